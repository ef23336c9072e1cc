"""The one place where a FedRL party's Q outputs are bounded and noised, and the accountant.

`release` is what every Q output goes through before it leaves a party (the paper's Eq. 1-2,
Q_hat = Q + N(0, sigma^2)), and what a party's own Q goes through inside its federated Q (Eq. 4-5
use Q_hat). The paper gives no sensitivity, so we bound each released vector first: its L2 norm
is clipped to C (`fedrl.clip`), which makes the L2 sensitivity of one released vector 2C (one
record replaced by any other) and each release a Gaussian mechanism with noise multiplier
z = sigma / 2C. Clipping scales the whole vector, so the argmax over actions is unchanged, and
it is differentiable, so a party still trains its Q-network through its own Q_hat.

Accounting (`Ledger`): the protected unit is one transition's observation stack. Each party
counts, per transition id, how many noised vectors computed from that stack it has released
(acting, and C / C' in the training exchanges). The epsilon reported is that of the most
released transition: RDP composition of that many Gaussian mechanisms, from Google's
dp-accounting, at delta (default 1e-5). Not covered, and said so in the README: an observation
sits in H consecutive stacks (group privacy would multiply), the targets Y that alpha sends are
not noised (the paper does not noise them), and theta_g itself is trained on both parties' data.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def release(
    q: torch.Tensor, clip: float, sigma: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Rows of q with L2 norm clipped to `clip`, plus N(0, sigma^2) noise (sigma 0: no noise)."""
    norm = q.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    bounded = q * (clip / norm).clamp(max=1.0)
    if sigma <= 0:
        return bounded
    noise = torch.randn(bounded.shape, generator=generator, dtype=bounded.dtype)
    return bounded + sigma * noise


def noise_multiplier(sigma: float, clip: float) -> float:
    return sigma / (2.0 * clip)


def epsilon(releases: int, sigma: float, clip: float, delta: float) -> float:
    """Epsilon at delta after `releases` Gaussian mechanisms with multiplier sigma / 2C."""
    if releases <= 0:
        return 0.0
    if sigma <= 0:
        return math.inf
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant

    acc = rdp_privacy_accountant.RdpAccountant()
    event = dp_accounting.GaussianDpEvent(noise_multiplier=noise_multiplier(sigma, clip))
    acc.compose(dp_accounting.SelfComposedDpEvent(event, int(releases)))
    return float(acc.get_epsilon(delta))


class Ledger:
    """Release counts per transition id (a ring of the replay's capacity, like the replay)."""

    def __init__(self, capacity: int):
        self.counts = np.zeros(capacity, np.int64)
        self.retired_max = 0  # largest count of a transition already overwritten in the ring

    def reset_slots(self, ids: np.ndarray) -> None:
        slots = np.asarray(ids) % len(self.counts)
        self.retired_max = max(self.retired_max, int(self.counts[slots].max(initial=0)))
        self.counts[slots] = 0

    def add(self, ids: np.ndarray, times: int = 1) -> None:
        np.add.at(self.counts, np.asarray(ids).ravel() % len(self.counts), times)

    def max_releases(self) -> int:
        return max(self.retired_max, int(self.counts.max(initial=0)))

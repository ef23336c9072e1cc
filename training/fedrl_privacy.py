"""The one place where a FedRL party's Q outputs are bounded and noised, and the accountant.

`release` is what every Q output goes through before it leaves a party (the paper's Eq. 1-2,
Q_hat = Q + N(0, sigma^2)), and what a party's own Q goes through inside its federated Q (Eq. 4-5
use Q_hat). The paper gives no sensitivity, so we bound each released vector first: its L2 norm
is clipped to C (`fedrl.clip`), which makes the L2 sensitivity of one released vector 2C (one
record replaced by any other) and each release a Gaussian mechanism with noise multiplier
z = sigma / 2C. Clipping scales the whole vector, so the argmax over actions is unchanged, and
it is differentiable, so a party still trains its Q-network through its own Q_hat.

Accounting (`Ledger`): the protected unit is one transition's observation stack. Each party
counts, per transition id, how many noised vectors computed from that stack it has released:
C when it acts, C / C' in the training exchanges, and alpha's move itself (its action ids are
the argmax of Q_f on a fresh draw of its own noise: one more Gaussian release; beta's move is
the argmax on the C it released, post-processing). The epsilon reported is that of the most
released transition: RDP composition of that many Gaussian mechanisms, from Google's
dp-accounting, at delta (default 1e-5). Not covered, and said so in the README: an observation
sits in H consecutive stacks (group privacy would multiply), the targets Y that alpha sends are
not noised (the paper does not noise them), and theta_g itself is trained on both parties' data.
Evaluation plays release too, about other records (the valid and test maps): each release is
counted per (split, episode slot, step of the play) across every play of that split
(`EvalLedger`), and reported as its own epsilon (`<role>-eval-epsilon`). A test_noise=off play
chooses each party's moves on its un-noised Q, and the moves leave: that split's epsilon is
infinite, and the ledger says so rather than leave it out.

Where the noise comes from (Kerckhoffs: the other party and the server know this code, the run
config and every message). `SecretNoise`: a 256-bit key drawn from the operating system's
entropy (`os.urandom`) when the party is created, kept in its private state (context.state,
written to its own state dir, never in a message, the run config, a log or a result), and
expanded per message and draw with SHAKE-256, an extendable-output function that is a PRF
under a secret key: without the key the noise is computationally unpredictable, whatever else
is known. `SeededNoise` (`fedrl.reproducible-noise = true`) is the study mode: the old torch
generator seeded from (seed, role, message count), so a study repeats to the digit. It is NOT
private: anyone with the run config regenerates the noise and subtracts it
(experiments/privacy/fedrl_derandomize.py). A party's policy refuses it unless its operator
allows it (`allow-reproducible-noise`). Not covered: floating-point artefacts of the Gaussian
sampler (Mironov 2012); the released values are float32 sums, not snapped to a grid.
"""

from __future__ import annotations

import hashlib
import math
import os

import numpy as np
import torch

KEY_BYTES = 32  # a party's noise key: 256 bits from os.urandom


class SecretNoise:
    """The Gaussian draws of one message, from the party's secret key (see the module doc).
    Draw d of message m about the values v is SHAKE-256(key | m | d | SHA-256(v)) read as
    53-bit uniforms, turned into standard normals by Box-Muller.

    Why v: a party's state can be rewound (a run resumed from round k as often as its submitter
    likes restores the key and the counter), and each rewind could then release *other* inputs
    under the *same* noise, whose difference is noise-free (issue 61 review). With v in the
    input, the same values get the same draw (a replay teaches nothing new) and any other
    values an independent one."""

    def __init__(self, key: bytes, message: int):
        if len(key) != KEY_BYTES:
            raise ValueError(f"a noise key is {KEY_BYTES} bytes, got {len(key)}")
        self.key, self.message, self.draws = key, int(message), 0

    def normal(self, shape, dtype: torch.dtype = torch.float32, about: bytes = b"") -> torch.Tensor:
        n = math.prod(shape)
        pairs = (n + 1) // 2
        xof = hashlib.shake_256(
            self.key
            + self.message.to_bytes(8, "little")
            + self.draws.to_bytes(8, "little")
            + hashlib.sha256(about).digest()
        )
        self.draws += 1
        words = np.frombuffer(xof.digest(16 * pairs), np.uint64) >> np.uint64(11)
        u = words.astype(np.float64) * 2.0**-53  # in [0, 1)
        u1, u2 = 1.0 - u[:pairs], u[pairs:]  # u1 in (0, 1]: log finite
        r = np.sqrt(-2.0 * np.log(u1))
        z = np.concatenate([r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)])[:n]
        return torch.from_numpy(z.reshape(shape)).to(dtype)


class SeededNoise:
    """Study mode (`fedrl.reproducible-noise`): one message's draws from a torch generator
    seeded by public values. Repeatable, and therefore removable by anyone who has the run
    config: never the default, refused by a policy that does not allow it."""

    def __init__(self, seed: int, role: int, message: int):
        self.gen = torch.Generator()
        self.gen.manual_seed((seed * 1_000_003 + role) * 1_000_000_007 + message)

    def normal(self, shape, dtype: torch.dtype = torch.float32, about: bytes = b"") -> torch.Tensor:
        return torch.randn(shape, generator=self.gen, dtype=dtype)  # `about` unused: study mode


def new_key() -> bytes:
    """A party's noise key, from the operating system's entropy."""
    return os.urandom(KEY_BYTES)


def release(
    q: torch.Tensor, clip: float, sigma: float, noise: SecretNoise | SeededNoise | None = None
) -> torch.Tensor:
    """Rows of q with L2 norm clipped to `clip`, plus N(0, sigma^2) noise (sigma 0: no noise).
    Without `noise`, the draws come from a fresh secret key."""
    norm = q.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    bounded = q * (clip / norm).clamp(max=1.0)
    if sigma <= 0:
        return bounded
    noise = noise or SecretNoise(new_key(), 0)
    about = bounded.detach().contiguous().numpy().tobytes()
    return bounded + sigma * noise.normal(tuple(bounded.shape), bounded.dtype, about)


def check_claim(who: str, what: str, raw, ours: float, most: float) -> tuple[float | None, str]:
    """A party's own privacy figure, checked against the server's count `ours`: (the claim if
    it can be a figure at all, else None; what is wrong with it, "" if it equals `ours`). Not a
    number, NaN, negative, or above `most` (the epsilon of every release the server saw from
    it, more than any accounting can give): dropped. Used by RelayLedger and LocalDPLedger."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None, f"{who} claims a non-number {what} {raw!r}"
    v = float(raw)
    if math.isnan(v) or v < 0 or v > most:
        return None, f"{who} claims {what} {v!r}, impossible (0 to {most:.4g}); not recorded"
    if not math.isclose(v, ours, rel_tol=1e-9) and not (math.isinf(v) and math.isinf(ours)):
        return v, f"{who} claims {what} {v:.6g}, the server counts {ours:.6g}"
    return v, ""


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


class EvalLedger:
    """Releases about evaluation observations: one count per (episode slot, step) of a split,
    summed over every play of that split (valid and test, noise on and off, last and best).
    A slot's t-th observation in two plays is counted as one record, which over-counts when
    the plays differ (a safe bound), and every row released is counted, finished slots too
    (their rows carry zeros before the noise, training/fedrl_party.eval_released: a safe bound).
    `unnoised`: the splits in which the party released something computed from un-noised Q
    (the moves of a test_noise=off play): their epsilon is unbounded."""

    def __init__(self):
        self.counts: dict[str, np.ndarray] = {}
        self.unnoised: set[str] = set()

    def add(self, split: str, step: int, slots: int) -> None:
        c = self.counts.setdefault(split, np.zeros((slots, 0), np.int64))
        if c.shape[1] <= step:
            c = np.pad(c, ((0, 0), (0, step + 1 - c.shape[1])))
        c[:, step] += 1
        self.counts[split] = c

    def max_releases(self) -> int:
        return max((int(c.max(initial=0)) for c in self.counts.values()), default=0)

    def epsilon(self, of_releases) -> float:
        """`of_releases(k)`, k the most released record's count; infinite once un-noised."""
        return math.inf if self.unnoised else of_releases(self.max_releases())

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            **{f"evalledger.{k}": v for k, v in self.counts.items()},
            **{f"evalunnoised.{k}": np.array(1) for k in self.unnoised},
        }

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        self.counts = {
            k[len("evalledger.") :]: np.array(v, np.int64)
            for k, v in arrays.items()
            if k.startswith("evalledger.")
        }
        self.unnoised = {k[len("evalunnoised.") :] for k in arrays if k.startswith("evalunnoised.")}


class RelayLedger:
    """Each party's epsilon as whoever relays the exchange computes it (the ServerApp, or the
    one-process runner): from the run config (sigma, C, delta: public) and the rows of every
    Q-output array it relayed, keyed as the party keys them (a transition id; an evaluation
    play's split, slot and release index). It needs nothing a party says about itself, so a
    party that lies about its spending cannot move it; the party's own figure is kept beside
    it as a claim (`claims`), checked here."""

    ROLES = ("alpha", "beta")

    def __init__(self, sigma: float, clip: float, delta: float):
        self.sigma, self.clip, self.delta = sigma, clip, delta
        self.train = {r: np.zeros(0, np.int64) for r in self.ROLES}
        self.eval = {r: EvalLedger() for r in self.ROLES}
        self.rows = {r: 0 for r in self.ROLES}  # every row a party released, all records
        self.claims: dict[str, float] = {}  # the last figure each party reported

    def transitions(self, role: str, ids) -> None:
        ids = np.asarray(ids, np.int64).ravel()
        if ids.size and ids.max() >= len(self.train[role]):
            grown = np.zeros(max(2 * len(self.train[role]), int(ids.max()) + 1), np.int64)
            grown[: len(self.train[role])] = self.train[role]
            self.train[role] = grown
        np.add.at(self.train[role], ids, 1)
        self.rows[role] += ids.size

    def evaluation(self, role: str, split: str, step: int, rows: int, noised: bool = True) -> None:
        """`rows` released about the play's observation at `step`; `noised` False: computed
        from un-noised Q (a test_noise=off move), which leaves the split unbounded."""
        if noised:
            self.eval[role].add(split, step, rows)
        else:
            self.eval[role].unnoised.add(split)
        self.rows[role] += rows

    def max_releases(self, role: str) -> int:
        return int(self.train[role].max(initial=0))

    def _of(self, k: int) -> float:
        return epsilon(k, self.sigma, self.clip, self.delta)

    def epsilon(self, role: str) -> float:
        """The training records' epsilon: the most released transition's."""
        return self._of(self.max_releases(role))

    def eval_epsilon(self, role: str) -> float:
        """The evaluation records' epsilon (infinite once a move left un-noised)."""
        return self.eval[role].epsilon(self._of)

    def claim(self, role: str, value, which: str = "epsilon") -> None:
        self.claims[(role, which)] = value

    def checked_claim(self, role: str, which: str = "epsilon") -> tuple[float | None, str]:
        """(the party's claim if it can be a figure at all, else None; what is wrong with it,
        "" if it equals the server's). A claim that is not a number, negative, or above the
        epsilon of every row the party released concerning one record (more than any
        accounting of what it sent can give) never reaches rounds.csv."""
        if (role, which) not in self.claims:
            return None, ""
        ours = self.epsilon(role) if which == "epsilon" else self.eval_epsilon(role)
        unbounded = which == "eval-epsilon" and self.eval[role].unnoised
        most = math.inf if unbounded else self._of(self.rows[role])
        return check_claim(role, which, self.claims[(role, which)], ours, most)

    def report(self) -> tuple[dict[str, float], list[str]]:
        """rounds.csv's privacy columns (the server's figure under the party's name, the
        checked claim beside it) and the problems with the claims, for the round line."""
        out, problems = {}, []
        for r in self.ROLES:
            out[f"{r}-privacy-epsilon"] = self.epsilon(r)
            out[f"{r}-max-releases"] = float(self.max_releases(r))
            out[f"{r}-eval-epsilon"] = self.eval_epsilon(r)
            for which, col in (
                ("epsilon", "claimed-epsilon"),
                ("eval-epsilon", "claimed-eval-epsilon"),
            ):
                v, problem = self.checked_claim(r, which)
                if v is not None:
                    out[f"{r}-{col}"] = v
                if problem:
                    problems.append(problem)
        return out, problems

    def arrays(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for r in self.ROLES:
            out[f"{r}/train"] = self.train[r]
            out[f"{r}/rows"] = np.array(self.rows[r])
            out.update({f"{r}/{k}": v for k, v in self.eval[r].arrays().items()})
        return out

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        for r in self.ROLES:
            self.train[r] = np.array(arrays[f"{r}/train"], np.int64)
            self.rows[r] = int(np.asarray(arrays[f"{r}/rows"]).ravel()[0])
            self.eval[r].load(
                {k[len(r) + 1 :]: v for k, v in arrays.items() if k.startswith(r + "/")}
            )

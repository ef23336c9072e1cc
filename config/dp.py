"""Run-config keys of differential privacy for the weight-sharing methods (`dp.*`).

Two places the noise can be added, both with Flower 1.41's own parts (strategies/dp.py,
clients/dp.py):
- `central`: each party clips its model update to L2 norm `clip` (Flower's
  `fixedclipping_mod`), the server averages with a fixed denominator and adds N(0, (z C / m)^2)
  to the mean (Flower's `DifferentialPrivacyClientSideFixedClipping`); the server sees clipped,
  un-noised updates. Accounted by Flower's `RdpAccountant`, client-level, no sampling
  amplification.
  With `clipping = "adaptive"` C moves each round toward the `clip-quantile` of the parties'
  update norms (Andrew et al. 2021, Flower's `adaptiveclipping_mod`): each party also sends
  whether it clipped, the server counts those bits with noise and steps C geometrically.
- `local`: each party clips and noises its own update before it leaves (Flower's
  `LocalDpMod`, epsilon `local-epsilon` and `delta` per release), so the server never sees an
  un-noised update. Each party accounts its own releases and reports them.

The papers (FedVLN, CDL) add no noise; `none` is theirs and the default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from config.schema import ConfigError, Section, setting

MODES = ("none", "central", "local")
CLIPPINGS = ("fixed", "adaptive")


@dataclass(frozen=True)
class DPSettings(Section):
    prefix = "dp."
    title = "Differential privacy (fedavg, fedprox, cdl-sfl, fedvln)"

    mode: str = setting(
        "none (the papers') | central (parties clip, the server adds noise) | local (each "
        "party clips and noises its own update: the server never sees it un-noised)",
        choices=MODES,
    )
    clip: float = setting(
        "L2 bound C on one party's model update (its change over the round)",
        lo=0,
        hi=1e6,
        lo_open=True,
    )
    noise_multiplier: float = setting(
        "central: z, the noise on the mean has std z C / m (m parties sampled per round)",
        lo=0,
        hi=1e4,
        lo_open=True,
    )
    clipping: str = setting(
        "central: fixed (C = dp.clip every round) | adaptive (dp.clip is the first C; each "
        "round C moves toward the dp.clip-quantile of the parties' update norms)",
        choices=CLIPPINGS,
    )
    clip_quantile: float = setting(
        "central, adaptive: gamma, the share of the parties' updates C aims to leave unclipped "
        "(Andrew et al.'s 0.5: C tracks the median update norm)",
        lo=0,
        hi=1,
        lo_open=True,
    )
    clip_lr: float = setting(
        "central, adaptive: eta_C, the geometric step C <- C exp(-eta_C (u - gamma)), u the "
        "noised share of unclipped updates (Andrew et al. and Flower: 0.2)",
        lo=0,
        hi=10,
        lo_open=True,
    )
    local_epsilon: float = setting(
        "local: epsilon of one party's release (Flower's LocalDpMod: std = 2C "
        "sqrt(2 ln(1.25/delta)) / epsilon)",
        lo=0,
        hi=1e4,
        lo_open=True,
    )
    delta: float = setting(
        "delta of every (epsilon, delta) the run reports, and of each local release",
        lo=0,
        hi=0.5,
        lo_open=True,
    )
    max_epsilon: float = setting(
        "central: > 0 is a privacy budget; the run stops before the release that would exceed "
        "it (Flower's PrivacyBudgetExhausted), 0 = no budget (local: each party's policy)",
        lo=0,
        hi=1e9,
    )

    @property
    def local_std(self) -> float:
        """Local DP: the std Flower's LocalDpMod adds, 2C sqrt(2 ln(1.25/delta)) / epsilon
        (sensitivity 2C: clients/dp.py)."""
        return 2 * self.clip * math.sqrt(2 * math.log(1.25 / self.delta)) / self.local_epsilon

    def validate(self) -> None:
        if self.clipping == "adaptive" and self.mode != "central":
            raise ConfigError(
                "run config 'dp.clipping' = \"adaptive\" is central DP's (the server adapts C "
                'from the parties\' noised clip bits); set dp.mode = "central"'
            )
        if self.mode != "central" and self.max_epsilon > 0:
            raise ConfigError(
                "run config 'dp.max-epsilon' is central DP's budget; under local DP each party "
                "keeps its own (its policy's [dp] max-epsilon)"
            )

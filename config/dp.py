"""Run-config keys of differential privacy for the weight-sharing methods (`dp.*`).

Two places the noise can be added, both with Flower 1.41's own parts (strategies/dp.py,
clients/dp.py):
- `central`: each party clips its model update to L2 norm `clip` (Flower's
  `fixedclipping_mod`), the server averages with a fixed denominator and adds N(0, (z C / m)^2)
  to the mean (Flower's `DifferentialPrivacyClientSideFixedClipping`); the server sees clipped,
  un-noised updates. Accounted by Flower's `RdpAccountant`, client-level, no sampling
  amplification.
- `local`: each party clips and noises its own update before it leaves (Flower's
  `LocalDpMod`, epsilon `local-epsilon` and `delta` per release), so the server never sees an
  un-noised update. Each party accounts its own releases and reports them.

The papers (FedVLN, CDL) add no noise; `none` is theirs and the default.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.schema import ConfigError, Section, setting

MODES = ("none", "central", "local")


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

    def validate(self) -> None:
        if self.mode != "central" and self.max_epsilon > 0:
            raise ConfigError(
                "run config 'dp.max-epsilon' is central DP's budget; under local DP each party "
                "keeps its own (its policy's [dp] max-epsilon)"
            )

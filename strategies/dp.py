"""Central differential privacy around our screened strategies, with Flower 1.41's own parts.

`dp.mode = "central"` (config/dp.py): every sampled party clips its update to L2 norm C with
Flower's `fixedclipping_mod` (clients/dp.py), and Flower's
`DifferentialPrivacyClientSideFixedClipping` adds N(0, (z C / m)^2) to the aggregate, where m
is the number of parties sampled in the round (McMahan et al. 2018, DP-FedAvg; Flower's
`compute_stdv`). The privacy is client-level: one party's whole data in or out.

Two choices Flower's wrapper leaves to us, and why:
- **Fixed denominator.** Flower's accounted mode insists on plain `FedAvg.aggregate_train` with
  equal weights, because an example-weighted mean lets one large party move the mean by more
  than C / m. Our screened strategy also drops rejected or failed replies, which would raise
  one party's weight to 1 / k > 1 / m. In DP mode the strategy therefore averages *updates*
  with the fixed denominator m: w + sum_i clip(w_i - w) / m (`fixed_denominator_mean`). Its
  sensitivity is C / m whatever is dropped, which is what the noise is calibrated to; so we
  hand Flower's accountant to the wrapper after its constructor (which would refuse a
  non-FedAvg aggregate) and skip its equal-weight check, which this mean makes moot.
- **Post-processing.** Batch-norm running variances are noised with the rest (they are
  computed from the data, so they leak too); a negative variance would make the model
  undefined, so they are floored at 1e-5 after the noise. Post-processing spends no privacy.

**Adaptive clipping** (`dp.clipping = "adaptive"`; Andrew et al. 2021, "Differentially Private
Learning with Adaptive Clipping", Algorithm 1). Each party clips with the C the server sent
and also sends b_i = 1 if it clipped (Flower's `adaptiveclipping_mod`). The server takes the
noised share of *unclipped* updates, u = 1/2 + (sum(1/2 - b_i) + N(0, sigma_b^2)) / m with
sigma_b = m / 20 (the paper's and Flower's default; centred, over the m parties sampled, as
Theorem 1 accounts it), and steps C <- C exp(-eta_C (u - gamma)), gamma `dp.clip-quantile`,
so C tracks the gamma-quantile of the update norms. A malformed bit is not counted. The update noise is
z_Delta C / m with z_Delta = (z^-2 - (2 sigma_b)^-2)^-1/2 (Flower's
`compute_adaptive_noise_params`), so that the two releases together are worth one Gaussian
release of multiplier z (the paper's Theorem 1), which is what the accountant composes. Two
choices differ from Flower 1.41's `DifferentialPrivacyClientSideAdaptiveClipping`, and why:
- Its bit is 1 for a *clipped* update, but it steps C with the paper's formula, which takes
  the *unclipped* share: when most updates are clipped it shrinks C, and C runs away from the
  quantile (tests/test_dp.py shows it). We keep its bit and use 1 - its share.
- It steps C before noising the round's mean with the new C; the round's updates were clipped
  to the old C, so we noise with the C they were clipped to (the paper's order).
The server's norm check (`max-update-norm`) follows C.

A party re-checks nothing here: whether a party may send a clipped but un-noised update at all
is its policy's (clients/dp.py); a policy that requires local DP refuses central runs.
"""

from __future__ import annotations

import json
import math
import os
from logging import WARNING
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.common import log
from flwr.serverapp import NeighboringRelation, PrivacyConfig, RdpAccountant, SamplingMethod
from flwr.serverapp.exception import PrivacyBudgetExhausted
from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping
from flwr.supercore.differential_privacy import (
    KEY_NORM_BIT,
    add_gaussian_noise_inplace,
    compute_adaptive_noise_params,
    compute_stdv,
)
from flwr.supercore.privacy_accounting import GaussianPrivacyEvent

from config import Config
from config.schema import ConfigError
from contracts.messages import DP_EPSILON as DP_CLAIM
from training.fedrl_privacy import check_claim, epsilon

VAR_FLOOR = 1e-5
# adaptive clipping: C stays within [dp.clip / CLIP_RANGE, dp.clip * CLIP_RANGE] (`clip_range`)
CLIP_RANGE = 100.0
NORM_SLACK = 1e-3  # float32 rounding: a clipped update's norm may read a little above C


def fixed_denominator_mean(
    updates: list[dict[str, np.ndarray]], current: ArrayRecord, m: int
) -> ArrayRecord:
    """w + sum_i (w_i - w) / m over the accepted models w_i (m: parties sampled, not answered);
        integer buffers (counters) keep the global model's value. Only the arrays the parties sent
    are returned, as the screened mean does."""
    out = {}
    for name in updates[0]:
        w = current[name].numpy()
        if w.dtype.kind not in "fc":
            out[name] = Array(np.ascontiguousarray(w))
            continue
        step = np.zeros(w.shape, np.float64)
        for u in updates:
            step += u[name].astype(np.float64) - w
        out[name] = Array(np.ascontiguousarray((w + step / m).astype(w.dtype)))
    return ArrayRecord(out)


def accountant(c: Config, population: int) -> RdpAccountant:
    """Flower's RDP accountant: client-level (add or remove one party), no sampling
    amplification (parties are not Poisson-sampled here), the run's delta and budget."""
    return RdpAccountant(
        PrivacyConfig(
            target_delta=c.dp.delta,
            population_size=population,
            neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
            sampling_method=SamplingMethod.NO_AMPLIFICATION,
            max_epsilon=c.dp.max_epsilon or None,
        )
    )


class CentralDP(DifferentialPrivacyClientSideFixedClipping):
    """Flower's client-side-clipping DP wrapper around a ScreenedFedAvg (or a subclass) whose
    mean is `fixed_denominator_mean`; accounted by Flower's RdpAccountant (module docstring)."""

    def __init__(
        self,
        inner,
        c: Config,
        sampled: int,
        population: int,
        done_releases: int = 0,
        clip: float | None = None,
        user_bound: float = 0.0,
    ):
        super().__init__(inner, c.dp.noise_multiplier, clip or c.dp.clip, sampled)
        self.user_bound = user_bound  # run.max-update-norm, kept below C when C moves
        inner.dp_denominator = sampled
        self.accountant = accountant(c, population)
        self.adaptive = c.dp.clipping == "adaptive"
        self.update_multiplier = self.noise_multiplier  # z_Delta: all of z when C is fixed
        if self.adaptive:
            self.quantile, self.clip_lr = c.dp.clip_quantile, c.dp.clip_lr
            self.clip_range = clip_range(c)
            self.count_std, self.update_multiplier = adaptive_noise(self.noise_multiplier, sampled)
        if done_releases:  # a resumed run: what the rounds before it released
            self.accountant.compose(self.event(), done_releases)

    def event(self) -> GaussianPrivacyEvent:
        return GaussianPrivacyEvent(
            noise_multiplier=self.noise_multiplier,
            sample_size=self.num_sampled_clients,
            population_size=self.accountant.config.population_size,
        )

    def _prepare_accounting(self, server_round: int, messages):
        """Flower's check before a round's release (PrivacyBudgetExhausted if it would exceed
        the budget), with the event of m sampled parties even when fewer nodes are online:
        the fixed denominator keeps the sensitivity at C / m."""
        messages = list(messages)
        event = self.event() if messages else None
        if event is not None and self.accountant.config.max_epsilon is not None:
            if self.accountant.would_exceed(event):
                spent = self.accountant.get_privacy_spent()
                raise PrivacyBudgetExhausted(
                    f"round {server_round + self.strategy.round_offset} would take epsilon "
                    f"above run config 'dp.max-epsilon' {self.accountant.config.max_epsilon:g} "
                    f"(spent: {spent.epsilon:.4g} at delta {spent.delta:g} after "
                    f"{spent.num_releases} releases)"
                )
        self._pending_events[server_round] = event
        return messages

    def aggregate_train(self, server_round, replies):
        """The inner strategy screens, records and takes the fixed-denominator mean; then
        Flower's noise and release accounting, and the variance floor (post-processing).

        A round in which no update was accepted still releases the model noised: leaving it
        exactly as it was would be an outcome a Gaussian release never gives. A strategy that
        keeps its own global model (FedVLN's Eq. 7 steps from `global_arrays`) is handed the
        noised release, so the next round steps from what was released, never from the
        un-noised model (which would let the noise of successive rounds cancel)."""
        event = self._pop_pending_event(server_round)
        replies = list(replies)
        arrays, metrics = self.strategy.aggregate_train(server_round, replies)
        if arrays is None and event is not None and self.strategy.current is not None:
            arrays = self.strategy.current  # the empty round's mean: the model as sent
        if arrays is not None and event is not None:
            arrays = floor_variances(self._noised(arrays))
            self._compose_release(event)
            if getattr(self.strategy, "global_arrays", None) is not None:
                self.strategy.global_arrays = arrays
            spent = self.accountant.get_privacy_spent()
            self.strategy.recorder.add_metrics(
                {
                    "dp_epsilon": spent.epsilon,
                    "dp_releases": spent.num_releases,
                    "dp_clip": self.clipping_norm,  # the C this round's updates were clipped to
                }
            )
        if self.adaptive and event is not None:
            self._step_clip(replies)
        return arrays, metrics

    def _step_clip(self, replies) -> None:
        """Andrew et al.'s geometric step of C from the noised share of unclipped updates
        (module docstring); the server's norm check follows it. The count is centred and
        divided by m, the parties sampled (public), as the paper's Theorem 1 accounts it:
        u = 1/2 + (sum(b_i - 1/2) + N(0, sigma_b^2)) / m. Only a well-formed bit counts
        (`clip_bit`), so a broken or hostile party moves the count by at most 1/2 a round: the
        noised share u by 1/m and log C by eta_C / m a round, and never outside `clip_range`
        (issue 62: two parties with false bits walked C from 2 to 39,861 in 200 rounds)."""
        bits = [b for b in map(clip_bit, replies) if b is not None]
        if bits:
            centred = sum(0.5 - b for b in bits)  # b = 1: clipped, so 1 - b is the paper's bit
            u = (
                0.5
                + (centred + float(np.random.normal(0, self.count_std))) / self.num_sampled_clients
            )
            lo, hi = self.clip_range
            self.clipping_norm = min(
                hi, max(lo, next_clip(self.clipping_norm, u, self.quantile, self.clip_lr))
            )
        bound = self.clipping_norm * (1 + NORM_SLACK)
        self.strategy.max_update_norm = min(self.user_bound or math.inf, bound)
        self.strategy.recorder.add_metrics({"dp_clip_next": self.clipping_norm})  # for a resume

    def _noised(self, arrays: ArrayRecord) -> ArrayRecord:
        """Flower's Gaussian noise, std z C / m times the strategy's step scale (FedVLN's
        Eq. 7 moves the model by eta_t times the mean: its sensitivity is eta_t C / m)."""
        nd = arrays.to_numpy_ndarrays()
        std = compute_stdv(self.update_multiplier, self.clipping_norm, self.num_sampled_clients)
        add_gaussian_noise_inplace(nd, std * abs(self.strategy.dp_step_scale()))
        return ArrayRecord({k: Array(np.asarray(v)) for k, v in zip(arrays.keys(), nd)})

    def __getattr__(self, name):  # round_offset, empty_rounds, recorder: the inner strategy's
        if name == "strategy":
            raise AttributeError(name)
        return getattr(self.strategy, name)


def adaptive_noise(z: float, sampled: int) -> tuple[float, float]:
    """(sigma_b, z_Delta) of adaptive clipping at overall multiplier z with m parties a round
    (Flower's `compute_adaptive_noise_params`, sigma_b = m / 20); z must be below 2 sigma_b."""
    try:
        return compute_adaptive_noise_params(z, sampled, None)
    except ValueError:
        raise ConfigError(
            f"run config 'dp.noise-multiplier' = {z:g} is too large for adaptive clipping "
            f"with {sampled} parties a round: it must be below 2 sigma_b = {sampled / 10:g} "
            "(the clip bits' count noise, m / 20; Andrew et al. 2021)"
        ) from None


def clip_bit(reply) -> int | None:
    """The clip bit of one reply (Flower's `adaptiveclipping_mod`: 1 = clipped), or None when
    the reply failed or carries no single metric record with a bit of exactly 0 or 1."""
    if reply.has_error() or len(reply.content.metric_records) != 1:
        return None
    bit = next(iter(reply.content.metric_records.values())).get(KEY_NORM_BIT)
    return bit if isinstance(bit, int) and bit in (0, 1) else None


def clip_range(c: Config) -> tuple[float, float]:
    """Where adaptive clipping may take C: dp.clip / CLIP_RANGE to dp.clip * CLIP_RANGE, and
    never beyond dp.clip's own bounds (0, 1e6]. Four orders of magnitude around the C a study
    chose: the quantile is tracked wherever the update norms are, while parties that lie
    about their bits (or a norm distribution that collapses) cannot take it to 0 or infinity."""
    return c.dp.clip / CLIP_RANGE, min(c.dp.clip * CLIP_RANGE, 1e6)


def next_clip(clip: float, unclipped: float, quantile: float, lr: float) -> float:
    """C exp(-eta_C (u - gamma)): C grows while fewer than gamma of the updates fit in it."""
    return clip * math.exp(-lr * (unclipped - quantile))


def floor_variances(arrays: ArrayRecord) -> ArrayRecord:
    out = floor_variance_arrays({k: a.numpy() for k, a in arrays.items()})
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in out.items()})


def floor_variance_arrays(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Noised BatchNorm running variances floored at VAR_FLOOR (post-processing)."""
    return {
        k: np.maximum(v, VAR_FLOOR).astype(v.dtype) if k.endswith("running_var") else v
        for k, v in arrays.items()
    }


class LocalDPLedger:
    """Local DP (`dp.mode = "local"`, clients/dp.py): each party's epsilon as the server computes
    it, never as the party says. The server knows the mechanism (Flower's LocalDpMod at the run
    config's dp.clip, dp.local-epsilon and dp.delta: std `c.dp.local_std`, sensitivity 2C) and
    how many noised updates it received from each party (partition); a party's epsilon is the
    RDP composition of that many at delta, and the round records the largest (`dp_epsilon`).
    The party's own figure (its reply's `dp-epsilon`) is a claim: the largest possible one is
    kept beside it (`dp_epsilon_claimed`), a claim that differs is named in the log, and one
    that is not a number in [0, the epsilon of every update the server received] is dropped.
    The counts are kept in <out>/dp_local_releases.json, so a resumed run goes on counting."""

    FILE = "dp_local_releases.json"

    def __init__(self, c: Config, out: str | Path | None = None):
        self.std, self.clip, self.delta = c.dp.local_std, c.dp.clip, c.dp.delta
        self.path = Path(out) / self.FILE if out else None
        self.count: dict[int, int] = {}
        if self.path is not None and self.path.exists():
            self.count = {int(k): int(v) for k, v in json.loads(self.path.read_text()).items()}
        self.claims: list[float] = []
        self.problems: list[str] = []

    def epsilon(self, releases: int) -> float:
        return epsilon(releases, self.std, self.clip, self.delta)

    def received(self, partition: int, metrics: dict) -> None:
        """One noised update of `partition` reached the server; `metrics` its reply's."""
        k = self.count[partition] = self.count.get(partition, 0) + 1
        if DP_CLAIM not in metrics:
            return
        v, problem = check_claim(
            f"partition {partition}",
            "epsilon",
            metrics[DP_CLAIM],
            self.epsilon(k),
            self.epsilon(sum(self.count.values())),
        )
        if v is not None:
            self.claims.append(v)
        if problem:
            self.problems.append(problem)

    def report(self) -> dict:
        """The round's figures (and the claims' problems, logged), then a fresh round."""
        for problem in self.problems:
            log(WARNING, "[fedembodied] local DP: %s", problem)
        out = {"dp_epsilon": self.epsilon(max(self.count.values(), default=0))}
        if self.claims:
            out["dp_epsilon_claimed"] = max(self.claims)
        self.claims, self.problems = [], []
        self.save()
        return out

    def save(self) -> None:
        """The counts to <out>/dp_local_releases.json (atomically), for a resumed run."""
        if self.path is not None:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.count))
            os.replace(tmp, self.path)

"""What every screened-FedAvg strategy (driving FedAvg/FedProx, FedVLN) takes from the run
config, in one place: the recorder, seed, node wait, evaluation cadence, round count, the
empty-round rule and evaluation sampling."""

from __future__ import annotations

import contextlib
import math
from logging import WARNING

from flwr.common import log

from config import Config
from strategies.dp import LocalDPLedger, clip_range


def screened_args(c: Config, recorder) -> dict:
    return dict(
        recorder=recorder,
        seed=c.run.seed,
        node_wait_s=c.run.node_wait_timeout,
        node_start_s=c.run.node_start_timeout,
        node_return_s=c.run.node_return_timeout,
        partition_sampling_max=c.run.partition_sampling_max,
        eval_every=c.run.eval_period,
        num_rounds=c.run.num_server_rounds,
        max_empty_rounds=c.run.max_empty_rounds,
        min_train_nodes=1,
        min_evaluate_nodes=1,
        fraction_evaluate=c.run.fraction_evaluate,
        max_evaluate_nodes=c.run.max_evaluate_clients,
        dp_local=LocalDPLedger(c, recorder.out) if c.dp.mode == "local" else None,
    )


def central_dp(strategy, c: Config, recorder):
    """Flower's central-DP wrapper around `strategy` (strategies/dp.py), its accountant given
    the releases of the rounds a resumed run already holds."""
    from strategies.dp import NORM_SLACK, CentralDP

    done = max(
        (int(r["dp_releases"]) for r in recorder.rounds if r.get("dp_releases", 0) > 0),
        default=0,
    )
    clip = resumed_clip(c, recorder.rounds)
    # the parties' clipping, checked: an update farther than C from the global model is refused
    user = strategy.max_update_norm
    bound = clip * (1 + NORM_SLACK)
    strategy.max_update_norm = min(user or bound, bound)
    return CentralDP(
        strategy,
        c,
        strategy.sampled_per_round(),
        strategy.num_clients,
        done_releases=done,
        clip=clip,
        user_bound=user,
    )


def resumed_clip(c: Config, rounds: list[dict]) -> float:
    """The C a run goes on with: dp.clip, or under adaptive clipping the C the last finished
    round stepped to (`dp_clip_next`, written every adaptive round). A missing or broken value
    (NaN from a CSV, 0), or one outside the range adaptive clipping keeps C in
    (strategies/dp.clip_range: a rounds.csv edited to 1e300 or 1e-300), is not resumed: the run
    goes on from dp.clip, and says so."""
    if c.dp.clipping != "adaptive" or not rounds:
        return c.dp.clip
    last = rounds[-1].get("dp_clip_next")
    try:
        last = float(last)
    except (TypeError, ValueError):
        return c.dp.clip
    lo, hi = clip_range(c)
    if math.isfinite(last) and lo <= last <= hi:
        return last
    if math.isfinite(last) and last != 0:
        log(
            WARNING,
            "[fedembodied] rounds.csv dp_clip_next = %g is outside adaptive clipping's range "
            "[%g, %g]; resuming from dp.clip = %g",
            last,
            lo,
            hi,
            c.dp.clip,
        )
    return c.dp.clip


@contextlib.contextmanager
def budget_stops(recorder):
    """A run whose next release would exceed its privacy budget ends there, as Flower's
    `PrivacyBudgetExhausted` says, with every finished round written and a line in the log."""
    from flwr.serverapp.exception import PrivacyBudgetExhausted

    try:
        yield
    except PrivacyBudgetExhausted as e:
        log(WARNING, "[fedembodied] stopped, privacy budget spent: %s", e)
        recorder.write_config(stopped=f"privacy budget: {e}")

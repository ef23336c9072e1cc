"""FedVLN's server: the paper's server step (Eq. 7) on the screened weighted average, houses
sampled per role, and pooled VLN evaluation.

Eq. 7: `w <- w + eta * sum_i n_i / sum_j n_j * (w_i - w)`. `ScreenedFedAvg` (seeded sampling by
partition, screening, byte and client accounting) computes the example-weighted average of the
accepted updates, `sum_i n_i / n * w_i`; `server_step` moves the global model `eta` of the way
to it, which is Eq. 7 because the weights sum to 1. `eta` may decay per round:
`eta_t = eta * decay ** (t - 1)`. (Flower's FedAvgM with momentum 0 computes the same step.)

What the global model is depends on the stage: the whole follower or speaker, only the language
encoder (`fed-lan` pre-exploration), or nothing (`env-based`, where the server only schedules
local training). Whatever it is, the same arrays go down and come back up.

A chained round (`chain`, the speaker stage's `fedvln.speaker-round = "chain"`): the round's
houses train one after another, in a seeded random order, each from the model the house before
it returned (the first from w), as the official code's speaker round does (eric-ai-lab/FedVLN
r2r_src/train.py:137-158: one local speaker loaded from the global once per round, trained
house after house in `random.sample`'s order; there one Adam state also serves every house,
which houses that keep their own cannot do: here each house keeps its own,
`fedvln.optimizer-state`). Its server step is the official one, w <- w + eta * sum_k n_k / n *
(w_k - w) with w_k the model after houses 1..k, which is Eq. 7 applied to the chain's models,
so `server_step` serves both. Why: experiments/studies/fedvln_speaker_round.toml. What it
costs: a house's trained model goes to the next house (the second house of a round, holding w
from the last evaluation, learns the first house's exact update; a later one the sum of the
updates before it); houses serve it only with their operator's consent (policy
fedvln.allow-chain), which the honest server code asks for in every message (CHAIN_ROUND) but a
server that is not honest can skip, as it can forward any update in FedAvg too: against it only
local DP protects. A round lasts the houses' training times summed, and `round-timeout` bounds
each house's exchange, not the round. The model passed on is the screened, re-encoded arrays
of the reply, never its bytes.

Sampling: `rates` gives each role (`seen`, `unseen`) its participation rate; a role with rate r
and n houses trains max(1, floor(r * n)) of them per round (the paper's r * n), chosen with a
seeded RNG so runs repeat. Evaluation goes to every house of `eval_roles`.

Mixing (`min_mixed`, run config fedvln.min-round-houses): after a round whose new model mixes
the updates of k houses, every house that receives it (the next round's, every house at an
evaluation) knows w, eta and the house sizes, so it learns the weighted sum of those k
updates: with k = 1 that house's exact update, the exposure a chained round makes (issue 64).
The server declares in every train message the fewest houses it mixes (MIXES_AT_LEAST), and
holds a round back, the model unchanged, when screening, failures or timeouts leave fewer
accepted updates (such rounds count toward `max-empty-rounds`); each house trains only where
the declared number meets its own policy (clients/policy.py, fedvln.min-round-houses). In a
chained round every house whose model is handed on is told 1 (the next house may hold w and
then learns its exact update), so serving a chain takes min-round-houses = 1 as well as
allow-chain. It bounds a count, not a weight: a house of few examples is barely mixed, and
k - 1 houses that collude learn the k-th's update. Like the chain's consent, this binds the
honest server code: a server that is not honest sees every update anyway, and only local DP
protects against it.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable
from logging import WARNING

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.common import log
from flwr.serverapp import Grid
from sacrebleu.metrics import BLEU

from contracts.messages import CHAIN_ROUND, LOCAL_STEPS, MIXES_AT_LEAST
from envs.vln_fidelity import STATS as FIDELITY_STATS
from envs.vln_fidelity import from_stats as fidelity_from_stats
from strategies.fedadam import fedadam_step
from strategies.screened_fedavg import ClientsFailed, ScreenedFedAvg, sample_size
from strategies.screening import MAX_EXAMPLES

NAV_METRICS = ("ne", "sr", "osr", "spl", "tl", "ndtw", "sdtw", "cls")
BLEU_STATS = (
    "sys_len",
    "ref_len",
    *(f"{k}_{n}" for k in ("correct", "total") for n in range(1, 5)),
)


PERCENT = ("sr", "osr", "spl", "ndtw", "sdtw", "cls")
FIDELITY_PAIRS = (  # route fidelity's sums and what they count (envs.vln_fidelity.stats)
    ("on_route_sum", "paths"),
    ("f1_sum", "paths"),
    ("goal_hits", "paths"),
    ("turn_hits", "paths"),
    ("entered_sum", "entered_paths"),
    ("stop_hits", "stop_paths"),
)


def eval_problem(record: dict) -> str | None:
    """Why a house's evaluation reply cannot be pooled, or None. A forged or broken reply
    (missing counts, non-finite or out-of-range values, negative or inconsistent BLEU counts)
    would crash the pool or move the pooled number arbitrarily; it is left out instead."""
    for k, v in record.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return f"{k!r} is not a finite number"
    for k, v in record.items():
        base = k.rsplit("_", 1)[-1]
        if k.endswith("_n") and not 0 <= v <= MAX_EXAMPLES:
            return f"{k!r} = {v} is not a count"
        if base in PERCENT and not 0 <= v <= 100:
            return f"{k!r} = {v} is not a percentage"
        if (k.endswith(("_len", "_ne", "_tl")) or "_correct_" in k or "_total_" in k) and v < 0:
            return f"{k!r} = {v} is negative"
    for k in record:
        if "_correct_" in k and record[k] > record.get(k.replace("_correct_", "_total_"), -1):
            return f"{k!r} exceeds its total"
        if "_fid_" in k and record[k] < 0:
            return f"{k!r} = {record[k]} is negative"
    for hits, n in FIDELITY_PAIRS:
        for k in [k for k in record if k.endswith(f"_fid_{hits}")]:
            if record[k] > record.get(k.replace(f"_fid_{hits}", f"_fid_{n}"), -1):
                return f"{k!r} exceeds its count"
    return None


def pool(records: list[dict]) -> dict[str, float]:
    """Union-of-houses metrics from per-house ones (each prefixed by its split, e.g.
    `val_unseen_n`, `val_unseen_sr`): navigation metrics are episode-weighted means, which
    equal the metric over the union; BLEU is recomputed from summed n-gram statistics, which
    equals sacrebleu's corpus BLEU over the union, and route fidelity from summed hit counts
    (no instruction leaves a house)."""
    out: dict[str, float] = {}
    splits = sorted({k[:-2] for r in records for k in r if k.endswith("_n")})
    for split in splits:
        rows = [r for r in records if r.get(f"{split}_n", 0) > 0]
        n = sum(r[f"{split}_n"] for r in rows)
        if not n:
            continue
        out[f"{split}_n"] = n
        if f"{split}_sys_len" in rows[0]:
            tot = {k: sum(r[f"{split}_{k}"] for r in rows) for k in BLEU_STATS}
            out[f"{split}_bleu"] = BLEU.compute_bleu(
                [tot[f"correct_{i}"] for i in range(1, 5)],
                [tot[f"total_{i}"] for i in range(1, 5)],
                tot["sys_len"],
                tot["ref_len"],
                smooth_method="exp",
            ).score
        if f"{split}_fid_paths" in rows[0]:
            fid = {k: sum(r[f"{split}_fid_{k}"] for r in rows) for k in FIDELITY_STATS}
            out.update({f"{split}_{k}": v for k, v in fidelity_from_stats(fid).items()})
        for m in NAV_METRICS:
            if f"{split}_{m}" in rows[0]:
                out[f"{split}_{m}"] = sum(r[f"{split}_n"] * r[f"{split}_{m}"] for r in rows) / n
    return out


def houses_a_round(counts: dict[str, int], rates: dict[str, float]) -> int:
    """The houses a round trains: max(1, floor(r * n)) of each role's n, for a rate r > 0."""
    return sum(
        min(n, max(1, math.floor(n * rates.get(role, 0.0) + 1e-9)))
        for role, n in counts.items()
        if rates.get(role, 0.0) > 0
    )


class FedVLNStrategy(ScreenedFedAvg):
    """Screened FedAvg with the paper's server learning rate (Eq. 7) and per-role sampling."""

    def __init__(
        self,
        *,
        roles: dict[int, str],
        rates: dict[str, float],
        eval_roles: tuple[str, ...],
        server_lr: float = 2.0,
        lr_decay: float = 1.0,
        send_global_for_eval: bool = True,
        chain: bool = False,
        round_timeout: float | None = None,
        min_mixed: int = 2,
        server_opt: str = "avg",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.chain, self.round_timeout = chain, round_timeout
        self.min_mixed = min_mixed  # fewest accepted updates in a model sent on (Mixing)
        self.server_opt = server_opt  # avg: Eq. 7 | adam: FedAdam (strategies/fedadam.py)
        self.moments: dict = {}  # FedAdam's (m, v) per array, kept across rounds
        self.chained: list[Message] = []  # the replies of a chained round's houses but the last
        self.chained_counted: list[Message] = []  # those of them aggregated now
        self.server_lr = server_lr  # eta_t of the current round
        self.base_lr, self.lr_decay = server_lr, lr_decay
        self.global_arrays: ArrayRecord | None = None  # w of Eq. 7
        self.roles, self.rates, self.eval_roles = roles, rates, eval_roles
        self.send_global_for_eval = send_global_for_eval

    def _by_role(self, grid: Grid) -> dict[str, list[int]]:
        parts = self._ensure_partitions(grid)
        out: dict[str, list[int]] = {}
        for node, p in sorted(parts.items(), key=lambda kv: kv[1]):
            out.setdefault(self.roles[p], []).append(node)
        return out

    def sampled_per_round(self) -> int:
        return houses_a_round(Counter(self.roles.values()), self.rates)

    def _extra_train_config(self) -> dict:
        return {MIXES_AT_LEAST: self.min_mixed}  # the house checks it against its policy

    def dp_step_scale(self) -> float:
        """Eq. 7 moves w by eta_t times the mean's change: central DP's noise scales with it."""
        return self.server_lr

    def train_nodes(self, grid: Grid, server_round: int) -> list[int]:
        chosen = []
        rng = random.Random(self.seed * 100_003 + server_round)
        for role, nodes in sorted(self._by_role(grid).items()):
            rate = self.rates.get(role, 0.0)
            if rate > 0:
                k = min(len(nodes), max(1, math.floor(len(nodes) * rate + 1e-9)))
                chosen += rng.sample(nodes, k)
        parts = self.partitions or {}
        return sorted(chosen, key=lambda n: parts[n])

    def evaluate_nodes(self, grid: Grid, server_round: int) -> list[int]:
        """The houses of `eval_roles`: `fraction-evaluate` of them, at most
        `max-evaluate-clients` (a seeded draw; all of them by default)."""
        nodes = [
            n
            for role, nodes in sorted(self._by_role(grid).items())
            if role in self.eval_roles
            for n in nodes
        ]
        k = sample_size(len(nodes), self.fraction_evaluate, self.max_evaluate_nodes)
        if k == len(nodes):
            return nodes
        parts = self.partitions or {}
        rng = random.Random((self.seed * 100_003 + server_round) * 7 + 1)
        return sorted(rng.sample(nodes, k), key=lambda n: parts[n])

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        t = server_round + self.round_offset  # a resumed run counts on from its last round
        self.server_lr = self.base_lr * self.lr_decay ** (t - 1)
        if self.global_arrays is None:  # the start (or the resumed round's) global model
            self.global_arrays = arrays
        msgs = list(super().configure_train(server_round, arrays, config, grid))
        return self._chain(server_round, msgs, grid) if self.chain and len(msgs) > 1 else msgs

    def _chain(self, server_round: int, msgs: list[Message], grid: Grid) -> list[Message]:
        """A chained round: every house but the last trained here, one after another in a
        seeded random order, each from the last model that passed screening (re-encoded from
        the decoded arrays, so a house's bytes never reach another house); the last house's
        message is Flower's to send. A house that fails or is screened out is skipped (the
        next starts from the model before it); every reply is aggregated and recorded with
        the last one's. Each message says whether the model it asks for is handed on."""
        t = server_round + self.round_offset
        order = random.Random((self.seed * 100_003 + t) * 7 + 3).sample(msgs, len(msgs))
        current, sent, self.chained = self.current, [], []
        for i, msg in enumerate(order):
            handed_on = i < len(order) - 1  # this house's model goes straight to the next
            config = ConfigRecord(
                {
                    **dict(msg.content[self.configrecord_key]),
                    CHAIN_ROUND: handed_on,
                    MIXES_AT_LEAST: 1 if handed_on else self.min_mixed,
                }
            )
            one = Message(
                content=RecordDict({self.arrayrecord_key: current, self.configrecord_key: config}),
                message_type=msg.metadata.message_type,
                dst_node_id=msg.metadata.dst_node_id,
            )
            sent.append(one)
            if i == len(order) - 1:
                break
            for rep in grid.send_and_receive([one], timeout=self.round_timeout):
                self.chained.append(rep)
                node = msg.metadata.dst_node_id
                if self.dp_local:  # released now (the next house gets it): counted now
                    self._count_release(node, rep)
                    self.dp_local.save()
                problem, update = self._problem(t, node, rep, {})
                if problem is None:
                    current = ArrayRecord(
                        {k: Array(np.ascontiguousarray(v)) for k, v in update.items()}
                    )
        self.sent = sent
        return sent[-1:]

    def _count_release(self, node: int, rep: Message) -> None:
        """A chained reply was counted when it arrived (`_chain`), not again at aggregation."""
        if not any(rep is r for r in self.chained_counted):
            super()._count_release(node, rep)

    def server_step(self, average: ArrayRecord) -> ArrayRecord:
        """Eq. 7: w <- w + eta_t * (sum_i n_i / n * w_i - w), array by array; or FedAdam's
        step on the same mean update (`server_opt = "adam"`, strategies/fedadam.py). A round
        with no accepted update leaves w as it is (aggregate_train does not call this)."""
        w = self.global_arrays
        if self.server_opt == "adam":
            now = {k: w[k].numpy() for k in average}
            d = {k: a.numpy() - now[k] for k, a in average.items()}
            new = fedadam_step(now, d, self.moments, self.server_lr)
            stepped = ArrayRecord({k: Array(np.asarray(v, now[k].dtype)) for k, v in new.items()})
            self.global_arrays = stepped
            return stepped
        stepped = ArrayRecord(
            {
                k: Array(np.asarray(w[k].numpy() - self.server_lr * (w[k].numpy() - a.numpy())))
                for k, a in average.items()
            }
        )
        self.global_arrays = stepped
        return stepped

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        self.chained_counted = self.chained  # local DP counted them as they arrived
        replies, self.chained = self.chained + list(replies), []
        empty_before = self.empty_rounds  # the parent resets it when any update is accepted
        average, metrics = super().aggregate_train(server_round, replies)
        self.chained_counted = []
        if average is not None and len(average) and metrics["n_accepted"] < self.min_mixed:
            self._hold_back(server_round + self.round_offset, metrics["n_accepted"], empty_before)
            average = None
        arrays = None if average is None else self.server_step(average)
        if metrics is not None:  # local_steps: optimizer steps summed over houses (Table 9)
            steps = sum(
                int(next(iter(r.content.metric_records.values())).get(LOCAL_STEPS, 0))
                for r in replies
                if not r.has_error()
            )
            self.recorder.add_metrics({"server_lr": self.server_lr, "local_steps": steps})
        return arrays, metrics

    def _hold_back(self, t: int, accepted: int, empty_before: int) -> None:
        """Too few updates to mix (Mixing): the model stays, and the round counts toward
        `max-empty-rounds` as an empty one, so a federation that never gets enough stops."""
        log(
            WARNING,
            "[fedembodied] round %d: held back, the model unchanged: %d accepted update(s), "
            "fewer than fedvln.min-round-houses = %d",
            t,
            accepted,
            self.min_mixed,
        )
        self.recorder.add_metrics({"held_back": 1})
        self.empty_rounds = empty_before + 1
        if self.empty_rounds >= self.max_empty_rounds:
            raise ClientsFailed(
                f"no model was made in {self.empty_rounds} consecutive rounds (up to round "
                f"{t}; run config 'max-empty-rounds'): the last accepted {accepted} house(s)' "
                f"updates, fewer than fedvln.min-round-houses = {self.min_mixed}; see clients.csv"
            )

    def _messages(
        self, arrays: ArrayRecord, config: ConfigRecord, node_ids: list[int], message_type: str
    ) -> list[Message]:
        if message_type == MessageType.EVALUATE and not self.send_global_for_eval:
            arrays = ArrayRecord()  # each house scores its own local model
        return super()._messages(arrays, config, node_ids, message_type)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        records = []
        for r in self._sorted(replies):
            if r.has_error() or len(r.content.metric_records) != 1:
                continue
            rec = dict(next(iter(r.content.metric_records.values())))
            problem = eval_problem(rec)
            if problem:
                log(
                    WARNING,
                    "[fedembodied] round %d: evaluation of node %d left out: %s",
                    server_round,
                    r.metadata.src_node_id,
                    problem,
                )
                continue
            records.append(rec)
        pooled = pool(records)
        if not pooled:
            return None
        self.recorder.add_metrics(pooled)
        return MetricRecord(pooled)

"""FedAvg and FedProx (from flwr.serverapp.strategy) with what a study needs around them:

* clients are sampled by partition id with a seeded RNG (node ids are random per run, so
  Flower's own sampler cannot be made reproducible), and replies are aggregated in partition
  order (float sums depend on order). That needs every node asked its partition at the start,
  and in Flower's simulation engine N pending messages cost N x N a poll (docs/performance.md,
  Scale): a federation above `partition_sampling_max` clients draws over the connected nodes
  instead and asks none of them: every driving reply says which partition its node holds
  (contracts.messages.HOLDS_PARTITION), so a round is two waits (train, evaluate) instead of
  four with an identity query before each (issue 66; issue 65 asked only the drawn nodes),
  start-up costs what a round costs, and which silos train then depends on the node ids Flower
  assigns;
* every update is screened (strategies.screening) and a bad one is left out of the round
  instead of failing it;
* the bytes of every array sent and received, and one row per client per round, go to the
  recorder (server.recorder.Recorder): a failed client's row names the node and partition the
  message went to (an error reply may come from the SuperLink, not the node), with a one-line
  reason (the full one goes to the log), and a client that never answered gets a row too;
* `max_empty_rounds` consecutive rounds in which no update was accepted (failed, rejected or
  unanswered) stop the run (ClientsFailed, naming the last failure), instead of a run that
  "completes" without training; a single such round (e.g. the one sampled house failed) is
  recorded and the global model stays as it was;
* evaluation runs on every silo's own test split; the pooled metrics are the example-weighted
  ones, which equal RMSE/MAE on the union of the test splits, so no test data leaves a silo.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable
from logging import INFO, WARNING

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, FedProx

from contracts.messages import (
    FIT_S,
    HOLDS_PARTITION,
    NUM_EXAMPLES,
    SAVE_STATE,
    SERVER_ROUND,
    TRAIN_LOSS,
)
from strategies.dp import fixed_denominator_mean, floor_variances
from strategies.floors import FLOOR_RMSE, best_constant_rmse, label_moments
from strategies.nodes import (
    START_S,
    adopt,
    answered,
    query_partitions,
    refresh_partitions,
    wait_for_nodes,
    wait_for_return,
)
from strategies.robust import aggregate, update_norm
from strategies.screening import MAX_EXAMPLES, mean_signals, message_bytes, one_line, screen_update


def evaluates(server_round: int, every: int, num_rounds: int) -> bool:
    """Evaluate every `every` rounds and always in the last one."""
    return server_round % max(every, 1) == 0 or server_round == num_rounds


def sample_size(n: int, fraction: float, cap: int = 0) -> int:
    """How many of n to draw: floor(n x fraction), at least 1, at most `cap` when > 0."""
    k = min(n, max(1, math.floor(n * fraction + 1e-9)))
    return min(k, cap) if cap > 0 else k


class ClientsFailed(RuntimeError):
    """No client of a round could train (e.g. all lack their data), or no update was accepted
    for `max_empty_rounds` rounds in a row: the run cannot go on."""


class ScreenedFedAvg(FedAvg):
    def __init__(
        self,
        *,
        recorder,
        num_clients: int,
        seed: int,
        node_wait_s: float = 120.0,
        node_start_s: float = START_S,
        node_return_s: float = 300.0,
        eval_every: int = 1,
        num_rounds: int = 0,
        max_empty_rounds: int = 3,
        aggregator: str = "mean",
        trim: float = 0.2,
        max_update_norm: float = 0.0,
        max_evaluate_nodes: int = 0,
        dp_local=None,
        partition_sampling_max: int = 1000,
        **kwargs,
    ):
        kwargs.setdefault("min_available_nodes", num_clients)
        super().__init__(**kwargs)
        self.recorder = recorder
        self.num_clients = num_clients
        self.seed = seed
        self.node_wait_s, self.node_start_s = node_wait_s, node_start_s  # strategies.nodes.Patience
        self.node_return_s = node_return_s  # strategies.nodes.wait_for_return
        self.eval_every = eval_every
        self.num_rounds = num_rounds
        self.partitions: dict[int, int] | None = None  # node id -> partition id
        self.unheld: list[int] = []  # sampled partitions no node holds
        self.retired: set[int] = set()  # nodes whose partition a newer node took
        self.current: ArrayRecord | None = None
        self.max_empty_rounds = max_empty_rounds
        self.empty_rounds = 0  # consecutive rounds with no accepted update
        self.sent: list[Message] = []  # this round's training messages
        self.round_offset = 0  # a resumed run: Flower counts its rounds from 1 again
        self.aggregator, self.trim = aggregator, trim  # strategies/robust.py
        self.max_update_norm = max_update_norm  # 0 = no bound
        self.max_evaluate_nodes = max_evaluate_nodes  # 0 = no cap
        self.dp_denominator = 0  # > 0: central DP's fixed-denominator mean (strategies/dp.py)
        # local DP (strategies/dp.LocalDPLedger): the server's own count of what each party
        # spent; noised variances are floored (post-processing)
        self.dp_local = dp_local
        # above this many clients: draw nodes, learn partitions from replies (module docstring)
        self.by_node = num_clients > partition_sampling_max

    # ---- who is who -------------------------------------------------------------------
    def _ensure_partitions(self, grid: Grid) -> dict[int, int]:
        """node id -> partition, refreshed every round (strategies.nodes.refresh_partitions)."""
        if self.partitions is None:
            ids = wait_for_nodes(grid, self.num_clients, self.node_wait_s)
            if self.by_node:
                log(
                    INFO,
                    "[fedembodied] %d clients > partition-sampling-max: each round draws over "
                    "the connected nodes; each reply says which partition its node holds",
                    self.num_clients,
                )
                self.partitions = {}
            else:
                self.partitions = query_partitions(grid, ids, self.node_wait_s, self.node_start_s)
            return self.partitions
        if grid is None:  # a strategy driven by hand (unit tests): the given map is the truth
            return self.partitions
        return refresh_partitions(
            grid, self.partitions, self.node_wait_s, self.retired, ask_new=not self.by_node
        )

    def sample(
        self, grid: Grid, server_round: int, fraction: float, cap: int = 0, stream: int = 0
    ) -> list[int]:
        """Node ids of a seeded sample of the run's partitions, in partition order: `fraction`
        of them, at most `cap` (0 = no cap). It is drawn over every partition, held by a node
        or not, so a lost silo does not change who else is picked; picked silos that no node
        holds now are left in `self.unheld`. `stream` keeps evaluation's draw apart from
        training's."""
        parts = self._ensure_partitions(grid)
        key = self.seed * 100_003 + server_round
        rng = random.Random(key * 7 + stream if stream else key)  # stream 0: training's draw
        if self.by_node and grid is not None:
            return self._sample_nodes(grid, parts, rng, fraction, cap)
        by_part = {p: n for n, p in parts.items()}
        everyone = sorted(set(range(self.num_clients)) | set(by_part))
        k = sample_size(len(everyone), fraction, cap)
        chosen = sorted(rng.sample(everyone, k))
        if grid is not None and chosen and not set(chosen) & set(by_part):
            wait_for_return(grid, parts, set(chosen), self.node_return_s, self.retired)
            by_part = {p: n for n, p in parts.items()}
        self.unheld = [p for p in chosen if p not in by_part]
        return [by_part[p] for p in chosen if p in by_part]

    def _sample_nodes(self, grid: Grid, parts: dict[int, int], rng, fraction, cap) -> list[int]:
        """A large federation's draw: over the connected nodes (sorted, so the draw depends on
        the seed and the node ids alone). No node is asked who it is: its reply says
        (`_learn_partitions`), which saves a wait on the whole federation per draw."""
        online = sorted(set(grid.get_node_ids()) - self.retired)
        chosen = rng.sample(online, sample_size(len(online), fraction, cap)) if online else []
        self.unheld = []
        return sorted(chosen, key=lambda n: (parts.get(n, self.num_clients), n))

    def _learn_partitions(self, replies: list[tuple[int, Message]]) -> None:
        """A large federation (`by_node`): the partition each (node, reply) says its node holds
        (HOLDS_PARTITION), for a node not met before, kept as an identity answer would be
        (strategies.nodes.adopt: a node that left, such as a SuperNode restarted with a new
        id, gives its partition to the newcomer). A claim is the node's own word, as the
        identity answer was, held to this: a missing, out-of-range or non-integer claim, or
        one on a partition that another node answering in the same batch holds or claims (two
        live nodes, not a restart), leaves the node unknown, and an unknown node's update and
        scores are not used (`_problem`, `aggregate_evaluate`). A node's partition is read
        once while it stays connected: its later claims are not read."""
        if not self.by_node or self.partitions is None:
            return
        live = {node for node, rep in replies if not rep.has_error()}
        claims: dict[int, int] = {}
        for node, rep in replies:
            if node in self.partitions or rep.has_error():
                continue
            claim = next(iter(rep.content.metric_records.values()), {}).get(HOLDS_PARTITION)
            if type(claim) is int and 0 <= claim < self.num_clients:  # not a bool or float
                claims[node] = claim
            else:
                log(WARNING, "[fedembodied] node %d's reply names no partition in [0, %d) "
                    "(%.40r): not used", node, self.num_clients, claim)  # fmt: skip
        held = {self.partitions[n] for n in live if n in self.partitions}
        counts = Counter(claims.values())
        found = {}
        for node, part in claims.items():
            if part in held or counts[part] > 1:
                log(WARNING, "[fedembodied] node %d claims partition %d, which another node "
                    "answering now holds or claims: not used", node, part)  # fmt: skip
            else:
                found[node] = part
        adopt(found, self.partitions, self.retired)

    def _unknown(self, node: int) -> bool:
        """A large federation's node that named no partition it may hold (`_learn_partitions`):
        its update, its scores and its releases are not used."""
        return self.by_node and node not in (self.partitions or {})

    def _extra_train_config(self) -> dict:
        return {}

    def sampled_per_round(self) -> int:
        """How many parties a training round samples (central DP's m, strategies/dp.py)."""
        return sample_size(self.num_clients, self.fraction_train)

    def dp_step_scale(self) -> float:
        """How far the global model moves per unit of the mean (FedVLN's Eq. 7: eta_t)."""
        return 1.0

    def train_nodes(self, grid: Grid, server_round: int) -> list[int]:
        """Who trains this round (subclasses sample differently)."""
        return self.sample(grid, server_round, self.fraction_train)

    def evaluate_nodes(self, grid: Grid, server_round: int) -> list[int]:
        """Who is scored: `fraction-evaluate` of the silos, at most `max-evaluate-clients`,
        in every evaluating round including the last (a seeded draw of its own)."""
        nodes = self.sample(
            grid, server_round, self.fraction_evaluate, self.max_evaluate_nodes, stream=1
        )
        self.unheld = []  # an unheld silo is not scored; training's rows say it is gone
        return nodes

    def _messages(
        self, arrays: ArrayRecord, config: ConfigRecord, node_ids: list[int], message_type: str
    ) -> list[Message]:
        msgs = list(
            self._construct_messages(
                RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config}),
                node_ids,
                message_type,
            )
        )
        self.recorder.add_bytes(
            down=sum(message_bytes(m) for m in msgs),
            evaluation=message_type == MessageType.EVALUATE,
        )
        if message_type == MessageType.TRAIN:
            self.sent = msgs
        return msgs

    # ---- training ---------------------------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        server_round += self.round_offset
        self.recorder.start_round(server_round)
        self.current = arrays
        config = ConfigRecord(
            {
                **dict(config),
                **self._extra_train_config(),
                SERVER_ROUND: server_round,
                SAVE_STATE: True,
            }
        )
        self.unheld = []
        nodes = self.train_nodes(grid, server_round)
        for p in self.unheld:  # picked, but its SuperNode is gone
            self.recorder.add_client(
                node=None,
                partition=p,
                num_examples=0,
                train_loss=None,
                fit_s=None,
                status="failed: no node holds this silo",
            )
        return self._messages(arrays, config, nodes, MessageType.TRAIN)

    def _sorted(self, replies: Iterable[Message]) -> list[Message]:
        parts = self.partitions or {}
        return sorted(replies, key=lambda m: parts.get(m.metadata.src_node_id, -1))

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Four stages: screen every reply, record every node (answered or not), apply the
        empty-round rule, then the weighted mean (or robust aggregate) of what was accepted."""
        server_round += self.round_offset
        pairs = answered(self.sent, list(replies))
        self._learn_partitions([(self.sent[i].metadata.dst_node_id, rep) for i, rep in pairs])
        pairs.sort(key=lambda ir: self._partition(self.sent[ir[0]].metadata.dst_node_id))
        if self.dp_local:  # every noised update that arrived was a release, used or not
            for i, rep in pairs:
                self._count_release(self.sent[i].metadata.dst_node_id, rep)
            self.recorder.add_metrics(self.dp_local.report())
        accepted = self._screen_and_record(server_round, pairs)
        self._record_silent(pairs)
        if not accepted:
            self._empty_round(server_round, pairs)
            return None, None  # the global model stays as it was
        self.empty_rounds = 0
        return self._mean(accepted)

    def _count_release(self, node: int, rep: Message) -> None:
        """Local DP's ledger: an update `node` sent (noised by its LocalDpMod) reached us."""
        if self._unknown(node):
            return  # no party to count it for; its update is not used (_problem)
        if not rep.has_error() and rep.content.array_records:
            metrics = next(iter(rep.content.metric_records.values()), {})
            self.dp_local.received(self._partition(node), dict(metrics))

    def _partition(self, node: int) -> int:
        return (self.partitions or {}).get(node, -1)

    def _problem(self, server_round: int, node: int, rep: Message, current: dict):
        """(why the reply is not used or None, its update): screening (strategies/screening),
        an error reply, the update-norm bound."""
        problem, update = screen_update(
            rep, self.current, array_key=self.arrayrecord_key, weight_key=self.weighted_by_key
        )
        if self._unknown(node) and not rep.has_error():
            problem = "rejected: no partition it may hold (holds-partition, _learn_partitions)"
        if rep.has_error():
            log(
                WARNING,
                "[fedembodied] round %d: node %d (partition %d) failed:\n%s",
                server_round,
                node,
                self._partition(node),
                rep.error.reason,
            )
            problem = f"failed: {one_line(rep.error.reason)}"
        elif problem is None and self.max_update_norm > 0:
            if not current:  # the global model, decoded once per round
                current.update({k: v.numpy() for k, v in self.current.items()})
            norm = update_norm(update, current)
            if norm > self.max_update_norm:
                problem = (
                    f"rejected: update norm {norm:.3g} > max-update-norm {self.max_update_norm:g}"
                )
        return problem, update

    def _screen_and_record(self, server_round: int, pairs) -> list:
        """Screen each reply and write its clients.csv row; (content, update) of the accepted."""
        accepted, current = [], {}
        for i, rep in pairs:
            node = self.sent[i].metadata.dst_node_id
            problem, update = self._problem(server_round, node, rep, current)
            m = (
                {}
                if rep.has_error()
                else dict(next(iter(rep.content.metric_records.values()), MetricRecord()))
            )
            if not rep.has_error():
                self.recorder.add_bytes(up=message_bytes(rep))
            self.recorder.add_client(
                node=node,
                partition=self._partition(node),
                num_examples=m.get(self.weighted_by_key, 0),
                train_loss=m.get(TRAIN_LOSS),
                fit_s=m.get(FIT_S),
                bytes_up=0 if rep.has_error() else message_bytes(rep),
                status=problem or "ok",
            )
            if problem is None:
                accepted.append((rep.content, update))
        return accepted

    def _record_silent(self, pairs) -> None:
        """A clients.csv row for every node that did not answer within the round timeout."""
        answered_ix = {i for i, _ in pairs}
        for i, msg in enumerate(self.sent):
            if i not in answered_ix:
                node = msg.metadata.dst_node_id
                self.recorder.add_client(
                    node=node,
                    partition=self._partition(node),
                    num_examples=0,
                    train_loss=None,
                    fit_s=None,
                    status="failed: no reply within the round timeout",
                )

    def _empty_round(self, server_round: int, pairs) -> None:
        """No update accepted: the model stays; after `max-empty-rounds` such rounds in a row
        the run stops naming the last failure."""
        self.recorder.add_metrics({"n_accepted": 0})
        self.empty_rounds += 1
        if self.empty_rounds >= self.max_empty_rounds:
            why = next(
                (one_line(rep.error.reason) for _, rep in pairs if rep.has_error()),
                "see clients.csv",
            )
            raise ClientsFailed(
                f"no update was accepted in {self.empty_rounds} consecutive "
                f"rounds (up to round {server_round}; run config "
                f"'max-empty-rounds'); last failure: {why}"
            )

    def _mean(self, accepted: list) -> tuple[ArrayRecord, MetricRecord]:
        """FedAvg's weighted mean (by `num-examples`) of the accepted updates, or the robust
        aggregate (strategies/robust.py), and the round's weighted training loss."""
        updates = [u for _, u in accepted]
        contents = [c for c, _ in accepted]
        n = [
            float(c.metric_records[next(iter(c.metric_records))][self.weighted_by_key])
            for c in contents
        ]
        if self.dp_denominator:
            arrays = fixed_denominator_mean(updates, self.current, self.dp_denominator)
        else:
            arrays = aggregate(updates, n, self.aggregator, self.trim)
        if self.dp_local:
            arrays = floor_variances(arrays)
        loss = [
            float(next(iter(c.metric_records.values())).get(TRAIN_LOSS, float("nan")))
            for c in contents
        ]
        metrics = MetricRecord(
            {
                "train_loss": sum(a * b for a, b in zip(n, loss)) / sum(n),
                "n_accepted": len(contents),
                **mean_signals([dict(next(iter(c.metric_records.values()))) for c in contents]),
            }
        )
        self.recorder.add_metrics(dict(metrics))
        return arrays, metrics

    # ---- evaluation on every silo -----------------------------------------------------
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        server_round += self.round_offset
        if not evaluates(server_round, self.eval_every, self.num_rounds):
            return []
        config = ConfigRecord({**dict(config), SERVER_ROUND: server_round})
        return self._messages(
            arrays, config, self.evaluate_nodes(grid, server_round), MessageType.EVALUATE
        )

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        server_round += self.round_offset
        replies = list(replies)
        self._learn_partitions([(r.metadata.src_node_id, r) for r in replies])
        rows, moments = [], []
        for rep in self._sorted(replies):
            if rep.has_error() or len(rep.content.metric_records) != 1:
                continue
            if self._unknown(rep.metadata.src_node_id):
                continue  # its scores are not used
            m = next(iter(rep.content.metric_records.values()))
            try:  # a malformed or forged reply is left out, never pooled or crashing the run
                row = (float(m[NUM_EXAMPLES]), float(m["mse"]), float(m["mae"]))
            except (KeyError, TypeError, ValueError):
                log(
                    WARNING,
                    "[fedembodied] round %d: evaluation of node %d lacks "
                    "num-examples/mse/mae; left out",
                    server_round,
                    rep.metadata.src_node_id,
                )
                continue
            if (
                all(math.isfinite(v) for v in row)
                and 0 < row[0] <= MAX_EXAMPLES
                and row[1] >= 0
                and row[2] >= 0
            ):
                rows.append(row)
                labels = label_moments(m)
                moments.append(None if labels is None else (row[0], *labels))
        if not rows:
            return None
        n_total = sum(r[0] for r in rows)
        metrics = MetricRecord(
            {
                "rmse": math.sqrt(sum(n * mse for n, mse, _ in rows) / n_total),
                "mae": sum(n * mae for n, _, mae in rows) / n_total,
                "silo_rmse_mean": sum(math.sqrt(mse) for _, mse, _ in rows) / len(rows),
                "silo_mae_mean": sum(mae for _, _, mae in rows) / len(rows),
                "n_eval_silos": len(rows),
            }
        )
        if all(moments):  # the floor of `rmse`: the best constant on the same test sets
            metrics[FLOOR_RMSE] = best_constant_rmse(moments)
        self.recorder.add_metrics(dict(metrics))
        return metrics


class ScreenedFedProx(ScreenedFedAvg, FedProx):
    """FedProx: FedAvg aggregation, clients add (mu/2)||w - w_global||^2 to their loss."""

    def _extra_train_config(self) -> dict:
        return {"proximal-mu": float(self.proximal_mu)}

"""Decentralized accumulation on a peer topology, with the server only as a relay.

Each round the relay sends every silo its own mix sum_j A[i, j] theta_j of its in-neighbours'
models (a different payload per node), each silo trains from its mix and sends its model back.
Mixing on the relay is arithmetically what peers exchanging models over the overlay would do;
what each silo receives depends only on its neighbours. Replies are screened like FedAvg's: a
rejected or failed silo keeps its mix for the next round.

Under party-side DP (`dp.mode = "local"`, clients/dp.py) each silo clips and noises the model
it sends on its own machine, so its neighbours only ever mix noised models. There is no
server aggregate here for Flower's central-DP wrapper to noise, hence no central mode. The
relay floors the noised BatchNorm variances of what it forwards (post-processing, as
strategies/dp.py does for FedAvg) and records the largest epsilon of a silo, as the server
counts it from the updates it received (`dp_epsilon`, strategies/dp.LocalDPLedger), the silos'
own claims beside it (`dp_epsilon_claimed`).

Evaluation each round (all on the silos, no data leaves them): every silo scores the models it
is sent on its own test split. With `cross_eval` it is sent every silo's model and the uniform
average, so each model's error on the pooled test set (the union of the splits) is the
example-weighted pool of the silos' answers; without it (large topologies, where that costs
N^2 model transfers) each silo scores its own model and the average.
"""

from __future__ import annotations

import math
import random

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from contracts.messages import (
    FIT_S,
    NUM_EXAMPLES,
    SAVE_STATE,
    SERVER_ROUND,
    TRAIN_LOSS,
)
from strategies.dp import floor_variance_arrays
from strategies.floors import (
    FLOOR,
    SILO_RMSE_OWN,
    SILO_RMSE_POOLED,
    best_constant_rmse,
    label_moments,
)
from strategies.nodes import (
    START_S,
    FederationError,
    answered,
    query_partitions,
    refresh_partitions,
    wait_for_nodes,
    wait_for_return,
)
from strategies.screened_fedavg import ClientsFailed, sample_size
from strategies.screening import mean_signals, message_bytes, one_line, screen_update
from strategies.topology import Topology, consensus_distance, mix, parameter_names


def to_record(arrays: dict[str, np.ndarray], prefix: str = "") -> dict[str, Array]:
    return {f"{prefix}{k}": Array(np.ascontiguousarray(v)) for k, v in arrays.items()}


class TopologyRelay:
    def __init__(
        self,
        topology: Topology,
        recorder,
        *,
        node_wait_s: float,
        timeout_s: float,
        node_start_s: float = START_S,
        node_return_s: float = 300.0,
        cross_eval: bool,
        max_empty_rounds: int = 3,
        eval_fraction: float = 1.0,
        eval_cap: int = 0,
        seed: int = 0,
        dp_local=None,
    ):
        self.topology = topology
        self.dp_local = dp_local
        self.eval_fraction, self.eval_cap, self.seed = eval_fraction, eval_cap, seed
        self.recorder = recorder
        self.node_wait_s, self.node_start_s = node_wait_s, node_start_s  # strategies.nodes.Patience
        self.node_return_s = node_return_s  # strategies.nodes.wait_for_return
        self.timeout_s = timeout_s
        self.cross_eval = cross_eval
        self.max_empty_rounds = max_empty_rounds
        self.empty_rounds = 0  # consecutive rounds in which no silo's update was accepted
        self.partitions: dict[int, int] = {}  # node id -> partition
        self.retired: set[int] = set()  # nodes whose silo a newer node took

    @property
    def node_of(self) -> dict[int, int]:
        """partition -> node id (silos of the topology only)."""
        return {p: node for node, p in self.partitions.items() if p < self.topology.num_silos}

    def connect(self, grid: Grid) -> None:
        n = self.topology.num_silos
        ids = wait_for_nodes(grid, n, self.node_wait_s)
        self.partitions = query_partitions(grid, ids, self.node_wait_s, self.node_start_s)
        if sorted(self.partitions.values())[:n] != list(range(n)):
            raise FederationError(
                f"topology {self.topology.name!r} needs partitions 0..{n - 1}, "
                f"nodes have {sorted(self.partitions.values())}"
            )

    def train_round(self, grid: Grid, rnd: int, models: list[dict]) -> list[dict]:
        """One accumulation + local training; returns the silos' new models. Who holds which
        silo is checked every round (a restarted node is used again)."""
        refresh_partitions(grid, self.partitions, self.node_wait_s, self.retired)
        silos = set(range(self.topology.num_silos))
        wait_for_return(grid, self.partitions, silos, self.node_return_s, self.retired)
        a = self.topology.mixing
        mixes = [mix(models, a[i]) for i in range(len(models))]
        sent, replies = self._send_mixes(grid, rnd, mixes)
        self._record_silent(len(models), {i for i, _ in replies})
        new = list(mixes)  # a silo that did not answer, or failed, keeps its mix
        accepted = self._accept(replies, sent, new)
        losses = [float(m[TRAIN_LOSS]) for m in accepted]
        weights = [float(m[NUM_EXAMPLES]) for m in accepted]
        metrics = {
            "n_accepted": len(losses),
            "train_loss": float(np.average(losses, weights=weights)) if losses else math.nan,
            "consensus": consensus_distance(new, parameter_names(new[0])),
        }
        if self.dp_local:  # the server's own count of each silo's releases (strategies/dp.py)
            for i, rep in replies:
                if not rep.has_error() and rep.content.array_records:
                    self.dp_local.received(i, dict(rep.content["metrics"]))
            metrics.update(self.dp_local.report())
        metrics.update(mean_signals(accepted))
        self.recorder.add_metrics(metrics)
        self._count_empty(rnd, bool(losses), replies)
        return new

    def _send_mixes(self, grid: Grid, rnd: int, mixes: list[dict]) -> tuple[dict, list]:
        """Each held silo's mix out as a train message; returns the messages by silo and the
        (silo, reply) pairs that came back within the round timeout."""
        silos = [i for i in range(len(mixes)) if i in self.node_of]
        msgs = [
            Message(
                RecordDict(
                    {
                        "arrays": ArrayRecord(to_record(mixes[i])),
                        "config": ConfigRecord({SERVER_ROUND: rnd, SAVE_STATE: True}),
                    }
                ),
                dst_node_id=self.node_of[i],
                message_type=MessageType.TRAIN,
            )
            for i in silos
        ]
        self.recorder.add_bytes(down=sum(message_bytes(m) for m in msgs))
        replies = [
            (silos[k], rep)
            for k, rep in answered(msgs, grid.send_and_receive(msgs, timeout=self.timeout_s))
        ]
        return dict(zip(silos, msgs)), replies

    def _record_silent(self, n_silos: int, answered_silos: set[int]) -> None:
        """clients.csv rows for the silos that did not answer, with why."""
        for i in sorted(set(range(n_silos)) - answered_silos):
            held = i in self.node_of
            why = "no reply within the round timeout" if held else "no node holds this silo"
            self.recorder.add_client(
                node=self.node_of.get(i),
                partition=i,
                num_examples=0,
                train_loss=None,
                fit_s=None,
                status=f"failed: {why}",
            )

    def _accept(self, replies: list, sent: dict, new: list[dict]) -> list[dict]:
        """Screen each reply against what its silo was sent; an accepted one replaces the
        silo's model in `new`. Returns the accepted replies' metrics, in silo order."""
        accepted = []
        for i, rep in replies:
            problem, update = screen_update(rep, sent[i].content["arrays"])
            m = {} if rep.has_error() else dict(rep.content["metrics"])
            if not rep.has_error():
                self.recorder.add_bytes(up=message_bytes(rep))
            self.recorder.add_client(
                node=self.node_of[i],
                partition=i,
                num_examples=m.get(NUM_EXAMPLES, 0),
                train_loss=m.get(TRAIN_LOSS),
                fit_s=m.get(FIT_S),
                bytes_up=0 if rep.has_error() else message_bytes(rep),
                status=problem or "ok",
            )
            if problem is None:
                if self.dp_local:  # noised variances floored: post-processing
                    update = floor_variance_arrays(update)
                new[i] = {k: np.array(v) for k, v in update.items()}  # the silo's own copy
                accepted.append(m)
        return accepted

    def _count_empty(self, rnd: int, any_accepted: bool, replies: list) -> None:
        """Stop the run after `max-empty-rounds` consecutive rounds with no accepted update."""
        self.empty_rounds = 0 if any_accepted else self.empty_rounds + 1
        if self.empty_rounds >= self.max_empty_rounds:
            raise ClientsFailed(
                f"no silo's update was accepted in {self.empty_rounds} "
                f"consecutive rounds (up to round {rnd}; run config "
                f"'max-empty-rounds'); last failure: "
                + next(
                    (one_line(r.error.reason) for _, r in replies if r.has_error()),
                    "see clients.csv",
                )
            )

    def evaluate_round(self, grid: Grid, rnd: int, models: list[dict]) -> list[dict]:
        """Metrics of the round; returns one row per silo (own split and pooled errors)."""
        n = len(models)
        average = mix(models, np.full(n, 1.0 / n))
        node_of = self.node_of
        silos = [i for i in range(n) if i in node_of]
        n_eval = sample_size(len(silos), self.eval_fraction, self.eval_cap)
        if n_eval < len(silos):  # fraction-evaluate / max-evaluate-clients: a seeded draw
            silos = sorted(random.Random((self.seed * 100_003 + rnd) * 7 + 1).sample(silos, n_eval))
        msgs = []
        for i in silos:
            chosen = list(range(n)) if self.cross_eval else [i]
            record = {}
            for k, j in enumerate(chosen):
                record.update(to_record(models[j], f"m{k}/"))
            record.update(to_record(average, f"m{len(chosen)}/"))
            msgs.append(
                Message(
                    RecordDict(
                        {
                            "arrays": ArrayRecord(record),
                            "config": ConfigRecord({SERVER_ROUND: rnd}),
                        }
                    ),
                    dst_node_id=node_of[i],
                    message_type=MessageType.EVALUATE,
                )
            )
        self.recorder.add_bytes(down=sum(message_bytes(m) for m in msgs), evaluation=True)
        answers, labels = {}, {}
        for k, rep in answered(msgs, grid.send_and_receive(msgs, timeout=self.timeout_s)):
            if not rep.has_error():
                m = rep.content["metrics"]
                answers[silos[k]] = (float(m[NUM_EXAMPLES]), list(m["mse"]), list(m["mae"]))
                labels[silos[k]] = label_moments(m)
        if not answers:
            return []
        total = sum(a[0] for a in answers.values())

        def pooled(k: int) -> tuple[float, float]:  # model k's errors on the union of splits
            mse = sum(a[0] * a[1][k] for a in answers.values()) / total
            mae = sum(a[0] * a[2][k] for a in answers.values()) / total
            return math.sqrt(mse), mae

        rows = []
        for i, (_, mse, mae) in sorted(answers.items()):
            own = i if self.cross_eval else 0
            row = {
                "round": rnd,
                "partition": i,
                "rmse_own": math.sqrt(mse[own]),
                "mae_own": mae[own],
            }
            if self.cross_eval:
                row["rmse_pooled"], row["mae_pooled"] = pooled(i)
            rows.append(row)
        avg_rmse, avg_mae = pooled(n if self.cross_eval else 1)
        metrics = {
            SILO_RMSE_OWN: float(np.mean([r["rmse_own"] for r in rows])),
            "silo_mae_own_mean": float(np.mean([r["mae_own"] for r in rows])),
            "avg_rmse": avg_rmse,
            "avg_mae": avg_mae,
            "n_eval_silos": len(rows),
        }
        if self.cross_eval:
            metrics[SILO_RMSE_POOLED] = float(np.mean([r["rmse_pooled"] for r in rows]))
            metrics["silo_mae_pooled_mean"] = float(np.mean([r["mae_pooled"] for r in rows]))
        # no `rmse`: that name is a global model's (FedAvg's), which a peer topology has none of
        if all(labels[i] for i in answers):  # the headline's floor, on the same test sets
            moments = [(answers[i][0], *labels[i]) for i in sorted(answers)]
            if self.cross_eval:
                metrics[FLOOR + SILO_RMSE_POOLED] = best_constant_rmse(moments)
            else:
                own = [best_constant_rmse([s]) for s in moments]
                metrics[FLOOR + SILO_RMSE_OWN] = float(np.mean(own))
        self.recorder.add_metrics(metrics)
        return rows

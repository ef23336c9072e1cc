"""Flower's cost per round against a bare loop doing the same work, and server aggregation
against a memcpy of the same bytes.

    python -m experiments.study experiments/studies/round_overhead.toml

(the analysis of that study file, which sets the rounds, clients, replies and repeats). The
study is one run, `repeats` times over both measures, so no two timings share the machine.

1. Round wall / bare loop, at the README's FedAvg setting (10 embedded silos, 2 local epochs,
   64x64, evaluation every round): the same run (a) through `simulation.py fedavg` (Flower's
   simulation engine, Ray, 2 ClientApps on 2 cores) and (b) as a bare loop: the same ServerApp
   code (server/driving_run.py) and ClientApp (clients/app.py) exchanging the same messages,
   serialized as Flower serializes them, through a grid that hands each to 2 worker processes
   (one torch thread each, as Flower's 2 ClientApp actors), with no Ray, no SuperLink and no
   polling (`bare_loop`). Median round wall time over rounds 2..R (round 1 pays start-up in
   both).
2. Aggregation / memcpy: `replies` training replies of a model of the driving ResNet-8's size
   and of a 13M-parameter model: screening + example-weighted mean as the strategy does it
   (each array read once, as a view of its bytes: strategies/screening.decode), best of 5,
   against a memcpy of the same bytes. The aggregation as it was before (decoded twice) is not
   timed here: a copy of old code does not follow fixes to the real one (issue 66); its rows
   (15.99x and 18.81x memcpy) are in git, experiments/results/round_overhead.csv at 8433976,
   made by the script of that commit.
Each ratio is taken within one repeat; the median is kept, least and largest beside. Writes
experiments/results/round_overhead.csv, every repeat in round_overhead_runs.csv, and the figure.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
import time
import traceback
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from config import parse
from contracts.messages import NUM_EXAMPLES
from experiments import figures
from experiments.simulate import machine_label, simulate


def _worker_start(study: int) -> None:
    """A bare-loop worker process: one torch thread (as each of Flower's two ClientApps on 2
    cores), allowed to build Messages (launch/in_process.task_identity); it ends with the
    study (launch/lifetime.py)."""
    import signal

    import torch

    from launch.in_process import task_identity
    from launch.lifetime import die_with

    die_with(study, signal.SIGKILL)

    torch.set_num_threads(1)
    task_identity()


def _call(message: bytes, context: bytes) -> tuple[bytes, bytes]:
    """One ClientApp call in a worker process, as Flower's simulation engine makes it: the
    message and the node's context arrive serialized, the reply and the context (with the
    state the node kept) go back serialized. An error becomes an error reply, as there."""
    from flwr.app import Error, Message
    from flwr.common import serde
    from flwr.proto.message_pb2 import Context as ProtoContext
    from flwr.proto.message_pb2 import Message as ProtoMessage

    from clients.app import app

    msg = serde.message_from_proto(ProtoMessage.FromString(message))
    ctx = serde.context_from_proto(ProtoContext.FromString(context))
    try:
        reply = app(msg, ctx)
    except Exception:
        reply = Message(Error(code=0, reason=traceback.format_exc()), reply_to=msg)
    return (
        serde.message_to_proto(reply).SerializeToString(),
        serde.context_to_proto(ctx).SerializeToString(),
    )


def bare_loop(cfg_over: dict, rounds: int, clients: int, out: Path) -> pd.DataFrame:
    """server/driving_run.run over a grid that hands each message to clients/app.py in one of
    2 worker processes (whichever is free, as Flower's two ClientApp actors are), with no Ray,
    no SuperLink and no polling. Processes, not threads: two threads share one interpreter,
    which made this loop slower than Flower's round on 2026-12-03's host (0.62x: no floor)."""
    from flwr.common import serde
    from flwr.proto.message_pb2 import Context as ProtoContext
    from flwr.proto.message_pb2 import Message as ProtoMessage

    from clients.app import app
    from config.schema import merged
    from launch.in_process import InProcessGrid
    from server import driving_run

    class TwoWorkers(InProcessGrid):
        pool: ProcessPoolExecutor

        def send_and_receive(self, messages, timeout=None):
            messages = list(messages)
            for m in messages:
                m.metadata.__dict__["_message_id"] = str(uuid.uuid4())
            calls = [
                self.pool.submit(
                    _call,
                    serde.message_to_proto(m).SerializeToString(),
                    serde.context_to_proto(
                        self.contexts[m.metadata.dst_node_id]
                    ).SerializeToString(),
                )
                for m in messages
            ]
            out = []
            for m, call in zip(messages, calls):
                reply, context = call.result()
                ctx = serde.context_from_proto(ProtoContext.FromString(context))
                self.contexts[m.metadata.dst_node_id] = ctx
                out.append(serde.message_from_proto(ProtoMessage.FromString(reply)))
            return out

    cfg = merged(
        {
            "method": "fedavg",
            "num-server-rounds": rounds,
            "num-clients": clients,
            "out-dir": str(out),
            **cfg_over,
        }
    )
    spawn = multiprocessing.get_context("spawn")
    grid = TwoWorkers(app, cfg, clients)
    pool = ProcessPoolExecutor(
        2, mp_context=spawn, initializer=_worker_start, initargs=(os.getpid(),)
    )
    with pool as grid.pool:
        driving_run.run(grid, parse(cfg), "fedavg")
    return pd.read_csv(out / "rounds.csv")


def round_overhead(rounds: int, clients: int, work: Path) -> dict:
    flower = pd.read_csv(
        simulate("fedavg", work / "flower", rounds=rounds, seed=0, num_clients=clients)
        / "rounds.csv"
    )
    bare = bare_loop({"seed": 0}, rounds, clients, work / "bare")
    t_f = float(flower[flower["round"] >= 2].wall_s.median())
    t_b = float(bare[bare["round"] >= 2].wall_s.median())
    return {
        "measure": "FedAvg round wall / bare loop",
        "setting": f"{clients} silos, 2 local epochs, 64x64, eval every round, rounds 2-{rounds}",
        "ours_s": t_f,
        "baseline_s": t_b,
        "ratio": t_f / t_b,
        "goal": "<= 1.15",
    }


def replies(n_params: int, n: int, seed: int = 0):
    from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    # Flower builds a Message only inside a run: give this process one (as tests/conftest.py)
    TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = 1
    rng = np.random.default_rng(seed)
    shapes = [(n_params // 4,), (n_params // 4,), (n_params // 2,)]
    ref = ArrayRecord(
        {f"w{i}": Array(rng.standard_normal(s).astype(np.float32)) for i, s in enumerate(shapes)}
    )
    out = []
    for _ in range(n):
        rec = ArrayRecord({k: Array(v.numpy() + 0.01) for k, v in ref.items()})
        msg = Message(
            RecordDict({"arrays": rec, "metrics": MetricRecord({NUM_EXAMPLES: 300})}),
            dst_node_id=1,
            message_type="train",
        )
        out.append(Message(msg.content, reply_to=msg))
    return ref, out


def new_aggregate(reps, ref):
    from strategies.robust import aggregate
    from strategies.screening import screen_update

    updates = [screen_update(r, ref)[1] for r in reps]
    return aggregate(updates, [300.0] * len(updates), "mean")


def best_of(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def aggregation(n_params: int, n: int) -> dict:
    ref, reps = replies(n_params, n)
    src = np.random.default_rng(1).standard_normal(n_params * n).astype(np.float32)
    dst = np.empty_like(src)
    t_copy = best_of(lambda: np.copyto(dst, src))
    t_new = best_of(lambda: new_aggregate(reps, ref))
    mean = new_aggregate(reps, ref)  # every reply is the reference + 0.01
    assert all(np.allclose(mean[k].numpy(), ref[k].numpy() + 0.01, atol=1e-5) for k in ref)
    return {
        "measure": "aggregation (screen + mean) / memcpy",
        "setting": f"{n} replies x {n_params / 1e6:.2f}M float32 parameters",
        "ours_s": t_new,
        "baseline_s": t_copy,
        "ratio": t_new / t_copy,
        "goal": "",
    }


def one_run(rounds: int, clients: int, replies: int, repeats: int) -> list[dict]:
    """Both measures `repeats` times, one after the other."""
    from models.resnet8 import ResNet8, count_parameters

    resnet = count_parameters(ResNet8(64, 1))
    rows = []
    for k in range(repeats):
        for n_params in (resnet, 13_000_000):
            rows.append({"repeat": k, **aggregation(n_params, replies)})
            print(rows[-1], flush=True)
        work = Path(tempfile.mkdtemp(prefix="round-overhead-"))
        rows.append({"repeat": k, **round_overhead(rounds, clients, work)})
        print(rows[-1], flush=True)
        shutil.rmtree(work, ignore_errors=True)
    return rows


def check(cell: dict, where) -> None:
    """What a run of this study accepts (experiments/study.py)."""
    if cell["rounds"] < 2 or min(cell["clients"], cell["replies"], cell["repeats"]) < 1:
        raise ValueError(f"{where}: grid.rounds at least 2; clients, replies, repeats at least 1")


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Per measure: the medians over the repeats, the ratio's least and largest beside."""
    df = (
        runs.fillna({"goal": ""})
        .groupby(["measure", "setting"], sort=False)
        .agg(
            ours_s=("ours_s", "median"),
            baseline_s=("baseline_s", "median"),
            ratio=("ratio", "median"),
            ratio_least=("ratio", "min"),
            ratio_largest=("ratio", "max"),
            goal=("goal", "first"),
            repeats=("repeat", "nunique"),
        )
        .reset_index()
    )
    df["machine"] = machine_label()
    return df.round(4)


def plot(runs: pd.DataFrame, png: Path, command: str) -> None:
    """Each measure's ratio to its baseline (1, the line): the median a bar, every repeat a dot,
    the round's goal drawn where it has one."""
    runs = runs.fillna({"goal": ""})
    keys = list(dict.fromkeys(zip(runs.measure, runs.setting)))
    fig, ax = figures.subplots(figsize=(8, 3.6))
    for i, (measure, setting) in enumerate(keys):
        r = runs[(runs.measure == measure) & (runs.setting == setting)]
        ax.barh(i, r.ratio.median(), 0.6, color="tab:blue", alpha=0.5)
        ax.plot(r.ratio, np.full(len(r), i), "o", color="tab:blue", ms=4)
        goal = r.goal.iloc[0]
        if goal.startswith("<="):
            x = float(goal.split()[1])
            ax.plot([x, x], [i - 0.4, i + 0.4], color="tab:red", lw=2, label=f"goal {goal}")
    ax.axvline(1.0, color="grey", ls="--", label="the baseline (bare loop, memcpy) = 1")
    ax.set_yticks(range(len(keys)), [f"{m}\n{s}" for m, s in keys], fontsize=7)
    ax.set(xscale="log", xlabel="time ÷ the baseline's, same repeat",
           title="Flower's round and our aggregation against a bare baseline")  # fmt: skip
    ax.legend(fontsize=7)
    fig.tight_layout()
    figures.save(fig, png, command)

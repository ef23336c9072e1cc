"""Flower's cost per round against a bare loop doing the same work, and server aggregation
against a memcpy of the same bytes.

    python -m experiments.bench.round_overhead [--rounds 5] [--clients 10] [--replies 12]

1. Round wall / bare loop, at the README's FedAvg setting (10 embedded silos, 2 local epochs,
   64x64, evaluation every round): the same run (a) through `simulation.py fedavg` (Flower's
   simulation engine, Ray, 2 ClientApps on 2 cores) and (b) as a bare loop: the same ServerApp
   code (server/driving_run.py) and ClientApp (clients/app.py) exchanging the same messages through
   a grid that calls the ClientApp directly on 2 worker threads (one torch thread each), with no
   Ray, no SuperLink and no polling. Median round wall time over rounds 2..R (round 1 pays
   start-up in both).
2. Aggregation / memcpy: `--replies` training replies of a model of the driving ResNet-8's size
   and of a 13M-parameter model: screening + example-weighted mean as the strategy does it now
   (each array read once, as a view of its bytes: strategies/screening.decode), as it did
   before (np.load'ed to screen, np.load'ed again and stacked for the mean), and a memcpy of the
   same bytes.
Writes experiments/results/round_overhead.csv.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from config import parse
from contracts.messages import NUM_EXAMPLES
from experiments.simulate import RESULTS, command_line, machine_label, simulate


def bare_loop(cfg_over: dict, rounds: int, clients: int, out: Path) -> pd.DataFrame:
    """server/driving_run.run over a grid that calls clients/app.py on 2 threads."""
    import torch

    from clients.app import app
    from config.schema import merged
    from launch.in_process import InProcessGrid
    from server import driving_run

    class TwoWorkers(InProcessGrid):
        pool = ThreadPoolExecutor(max_workers=2)

        def send_and_receive(self, messages, timeout=None):
            import uuid

            messages = list(messages)
            for m in messages:
                m.metadata.__dict__["_message_id"] = str(uuid.uuid4())
            return list(self.pool.map(self._deliver, messages))

    torch.set_num_threads(1)
    cfg = merged(
        {
            "method": "fedavg",
            "num-server-rounds": rounds,
            "num-clients": clients,
            "out-dir": str(out),
            **cfg_over,
        }
    )
    driving_run.run(TwoWorkers(app, cfg, clients), parse(cfg), "fedavg")
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
        "ours_s": round(t_f, 3),
        "baseline_s": round(t_b, 3),
        "ratio": round(t_f / t_b, 3),
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


def old_aggregate(reps, ref) -> dict:
    """Before: screening deserialized every array (Array.numpy: np.load, a copy) to check it
    was finite, then the mean deserialized it again and stacked all replies in float64."""
    for r in reps:
        for k in ref.keys():
            np.isfinite(r.content["arrays"][k].numpy()).all()
    w = np.full(len(reps), 1.0 / len(reps))
    return {
        k: np.tensordot(
            w, np.stack([r.content["arrays"][k].numpy().astype(np.float64) for r in reps]), axes=1
        ).astype(np.float32)
        for k in ref.keys()
    }


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


def aggregation(n_params: int, n: int) -> list[dict]:
    ref, reps = replies(n_params, n)
    src = np.random.default_rng(1).standard_normal(n_params * n).astype(np.float32)
    dst = np.empty_like(src)
    t_copy = best_of(lambda: np.copyto(dst, src))
    t_new = best_of(lambda: new_aggregate(reps, ref))
    t_old = best_of(lambda: old_aggregate(reps, ref))
    new = new_aggregate(reps, ref)
    old = old_aggregate(reps, ref)
    assert all(np.allclose(new[k].numpy(), old[k], atol=1e-5) for k in old)  # same result
    setting = f"{n} replies x {n_params / 1e6:.2f}M float32 parameters"
    return [
        {
            "measure": "aggregation (screen + mean) / memcpy",
            "setting": setting,
            "ours_s": round(t_new, 4),
            "baseline_s": round(t_copy, 4),
            "ratio": round(t_new / t_copy, 2),
            "goal": "",
        },
        {
            "measure": "aggregation before (decoded twice) / memcpy",
            "setting": setting,
            "ours_s": round(t_old, 4),
            "baseline_s": round(t_copy, 4),
            "ratio": round(t_old / t_copy, 2),
            "goal": "",
        },
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--replies", type=int, default=12)
    ap.add_argument(
        "--skip-rounds", action="store_true", help="aggregation only (keeps the CSV's round rows)"
    )
    args = ap.parse_args(argv)
    cmd = command_line(__file__, argv)
    from models.resnet8 import ResNet8, count_parameters

    resnet = count_parameters(ResNet8(64, 1))
    rows = []
    for n_params in (resnet, 13_000_000):
        rows += aggregation(n_params, args.replies)
        print(rows[-2:], flush=True)
    if not args.skip_rounds:
        work = Path(tempfile.mkdtemp(prefix="round-overhead-"))
        rows.append(round_overhead(args.rounds, args.clients, work))
        print(rows[-1], flush=True)
        shutil.rmtree(work, ignore_errors=True)
    csv = RESULTS / "round_overhead.csv"
    if args.skip_rounds and csv.exists():  # keep the round rows measured before
        old = pd.read_csv(csv)
        rows += (
            old[~old.measure.str.startswith("aggregation")]
            .drop(columns="machine")
            .to_dict("records")
        )
    df = pd.DataFrame(rows)
    df["machine"] = machine_label()
    RESULTS.mkdir(parents=True, exist_ok=True)
    df.to_csv(csv, index=False)
    print(f"\n{cmd}\n" + df.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

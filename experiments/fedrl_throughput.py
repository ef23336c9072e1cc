"""FedRL training throughput under Flower's simulation engine vs the same algorithm in one process.

    python -m experiments.fedrl_throughput [--rounds 12] [--configs 32,4,16 128,2,64 256,1,256]

Each config is B,S,K: B environments per acting message, S acting steps per round (2 messages
each) and K minibatch updates per round (3 messages for all K). The same config runs (a) through
`simulation.py fedrl` (real ServerApp and ClientApps, Ray) and (b) as direct calls to the same
party code in one process with no Flower (`experiments/fedrl_local.py`), both on this machine.
Throughput is measured on the median round after the first updates (rounds 3 .. R-1: round 1 pays
Ray's start-up, the last round the final evaluation): env steps/s = B*S / round time, train
steps/s = K*batch / round time. ratio = Flower's throughput / one process's (goal >= 0.5).
Writes experiments/results/fedrl_throughput.csv.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.simulate import RESULTS, command_line, simulate


def run_config(b: int, s: int, k: int) -> dict:
    # updates start in round 2; the final evaluation is kept short (4 valid maps, no test split)
    return {"fedrl.envs": b, "fedrl.act-steps": s, "fedrl.updates": k, "fedrl.warmup": b * s,
            "fedrl.eval-episodes": 4, "fedrl.test-maps": "", "client-threads": 1,
            "eval-every": 100000}


def local_round_times(cfg: dict, rounds: int) -> list[float]:
    import torch

    from clients.fedrl_party import Settings
    from experiments.fedrl_local import FedRLLocal
    from server.config import merged

    torch.set_num_threads(1)
    runner = FedRLLocal(Settings.from_config(merged(cfg)))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        runner.round()
        times.append(time.perf_counter() - t0)
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--configs", nargs="+", default=["32,4,16", "128,2,64", "256,1,256"])
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args(argv)
    rows = []
    work = Path(tempfile.mkdtemp(prefix="fedrl-throughput-"))
    for spec in args.configs:
        b, s, k = (int(x) for x in spec.split(","))
        cfg = run_config(b, s, k)
        cfg["fedrl.batch-size"] = args.batch_size
        text = " ".join(f"{key}={v!r}".replace("'", '"') for key, v in cfg.items())
        run_dir = simulate("fedrl", work / spec.replace(",", "-"), rounds=args.rounds, seed=0,
                           run_config=text)
        flower = pd.read_csv(run_dir / "rounds.csv")
        steady = flower[(flower["round"] >= 3) & (flower["round"] < args.rounds)]
        t_flower = float(steady["wall_s"].median())
        msgs = float(steady["messages"].diff().median())
        t_local = float(np.median(local_round_times(cfg, args.rounds)[2:-1]))
        row = {"B": b, "S": s, "K": k, "batch": args.batch_size, "messages_per_round": msgs,
               "flower_round_s": t_flower, "local_round_s": t_local,
               "flower_env_steps_per_s": b * s / t_flower,
               "local_env_steps_per_s": b * s / t_local,
               "flower_train_steps_per_s": k * args.batch_size / t_flower,
               "local_train_steps_per_s": k * args.batch_size / t_local,
               "ratio": t_local / t_flower}
        rows.append(row)
        print({key: round(v, 3) for key, v in row.items()}, flush=True)
    shutil.rmtree(work, ignore_errors=True)
    df = pd.DataFrame(rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    df.to_csv(RESULTS / "fedrl_throughput.csv", index=False)
    print(f"\n{command_line()}\n" + df.round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

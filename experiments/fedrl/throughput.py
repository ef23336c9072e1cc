"""FedRL under Flower's simulation engine against the same algorithm in one process, and what each
exchange setting costs in success: one table (the goal: the default >= 0.5 of the one-process
throughput and within the seed spread of the best SuccRate).

    python -m experiments.fedrl.throughput --map-dir ../shared/data/gridworld
           [--configs 32,4,64 64,2,64 128,1,64 128,1,128 256,1,128] [--timing-rounds 12]
           [--transitions 25600] [--seeds 0 1 2] [--jobs 2] [--skip-success] [--force]

Each config is B,S,K: B environments per acting message, S acting steps per round (2 messages
each; the round's K minibatch updates ride on the last step's two, server/fedrl_run.py).

Throughput: the config runs (a) through `simulation.py fedrl` (real ServerApp and ClientApps,
Ray) and (b) as direct calls to the same party code in one process with no Flower
(`experiments/fedrl/local.py`), back to back on this machine, one torch thread each. Measured on
the median round after the first updates (rounds 3 .. R-1: round 1 pays Ray's start-up, the last
the final evaluation). ratio = one-process round time / Flower round time, i.e. Flower's share of
the one-process throughput (env steps and updates per second alike: same work per round).

Success: the paper's 8x8 maps and rules (as Table 1: train 0-6399, 6400-6799 selects, 6800-7199
scored), 3 seeds, every config the same number of transitions (`--transitions`, rounds =
transitions / (B x S)) and valid checks every 1,280 transitions, in one process (the Flower app
computes the same: tests/fedrl_parity.py). Runs are kept in --work and reused (resume).
Writes experiments/results/fedrl_throughput.csv (and _runs.csv).
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

from config import parse
from experiments.fedrl.table1 import check_common, run_jobs, splits_for
from experiments.simulate import RESULTS, ROOT, command_line, machine_label, simulate
from experiments.tables import refuse_overwrite


def default_config() -> str:
    """B,S,K of the run config's defaults (pyproject.toml)."""
    from config.schema import merged

    cfg = merged({})
    return f"{cfg['fedrl.envs']},{cfg['fedrl.act-steps']},{cfg['fedrl.updates']}"


def run_config(b: int, s: int, k: int) -> dict:
    # updates start in round 2; the final evaluation is kept short (4 valid maps, no test split)
    return {
        "fedrl.envs": b,
        "fedrl.act-steps": s,
        "fedrl.updates": k,
        "fedrl.warmup": b * s,
        "fedrl.eval-episodes": 4,
        "fedrl.test-maps": "",
        "client-threads": 1,
        "eval-every": 100000,
    }


def local_round_times(cfg: dict, rounds: int) -> list[float]:
    import torch

    from config.schema import merged
    from training.fedrl_protocol import DirectTransport
    from training.fedrl_setup import Settings

    torch.set_num_threads(1)
    runner = DirectTransport(Settings.of(parse(merged(cfg))))
    times = []
    for rnd in range(1, rounds + 1):
        t0 = time.perf_counter()
        runner.round(rnd == rounds)
        times.append(time.perf_counter() - t0)
    return times


def timing(b: int, s: int, k: int, rounds: int, work: Path) -> dict:
    cfg = run_config(b, s, k)
    text = " ".join(f"{key}={v!r}".replace("'", '"') for key, v in cfg.items())
    run_dir = simulate("fedrl", work / f"{b}-{s}-{k}", rounds=rounds, seed=0, run_config=text)
    flower = pd.read_csv(run_dir / "rounds.csv")
    steady = flower[(flower["round"] >= 3) & (flower["round"] < rounds)]
    t_flower = float(steady["wall_s"].median())
    msgs = float(steady["messages"].diff().median())
    t_local = float(np.median(local_round_times(cfg, rounds)[2:-1]))
    return {
        "messages_per_round": msgs,
        "flower_round_s": round(t_flower, 3),
        "local_round_s": round(t_local, 3),
        "flower_env_steps_per_s": round(b * s / t_flower, 1),
        "flower_updates_per_s": round(k / t_flower, 1),
        "local_updates_per_s": round(k / t_local, 1),
        "ratio": round(t_local / t_flower, 3),
    }


def success(configs: list[tuple], args) -> pd.DataFrame:
    _, files = check_common(args, [8])
    ranges = splits_for(files[8], args)
    jobs = []
    for b, s, k in configs:
        per_round = b * s
        jobs += [
            {
                "method": "fedrl",
                "rules": "paper",
                "size": 8,
                "seed": seed,
                "rounds": args.transitions // per_round,
                "eval_every": max(1, 1280 // per_round),
                "map_file": files[8],
                "ranges": ranges,
                "work": args.work,
                "extra": {"fedrl.envs": b, "fedrl.act-steps": s, "fedrl.updates": k},
            }
            for seed in args.seeds
        ]
    runs = run_jobs(jobs, args.jobs)
    return runs[runs.test_noise == "on"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--configs", nargs="+", default=["32,4,64", "64,2,64", "128,1,64", "128,1,128", "256,1,128"]
    )
    ap.add_argument("--timing-rounds", type=int, default=12)
    ap.add_argument("--transitions", type=int, default=25600, help="per success run")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--map-dir", default="", help="folder of gridworld_o_<n>.mat (paper maps)")
    for k in ("train", "valid", "test"):
        ap.add_argument(f"--{k}-maps", default="")
    ap.add_argument("--jobs", type=int, default=2, help="success runs in parallel")
    ap.add_argument("--work", default=str(ROOT / "runs" / "fedrl_throughput"))
    ap.add_argument("--skip-success", action="store_true", help="timings only")
    ap.add_argument(
        "--success-only",
        action="store_true",
        help="train the success runs into --work and stop (a later full run reuses "
        "them and times on an idle machine)",
    )
    ap.add_argument("--force", action="store_true", help="overwrite the result files")
    args = ap.parse_args(argv)
    cmd = command_line(__file__, argv)
    args.run_config, args.eval_every = "", 1
    csv, runs_csv = RESULTS / "fedrl_throughput.csv", RESULTS / "fedrl_throughput_runs.csv"
    try:
        configs = [tuple(int(x) for x in spec.split(",")) for spec in args.configs]
        if any(len(c) != 3 or min(c) <= 0 for c in configs):
            raise ValueError("--configs: each must be B,S,K of positive integers")
        refuse_overwrite([csv], args.force)
    except ValueError as e:
        print(f"fedrl_throughput: {e}", file=sys.stderr)
        return 2
    if args.success_only:
        success(configs, args)
        return 0
    machine = machine_label()
    rows, work = [], Path(tempfile.mkdtemp(prefix="fedrl-throughput-"))
    for b, s, k in configs:  # timings first, one at a time, on an idle machine
        row = {
            "B": b,
            "S": s,
            "K": k,
            "update_ratio": k / (b * s),
            "default": f"{b},{s},{k}" == default_config(),
            **timing(b, s, k, args.timing_rounds, work),
            "machine": machine,
        }
        print(row, flush=True)
        rows.append(row)
    shutil.rmtree(work, ignore_errors=True)
    table = pd.DataFrame(rows)
    if not args.skip_success:
        runs = success(configs, args)
        RESULTS.mkdir(parents=True, exist_ok=True)
        runs.to_csv(runs_csv, index=False)
        for ck in ("best", "last"):
            g = runs[runs.checkpoint == ck].groupby(["envs", "act_steps", "updates_per_round"])
            stats = g.succ_rate.agg(["mean", "std", "count"]) * [100, 100, 1]
            for i, row in table.iterrows():
                m = stats.loc[(row.B, row.S, row.K)]
                table.loc[i, f"succ_{ck}_mean"] = round(m["mean"], 1)
                table.loc[i, f"succ_{ck}_sd"] = round(m["std"], 1)
            table["seeds"] = int(stats["count"].min())
        top = table.loc[table.succ_best_mean.idxmax()]
        # within the seed spread of the best: no lower than the best's mean minus its sd
        table["within_spread_of_best"] = (
            table.succ_best_mean >= top.succ_best_mean - top.succ_best_sd
        )
        table["rounds"] = args.transitions // (table.B * table.S)
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(csv, index=False)
    print(f"\n{cmd}\n" + table.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

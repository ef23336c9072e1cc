"""How FedAvg under Flower's simulation engine scales with the number of virtual clients.

    python -m experiments.study experiments/studies/scale.toml

(the analysis of that study file, which sets the client counts, participants, rounds and
repeats). The study is one run that times every client count in turn, `repeats` times
interleaved, so no two timings share the machine and a change of load hits every count alike;
run it on a quiet machine. Every run does the same work per round: `participants` clients train
(fraction-train = participants / N) and at most as many are scored (fraction-evaluate = the
same, capped by max-evaluate-clients), on small embedded driving silos (32 training images of
32x32, 1 local epoch), so a difference between rows is what the federation's size costs, not
more training. Per run: time to the end of round 1 (Ray and the SuperLink's start, registering
the nodes, the identity queries, round 1), the median time of rounds 2..R, and the peak memory
of the whole process tree (simulation.py, the SuperLink, Ray and its workers: the sum of the
resident set sizes of every descendant, sampled every 0.5 s from /proc, so Linux only). Above
`partition-sampling-max` (1,000) clients the server asks no node who it is (each reply says)
(strategies/screened_fedavg.py), so round 1 costs what any round costs. The baseline is the
smallest federation, timed in the same repeat: a round's ratio to it is taken within each
repeat. The goals set for it (issue 65): 100,000 clients under 8 GiB, start to the end of
round 1 under 2 min, a round <= 2x the 10-client round or Flower's share of it named
(experiments/studies/engine_sweep.toml). Writes experiments/results/scale.csv (medians over the
repeats, least and largest beside), every run in scale_runs.csv, and the figure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd

from experiments import figures
from experiments.simulate import ROOT, machine_label
from experiments.tables import ratio_within_repeat
from launch.lifetime import child_env


def tree_rss(root: int) -> int:
    """Bytes resident in `root` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/statm") as f:
                rss[int(d)] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    total, todo = 0, [root]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total


def run(n: int, participants: int, rounds: int, out: Path) -> dict:
    frac = min(1.0, participants / n)
    rc = (
        f"fraction-train={frac} fraction-evaluate={frac} max-evaluate-clients={participants} "
        "driving.train-per-silo=32 driving.test-per-silo=16 driving.image-size=32 "
        "driving.local-epochs=1 node-wait-timeout=1800"
    )
    cmd = [
        sys.executable,
        str(ROOT / "simulation.py"),
        "fedavg",
        "--rounds",
        str(rounds),
        "--num-clients",
        str(n),
        "--out",
        str(out),
        "--no-plots",
        "--run-config",
        rc,
    ]
    print("$", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )  # ends with the study (launch/lifetime.py)
    peak, done = [0], threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss(proc.pid))
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()
    rc_ = proc.wait()
    done.set()
    total = time.perf_counter() - t0
    row = {
        "clients": n,
        "participants": participants,
        "rounds": rounds,
        "returncode": rc_,
        "total_s": round(total, 1),
        "peak_gib": round(peak[0] / 2**30, 2),
    }
    if rc_ == 0:
        df = pd.read_csv(out / "rounds.csv")
        row["round_s"] = round(float(df[df["round"] >= 2].wall_s.median()), 2)
        # what the run spent before round 2: start-up, identity queries and round 1
        row["to_first_round_end_s"] = round(total - float(df[df["round"] >= 2].wall_s.sum()), 1)
    return row


def one_run(clients: list[int], participants: int, rounds: int, repeats: int) -> list[dict]:
    """Every client count timed `repeats` times, interleaved; each run's folder is removed."""
    work = Path(tempfile.mkdtemp(prefix="scale-"))
    rows = []
    for k in range(repeats):
        for n in clients:
            rows.append({"repeat": k, **run(n, participants, rounds, work / f"{n}-{k}")})
            print(rows[-1], flush=True)
            shutil.rmtree(work / f"{n}-{k}", ignore_errors=True)
    return rows


def check(cell: dict, where) -> None:
    """What a run of this study accepts (experiments/study.py)."""
    if min(cell["clients"]) < cell["participants"] or cell["rounds"] < 2 or cell["repeats"] < 1:
        raise ValueError(
            f"{where}: grid.clients at least grid.participants, grid.rounds at least 2, "
            "grid.repeats at least 1"
        )


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Per client count: medians over the repeats (a failed run counts as failed), the round's
    ratio to the smallest federation's within each repeat, its least and largest beside."""
    runs = ratio_within_repeat(runs, "round_s", runs.clients == runs.clients.min())
    df = (
        runs.groupby("clients")
        .agg(
            participants=("participants", "first"),
            rounds=("rounds", "first"),
            returncode=("returncode", "max"),
            total_s=("total_s", "median"),
            peak_gib=("peak_gib", "max"),
            round_s=("round_s", "median"),
            to_first_round_end_s=("to_first_round_end_s", "median"),
            to_first_round_end_least=("to_first_round_end_s", "min"),
            to_first_round_end_largest=("to_first_round_end_s", "max"),
            round_vs_smallest=("ratio", "median"),
            round_vs_smallest_least=("ratio", "min"),
            round_vs_smallest_largest=("ratio", "max"),
            repeats=("repeat", "nunique"),
        )
        .reset_index()
    )
    df["machine"] = machine_label()
    return df.round(2)


def plot(runs: pd.DataFrame, png: Path, command: str) -> None:
    """The three goals against the federation's size, every run a dot and the median a line,
    each goal drawn as a dashed line."""
    runs = ratio_within_repeat(runs, "round_s", runs.clients == runs.clients.min())
    panels = (
        (
            "ratio",
            "round time ÷ the smallest federation's",
            2,
            "goal <= 2x (or Flower's share named)",
        ),
        ("to_first_round_end_s", "start to the end of round 1 (s)", 120, "goal < 2 min"),
        ("peak_gib", "peak memory, process tree (GiB)", 8, "goal < 8 GiB"),
    )
    fig, axes = figures.subplots(1, 3, figsize=(13, 3.8))
    for ax, (col, label, goal, goal_label) in zip(axes, panels):
        ax.plot(runs.clients, runs[col], "o", color="tab:blue", alpha=0.4)
        ax.plot(runs.groupby("clients")[col].median(), "-", color="tab:blue", label="median")
        ax.axhline(goal, color="grey", ls="--", label=goal_label)
        ax.set(xscale="log", xlabel="virtual clients", ylabel=label)
        ax.legend(fontsize=7)
    fig.suptitle(
        f"FedAvg in Flower's simulation engine, {int(runs.participants.iloc[0])} clients train "
        "a round; smallest federation = the baseline",
        fontsize=9,
    )
    fig.tight_layout()
    figures.save(fig, png, command)

"""How FedAvg under Flower's simulation engine scales with the number of virtual clients.

    python -m experiments.bench.scale [--clients 10 10000 100000] [--participants 10] [--rounds 3]

Every run does the same work per round: `--participants` clients train (fraction-train =
participants / N) and at most as many are scored (fraction-evaluate = the same, capped by
max-evaluate-clients), on small embedded driving silos (32 training images of 32x32, 1 local
epoch), so a difference between rows is what the federation's size costs, not more training.
Per run: time to the end of round 1 (Ray and the SuperLink's start, registering the nodes, the
identity queries, round 1), the median time of rounds 2..R, and the peak memory of the whole
process tree (simulation.py, the SuperLink, Ray and its workers: the sum of the resident set
sizes of every descendant, sampled every 0.5 s from /proc, so Linux only). Above
`partition-sampling-max` (1,000) clients the server asks only the nodes it draws who they are
(strategies/screened_fedavg.py), so round 1 costs what any round costs. The goals set for it
(issue 65): 100,000 clients under 8 GiB, start to the end of round 1 under 2 min, a round <= 2x
the 10-client round or Flower's share of it named (experiments/bench/engine_sweep.py).
Writes experiments/results/scale.csv.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd

from experiments.simulate import RESULTS, ROOT, command_line, machine_label


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
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 10000, 100000])
    ap.add_argument("--participants", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    cmd = command_line(__file__, argv)
    if min(args.clients) < args.participants or args.rounds < 2:
        print("scale: --clients must be >= --participants and --rounds >= 2", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="scale-"))
    rows = []
    for n in args.clients:
        rows.append(run(n, args.participants, args.rounds, work / str(n)))
        print(rows[-1], flush=True)
        shutil.rmtree(work / str(n), ignore_errors=True)
    df = pd.DataFrame(rows)
    base = df[df.clients == min(args.clients)].round_s.iloc[0]
    df["round_vs_smallest"] = (df.round_s / base).round(2)
    df["machine"] = machine_label()
    RESULTS.mkdir(parents=True, exist_ok=True)
    df.to_csv(RESULTS / "scale.csv", index=False)
    print(f"\n{cmd}\n" + df.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

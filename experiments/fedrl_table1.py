"""The layout of the FedRL paper's Table 1 (Grid-World 8/16/32), the paper's numbers beside ours.

    python -m experiments.fedrl_table1 [--sizes 8 16 32] [--seeds 0 1 2] [--rounds 300]
                                       [--map-dir ../shared/data/gridworld] [--jobs 2]

Methods: FCN-alpha, DQN-alpha, FedRL (test_noise=on / off), FCN-full, DQN-full, each trained for
the same number of rounds (B=32 environments x 4 steps and 16 minibatch updates per round, the
app's defaults) on the training maps and scored once at the end, one greedy episode per map, on
the validation maps (and the test maps, when the map source has them). FedRL runs in one process
(`experiments/fedrl_local.py`): the Flower app computes bit-identical numbers for the same config
(tests/test_fedrl.py checks it), and the single process spares ~0.15 s per message.

Which FedRL column is the paper's FedRL-1 / FedRL-2 is contradictory in the paper (Sec. 5.1
calls FedRL-1 "adding" and FedRL-2 "not adding" noise at test time, Figure 4's text the
opposite), so our columns say what they are: test_noise=on | off.

Maps: by default the embedded generated maps (8000 per size, split 6400/800/800, so there is a
test split); with --map-dir, the paper's own gridworld_o_<n>.mat, maps 0-6399 train and
6400-7199 valid (the files here do not hold the paper's test maps 7200-7999: valid only).
Paper scale is 200 epochs x 100 episodes with early stopping on valid; CPU defaults are smaller
(--rounds), so compare orderings. Writes experiments/results/fedrl_table1{,_runs}.csv and .png.
"""
from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.simulate import RESULTS, command_line  # noqa: E402

# Table 1 of the paper (SuccRate %, AvgRwd); FedRL-1/-2 as printed.
PAPER = {
    ("fcn-alpha", "succ"): (69.73, 48.04, 41.73), ("dqn-alpha", "succ"): (88.27, 76.20, 71.41),
    ("fedrl-1", "succ"): (92.52, 79.83, 77.88), ("fedrl-2", "succ"): (95.06, 84.31, 82.02),
    ("fcn-full", "succ"): (72.16, 56.44, 50.15), ("dqn-full", "succ"): (93.69, 83.40, 79.73),
    ("dqn-alpha", "rwd"): (13.781, -112.084, -285.946), ("fedrl-1", "rwd"): (18.152, -94.193, -226.583),
    ("fedrl-2", "rwd"): (19.101, -84.139, -189.756), ("dqn-full", "rwd"): (31.286, -38.114, -52.72),
}
SIZES = (8, 16, 32)
ROWS = [("FCN-alpha", "fcn-alpha", None, "fcn-alpha"),
        ("DQN-alpha", "dqn-alpha", None, "dqn-alpha"),
        ("FedRL test_noise=on", "fedrl", "on", "fedrl-1"),
        ("FedRL test_noise=off", "fedrl", "off", "fedrl-2"),
        ("FCN-full", "fcn-full", None, "fcn-full"),
        ("DQN-full", "dqn-full", None, "dqn-full")]


def one_run(job: tuple) -> list[dict]:
    method, size, seed, rounds, map_dir, extra = job
    import torch

    from clients.fedrl_party import Settings
    from experiments.fedrl_local import train
    from server.config import merged

    torch.set_num_threads(1)
    rc = {"seed": seed, "fedrl.size": size, **extra}
    if map_dir:
        rc.update({"fedrl.map-file": str(Path(map_dir) / f"gridworld_o_{size}.mat"),
                   "fedrl.test-maps": ""})
    s = Settings.from_config(merged(rc))
    s.check_maps()
    splits = ("valid", "test") if len(s.test) else ("valid",)
    rows = train(method, s, rounds, eval_every=0, splits=splits, log=None)
    last = rows[-1]
    out = []
    for split in splits:
        for noise in (("on", "off") if method == "fedrl" else (None,)):
            sfx = f"-test_noise={noise}" if noise else ""
            out.append({"method": method, "test_noise": noise or "", "size": size, "seed": seed,
                        "split": split, "rounds": rounds, "wall_s": last["wall_s"],
                        "succ_rate": last[f"{split}-succ-rate{sfx}"],
                        "avg_reward": last[f"{split}-avg-reward{sfx}"]})
    print(f"  {method:9s} size {size:2d} seed {seed}: "
          + ", ".join(f"{r['split']}{'/' + r['test_noise'] if r['test_noise'] else ''} "
                      f"succ {r['succ_rate']:.3f} rwd {r['avg_reward']:.1f}" for r in out)
          + f" ({last['wall_s']:.0f} s)", flush=True)
    return out


def summarize(runs: pd.DataFrame, split: str) -> pd.DataFrame:
    rows = []
    for label, method, noise, paper in ROWS:
        for metric, col, scale in (("SuccRate %", "succ_rate", 100.0), ("AvgRwd", "avg_reward", 1.0)):
            key = "succ" if col == "succ_rate" else "rwd"
            if key == "rwd" and method.startswith("fcn"):
                continue  # the paper reports no AvgRwd for the FCNs
            row = {"metric": metric, "method": label}
            for i, size in enumerate(SIZES):
                sel = runs[(runs.method == method) & (runs["size"] == size) & (runs.split == split)
                           & (runs.test_noise.fillna("") == (noise or ""))]
                vals = sel[col].to_numpy() * scale
                row[f"{size}x{size} ours"] = (f"{vals.mean():.2f} ± {vals.std(ddof=1):.2f}"
                                              if len(vals) > 1 else
                                              f"{vals.mean():.2f}" if len(vals) else "")
                row[f"{size}x{size} paper"] = PAPER.get((paper, key), ("",) * 3)[i]
            rows.append(row)
    return pd.DataFrame(rows)


def plot(runs: pd.DataFrame, split: str, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    labels = [r[0] for r in ROWS]
    x = np.arange(len(labels))
    sizes = sorted(runs["size"].unique())
    for ax, col, scale, title in ((axes[0], "succ_rate", 100, "SuccRate (%)"),
                                  (axes[1], "avg_reward", 1, "AvgRwd")):
        for j, size in enumerate(sizes):
            means, stds = [], []
            for _, method, noise, _ in ROWS:
                sel = runs[(runs.method == method) & (runs["size"] == size) & (runs.split == split)
                           & (runs.test_noise.fillna("") == (noise or ""))][col] * scale
                means.append(sel.mean() if len(sel) else np.nan)
                stds.append(sel.std(ddof=1) if len(sel) > 1 else 0)
            ax.bar(x + (j - (len(sizes) - 1) / 2) * 0.25, means, 0.25, yerr=stds,
                   label=f"{size}x{size}", capsize=2)
        ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{title}, {split} maps (ours, mean ± sd over seeds)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), choices=SIZES)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--methods", nargs="+",
                    default=["fcn-alpha", "dqn-alpha", "fedrl", "fcn-full", "dqn-full"])
    ap.add_argument("--map-dir", default="", help="folder of gridworld_o_<n>.mat (paper maps)")
    ap.add_argument("--eval-episodes", type=int, default=0,
                    help="episodes per evaluation (0 = every map of the split)")
    ap.add_argument("--jobs", type=int, default=2, help="runs in parallel (1 torch thread each)")
    ap.add_argument("--name", default="fedrl_table1")
    args = ap.parse_args(argv)
    if args.map_dir:
        for size in args.sizes:
            f = Path(args.map_dir) / f"gridworld_o_{size}.mat"
            if not f.is_file():
                print(f"--map-dir: {f} not found", file=sys.stderr)
                return 2
    extra = {"fedrl.eval-episodes": args.eval_episodes}
    jobs = [(m, size, seed, args.rounds, args.map_dir, extra)
            for size in args.sizes for seed in args.seeds for m in args.methods]
    print(f"{len(jobs)} runs, {args.jobs} at a time", flush=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        results = [r for rows in pool.map(one_run, jobs) for r in rows]
    runs = pd.DataFrame(results)
    RESULTS.mkdir(parents=True, exist_ok=True)
    runs.to_csv(RESULTS / f"{args.name}_runs.csv", index=False)
    tables = []
    for split in sorted(runs.split.unique(), key=["valid", "test"].index):
        t = summarize(runs, split)
        t.insert(0, "split", split)
        tables.append(t)
        print(f"\n{split} maps ({command_line()}):")
        print(t.to_string(index=False))
        plot(runs, split, RESULTS / f"{args.name}_{split}.png")
    pd.concat(tables).to_csv(RESULTS / f"{args.name}.csv", index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""SuccRate against one `fedrl.*` setting, one size: the paper's Figure 4 (the history H) and the
measurements behind our defaults (updates per round, exploration decay, target-update period).

    python -m experiments.fedrl.sweep --map-dir ../shared/data/gridworld --knob history \
           --values 1 2 4 8 16                                   # Figure 4 at 8x8
    python -m experiments.fedrl.sweep --map-dir ../shared/data/gridworld --knob updates \
           --values 16 64 128                                    # update ratio 1/8, 1/2, 1
           [--size 8] [--methods fedrl dqn-alpha dqn-full random-both] [--rules paper] [--seeds 0 1 2]
           [--rounds 150] [--run-config "..."] [--jobs 2] [--name fedrl_sweep_<knob>] [--force]

Same training, maps, model selection and resume as experiments/fedrl/table1.py (whose runs it
shares, in --work); only the knob changes. Writes experiments/results/<name>.csv (mean ± sd per
value and method, best and last checkpoint) and <name>.png. The paper draws Figure 4 without
printing its values, so there are no paper numbers to put beside ours; its text says success
grows with H and converges past H = 16 at 8x8 and 16x16.
"""

from __future__ import annotations

import argparse
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments import figures  # noqa: E402
from experiments.fedrl.table1 import (  # noqa: E402
    check_common,
    common_args,
    run_jobs,
    splits_for,
)
from experiments.simulate import RESULTS, command_line  # noqa: E402
from experiments.tables import redraw, refuse_overwrite  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=8, choices=[8, 16, 32])
    ap.add_argument(
        "--knob",
        default="history",
        choices=["history", "updates", "eps-decay", "target-update", "envs", "lr"],
    )
    ap.add_argument("--values", type=float, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument(
        "--methods",
        nargs="+",
        default=["fedrl", "dqn-alpha", "dqn-full", "random-both"],
        choices=[
            "fedrl",
            "dqn-alpha",
            "dqn-full",
            "fcn-alpha",
            "fcn-full",
            "random-alpha",
            "random-both",
        ],
        help="random-both is the floor (both agents move at random)",
    )
    ap.add_argument("--rules", default="paper", choices=["paper", "reference"])
    ap.add_argument("--rounds", type=int, default=150)
    ap.add_argument("--name", default="")
    common_args(ap)
    args = ap.parse_args(argv)
    cmd = command_line(__file__, argv)
    name = args.name or f"fedrl_sweep_{args.knob}"
    csv, png = RESULTS / f"{name}.csv", RESULTS / f"{name}.png"
    if args.plot_only:
        return redraw(csv, lambda t, c: draw(t, args.knob, png, c), keep_default_na=False)
    values = [v if args.knob == "lr" else int(v) for v in args.values]
    try:
        if args.rounds <= 0 or min(values) <= 0:
            raise ValueError("--rounds and --values must be positive")
        extra, files = check_common(args, [args.size])
        refuse_overwrite([csv, png], args.force)
        ranges = splits_for(files[args.size], args)
    except (ValueError, OSError) as e:
        print(f"fedrl_history: {e}", file=sys.stderr)
        return 2
    jobs = [
        {
            "method": m,
            "rules": args.rules,
            "size": args.size,
            "seed": seed,
            "rounds": args.rounds,
            "eval_every": args.eval_every,
            "map_file": files[args.size],
            "ranges": ranges,
            "extra": {**extra, f"fedrl.{args.knob}": v},
            "work": args.work,
        }
        for v in values
        for seed in args.seeds
        for m in args.methods
    ]
    runs = run_jobs(jobs, args.jobs)
    col = {"updates": "updates_per_round"}.get(args.knob, args.knob.replace("-", "_"))
    runs[args.knob] = runs[col]
    noise = np.where(runs.test_noise != "", " test_noise=" + runs.test_noise, "")
    runs["label"] = runs.method + noise
    g = runs.groupby(["label", args.knob, "checkpoint"]).succ_rate
    table = (
        (g.mean() * 100)
        .round(1)
        .to_frame("succ_mean")
        .join((g.std() * 100).round(1).rename("succ_sd"))
        .join(g.count().rename("seeds"))
        .reset_index()
    )
    table.insert(0, "rules", args.rules)
    table.insert(1, "size", args.size)
    table.insert(2, "rounds", args.rounds)
    table.insert(3, "settings", args.run_config)
    table.assign(command=cmd).to_csv(csv, index=False)
    print(f"\n{cmd}\n" + table.to_string(index=False))
    draw(table, args.knob, png, cmd)
    return 0


# the paper's Table 1 row each curve is compared with (experiments/results/fedrl_table1.csv)
PAPER_ROW = {
    "dqn-alpha": "DQN-alpha",
    "dqn-full": "DQN-full",
    "fcn-alpha": "FCN-alpha",
    "fcn-full": "FCN-full",
    "fedrl test_noise=on": "FedRL test_noise=on",
}


def paper_succ(size: int, rules: str) -> dict[str, float]:
    """label -> the paper's SuccRate % at this size (FedRL: the first of its two numbers)."""
    t = pd.read_csv(RESULTS / "fedrl_table1.csv")
    t = t[(t.rules == rules) & (t.metric == "SuccRate %")].set_index("method")[
        f"{size}x{size} paper"
    ]
    return {
        label: float(str(t[row]).split("/")[0])
        for label, row in PAPER_ROW.items()
        if row in t.index and isinstance(t[row], str) and t[row].strip()
    }


def draw(table: pd.DataFrame, knob: str, png, command: str) -> None:
    """SuccRate against the knob, best and last checkpoint, each method's curve with the
    paper's Table 1 value for it as a dotted line of the same colour."""
    size, rules = int(table["size"].iloc[0]), str(table.rules.iloc[0])
    paper = paper_succ(size, rules)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, ckpt in zip(axes, ("best", "last")):
        for label, t in table[table.checkpoint == ckpt].groupby("label"):
            line = ax.errorbar(
                t[knob], t.succ_mean, yerr=t.succ_sd, marker="o", capsize=3, label=f"{label} (ours)"
            )
            if label in paper:
                color = line.lines[0].get_color()
                ax.axhline(
                    paper[label],
                    color=color,
                    ls=":",
                    lw=1.2,
                    label=f"{label} paper {paper[label]:g}",
                )
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"fedrl.{knob}")
        ax.set_title(f"{size}x{size}, {rules} rules, {ckpt} checkpoint")
        ax.set_ylabel("SuccRate % (mean ± sd over seeds)")
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    figures.save(fig, png, command)


if __name__ == "__main__":
    sys.exit(main())

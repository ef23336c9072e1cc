"""The local learning rate of FedVLN's augment stage, federated, each run to convergence: the cpu
recipe's follower lr 1e-3 against the official 1e-4 (issue 32, deliverable 3).

    python -m experiments.fedvln.finetune_lr            # embedded houses, seeds 0 1 2

Why: augmentation fine-tunes an agent already trained to convergence (the pipeline's
`agent/best.pt`, with its speaker's `best.pt`). Each stage is a new run, so each house starts a
fresh RMSprop, whose square average starts at 0: its first steps are up to 10x lr. At the
agent stage's 1e-3 that throws the converged agent far back before it recovers; the official
scripts fine-tune at RMSprop 1e-4. Every run is `simulation.py fedvln` with
`fedvln.stage="augment"`, the pipeline's patience and cap, and `fedvln.lr` set; a finished run
that is this very launch (the pipeline's own augment stage, or one under a `--reuse` folder) is
read, not trained again (`experiments.fedvln.runs.finished_twin`). The table has, per lr, the agent it
starts from, the first evaluation, the best (the paper's checkpoint) and the last, with the
optimizer steps (all houses) each took, and the paired difference of the best over seeds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from experiments.fedvln.runs import curve, finished_twin, pick
from experiments.simulate import RESULTS, ROOT, in_parallel, simulate
from experiments.tables import mean_sd, paired_interval, pipe_table

OWN = ROOT / "runs" / "fedvln-finetune-lr"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--lrs", type=float, nargs="+", default=[1e-3, 1e-4])
    p.add_argument("--rounds", type=int, default=90, help="round cap (the pipeline's)")
    p.add_argument("--eval-every", type=int, default=3)
    p.add_argument("--patience", type=int, default=8, help="evaluations without a better SR")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time")
    p.add_argument("--pipeline-out", default=str(ROOT / "runs" / "fedvln"))
    p.add_argument(
        "--reuse",
        nargs="*",
        default=[str(ROOT / "runs" / "fedvln-lr1e-3")],
        help="more pipeline folders whose seed<N>/augment runs may be this very launch",
    )
    p.add_argument("--tables-only", action="store_true", help="tabulate finished runs only")
    p.add_argument("--results-dir", default=str(RESULTS))
    a = p.parse_args(argv)
    for flag in ("rounds", "eval_every", "patience", "jobs"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1")
    if min(a.lrs) <= 0:
        p.error("--lrs must all be > 0")
    return a


def _config(a, seed: int, lr: float) -> str:
    stage = (Path(a.pipeline_out) / f"seed{seed}").resolve()
    return (
        f'fedvln.stage="augment" eval-every={a.eval_every} fedvln.patience={a.patience} '
        f'fedvln.agent-init="{stage / "agent" / "best.pt"}" '
        f'fedvln.speaker-init="{stage / "speaker" / "best.pt"}" fedvln.lr={lr:g}'
    )


def run_dir(a, seed: int, lr: float) -> Path:
    """Its own folder once started, else a finished twin run, else its own folder (to train)."""
    own = OWN / f"lr{lr:g}-s{seed}"
    if own.exists():
        return own
    roots = [Path(a.pipeline_out), *map(Path, a.reuse)]
    twin = finished_twin(
        [r / f"seed{seed}" / "augment" for r in roots], _config(a, seed, lr), a.rounds, seed
    )
    return twin or own


def _run(a, seed: int, lr: float) -> Path:
    run = run_dir(a, seed, lr)
    if run.parent == OWN:
        return simulate("fedvln", run, rounds=a.rounds, seed=seed, run_config=_config(a, seed, lr))
    print(f"fedvln_finetune_lr: lr {lr:g} seed {seed} is {run}; not trained twice")
    return run


def rows_of(a, seed: int, lr: float) -> dict | None:
    """One run: its start (the agent's best), first, best and last evaluation."""
    run = run_dir(a, seed, lr)
    df, agent = curve(run.parent, run.name), curve(Path(a.pipeline_out) / f"seed{seed}", "agent")
    if df is None or agent is None or not len(df):
        print(f"fedvln_finetune_lr: {run} is missing or unfinished; left out")
        return None
    ck = pick(df, "val_unseen_sr")
    return {
        "lr": lr,
        "seed": seed,
        "start_sr": agent["val_unseen_sr"].max(),
        "first_sr": df["val_unseen_sr"].iloc[0],
        "first_steps": int(df["steps"].iloc[0]),
        "best_sr": ck["best"]["val_unseen_sr"],
        "best_steps": int(ck["best"]["steps"]),
        "last_sr": ck["last"]["val_unseen_sr"],
        "last_steps": int(ck["last"]["steps"]),
        "run": str(run.relative_to(ROOT)) if run.is_relative_to(ROOT) else str(run),
    }


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per lr: mean ± sd of each column, and the first and best evaluations' paired
    differences to the first lr's."""
    base = runs[runs["lr"] == runs["lr"].iloc[0]].set_index("seed")
    out = []
    for lr, g in runs.groupby("lr", sort=False):
        g = g.set_index("seed")
        row = {"lr": f"{lr:g}", "seeds": len(g)}
        for col in ("start_sr", "first_sr", "best_sr", "best_steps", "last_sr", "last_steps"):
            row[col] = mean_sd(g[col], 0 if col.endswith("steps") else 1)
        row["best_gain_over_start"] = mean_sd(g["best_sr"] - g["start_sr"])
        both = g.index.intersection(base.index)
        for col in ("first_sr", "best_sr"):
            key = f"{col.removesuffix('_sr')}_vs_first_lr"
            row[key] = ""
            if lr != runs["lr"].iloc[0] and len(both) > 1:
                m, lo, hi = paired_interval(g.loc[both, col], base.loc[both, col])
                row[key] = f"{m:+.1f} [{lo:+.1f}, {hi:+.1f}] ({len(both)} seeds)"
        out.append(row)
    return pd.DataFrame(out)


def markdown(table: pd.DataFrame) -> str:
    head = [
        "augment lr",
        "seeds",
        "start (agent best)",
        "first evaluation",
        "best",
        "steps to best",
        "last",
        "steps trained",
        "best − start",
        "first vs first lr (paired, 95%)",
        "best vs first lr (paired, 95%)",
    ]
    cols = ["lr", "seeds", "start_sr", "first_sr", "best_sr", "best_steps", "last_sr"]
    cols += ["last_steps", "best_gain_over_start", "first_vs_first_lr", "best_vs_first_lr"]
    return pipe_table(head, table[cols].values.tolist())


def main(argv=None) -> int:
    a = parse_args(argv)
    jobs = [(s, lr) for s in a.seeds for lr in a.lrs]
    missing = [s for s in a.seeds if curve(Path(a.pipeline_out) / f"seed{s}", "agent") is None]
    if missing:
        print(
            f"fedvln_finetune_lr: {a.pipeline_out} has no finished agent stage for seeds "
            f"{missing}: run `python -m experiments.fedvln.pipeline --stages agent speaker` first"
        )
        return 2
    if not a.tables_only:
        in_parallel(lambda j: _run(a, *j), jobs, a.jobs, "fedvln_finetune_lr")
    runs = pd.DataFrame([r for j in jobs if (r := rows_of(a, *j))])
    if runs.empty:
        print("fedvln_finetune_lr: no finished runs")
        return 1
    table = summary(runs)
    dest = Path(a.results_dir)
    dest.mkdir(parents=True, exist_ok=True)
    sr = [c for c in runs if c.endswith("_sr")]  # lr stays as it is (1e-4 rounds to 0)
    runs.round({c: 2 for c in sr}).to_csv(dest / "fedvln_finetune_lr_runs.csv", index=False)
    table.to_csv(dest / "fedvln_finetune_lr.csv", index=False)
    print(markdown(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

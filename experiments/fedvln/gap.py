"""FedVLN's server learning rate and local optimizer state, each trained to convergence: which
federated agent stage converges best, beside centralized Envdrop (issue 32, deliverable 2).

    python -m experiments.fedvln.gap                       # embedded houses, seeds 0 1 2

Runs (each `simulation.py fedvln --stage agent` with `fedvln.patience`, in
runs/fedvln-gap/<name>-s<seed>; two at a time, `--jobs`):

| name | houses per round | local epochs | steps per round | local optimizer | eta |
|---|---|---|---|---|---|
| default (the shipped recipe) | 2 (r = 0.2) | 3 | 2 x 12 = 24 | fresh each round | 1 |
| kept-optimizer | 2 (r = 0.2) | 3 | 2 x 12 = 24 | kept in the house | 1 |
| kept-optimizer-eta2 | 2 (r = 0.2) | 3 | 2 x 12 = 24 | kept in the house | 2 |
| all-houses-kept | 12 (r = 1.0) | 0.5 | 12 x 2 = 24 | kept in the house | 1 |
| all-houses-kept-eta2 | 12 (r = 1.0) | 0.5 | 12 x 2 = 24 | kept in the house | 2 |
| all-houses (not run by default) | 12 (r = 1.0) | 0.5 | 12 x 2 = 24 | fresh each round | 1 |

Every run trains until val_unseen SR has not improved for `--patience` evaluations (every
`--eval-every` rounds), under a cap of `--rounds`; it reports its best evaluation (the paper's
checkpoint) and its last, with the optimizer steps (all houses) each took. Patience 8 (24
rounds, 576 steps): one evaluation's SR has a standard error of about 2 points and adjacent
evaluations move by up to 5, so at 4 evaluations (12 rounds) every variant stopped on noise
within 21-30 rounds, before the fixed-budget runs' best (round 23 on average). The 12-house
variants are capped at `--all-houses-rounds` (60: 1,440 steps, 120 sequential ones), since a
round with 12 houses costs about 2.5x a 2-house round here; the table says how many of their
runs stopped by patience and how many at the cap (not converged). Why these rows: a
fresh RMSprop has no bias correction, so its first steps are up to 10x lr, and with a few local
steps per round every step is one of them; the official code keeps one RMSprop whose state
carries across houses and rounds and steps the server with eta = 2 (with a fresh optimizer every
round eta = 2 doubled those first large steps and diverged). Here each house keeps its own
RMSprop state on its own disk (`fedvln.optimizer-state=house`, never sent). Many houses per
round average away more drift per step. If the pipeline's centralized Envdrop runs exist
(`--pipeline-out`, `central/agent_log.csv` per seed), they are added as rows. The figure is the
mean val_unseen SR curve per run over seeds. Threads: one per house, as every run fixes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from experiments import figures
from experiments.fedvln.pipeline import _pm
from experiments.fedvln.runs import curve, finished_twin, pick
from experiments.simulate import RESULTS, ROOT, command_line, in_parallel, simulate

# every run names all four settings it varies, so a later change of the defaults leaves its
# numbers as they are (it is trained again, study.json records the defaults, to the same result)
TWO = "fedvln.seen-rate=0.2 fedvln.local-epochs=3.0"
ALL = "fedvln.seen-rate=1.0 fedvln.local-epochs=0.5"
FRESH = 'fedvln.optimizer-state="round"'
KEEP = 'fedvln.optimizer-state="house"'
ETA1 = "fedvln.server-lr=1.0"  # the cpu recipe's eta
ETA2 = "fedvln.server-lr=2.0"  # the official eta
VARIANTS = {  # run folder name: (row label, run config)
    "default": ("2 houses x 12 steps, fresh optimizer, eta = 1", f"{TWO} {FRESH} {ETA1}"),
    "kept-optimizer": ("2 houses x 12 steps, optimizer kept, eta = 1", f"{TWO} {KEEP} {ETA1}"),
    "kept-optimizer-eta2": ("2 houses x 12 steps, optimizer kept, eta = 2", f"{TWO} {KEEP} {ETA2}"),
    "all-houses-kept": ("12 houses x 2 steps, optimizer kept, eta = 1", f"{ALL} {KEEP} {ETA1}"),
    "all-houses-kept-eta2": (
        "12 houses x 2 steps, optimizer kept, eta = 2",
        f"{ALL} {KEEP} {ETA2}",
    ),
    "all-houses": ("12 houses x 2 steps, fresh optimizer, eta = 1", f"{ALL} {FRESH} {ETA1}"),
}
CENTRAL = "centralized Envdrop (pooled data; the pipeline's)"
CENTRAL_CUT = "centralized, cut at the federated best's sequential steps"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--rounds", type=int, default=150, help="cap on rounds per run")
    p.add_argument(
        "--all-houses-rounds",
        type=int,
        default=60,
        help="cap on rounds of the 12-house variants (a round costs ~2.5x a 2-house one)",
    )
    p.add_argument("--eval-every", type=int, default=3, help="rounds between evaluations")
    p.add_argument(
        "--patience",
        type=int,
        default=8,
        help="stop a run once val_unseen SR has not improved for this many evaluations",
    )
    p.add_argument(
        "--variants",
        nargs="+",
        default=[v for v in VARIANTS if v != "all-houses"],
        choices=list(VARIANTS),
        help="federated variants to run",
    )
    p.add_argument("--jobs", type=int, default=2, help="runs at a time")
    p.add_argument(
        "--tables-only",
        action="store_true",
        help="tabulate the finished runs of the asked variants and seeds; train nothing",
    )
    p.add_argument("--pipeline-out", default=str(ROOT / "runs" / "fedvln"))
    p.add_argument("--results-dir", default=str(RESULTS))
    a = p.parse_args(argv)
    for flag in ("rounds", "all_houses_rounds", "eval_every", "patience", "jobs"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1")
    return a


def _config(a, name: str) -> str:
    rc = VARIANTS[name][1]
    return f'fedvln.stage="agent" eval-every={a.eval_every} fedvln.patience={a.patience} {rc}'


def _rounds(a, name: str) -> int:
    return a.all_houses_rounds if name.startswith("all-houses") else a.rounds


def pipeline_twin(a, name: str, seed: int) -> Path | None:
    """The pipeline's agent stage of this seed if it is this very run, finished (same settings,
    resolved recipe, rounds cap and seed: `experiments.fedvln.runs.finished_twin`). The pipeline trains
    the default, so one variant is usually its twin and need not be trained twice."""
    run = Path(a.pipeline_out) / f"seed{seed}" / "agent"
    return finished_twin([run], _config(a, name), _rounds(a, name), seed)


def run_dir(a, name: str, seed: int) -> Path:
    """Where a variant's run is: its own folder once started, else the pipeline's twin run
    if there is one, else its own folder (to train)."""
    own = ROOT / "runs" / "fedvln-gap" / f"{name}-s{seed}"
    return own if own.exists() else pipeline_twin(a, name, seed) or own


def _run(a, name: str, seed: int) -> Path:
    run = run_dir(a, name, seed)
    if run.parent != ROOT / "runs" / "fedvln-gap":
        print(f"fedvln_gap: {name} seed {seed} is the pipeline's {run}; not trained twice")
        return run
    return simulate("fedvln", run, rounds=_rounds(a, name), seed=seed, run_config=_config(a, name))


def sequential_steps(fed: pd.DataFrame) -> int:
    """How far one house's optimizer walked by the federated run's best evaluation: rounds to
    it times one house's local steps per round (averaging houses that each took s steps from
    the same model moves it about as far as s steps, not s times the houses)."""
    best = fed.loc[fed["val_unseen_sr"].idxmax()]
    per_round = (fed["local_steps"] / fed["n_clients"]).median()
    return int(best["round"] * per_round)


def rows_of(label: str, seed: int, df: pd.DataFrame, stopped: bool | None) -> list[dict]:
    """The best and last evaluation of one run, with the steps each took."""
    return [
        {
            "run": label,
            "checkpoint": ck,
            "seed": seed,
            "steps": int(r["steps"]),
            "val_unseen_sr": r["val_unseen_sr"],
            "val_seen_sr": r.get("val_seen_sr", np.nan),
            "stopped_early": stopped,
        }
        for ck, r in pick(df, "val_unseen_sr").items()
    ]


def main(argv=None) -> int:
    a = parse_args(argv)
    jobs = [(v, s) for s in a.seeds for v in a.variants]
    if not a.tables_only:
        in_parallel(lambda j: _run(a, *j), jobs, a.jobs, "fedvln_gap")
    rows, curves = [], []
    for name, seed in jobs:
        run = run_dir(a, name, seed)
        df = curve(run.parent, run.name)
        if df is None:  # --tables-only: not run, or not finished
            print(f"fedvln_gap: {run} is missing or unfinished; left out")
            continue
        conv = json.loads((run / "config.json").read_text()).get("convergence") or {}
        rows += rows_of(VARIANTS[name][0], seed, df, bool(conv.get("stopped_early")))
        curves.append(df.assign(run=VARIANTS[name][0], seed=seed))
    for seed in a.seeds:  # centralized Envdrop, if the pipeline has run for this seed
        df = curve(Path(a.pipeline_out) / f"seed{seed}", "central/agent")
        if df is not None and len(df):
            rows += rows_of(CENTRAL, seed, df, None)
            curves.append(df.assign(run=CENTRAL, seed=seed))
            fed = curve(Path(a.pipeline_out) / f"seed{seed}", "agent")
            if fed is not None and len(fed):
                cut = df[df["steps"] <= sequential_steps(fed)].reset_index(drop=True)
                rows += rows_of(CENTRAL_CUT, seed, cut, None) if len(cut) else []
    df = pd.DataFrame(rows)
    df["stopped_early"] = df["stopped_early"].astype(float)  # centralized: NaN
    table = (
        df.groupby(["run", "checkpoint"], sort=False)
        .agg(
            n_seeds=("seed", "size"),
            stopped_early=("stopped_early", "sum"),
            steps=("steps", "mean"),
            steps_sd=("steps", "std"),
            val_unseen_sr=("val_unseen_sr", "mean"),
            val_unseen_sr_sd=("val_unseen_sr", "std"),
            val_seen_sr=("val_seen_sr", "mean"),
            val_seen_sr_sd=("val_seen_sr", "std"),
        )
        .reset_index()
    )
    dest = Path(a.results_dir)
    dest.mkdir(parents=True, exist_ok=True)
    table.round(2).to_csv(dest / "fedvln_gap.csv", index=False)
    df.round(2).to_csv(dest / "fedvln_gap_runs.csv", index=False)
    plot(pd.concat(curves), dest / "fedvln_gap.png", a, command_line(__file__, argv))
    print(table.round(1).to_string(index=False))
    return 0


def markdown(table: pd.DataFrame) -> str:
    """The README's table: best and last checkpoint of each run, mean ± sd over seeds, with
    how many seeds stopped by patience (the rest reached the round cap: not converged)."""

    lines = [
        "| agent stage | checkpoint | seeds | stopped by patience | steps | val_unseen SR | "
        "val_seen SR |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, r in table.iterrows():
        central = r["run"] in (CENTRAL, CENTRAL_CUT)
        stopped = "–" if central else f"{int(r['stopped_early'])} / {int(r['n_seeds'])}"
        lines.append(
            f"| {r['run']} | {r['checkpoint']} | {int(r['n_seeds'])} | {stopped} | "
            f"{_pm(r, 'steps', 0)} | {_pm(r, 'val_unseen_sr')} | {_pm(r, 'val_seen_sr')} |"
        )
    return "\n".join(lines)


def plot(curves: pd.DataFrame, png: Path, a, command: str) -> None:
    """Mean val_unseen SR over seeds against optimizer steps (all houses), one line per run;
    a seed that stopped early holds its last value, so the mean is over every seed."""
    fig, ax = figures.subplots(figsize=(8, 4.5))
    for name, g in curves.groupby("run", sort=False):
        wide = g.pivot_table(index="steps", columns="seed", values="val_unseen_sr").ffill()
        ax.plot(wide.index, wide.mean(axis=1), ls="--" if name == CENTRAL else "-", label=name)
    ax.set(
        xlabel="optimizer steps, all houses",
        ylabel="val_unseen SR (%), mean over seeds",
        title=f"FedVLN agent stage to convergence (patience {a.patience} evaluations, "
        f"cap {a.rounds} rounds), seeds {' '.join(map(str, a.seeds))}",
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    figures.save(fig, png, command)


if __name__ == "__main__":
    raise SystemExit(main())

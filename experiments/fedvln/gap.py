"""FedVLN's server learning rate and local optimizer state, each trained to convergence: which
federated agent stage converges best, beside centralized Envdrop (issue 32, deliverable 2). The
analysis of a study file (one call of `measure` per seed and variant):

    python -m experiments.study experiments/studies/fedvln_gap.toml

Runs (each `simulation.py fedvln --stage agent` with `fedvln.patience`, in
WORK/<name>-s<seed>; two at a time, `--jobs`):

| name | houses per round | local epochs | steps per round | local optimizer | eta |
|---|---|---|---|---|---|
| default (the shipped recipe) | 2 (r = 0.2) | 3 | 2 x 12 = 24 | fresh each round | 1 |
| kept-optimizer | 2 (r = 0.2) | 3 | 2 x 12 = 24 | kept in the house | 1 |
| kept-optimizer-eta2 | 2 (r = 0.2) | 3 | 2 x 12 = 24 | kept in the house | 2 |
| all-houses-kept | 12 (r = 1.0) | 0.5 | 12 x 2 = 24 | kept in the house | 1 |
| all-houses-kept-eta2 | 12 (r = 1.0) | 0.5 | 12 x 2 = 24 | kept in the house | 2 |
| all-houses (not in the study file) | 12 (r = 1.0) | 0.5 | 12 x 2 = 24 | fresh each round | 1 |

Every run trains until val_unseen SR has not improved for `patience` evaluations (every
`eval-every` rounds), under a cap of `rounds`; it reports its best evaluation (the paper's
checkpoint) and its last, with the optimizer steps (all houses) each took. Patience 8 (24
rounds, 576 steps): one evaluation's SR has a standard error of about 2 points and adjacent
evaluations move by up to 5, so at 4 evaluations (12 rounds) every variant stopped on noise
within 21-30 rounds, before the fixed-budget runs' best (round 23 on average). The 12-house
variants are capped at `all-houses-rounds` (60: 1,440 steps, 120 sequential ones), since a
round with 12 houses costs about 2.5x a 2-house round here; the table says how many of their
runs stopped by patience and how many at the cap (not converged). Why these rows: a
fresh RMSprop has no bias correction, so its first steps are up to 10x lr, and with a few local
steps per round every step is one of them; the official code keeps one RMSprop whose state
carries across houses and rounds and steps the server with eta = 2 (with a fresh optimizer every
round eta = 2 doubled those first large steps and diverged). Here each house keeps its own
RMSprop state on its own disk (`fedvln.optimizer-state=house`, never sent). Many houses per
round average away more drift per step. The variant `centralized` reads the pipeline's
centralized Envdrop (`pipeline-work`, `central/agent_log.csv` per seed; the pipeline study
makes it), whole and cut at the federated best's sequential steps. The figure is the mean
val_unseen SR curve per run over seeds, drawn from the curves CSV the study writes
(`fedvln_gap_curves.csv`), so `--plot-only` redraws it. Threads: one per house, as every run
fixes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from experiments import figures
from experiments.fedvln.pipeline import _pm
from experiments.fedvln.runs import curve, finished_twin, pick
from experiments.simulate import RESULTS, ROOT, simulate

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
UNTRAINED = "untrained follower (floor)"  # drawn on the figure, not a row of the table


def _config(a, name: str) -> str:
    rc = VARIANTS[name][1]
    return f'fedvln.stage="agent" eval-every={a.eval_every} fedvln.patience={a.patience} {rc}'


def _rounds(a, name: str) -> int:
    return a.all_houses_rounds if name.startswith("all-houses") else a.rounds


def pipeline_twin(a, name: str, seed: int) -> Path | None:
    """The pipeline's agent stage of this seed if it is this very run, finished (same settings,
    resolved recipe, rounds cap and seed: `experiments.fedvln.runs.finished_twin`). The pipeline trains
    the default, so one variant is usually its twin and need not be trained twice."""
    run = Path(a.pipeline_work) / f"seed{seed}" / "agent"
    return finished_twin([run], _config(a, name), _rounds(a, name), seed)


def run_dir(a, name: str, seed: int) -> Path:
    """Where a variant's run is: its own folder once started, else the pipeline's twin run
    if there is one, else its own folder (to train)."""
    own = Path(a.work) / f"{name}-s{seed}"
    return own if own.exists() else pipeline_twin(a, name, seed) or own


def _run(a, name: str, seed: int) -> Path:
    run = run_dir(a, name, seed)
    if run.parent != Path(a.work):
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


def measure(
    seed: int,
    variant: str,
    rounds: int,
    all_houses_rounds: int,
    eval_every: int,
    patience: int,
    pipeline_work: str,
    work: Path,
) -> list[dict]:
    """One cell: a variant's run of one seed (trained in WORK/<variant>-s<seed> unless the
    pipeline's agent stage is this very run), its every evaluation returned with its label;
    `centralized` reads the pipeline's centralized Envdrop instead, whole and cut at the
    federated best's sequential steps. The fields: `rounds` the cap, `all-houses-rounds` the
    12-house variants' cap, `eval-every`, `patience` (evaluations), `pipeline-work` the
    pipeline study's folder."""
    a = SimpleNamespace(rounds=rounds, all_houses_rounds=all_houses_rounds,
                        eval_every=eval_every, patience=patience, work=work,
                        pipeline_work=str(ROOT / pipeline_work))  # fmt: skip
    if variant == "centralized":
        return _centralized(a, seed)
    _run(a, variant, seed)
    run = run_dir(a, variant, seed)
    df = curve(run.parent, run.name)
    if df is None:
        raise ValueError(f"{run}: the run did not finish")
    conv = json.loads((run / "config.json").read_text()).get("convergence") or {}
    return _rows(df, VARIANTS[variant][0], seed, bool(conv.get("stopped_early")))


def _centralized(a, seed: int) -> list[dict]:
    """The pipeline's centralized Envdrop of this seed, whole and cut at the federated best's
    sequential steps (a seed the pipeline has not run stops the study, naming what to run)."""
    _needs_pipeline(a.pipeline_work, seed)
    df = curve(Path(a.pipeline_work) / f"seed{seed}", "central/agent")
    fed = curve(Path(a.pipeline_work) / f"seed{seed}", "agent")
    cut = df[df["steps"] <= sequential_steps(fed)].reset_index(drop=True)
    floor = curve(Path(a.pipeline_work) / f"seed{seed}", "untrained")
    floor = [] if floor is None else _rows(floor, UNTRAINED, seed, None)
    return _rows(df, CENTRAL, seed, None) + _rows(cut, CENTRAL_CUT, seed, None) + floor


def _rows(df: pd.DataFrame, label: str, seed: int, stopped: bool | None) -> list[dict]:
    """A run's evaluations as the curves CSV keeps them."""
    cols = ["steps", "val_unseen_sr", "val_seen_sr"]
    return [
        {"run": label, "seed": seed, "stopped_early": stopped, **r}
        for r in df.reindex(columns=cols).to_dict("records")
    ]


def _needs_pipeline(pipeline_work: str, seed: int) -> None:
    """The pipeline's federated and centralized agent stages of this seed, finished."""
    runs = [curve(ROOT / pipeline_work / f"seed{seed}", r) for r in ("central/agent", "agent")]
    if any(r is None or not len(r) for r in runs):
        raise ValueError(
            f"grid.pipeline-work: {pipeline_work} has no finished agent stage for seed "
            f"{seed}: run `python -m experiments.study experiments/studies/fedvln_pipeline.toml`"
        )


def needs(cell: dict, where) -> None:
    """The pipeline's runs the `centralized` variant reads, before anything trains."""
    if cell["variant"] == "centralized":
        try:
            _needs_pipeline(cell["pipeline-work"], cell["seed"])
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None


def check(cell: dict, where) -> None:
    for key in ("rounds", "all-houses-rounds", "eval-every", "patience"):
        if cell[key] < 1:
            raise ValueError(f"{where}: grid.{key}: must be at least 1")
    if cell["variant"] not in (*VARIANTS, "centralized"):
        raise ValueError(f"{where}: grid.variant: one of {', '.join(VARIANTS)}, centralized")


def outputs(study: dict) -> list[Path]:
    name = study["name"]
    return [RESULTS / f"{name}{x}" for x in (".csv", "_runs.csv", "_curves.csv", ".png")]


def report(runs: pd.DataFrame, study: dict, command: str) -> str:
    """Best and last of every run (the runs CSV), their mean ± sd (the table), every
    evaluation (the curves CSV) and the figure drawn from it."""
    out_csv, runs_csv, curves_csv, png = outputs(study)
    central = runs["run"].isin([CENTRAL, CENTRAL_CUT, UNTRAINED])
    runs = pd.concat([runs[~central], runs[central]])  # the centralized rows last, as before
    rows = []
    for (label, seed), g in runs[runs["run"] != UNTRAINED].groupby(["run", "seed"], sort=False):
        stopped = g["stopped_early"].iloc[0]
        rows += rows_of(
            label, seed, g.reset_index(drop=True), None if pd.isna(stopped) else bool(stopped)
        )
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
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.round(2).to_csv(out_csv, index=False)
    df.round(2).to_csv(runs_csv, index=False)
    runs.round(4).to_csv(curves_csv, index=False)
    plot(runs, png, study["grid"], command)
    return markdown(table)


def replot(study: dict) -> int:
    """`--plot-only`: the figure again from the committed curves CSV, under its command."""
    from experiments.figures import command_of

    _, _, curves_csv, png = outputs(study)
    if not curves_csv.is_file() or command_of(png) is None:
        print(f"study: {curves_csv}: not made by this study yet (run it first)", file=sys.stderr)
        return 2
    plot(pd.read_csv(curves_csv), png, study["grid"], command_of(png))
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


def plot(curves: pd.DataFrame, png: Path, grid: dict, command: str) -> None:
    """Mean val_unseen SR over seeds against optimizer steps (all houses), one line per run
    (the centralized cut is the whole run's start), beside the untrained follower (the
    floor); a seed that stopped early holds its last value, so the mean is over every seed."""
    fig, ax = figures.subplots(figsize=(8, 4.5))
    for name, g in curves[~curves["run"].isin([CENTRAL_CUT, UNTRAINED])].groupby("run", sort=False):
        wide = g.pivot_table(index="steps", columns="seed", values="val_unseen_sr").ffill()
        ax.plot(wide.index, wide.mean(axis=1), ls="--" if name == CENTRAL else "-", label=name)
    floor = curves.loc[curves["run"] == UNTRAINED, "val_unseen_sr"]
    if len(floor):  # what a run must beat: the untrained follower, mean over seeds
        ax.axhline(float(floor.mean()), color="black", ls="-.", lw=0.8, label=UNTRAINED)
    ax.set(
        xlabel="optimizer steps, all houses",
        ylabel="val_unseen SR (%), mean over seeds",
        title=f"FedVLN agent stage to convergence (patience {grid['patience']} evaluations, "
        f"cap {grid['rounds']} rounds), seeds {' '.join(map(str, grid['seed']))}",
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    figures.save(fig, png, command)

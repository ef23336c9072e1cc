"""Why does federated augmentation lose to its control? Its update budget, measured apart from
its routes (issue 41: "a gain that does not appear is reported as measured, with what was
tried"). The analysis of a study file (one call of `measure` per seed and arm; it needs the
pipeline's augment and augment-control runs):

    python -m experiments.study experiments/studies/fedvln_augment_budget.toml

The pipeline's augment stage and its control restart from the same agent (`agent/best.pt`),
with the same houses, patience and cap; the control has no speaker routes. They do not get
the same updates: as the official code counts them (`training.vln_house.follower_steps`,
official train.py l. 478-495) an augmenting house makes half the labelled batches' steps of
tau passes, each step one labelled plus one route batch, while the control makes every
labelled batch's step. So "augment − control" mixes two things: what the routes add, and
half the optimizer updates (and labelled batches). Two more arms, each the pipeline's own
launch with only `fedvln.local-epochs` (tau) changed, pull them apart:

- *control at augment's updates*: no routes, tau / 2, so the same optimizer updates and
  labelled batches per round as the augmented agent;
- *augment at control's updates*: routes, 2 tau, so the same updates and labelled batches as
  the control, plus one route batch each.

If the routes are worth nothing either way, augment ≈ control at augment's updates and augment
at control's updates ≈ control; if the routes hurt, both comparisons are negative. A fifth arm
asks whether it is our speaker's words or the routes themselves:

- *augment, perfect words*: the pipeline's augment launch with `fedvln.route-words="grammar"`,
  the embedded houses' own grammar writing each route's words (`training.vln_house.
  grammar_words`; the data's instructions were written by it, so they are true of the route).
  Caveat: the grammar writes one instruction per route, reused each time the route is drawn,
  where our speaker writes new words every batch; so "our speaker's words vs perfect words"
  differs in the words' truth and in their variety.

The equal-update arithmetic holds without a local step cap (`fedvln.max-local-steps = 0`, the
pipeline's): a cap would clip both to the same count and halve the augmenting one again, so a
pipeline run with a cap is refused. `best` is the highest val_unseen SR of a run, picked on
the split it is scored on, so a run with more evaluations gets more of that optimistic pick;
`last` carries none. Every
difference is paired by seed, best and last val_unseen SR, its interval floored by one
evaluation's binomial noise (`experiments.tables.binomial_sd`).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from experiments.fedvln.runs import curve, pick
from experiments.simulate import RESULTS, ROOT, simulate
from experiments.tables import gain_text, mean_sd, paired, pipe_table, print_from_runs, study_files

PIPELINE = "experiments/studies/fedvln_pipeline.toml"  # the study whose runs the arms copy
# arm -> (the pipeline run it copies, factor on its tau, more run config); (run, 1, "") is the
# pipeline's run itself
GRAMMAR = 'fedvln.route-words="grammar"'
ARMS = {
    "augment": ("augment", 1.0, ""),
    "control": ("augment-control", 1.0, ""),
    "control at augment's updates": ("augment-control", 0.5, ""),
    "augment at control's updates": ("augment", 2.0, ""),
    "augment, perfect words": ("augment", 1.0, GRAMMAR),
}
# (what it tests, a, b): the difference is a − b
COMPARISONS = [
    ("augment vs control (the pipeline's: routes and half the updates)", "augment", "control"),
    (
        "routes at augment's updates (same updates and labelled batches)",
        "augment",
        "control at augment's updates",
    ),
    (
        "routes at control's updates (same updates and labelled batches)",
        "augment at control's updates",
        "control",
    ),
    ("half the updates, no routes", "control at augment's updates", "control"),
    (
        "routes with perfect words at augment's updates",
        "augment, perfect words",
        "control at augment's updates",
    ),
    ("our speaker's words vs perfect words", "augment", "augment, perfect words"),
]


def launch(a, seed: int, arm: str) -> tuple[list[str], dict] | None:
    """The pipeline run an arm copies: its `study.json` arguments and `config.json`; None when
    that run has not finished."""
    base = ARMS[arm][0]
    run = Path(a.pipeline_work) / f"seed{seed}" / base
    if curve(run.parent, run.name) is None or not (run / "study.json").is_file():
        return None
    cfg = json.loads((run / "config.json").read_text())
    if cfg.get("fedvln.max-local-steps", 0):
        raise ValueError(
            f"grid.pipeline-work: {run} caps local steps (fedvln.max-local-steps = "
            f"{cfg['fedvln.max-local-steps']}): tau x2 / x0.5 then gives no equal updates"
        )
    return json.loads((run / "study.json").read_text())["args"], cfg


def run_dir(a, seed: int, arm: str) -> Path:
    """The pipeline's own run, or this study's folder for an arm the pipeline does not run."""
    base, factor, extra = ARMS[arm]
    if factor == 1.0 and not extra:
        return Path(a.pipeline_work) / f"seed{seed}" / base
    name = arm.replace(" ", "-").replace(",", "").replace("'", "")
    return Path(a.work) / f"{name}-s{seed}"


def _run(a, seed: int, arm: str) -> Path:
    """Train an arm the pipeline does not have: its run config with tau scaled (or the routes'
    words changed), nothing else."""
    args, cfg = launch(a, seed, arm)
    _, factor, extra = ARMS[arm]
    rounds = int(args[args.index("--rounds") + 1])
    config = args[args.index("--run-config") + 1]
    if factor != 1.0:
        config += f" fedvln.local-epochs={cfg['fedvln.local-epochs'] * factor:g}"
    config += f" {extra}" if extra else ""
    return simulate("fedvln", run_dir(a, seed, arm), rounds=rounds, seed=seed, run_config=config)


def rows_of(a, seed: int, arm: str) -> list[dict]:
    """One arm of one seed: its best and last val_unseen SR with the steps each took."""
    run = run_dir(a, seed, arm)
    df = curve(run.parent, run.name)
    if df is None or not len(df):
        print(f"fedvln_augment_budget: {run} is missing or unfinished; left out")
        return []
    return [
        {
            "seed": seed,
            "arm": arm,
            "checkpoint": ck,
            "sr": float(r["val_unseen_sr"]),
            "n": float(r["val_unseen_n"]),
            "steps": int(r["steps"]),
            "run": str(run.relative_to(ROOT)) if run.is_relative_to(ROOT) else str(run),
        }
        for ck, r in pick(df, "val_unseen_sr").items()
    ]


def comparisons(runs: pd.DataFrame) -> pd.DataFrame:
    """Each comparison, best and last: both arms' means, the paired difference and interval."""
    out = []
    for what, a, b in COMPARISONS:
        for ck in ("best", "last"):
            side = {
                arm: {
                    r.seed: (r.sr, r.n)
                    for r in runs[(runs.arm == arm) & (runs.checkpoint == ck)].itertuples()
                }
                for arm in (a, b)
            }
            if pair := paired(side[a], side[b]):
                out.append({"comparison": what, "a": a, "b": b, "checkpoint": ck} | pair)
    return pd.DataFrame(out)


def arms_table(runs: pd.DataFrame) -> str:
    """Per arm and checkpoint: seeds, val_unseen SR and the optimizer steps (all houses)."""
    rows = []
    for (arm, ck), g in runs.groupby(["arm", "checkpoint"], sort=False):
        rows.append([arm, ck, len(g), mean_sd(g["sr"]), mean_sd(g["steps"], 0)])
    return pipe_table(["arm", "checkpoint", "seeds", "val_unseen SR", "steps (all houses)"], rows)


def markdown(t: pd.DataFrame) -> str:
    rows = [
        [
            r.comparison,
            r.checkpoint,
            int(r.n_seeds),
            f"{r.a_sr:.1f}",
            f"{r.b_sr:.1f}",
            gain_text(r.gain, r.low, r.high),
            r.by_seed,
        ]
        for r in t.itertuples()
    ]
    head = ["comparison (val_unseen SR)", "checkpoint", "seeds", "a", "b", "a − b [95%]", "by seed"]
    return pipe_table(head, rows)


def both_tables(runs: pd.DataFrame, table: pd.DataFrame) -> str:
    """The arms' table, then the paired comparisons (what the docs show)."""
    return f"{arms_table(runs)}\n\n{markdown(table)}"


def measure(seed: int, arm: str, pipeline_work: str, work: Path) -> list[dict]:
    """One cell: an arm of one seed, read from the pipeline's run (`pipeline-work`) when it is
    that run, else trained in WORK/<arm>-s<seed> from the pipeline's launch with tau scaled or
    the routes' words changed; its best and last. A seed the pipeline has not finished stops
    the study, naming the study to run."""
    a = SimpleNamespace(pipeline_work=str(ROOT / pipeline_work), work=work)
    _needs_pipeline(a, pipeline_work, seed)
    _, factor, extra = ARMS[arm]
    if factor != 1.0 or extra:
        _run(a, seed, arm)
    rows = rows_of(a, seed, arm)
    if not rows:
        raise ValueError(f"{run_dir(a, seed, arm)}: the run did not finish")
    return rows


def _needs_pipeline(a, pipeline_work: str, seed: int) -> None:
    """The pipeline's augment and augment-control of this seed, finished and uncapped."""
    if not all(launch(a, seed, base) for base in ("augment", "control")):
        raise ValueError(
            f"grid.pipeline-work: {pipeline_work} has no finished augment and augment-control "
            f"for seed {seed}: run `python -m experiments.study {PIPELINE}` first"
        )


def needs(cell: dict, where) -> None:
    """What every arm of the cell's seed copies, before anything trains."""
    a = SimpleNamespace(pipeline_work=str(ROOT / cell["pipeline-work"]))
    try:
        _needs_pipeline(a, cell["pipeline-work"], cell["seed"])
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def check(cell: dict, where) -> None:
    if cell["arm"] not in ARMS:
        raise ValueError(f"{where}: grid.arm: one of {', '.join(ARMS)}")


def outputs(study: dict) -> list[Path]:
    return study_files(RESULTS, study["name"])[:2]  # the table and the runs; no figure


def report(runs: pd.DataFrame, study: dict, command: str) -> str:
    out_csv, runs_csv = outputs(study)
    table = comparisons(runs)
    RESULTS.mkdir(parents=True, exist_ok=True)
    runs.round({"sr": 2}).to_csv(runs_csv, index=False)
    table.round(2).to_csv(out_csv, index=False)
    return both_tables(runs, table)


def replot(study: dict) -> int:
    return print_from_runs(outputs(study)[1], lambda runs: both_tables(runs, comparisons(runs)))

"""Why does federated augmentation lose to its control? Its update budget, measured apart from
its routes (issue 41: "a gain that does not appear is reported as measured, with what was
tried").

    python -m experiments.fedvln.augment_budget            # embedded houses, seeds 0 1 2

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

import argparse
import json
from pathlib import Path

import pandas as pd

from experiments.fedvln.runs import curve, pick
from experiments.simulate import RESULTS, ROOT, in_parallel, simulate
from experiments.tables import gain_text, mean_sd, paired, pipe_table

OWN = ROOT / "runs" / "fedvln-augment-budget"
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


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--jobs", type=int, default=1, help="runs at a time")
    p.add_argument("--pipeline-out", default=str(ROOT / "runs" / "fedvln"))
    p.add_argument("--tables-only", action="store_true", help="tabulate finished runs only")
    p.add_argument("--results-dir", default=str(RESULTS))
    a = p.parse_args(argv)
    if a.jobs < 1:
        p.error("--jobs must be at least 1")
    return a


def launch(a, seed: int, arm: str) -> tuple[list[str], dict] | None:
    """The pipeline run an arm copies: its `study.json` arguments and `config.json`; None when
    that run has not finished."""
    base = ARMS[arm][0]
    run = Path(a.pipeline_out) / f"seed{seed}" / base
    if curve(run.parent, run.name) is None or not (run / "study.json").is_file():
        return None
    cfg = json.loads((run / "config.json").read_text())
    if cfg.get("fedvln.max-local-steps", 0):
        raise SystemExit(
            f"fedvln_augment_budget: {run} caps local steps (fedvln.max-local-steps = "
            f"{cfg['fedvln.max-local-steps']}): tau x2 / x0.5 then gives no equal updates"
        )
    return json.loads((run / "study.json").read_text())["args"], cfg


def run_dir(a, seed: int, arm: str) -> Path:
    """The pipeline's own run, or this study's folder for an arm the pipeline does not run."""
    base, factor, extra = ARMS[arm]
    if factor == 1.0 and not extra:
        return Path(a.pipeline_out) / f"seed{seed}" / base
    name = arm.replace(" ", "-").replace(",", "").replace("'", "")
    return OWN / f"{name}-s{seed}"


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


def report(runs: pd.DataFrame, table: pd.DataFrame) -> str:
    """The arms' table, then the paired comparisons (what the docs show)."""
    return f"{arms_table(runs)}\n\n{markdown(table)}"


def main(argv=None) -> int:
    a = parse_args(argv)
    ready = [s for s in a.seeds if all(launch(a, s, arm) for arm in ARMS)]
    for s in sorted(set(a.seeds) - set(ready)):
        print(
            f"fedvln_augment_budget: seed {s} has no finished augment and augment-control in "
            f"{a.pipeline_out}: run `python -m experiments.fedvln.pipeline --seeds {s}` first"
        )
    jobs = [(s, arm) for s in ready for arm, (_, f, x) in ARMS.items() if f != 1.0 or x]
    if not a.tables_only:
        in_parallel(lambda j: _run(a, *j), jobs, a.jobs, "fedvln_augment_budget")
    runs = pd.DataFrame([r for s in ready for arm in ARMS for r in rows_of(a, s, arm)])
    if runs.empty:
        print("fedvln_augment_budget: no finished runs")
        return 1
    table = comparisons(runs)
    dest = Path(a.results_dir)
    dest.mkdir(parents=True, exist_ok=True)
    runs.round({"sr": 2}).to_csv(dest / "fedvln_augment_budget_runs.csv", index=False)
    table.round(2).to_csv(dest / "fedvln_augment_budget.csv", index=False)
    print(report(runs, table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

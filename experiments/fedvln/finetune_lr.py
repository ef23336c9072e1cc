"""The local learning rate of FedVLN's augment stage, federated, each run to convergence: the cpu
recipe's follower lr 1e-3 against the official 1e-4 (issue 32, deliverable 3). The analysis of
a study file (one call of `measure` per seed and lr; it needs the pipeline's agent and speaker):

    python -m experiments.study experiments/studies/fedvln_finetune_lr.toml

Why: augmentation fine-tunes an agent already trained to convergence (the pipeline's
`agent/best.pt`, with its speaker's `best.pt`). Each stage is a new run, so each house starts a
fresh RMSprop, whose square average starts at 0: its first steps are up to 10x lr. At the
agent stage's 1e-3 that throws the converged agent far back before it recovers; the official
scripts fine-tune at RMSprop 1e-4. Every run is `simulation.py fedvln` with
`fedvln.stage="augment"`, the pipeline's patience and cap, and `fedvln.lr` set; a finished run
that is this very launch (the pipeline's own augment stage, or one under a `reuse` folder) is
read, not trained again (`experiments.fedvln.runs.finished_twin`). The table has, per lr, the agent it
starts from, the first evaluation, the best (the paper's checkpoint) and the last, with the
optimizer steps (all houses) each took, and the paired difference of the best over seeds.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from experiments.fedvln.runs import curve, finished_twin, pick
from experiments.simulate import RESULTS, ROOT, simulate
from experiments.tables import mean_sd, paired_interval, pipe_table, print_from_runs, study_files

PIPELINE = "experiments/studies/fedvln_pipeline.toml"  # the study whose runs this one starts from


def _config(a, seed: int, lr: float) -> str:
    stage = (Path(a.pipeline_work) / f"seed{seed}").resolve()
    return (
        f'fedvln.stage="augment" eval-every={a.eval_every} fedvln.patience={a.patience} '
        f'fedvln.agent-init="{stage / "agent" / "best.pt"}" '
        f'fedvln.speaker-init="{stage / "speaker" / "best.pt"}" fedvln.lr={lr:g}'
    )


def run_dir(a, seed: int, lr: float) -> Path:
    """Its own folder once started, else a finished twin run, else its own folder (to train)."""
    own = Path(a.work) / f"lr{lr:g}-s{seed}"
    if own.exists():
        return own
    roots = [Path(a.pipeline_work), *(ROOT / r for r in a.reuse)]
    twin = finished_twin(
        [r / f"seed{seed}" / "augment" for r in roots], _config(a, seed, lr), a.rounds, seed
    )
    return twin or own


def _run(a, seed: int, lr: float) -> Path:
    run = run_dir(a, seed, lr)
    if run.parent == Path(a.work):
        return simulate("fedvln", run, rounds=a.rounds, seed=seed, run_config=_config(a, seed, lr))
    print(f"fedvln_finetune_lr: lr {lr:g} seed {seed} is {run}; not trained twice")
    return run


def rows_of(a, seed: int, lr: float) -> dict | None:
    """One run: its start (the agent's best), first, best and last evaluation."""
    run = run_dir(a, seed, lr)
    df, agent = curve(run.parent, run.name), curve(Path(a.pipeline_work) / f"seed{seed}", "agent")
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


def measure(
    seed: int,
    lr: float,
    rounds: int,
    eval_every: int,
    patience: int,
    pipeline_work: str,
    reuse: list[str],
    work: Path,
) -> dict:
    """One cell: the augment stage of seed `seed` at local lr `lr` from the pipeline's agent
    and speaker (in `pipeline-work`), trained in WORK/lr<lr>-s<seed> unless a finished twin
    run is in the pipeline's folder or a `reuse` one; `rounds` the cap, evaluated every
    `eval-every` rounds, stopped after `patience` evaluations without a better SR (the
    pipeline's). A seed the pipeline has not run stops the study, naming the study to run."""
    a = SimpleNamespace(rounds=rounds, eval_every=eval_every, patience=patience, reuse=reuse,
                        pipeline_work=str(ROOT / pipeline_work), work=work)  # fmt: skip
    _needs_pipeline(pipeline_work, seed)
    _run(a, seed, lr)
    row = rows_of(a, seed, lr)
    if row is None:
        raise ValueError(f"{run_dir(a, seed, lr)}: the run did not finish")
    return row


def _needs_pipeline(pipeline_work: str, seed: int) -> None:
    if curve(ROOT / pipeline_work / f"seed{seed}", "agent") is None:
        raise ValueError(
            f"grid.pipeline-work: {pipeline_work} has no finished agent stage for seed {seed}: "
            f"run `python -m experiments.study {PIPELINE}` first"
        )


def needs(cell: dict, where) -> None:
    """The pipeline's agent stage of the cell's seed, before anything trains."""
    try:
        _needs_pipeline(cell["pipeline-work"], cell["seed"])
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def check(cell: dict, where) -> None:
    for key in ("rounds", "eval-every", "patience"):
        if cell[key] < 1:
            raise ValueError(f"{where}: grid.{key}: must be at least 1")
    if not cell["lr"] > 0:
        raise ValueError(f"{where}: grid.lr: must be > 0")


def outputs(study: dict) -> list[Path]:
    return study_files(RESULTS, study["name"])[:2]  # the table and the runs; no figure


def report(runs: pd.DataFrame, study: dict, command: str) -> str:
    out_csv, runs_csv = outputs(study)
    table = summary(runs)
    RESULTS.mkdir(parents=True, exist_ok=True)
    sr = [c for c in runs if c.endswith("_sr")]  # lr stays as it is (1e-4 rounds to 0)
    runs.round({c: 2 for c in sr}).to_csv(runs_csv, index=False)
    table.to_csv(out_csv, index=False)
    return markdown(table)


def replot(study: dict) -> int:
    return print_from_runs(outputs(study)[1], lambda runs: markdown(summary(runs)))

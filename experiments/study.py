"""One runner for the studies kept as files (issue 66 item 1).

    python -m experiments.study experiments/studies/fedrl_frontier.toml [--jobs 2] [--force]
    python -m experiments.study experiments/studies/fedrl_frontier.toml --plot-only

A study file (experiments/studies/<name>.toml) is a table's or a figure's exact settings: the
runs it is made of (methods x settings x seeds) and the analysis that reads them. The runner
expands the runs, trains only what its cache lacks (a finished run is reused only under the
same fingerprint, so a study resumes), and hands them to the analysis, which writes the CSVs
and draws the figure (experiments/figures.save) under this command. What stays in Python is
what is specific to a study: its analysis module's `outputs(study)`, `report(runs, study,
command)` (returns the table as markdown) and `replot(study)` (the figure again from the
committed CSVs, `--plot-only`). A run that finds its input missing or wrong (another study's
runs it reads, a data folder) raises ValueError: the study stops in one line, exit 2, every
finished run kept; an analysis's `needs(cell, file)` says so for every cell before anything
trains (what `check` cannot: it reads other studies' folders, which a fresh checkout lacks).
A study that checks a claim (e.g. every engine gives the same
scores) names it in `failure`: the runner writes the results, then exits 1 with the reason.

The file, keys in kebab-case:

    name = "fedrl_frontier"            # experiments/results/<name>...
    runs = "fedrl-gridworld"           # which runs: a key of RUNS
    analysis = "experiments.privacy.fedrl_frontier"
    [grid]                             # every run's settings; lists are crossed
    methods = ["dqn-alpha"]
    seeds = [0, 1, 2]
    ...
    run-config = { "fedrl.envs" = 32 } # one table of overrides, or a list: one run per entry
    [[grid.arms]]                      # optional: groups of runs, each overriding the grid
    methods = ["fedrl"]
    run-config = [{ "fedrl.sigma" = 0.25 }, { "fedrl.sigma" = 1.0 }]
    [report]                           # what the analysis alone reads (e.g. a sweep's knob)

A list-valued `run-config` in an arm is merged over the grid's table, one run per entry.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from experiments.simulate import RESULTS, command_line
from experiments.tables import (
    pipe_table,
    plot_only_flag,
    redraw_study,
    refuse_overwrite,
    save_study,
    study_files,
)

# runs kind -> module with crossed(study) ({list field: cell field}, crossed in that order),
# check(cell, file), jobs(cells, work) and run_jobs(jobs, n_jobs)
RUNS = {
    "fedrl-gridworld": "experiments.fedrl.table1",
    "fedrl-text2action": "experiments.fedrl.table2",
    "function": "experiments.function_runs",
    "simulation": "experiments.simulation_runs",
}
TOP = {"name", "runs", "analysis", "grid", "report"}


def load(path: Path | str) -> dict:
    """The study file, checked: one line naming the file and the field on any mistake."""
    path = Path(path)
    try:
        study = tomllib.loads(path.read_text())
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not TOML: {e}") from None
    unknown = set(study) - TOP
    if unknown:
        raise ValueError(f"{path}: unknown field(s) {', '.join(sorted(unknown))}")
    for key in ("name", "runs", "analysis", "grid"):
        if key not in study:
            raise ValueError(f"{path}: missing field `{key}`")
    if study["runs"] not in RUNS:
        raise ValueError(f"{path}: runs = {study['runs']!r}: one of {', '.join(RUNS)}")
    module, _, attr = study["analysis"].partition(":")
    if importlib.util.find_spec(module) is None:
        raise ValueError(f"{path}: analysis = {study['analysis']!r}: no such module")
    if attr and not hasattr(importlib.import_module(module), attr):
        raise ValueError(f"{path}: analysis = {study['analysis']!r}: {module} has no {attr}")
    study["file"] = path
    return study


def analysis_of(study: dict):
    """The study's analysis: a module, or `module:NAME`, a namespace in it (a module with two
    studies, e.g. experiments.privacy.fedrl_attack:DEFENCE), with outputs, report, replot and
    optionally check(cell) for what its runs accept and failure(study) (why the claim the study
    checks does not hold, or None). One that has no `report` is a standard study:
    `summarize(runs)` gives the table, `markdown(table)` (default: a pipe table) prints it,
    `plot(runs, png, command)` draws it and `failure(table)` reads the written table; it
    writes the three files of `study_files`."""
    module, _, attr = study["analysis"].partition(":")
    found = importlib.import_module(module)
    a = getattr(found, attr) if attr else found
    if hasattr(a, "report"):
        return a
    return SimpleNamespace(**standard(a, study_files(RESULTS, study["name"])))


def standard(a, files: list[Path]) -> dict:
    """outputs, report and replot of a standard study from its summarize, markdown and plot."""

    def report(runs, study, command):
        table = a.summarize(runs)
        save_study(files, runs, table, command, a.plot)
        show = getattr(a, "markdown", lambda t: pipe_table(list(t.columns), t.values.tolist()))
        return show(table)

    out = {"outputs": lambda study: files, "report": report,
           "replot": lambda study: redraw_study(files, a.plot)}  # fmt: skip
    if hasattr(a, "failure"):
        out["failure"] = lambda study: a.failure(pd.read_csv(files[0]))
    return out | ({"check": a.check} if hasattr(a, "check") else {})


def cells(study: dict, crossed: dict[str, str]) -> list[dict]:
    """Every run the study is made of, one dict per run: the grid's settings with an arm's
    over them, the kind's list fields crossed (`crossed`: {"seeds": "seed", ...}), then one
    run per run-config."""
    grid = {k: v for k, v in study["grid"].items() if k != "arms"}
    out = []
    for arm in study["grid"].get("arms") or [{}]:
        g = grid | arm
        base = grid.get("run-config", {})
        if not isinstance(base, dict):
            raise ValueError(f"{study['file']}: grid.run-config: a table of overrides")
        rc = arm.get("run-config", [{}])
        variants = [base | v for v in rc] if isinstance(rc, list) else [base | rc]
        for key in crossed:
            if not isinstance(g.get(key), list) or not g[key]:  # an arm may hold its own
                raise ValueError(f"{study['file']}: grid.{key}: a non-empty list")
        fixed = {k: v for k, v in g.items() if k not in (*crossed, "run-config", "cross")}
        for values in itertools.product(*(g[k] for k in crossed)):
            for run_config in variants:
                one = dict(zip(crossed.values(), values))
                out.append(fixed | one | {"run-config": run_config})
    return out


def check_cell(cell: dict, where, fields: set[str], methods) -> None:
    """What every kind of run checks in a cell (ValueError naming the study file and field):
    no field the kind does not take, a method it runs, a seed, run-config keys the app knows
    with values it accepts."""
    from config import ConfigError, parse
    from config.schema import merged

    unknown = set(cell) - fields
    if unknown:
        raise ValueError(f"{where}: grid: unknown field(s) {', '.join(sorted(unknown))}")
    if cell["method"] not in methods:
        raise ValueError(f"{where}: grid.methods: {cell['method']!r} is not one of {methods}")
    seed = cell.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"{where}: grid.seeds: whole numbers of at least 0, got {seed!r}")
    unknown = [k for k in cell["run-config"] if k not in merged({})]
    if unknown:
        raise ValueError(f"{where}: grid.run-config: unknown key(s) {', '.join(unknown)}")
    try:  # each value's type and range, as the run would parse it, before any run starts
        parse(cell["run-config"])
    except ConfigError as e:
        raise ValueError(f"{where}: grid.run-config: {e}") from None


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m experiments.study", description=__doc__.split("\n")[0]
    )
    p.add_argument("study", help="a study file, e.g. experiments/studies/fedrl_table1.toml")
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel (1 torch thread each)")
    p.add_argument("--work", default="", help="where finished runs are kept (default: the kind's)")
    p.add_argument("--force", action="store_true", help="overwrite committed results")
    plot_only_flag(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    command = command_line(__file__, argv)
    try:
        study = load(a.study)
        analysis = analysis_of(study)
        if a.plot_only:
            return analysis.replot(study)
        if a.jobs <= 0:
            raise ValueError("--jobs must be positive")
        kind = importlib.import_module(RUNS[study["runs"]])
        runs = cells(study, kind.crossed(study))
        for cell in runs:
            kind.check(cell, study["file"])
            if hasattr(analysis, "check"):
                analysis.check(cell, study["file"])
        refuse_overwrite(analysis.outputs(study), a.force)
        for cell in runs if hasattr(analysis, "needs") else ():
            analysis.needs(cell, study["file"])
        jobs = kind.jobs(runs, Path(a.work) if a.work else None)
    except ValueError as e:
        print(f"study: {e}", file=sys.stderr)
        return 2
    try:
        runs = kind.run_jobs(jobs, a.jobs)
    except ValueError as e:  # a cell's input is missing or wrong (envs.errors.DataError too)
        print(f"study: {study['file']}: {e} (every finished run is kept)", file=sys.stderr)
        return 2
    text = analysis.report(runs, study, command)
    print(f"\n{command}\n\n{text}")
    why = analysis.failure(study) if hasattr(analysis, "failure") else None
    if why:
        print(f"study: {study['name']}: {why} (the results above are written)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

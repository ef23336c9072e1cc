"""The study kind "function" (experiments/study.py): each cell is one call of a Python
function that trains, scores and caches its own run (`run = "module.function"` in the grid).

The grid's other fields are the call's keyword arguments (kebab-case keys become the
function's snake_case names); `cross` names the fields that are
lists to cross (one call per combination), every other field is passed whole (a list stays a
list: e.g. the sigmas one network is released at). `work`, the folder the function caches in,
is relative to the project and `python -m experiments.study --work` replaces it. A call
returns one row or a list of rows; the analysis reads them as one table.
"""

from __future__ import annotations

import importlib
import inspect
import tomllib
import typing
from pathlib import Path

import pandas as pd

from experiments.simulate import ROOT, in_parallel


def crossed(study: dict) -> dict[str, str]:
    cross = study["grid"].get("cross")
    if not isinstance(cross, list) or not all(isinstance(c, str) for c in cross):
        raise ValueError(f"{study['file']}: grid.cross: the list of fields to cross")
    return {c: c for c in cross}


def function(dotted: str):
    module, _, name = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, ValueError, AttributeError):
        raise ValueError(f"grid.run: {dotted!r} is not a function of the project") from None


def arguments(cell: dict) -> dict:
    """The call's keyword arguments: the cell without `run` (and the runner's run-config,
    which a function's own study does not have)."""
    return {k.replace("-", "_"): v for k, v in cell.items() if k not in ("run", "run-config")}


def fields(study_file: Path | str) -> dict:
    """A function study file's grid as its function's keyword arguments, less the crossed
    fields (one value per call): how another study or a test reads this study's settings."""
    grid = tomllib.loads(Path(study_file).read_text())["grid"]
    skip = {"cross", "arms", *grid.get("cross", [])}
    return arguments({k: v for k, v in grid.items() if k not in skip})


def check(cell: dict, where) -> None:
    """The cell names a function that takes exactly its fields (a misspelt or missing field is
    named), each of the type the function's parameter names; what a value may be beyond its
    type is checked by the analysis's own `check`."""
    if "run" not in cell:
        raise ValueError(f"{where}: grid.run: the function each cell calls")
    if cell.get("run-config"):
        raise ValueError(
            f"{where}: grid.run-config: a function's study passes its settings as fields"
        )
    try:
        fn = function(cell["run"])
        inspect.signature(fn).bind(**arguments(cell))
    except (ValueError, TypeError) as e:
        raise ValueError(f"{where}: {e}") from None
    hints = typing.get_type_hints(fn)
    for key, value in cell.items():
        hint = hints.get(key.replace("-", "_"))
        if hint is not None and not _is(value, hint):
            raise ValueError(f"{where}: grid.{key} = {value!r}: {_named(hint)} expected")


def _is(value, hint) -> bool:
    """Whether a TOML value is of the type a function's parameter names (a wrong type would
    otherwise fail inside a run, as a traceback, after others have trained)."""
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_is(v, item) for v in value)
    if hint is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):  # TOML's true is not a number or a name
        return False
    if hint is float:
        return isinstance(value, (int, float))
    if hint is Path:
        return isinstance(value, str)
    return not isinstance(hint, type) or isinstance(value, hint)


def _named(hint) -> str:
    if typing.get_origin(hint) is list:
        return f"a list of {_named(typing.get_args(hint)[0])}"
    names = {int: "a whole number", float: "a number", str: "text", bool: "true or false"}
    return names.get(hint, "a path" if hint is Path else getattr(hint, "__name__", str(hint)))


def jobs(cells: list[dict], work: Path | None) -> list[dict]:
    out = []
    for c in cells:
        kwargs = arguments(c)
        if "work" in kwargs:
            kwargs["work"] = work or ROOT / kwargs["work"]
        out.append({"run": c["run"], "kwargs": kwargs})
    return out


def _call(job: dict) -> list[dict]:
    got = function(job["run"])(**job["kwargs"])
    return got if isinstance(got, list) else [got]


def run_jobs(jobs: list[dict], n_jobs: int) -> pd.DataFrame:
    """`n_jobs` calls at a time, each in its own process (each function pins its own threads
    and caches its run); rows in the order of the study's cells."""
    if n_jobs == 1:
        done = [_call(j) for j in jobs]
    else:
        done = in_parallel(_call, jobs, n_jobs, "study runs", processes=True)
    return pd.DataFrame([r for rows in done for r in rows])

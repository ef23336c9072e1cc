"""The study kind "simulation" (experiments/study.py): each cell is one launch of simulation.py,
Flower's simulation engine as a user runs it, through `experiments.simulate.simulate` (which
reuses a finished run of the same launch, resumes an interrupted one and retrains one whose
launch changed).

Grid fields: `methods` and `seeds` (crossed), `rounds`, and optionally `num-clients`,
`topology`, `run-config` (a table of overrides, or a list in an arm: one run per entry),
`policy` (the nodes' policy file, relative to the project: simulation.py --policy),
`label` (the run folder's prefix, default the method: two arms of one method need two labels),
`may-stop` (true: a run its strategy stops because no update was accepted in
`max-empty-rounds` consecutive rounds, e.g. noise that wrecked the model, is kept as it
stopped, marked by `stopped.txt` and not launched again; its row has `stopped`; any other
failure still stops the study) and `work` (required: where the run folders are kept, relative
to the project; `python -m experiments.study --work` replaces it). A cell's run folder is
`<work>/<label>-s<seed>`. The analysis gets one row per run: its cell's fields and `run_dir`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd

from experiments.simulate import ROOT, in_parallel, simulate

CROSSED = {"methods": "method", "seeds": "seed"}
CELL = {
    "method",
    "seed",
    "rounds",
    "num-clients",
    "topology",
    "run-config",
    "label",
    "work",
    "policy",
    "may-stop",
}
STOPPED = "stopped.txt"  # a may-stop run that the simulation stopped


def crossed(study: dict) -> dict[str, str]:
    return CROSSED


def check(cell: dict, where) -> None:
    """A cell's fields (ValueError naming the study file and field)."""
    from config.methods import METHODS
    from experiments.study import check_cell

    check_cell(cell, where, CELL, list(METHODS))
    if not isinstance(cell.get("work"), str) or "rounds" not in cell:
        raise ValueError(f"{where}: grid.work (a folder for the runs) and grid.rounds: required")
    if "policy" in cell and not (ROOT / str(cell["policy"])).is_file():
        raise ValueError(f"{where}: grid.policy: {cell['policy']!r} is not a file of the project")
    if not isinstance(cell.get("may-stop", False), bool):
        raise ValueError(f"{where}: grid.may-stop: true or false, got {cell['may-stop']!r}")
    for key in ("rounds", "num-clients"):
        v = cell.get(key, 1)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise ValueError(f"{where}: grid.{key}: a whole number of at least 1, got {v!r}")


def overrides(run_config: dict) -> str:
    """A cell's run-config table as simulation.py's --run-config text (TOML values)."""
    return " ".join(f"{k}={json.dumps(v)}" for k, v in run_config.items())


def jobs(cells: list[dict], work: Path | None) -> list[dict]:
    out = []
    for c in cells:
        folder = (work or ROOT / c["work"]) / f"{c.get('label') or c['method']}-s{c['seed']}"
        out.append(c | {"run_dir": str(folder)})
    dup = {j["run_dir"] for j in out if sum(k["run_dir"] == j["run_dir"] for k in out) > 1}
    if dup:
        raise ValueError(f"two runs would share {sorted(dup)[0]}: give each arm its own label")
    return out


def _launch(job: dict) -> dict:
    folder = Path(job["run_dir"])
    if not job.get("may-stop"):
        return _simulate(job)
    if not (folder / STOPPED).is_file():
        try:
            return _simulate(job) | {"stopped": False}
        except subprocess.CalledProcessError:
            log = folder / "server.log"
            if "consecutive rounds" not in (log.read_text() if log.is_file() else ""):
                raise
            (folder / STOPPED).write_text("the run stopped: see server.log\n")
    return job | {"stopped": True}


def _simulate(job: dict) -> dict:
    simulate(
        job["method"],
        Path(job["run_dir"]),
        rounds=job["rounds"],
        seed=job["seed"],
        num_clients=job.get("num-clients"),
        topology=job.get("topology"),
        run_config=overrides(job["run-config"]),
        policy=ROOT / job["policy"] if job.get("policy") else None,
    )
    return job


def run_jobs(jobs: list[dict], n_jobs: int) -> pd.DataFrame:
    """`n_jobs` launches at a time (each its own process tree)."""
    return pd.DataFrame(in_parallel(_launch, jobs, n_jobs, "simulations"))

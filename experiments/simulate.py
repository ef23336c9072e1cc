"""Helpers for experiment scripts: run simulation.py like a user would, resumably."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"


def simulate(
    method: str,
    run_dir: Path,
    *,
    rounds: int,
    seed: int,
    num_clients: int | None = None,
    topology: str | None = None,
    run_config: str = "",
) -> Path:
    """Run one study into run_dir unless it already finished there (so scripts resume)."""
    if (run_dir / "rounds.csv").exists():
        done = pd.read_csv(run_dir / "rounds.csv")
        if len(done) and done["round"].max() >= rounds:
            return run_dir
        raise SystemExit(f"{run_dir} holds an unfinished run; remove it to rerun")
    cmd = [
        sys.executable,
        str(ROOT / "simulation.py"),
        method,
        "--rounds",
        str(rounds),
        "--seed",
        str(seed),
        "--out",
        str(run_dir),
        "--no-plots",
    ]
    if num_clients is not None:
        cmd += ["--num-clients", str(num_clients)]
    if topology is not None:
        cmd += ["--topology", topology]
    if run_config:
        cmd += ["--run-config", run_config]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    return run_dir


def command_line() -> str:
    """How this script was invoked, for the results' provenance."""
    return (
        "python -m "
        + Path(sys.argv[0]).with_suffix("").relative_to(ROOT).as_posix().replace("/", ".")
        + "".join(f" {a}" for a in sys.argv[1:])
    )

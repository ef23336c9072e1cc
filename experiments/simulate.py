"""Helpers for experiment scripts: run simulation.py like a user would, resumably, and many
runs at once with a progress bar."""

from __future__ import annotations

import shlex
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from pathlib import Path

import pandas as pd
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
# the nodes' policy when a study compares what the papers compare beyond their own protections
RESEARCH_POLICY = ROOT / "deploy" / "policies" / "research.toml"


def simulate(
    method: str,
    run_dir: Path,
    *,
    rounds: int,
    seed: int,
    num_clients: int | None = None,
    topology: str | None = None,
    run_config: str = "",
    policy: Path | None = None,
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
    if policy is not None:
        cmd += ["--policy", str(policy)]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    return run_dir


def in_parallel(fn, items: list, jobs: int, desc: str, processes: bool = False) -> list:
    """`fn` over `items`, `jobs` at a time (threads, or processes for in-process training),
    with a bar of finished runs on stderr; results in the order of `items`. The first run
    that fails stops the script with its error."""
    pool_of = ProcessPoolExecutor if processes else ThreadPoolExecutor
    with pool_of(max_workers=jobs) as pool:
        futures = [pool.submit(fn, x) for x in items]
        for f in tqdm(as_completed(futures), total=len(futures), desc=desc, unit="run"):
            f.result()
        return [f.result() for f in futures]


def command_line(script: str, argv: list[str] | None = None) -> str:
    """How a script was invoked, for the results' provenance: `python -m <module> <args>`.

    `script` is the calling module's `__file__` (always inside the project, wherever the venv
    or the caller is: a notebook calling `main([...])` gets its own arguments, not the
    notebook's); `argv` is what its `main` parsed (None: the command line's)."""
    module = Path(script).resolve().with_suffix("").relative_to(ROOT).as_posix().replace("/", ".")
    args = sys.argv[1:] if argv is None else [str(a) for a in argv]
    return shlex.join(["python", "-m", module, *args])

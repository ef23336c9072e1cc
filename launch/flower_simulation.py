"""`flower-simulation`, the classic command, answered (issue 45).

Flower 1.41 no longer ships `flower-simulation`: a simulation is `flwr run APP` (Flower's
`flwr-simulation` is an internal process started with a token). This console script keeps the
classic flags for this app and runs the run through the project's launcher (`simulation.py`,
Flower's simulation engine behind a private SuperLink), saying so in one line:

    flower-simulation --app . --num-supernodes 2 [--run-config "method='fedrl' ..."] \\
        [--backend-config '{"client_resources": {"num_cpus": 1, "num_gpus": 0.0}}']

`--app` must be a checkout of this project (it needs `simulation.py` and `pyproject.toml`).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

NOTE = (
    "flower-simulation: Flower 1.41 runs simulations with `flwr run APP`; running this app "
    "through its launcher instead (python simulation.py, the same engine)"
)


def default_method(app: Path) -> str:
    """The app's own default `method` (pyproject.toml [tool.flwr.app.config]), as `flwr run`
    would use it."""
    cfg = tomllib.loads((app / "pyproject.toml").read_text())
    return str(cfg["tool"]["flwr"]["app"]["config"]["method"])


def translate(a: argparse.Namespace, method: str) -> list[str]:
    """The classic flags as `simulation.py` arguments (`method` unless the run config names
    one). ValueError names a flag it cannot use."""
    args, rest = [method], []
    for item in shlex.split(a.run_config):
        key, _, value = item.partition("=")
        if key == "method":
            args[0] = value.strip("\"'")
        elif key == "num-server-rounds":
            args += ["--rounds", value]
        else:
            rest.append(item)
    if a.num_supernodes is not None:
        if a.num_supernodes < 1:
            raise ValueError(f"--num-supernodes must be >= 1, got {a.num_supernodes}")
        args += ["--num-clients", str(a.num_supernodes)]
    if a.backend_config:
        try:
            resources = json.loads(a.backend_config).get("client_resources", {})
            cpus, gpus = resources.get("num_cpus"), resources.get("num_gpus")
        except (ValueError, AttributeError) as e:
            raise ValueError(f"--backend-config: not a JSON object ({e})") from None
        args += ["--num-cpus", str(int(cpus))] if cpus is not None else []
        args += ["--num-gpus", str(float(gpus))] if gpus is not None else []
    if rest:
        args += ["--run-config", " ".join(rest)]
    return args


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="flower-simulation", description=NOTE)
    ap.add_argument("--app", default=".", help="this project's checkout (default: .)")
    ap.add_argument("--num-supernodes", type=int, default=None, help="nodes (num-clients)")
    ap.add_argument("--run-config", default="", help='run config, e.g. "num-server-rounds=3"')
    ap.add_argument("--backend-config", default="", help="Flower's JSON: client_resources")
    a = ap.parse_args(argv)
    app = Path(a.app).resolve()
    if not (app / "simulation.py").is_file() or not (app / "pyproject.toml").is_file():
        print(
            f"flower-simulation: --app {a.app}: not a checkout of this project (no "
            "simulation.py); Flower 1.41 has no flower-simulation, use `flwr run APP`",
            file=sys.stderr,
        )
        return 2
    try:
        args = translate(a, default_method(app))
    except (ValueError, KeyError, tomllib.TOMLDecodeError) as e:
        print(f"flower-simulation: {e}", file=sys.stderr)
        return 2
    print(NOTE, flush=True)
    return subprocess.call([sys.executable, str(app / "simulation.py"), *args], cwd=app)


if __name__ == "__main__":
    sys.exit(main())

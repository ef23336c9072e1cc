"""Plain `flwr run .` (Flower's own auto-started local SuperLink), as a new user runs it from
the venv setup.sh made: it completes with our results and installs nothing at run time (Flower
1.41 otherwise builds a per-run env with `uv sync`: 5.2 GB of CUDA torch, impossible offline)."""

import os
import runpy
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from tests.conftest import ROOT
from tests.deployment import BIN

pytestmark = pytest.mark.slow


def test_sitecustomize_turns_off_runtime_installs_and_finds_the_venvs_commands(monkeypatch):
    monkeypatch.delenv("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    runpy.run_path(str(ROOT / "deploy" / "sitecustomize.py"))
    assert os.environ["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] == "1"
    assert os.environ["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    monkeypatch.setenv("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "0")  # a user's choice
    runpy.run_path(str(ROOT / "deploy" / "sitecustomize.py"))
    assert os.environ["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] == "0"


def test_sitecustomize_keeps_the_nodes_gate_first_when_the_venv_is_reached_through_a_link(
    tmp_path, monkeypatch
):
    """A node's PATH is deploy/gate first, then the venv's bin. Reached through a link
    (checkout/.venv -> elsewhere), the venv's bin on PATH is not sys.executable's resolved
    folder by name; the venv's commands are there all the same, so nothing is put in front of
    the gate (it was: the SuperExec then started the venv's own flwr-clientapp, and a node
    ran any app a run submitted)."""
    link = tmp_path / "venv-bin"
    link.symlink_to(os.path.dirname(os.path.realpath(sys.executable)))
    gate = str(ROOT / "deploy" / "gate")
    monkeypatch.setattr(sys, "executable", os.path.realpath(sys.executable))
    monkeypatch.setenv("PATH", f"{gate}{os.pathsep}{link}{os.pathsep}/usr/bin")
    runpy.run_path(str(ROOT / "deploy" / "sitecustomize.py"))
    assert os.environ["PATH"].split(os.pathsep)[0] == gate
    monkeypatch.setenv("PATH", f"{gate}{os.pathsep}/usr/bin")  # the venv not on PATH at all
    runpy.run_path(str(ROOT / "deploy" / "sitecustomize.py"))
    assert os.environ["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)


def test_plain_flwr_run_completes_without_installing_anything(tmp_path):
    home, out = tmp_path / "flwr-home", tmp_path / "out"
    env = {  # what the venv's sitecustomize gives every process, not activated, bare PATH
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "PATH": f"{BIN}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "FLWR_HOME": str(home),
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "XDG_STATE_HOME": str(tmp_path / "node-state"),
    }
    try:
        run = subprocess.run(
            [str(BIN / "flwr"), "run", ".", "--stream", "--run-config",
             f'num-server-rounds=1 driving.image-size=32 driving.train-per-silo=40 '
             f'driving.test-per-silo=16 out-dir="{out}"'],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        assert f"[fedembodied] done: {out}" in run.stdout + run.stderr
        assert len(pd.read_csv(out / "rounds.csv")) == 1 and list(out.glob("events.out.*"))
        # the ServerApp writes its plots and its log: no launcher needed
        assert (out / "plots" / "summary.png").is_file() and (out / "plots" / "rmse.png").is_file()
        assert "[fedembodied] round 1/1" in (out / "server.log").read_text()
        assert not (home / "runtime-envs").exists()  # no per-run env was built
    finally:  # the local SuperLink flwr started keeps running: stop exactly that one
        db = str(home / "local-superlink")
        pids = subprocess.run(["pgrep", "-f", db], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and subprocess.run(["pgrep", "-f", db]).returncode == 0:
            time.sleep(0.5)

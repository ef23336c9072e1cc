"""The simulation engine on an existing Ray cluster: a head (`ray start --head`, no CPUs of its
own) and one worker node joined to it, as separate processes on loopback; simulation.py
`--ray-address` runs the app there, and the cluster's job table shows Flower's driver."""

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import PYTHON, ROOT
from tests.deployment import BIN, Federation, free_port, wait_for, wait_listening

pytestmark = pytest.mark.slow  # engine runs / subprocesses: not in the fast lane

RAY = BIN / "ray"
SMALL = (
    "driving.image-size=32 driving.train-per-silo=40 driving.test-per-silo=16 "
    "driving.local-epochs=1"
)


@pytest.mark.skipif(not RAY.exists() and not shutil.which("ray"), reason="ray CLI not installed")
def test_a_simulation_runs_on_an_existing_ray_cluster(tmp_path):
    """The head and the worker run `ray start --block` in sessions of their own, under a private
    temp dir (so no later `ray.init()` on this machine finds this cluster); the test stops
    exactly those process groups, never `ray stop` (which ends every Ray process of the user)."""
    ray = str(RAY if RAY.exists() else shutil.which("ray"))
    port = free_port()
    # a short private temp dir: Ray's socket paths must stay under the OS's 107 bytes
    temp = Path(tempfile.mkdtemp(prefix="fe-ray-"))
    common = ["--disable-usage-stats", "--block"]
    fed = Federation(tmp_path)
    try:
        fed.start(
            "ray-head",
            [ray, "start", "--head", "--port", str(port), "--num-cpus", "0",
             "--include-dashboard=false", "--temp-dir", str(temp), *common],
        )  # fmt: skip
        wait_listening("127.0.0.1", port, timeout=120)
        # the head has no CPU: every ClientApp actor must run on the joined worker node
        fed.start(
            "ray-worker",
            [ray, "start", "--address", f"127.0.0.1:{port}", "--num-cpus", "2", *common],
        )
        wait_for(lambda: _nodes_alive(port) >= 2, timeout=120, what="the worker to join")
        out = tmp_path / "out"
        run = subprocess.run(
            [
                str(PYTHON),
                "simulation.py",
                "fedavg",
                "--rounds",
                "1",
                "--num-clients",
                "2",
                "--out",
                str(out),
                "--no-plots",
                "--ray-address",
                f"127.0.0.1:{port}",
                "--run-config",
                SMALL,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        assert len(pd.read_csv(out / "rounds.csv")) == 1
        jobs = _in_cluster(
            port, "print('\\n'.join(str(j.get('Entrypoint', '')) for j in st.jobs()))"
        )
        assert "flwr" in jobs.stdout or "flower" in jobs.stdout, jobs.stdout + jobs.stderr
    finally:
        groups = [p.pid for p in fed.procs.values()]
        fed.close()  # SIGTERM to each group, SIGKILL if it lingers
        for pgid in groups:  # nothing of ours is left, whatever ignored SIGTERM
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(temp, ignore_errors=True)


def _in_cluster(port: int, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(PYTHON),
            "-c",
            "import ray, ray._private.state as st\n"
            f"ray.init(address='127.0.0.1:{port}', logging_level='ERROR')\n" + code,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _nodes_alive(port: int) -> int:
    got = _in_cluster(port, "print(sum(n['Alive'] for n in ray.nodes()))")
    try:
        return int(got.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return 0


def test_a_bad_ray_address_is_refused_before_anything_starts():
    run = subprocess.run(
        [str(PYTHON), "simulation.py", "fedavg", "--ray-address", "nohost"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "--ray-address" in run.stderr
    port = free_port()  # nothing listens there
    run = subprocess.run(
        [str(PYTHON), "simulation.py", "fedavg", "--ray-address", f"127.0.0.1:{port}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "no Ray head answers" in run.stderr, run.stderr

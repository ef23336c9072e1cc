"""The simulation engine on an existing Ray cluster: a head (`ray start --head`, no CPUs of its
own) and one worker node joined to it, as separate processes on loopback; simulation.py
`--ray-address` runs the app there, and the cluster's job table shows Flower's driver."""

import shutil
import subprocess

import pandas as pd
import pytest

from tests.conftest import PYTHON, ROOT
from tests.deployment import BIN, free_port

pytestmark = pytest.mark.slow  # engine runs / subprocesses: not in the fast lane

RAY = BIN / "ray"
SMALL = (
    "driving.image-size=32 driving.train-per-silo=40 driving.test-per-silo=16 "
    "driving.local-epochs=1"
)


@pytest.mark.skipif(not RAY.exists() and not shutil.which("ray"), reason="ray CLI not installed")
def test_a_simulation_runs_on_an_existing_ray_cluster(tmp_path):
    ray = str(RAY if RAY.exists() else shutil.which("ray"))
    port = free_port()
    common = ["--disable-usage-stats"]
    try:
        subprocess.run(
            [
                ray,
                "start",
                "--head",
                "--port",
                str(port),
                "--num-cpus",
                "0",
                "--include-dashboard=false",
                *common,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        # the head has no CPU: every ClientApp actor must run on the joined worker node
        subprocess.run(
            [ray, "start", "--address", f"127.0.0.1:{port}", "--num-cpus", "2", *common],
            check=True,
            capture_output=True,
            timeout=120,
        )
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
        jobs = subprocess.run(
            [
                str(PYTHON),
                "-c",
                (
                    "import ray, ray._private.state as st\n"
                    f"ray.init(address='127.0.0.1:{port}', logging_level='ERROR')\n"
                    "print('\\n'.join(str(j.get('Entrypoint', '')) for j in st.jobs()))"
                ),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "flwr" in jobs.stdout or "flower" in jobs.stdout, jobs.stdout + jobs.stderr
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True, timeout=120)


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

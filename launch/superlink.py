"""A private Flower SuperLink in simulation mode for one run of simulation.py, and the
supervision of every process it leads to: Flower's SuperLink, SuperExec, ServerApp and
ClientApps, and Ray's daemons (which leave our process group and, through setproctitle, blank
their environment). `LocalSuperLink.stop` ends all of them, on success, failure and Ctrl-C.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from launch.lifetime import undisturbed

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalSuperLink:
    """A private simulation SuperLink, and the clean-up of everything it spawns. With a Ray
    address (`--ray-address`, or RAY_ADDRESS in the environment) Flower's Ray backend joins
    that cluster (its `ray.init()` reads RAY_ADDRESS; we pass no num_cpus, which joining
    forbids), so the ClientApps run on the cluster's nodes."""

    def __init__(self, ray_address: str | None = None, policy: Path | None = None):
        self.home = Path(tempfile.mkdtemp(prefix="fedembodied-flwr-"))
        self.port = free_port()
        self.token = run_token()
        self.env = {
            **os.environ,
            "FLWR_HOME": str(self.home),
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
            "RAY_DEDUP_LOGS": "0",  # every house's progress line, not one per cluster
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "RAY_USAGE_STATS_ENABLED": "0",
            "FEDEMBODIED_RUN_TOKEN": self.token,
            "PYTHONWARNINGS": "ignore",
        }
        # a plain run gets a private local Ray: without an address, Ray's init() would join
        # whatever cluster a `ray start` left on this machine (it reads the address file)
        self.env["RAY_ADDRESS"] = ray_address or os.environ.get("RAY_ADDRESS") or "local"
        # a private Ray temp dir: Ray's agents rename themselves (setproctitle blanks their
        # environment, token included), but they keep their session's logs open in it
        self.ray_tmp = tempfile.mkdtemp(prefix="fe-ray-")  # short: socket paths <= 107 bytes
        self.env["RAY_TMPDIR"] = self.ray_tmp
        if policy is not None:  # the nodes' operator is the launcher's user (clients/policy.py)
            self.env["FEDEMBODIED_POLICY"] = str(policy)
        (self.home / "config.toml").write_text(
            '[superlink]\ndefault = "fedsim"\n\n[superlink.fedsim]\n'
            f'address = "127.0.0.1:{self.port}"\ninsecure = true\n'
        )
        self.log = open(self.home / "superlink.log", "w")
        self.proc = subprocess.Popen(
            [
                str(BIN / "flower-superlink"),
                "--insecure",
                "--simulation",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--disable-runtime-dependency-installation",
            ],
            env=self.env,
            cwd=str(ROOT),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            self._wait_ready()
        except BaseException:  # Ctrl-C or SIGTERM while it starts: its own session outlived us
            with undisturbed():
                self.stop()
            raise

    def _wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"flower-superlink exited ({self.proc.returncode}); see "
                    f"{self.home / 'superlink.log'}"
                )
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.2)
        raise RuntimeError("flower-superlink did not start within 60 s")

    def flwr(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(BIN / "flwr"), *args],
            env=self.env,
            cwd=str(ROOT),
            capture_output=True,
            text=True,
            **kw,
        )

    def stop(self) -> None:
        """Stop the SuperLink's process group, then any process that carries our token or
        holds a file in our Ray temp dir."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue
        for _ in range(3):
            left = set(processes_with_token(self.token)) | set(processes_holding(self.ray_tmp))
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)
        self.log.close()
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.rmtree(self.ray_tmp, ignore_errors=True)


def _pids_where(test) -> list[int]:
    """Pids of the other processes whose /proc folder passes `test` (one that vanishes or that
    we may not read is skipped)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if test(d):
                found.append(int(d.name))
        except OSError:
            continue
    return found


def run_token() -> str:
    """The token every process of one run carries, so its clean-up finds them (Ray's daemons
    leave our process group). A caller may set FEDEMBODIED_RUN_TOKEN to track its runs: each
    run extends it with its own suffix, so a study's runs side by side (all inheriting the
    caller's token) stay apart and one run's clean-up does not kill its siblings, while the
    caller's token, a prefix of all of them, still finds every one."""
    caller = os.environ.get("FEDEMBODIED_RUN_TOKEN")
    own = uuid.uuid4().hex
    return f"{caller}.{own}" if caller else own


def processes_with_token(token: str) -> list[int]:
    """Pids whose environment carries `token` or a run token extending it (`run_token`)."""
    entry = re.compile(rb"(?:^|\0)FEDEMBODIED_RUN_TOKEN=" + re.escape(token.encode()) + rb"[.\0]")
    return _pids_where(lambda d: entry.search((d / "environ").read_bytes()) is not None)


def processes_holding(folder: str) -> list[int]:
    """Pids with a file open under `folder` (the Ray daemons of our private Ray temp dir: on
    SIGINT its DashboardAgent and RuntimeEnvAgent outlived the run, deaf to SIGTERM)."""
    return _pids_where(
        lambda d: any(os.readlink(fd).startswith(folder) for fd in (d / "fd").iterdir())
    )


def run_status(link: LocalSuperLink, run_id: int) -> tuple[str, str]:
    res = link.flwr("ls", "fedsim", "--run-id", str(run_id), "--format", "json", timeout=60)
    try:
        runs = json.loads(res.stdout).get("runs", [])
        return runs[0].get("status", "unknown"), runs[0].get("status-details", "")
    except (json.JSONDecodeError, IndexError, AttributeError):
        return "unknown", res.stdout + res.stderr


def wait_finished(link: LocalSuperLink, run_id: int, timeout: float) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        status, details = run_status(link, run_id)
        if status.startswith("finished") or time.monotonic() > deadline:
            return status, details
        time.sleep(1.0)

"""Flower's deployment engine through deploy/*.sh on loopback: a run survives a SuperNode killed
mid-run and restarted (with a new node id), the SuperLink keeps its runs and nodes across a
restart (its database), and the network port serves SuperNodes only (the Fleet gateway)."""

import json
import subprocess

import httpx
import pandas as pd
import pytest

from tests.conftest import ROOT
from tests.deployment import (
    NEEDS_EDGE,
    Federation,
    free_port,
    free_ports,
    rounds_done,
    wait_for,
    wait_listening,
)

pytestmark = [pytest.mark.slow, NEEDS_EDGE]  # engine runs, subprocesses, the edge

SMALL = (
    "driving.image-size=32 driving.train-per-silo=40 driving.test-per-silo=16 "
    "driving.local-epochs=1 timeout-floor=20.0"
)


def test_a_killed_supernode_rejoins_and_a_restarted_superlink_keeps_runs_and_nodes(tmp_path):
    port, control = free_ports(2)
    fed = Federation(tmp_path)
    link = [
        str(ROOT / "deploy/superlink.sh"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--control-port",
        str(control),
    ]

    def supernode(pid: int, name: str):
        fed.start(
            name,
            [
                str(ROOT / "deploy/supernode.sh"),
                "--superlink",
                f"127.0.0.1:{port}",
                "--partition-id",
                str(pid),
                "--num-partitions",
                "2",
                "--port",
                str(free_port()),
            ],
        )

    try:
        fed.start("link", link)
        wait_listening("127.0.0.1", port)
        wait_listening("127.0.0.1", control)
        supernode(0, "sn0")
        supernode(1, "sn1")
        # the network port answers SuperNodes only: run submission / listing are refused there
        for path in (
            "/v1/control/list-runs",
            "/v1/control/start-run",
            "/v1/fleet/../control/list-runs",
        ):
            r = httpx.post(f"http://127.0.0.1:{port}{path}", content=b"")
            assert r.status_code == 403, (path, r.status_code)
        fed.connect("loop", f"127.0.0.1:{control}")
        out = tmp_path / "out"
        started = fed.cli(
            "run",
            str(ROOT),
            "loop",
            "--format",
            "json",
            "--run-config",
            f'num-server-rounds=4 num-clients=2 out-dir="{out}" {SMALL}',
        )
        run_id = json.loads(started.stdout)["run-id"]

        wait_for(lambda: rounds_done(out) >= 1, 300, what="round 1", progress=fed.progress(out))
        fed.kill("sn1")  # kill -9 mid-run: round 2's message goes to a dead node
        # The same silo comes back at once with a new node id. It registers within seconds,
        # while round 2 still waits out the dead node (timeout-floor), so round 3 asks it who it
        # is. Started only after round 2, it raced rounds 3 and 4: on a loaded CI host both
        # began before it had registered, and silo 1 never trained again.
        supernode(1, "sn1#2")
        wait_for(
            lambda: rounds_done(out) >= 2, 300, what="round 2 without silo 1",
            progress=fed.progress(out),
        )  # fmt: skip
        status = fed.wait_finished(
            "loop", run_id, 400, what="the run to finish", progress=fed.progress(out)
        )
        assert status == "finished:completed", fed.log("link")

        rounds = pd.read_csv(out / "rounds.csv")
        assert list(rounds["round"]) == [1, 2, 3, 4]
        assert rounds["n_accepted"].iloc[0] == 2 and rounds["n_accepted"].iloc[1] == 1
        assert rounds["n_accepted"].iloc[-1] == 2  # silo 1 trains again
        clients = pd.read_csv(out / "clients.csv")
        silo1 = clients[clients.partition == 1].set_index("round")
        assert list(silo1.index) == [1, 2, 3, 4]  # every round says what silo 1 did
        assert silo1.status[2].startswith("failed")  # the killed node, one line
        assert silo1.status[4] == "ok" and silo1.node[4] != silo1.node[1]  # a new node id

        # restart the SuperLink: its database keeps the run, and both SuperNodes reconnect
        fed.kill("link")
        fed.start("link#2", link)
        wait_for(
            lambda: fed.status("loop", run_id) == "finished:completed",
            60,
            what="the restarted SuperLink to list the finished run",
        )

        def online() -> int:
            ls = fed.cli("supernode", "ls", "loop", "--format", "json")
            try:
                return sum(n["status"] == "online" for n in json.loads(ls.stdout)["nodes"])
            except (ValueError, KeyError):
                return 0

        wait_for(lambda: online() >= 2, 120, what="both SuperNodes to reconnect")
        assert all(p.poll() is None for name, p in fed.procs.items() if name.startswith("sn"))
    finally:
        fed.close()
    leftover = subprocess.run(
        ["pgrep", "-f", f"127.0.0.1:({port}|{control})"], capture_output=True, text=True
    ).stdout.split()
    wait_for(
        lambda: (
            not subprocess.run(
                ["pgrep", "-f", f"127.0.0.1:({port}|{control})"], capture_output=True
            ).stdout
        ),
        20,
        0.5,
        what=f"processes to exit: {leftover}",
    )


def test_the_edges_key_is_removed_when_superlink_sh_is_stopped_by_its_process_group(tmp_path):
    """A SIGTERM to superlink.sh's process group reaches its children first; the teardown then
    failed under `set -e` and left /tmp/fedembodied-edge.*, the edge's certificate and
    private key, behind. Every exit path must remove it."""
    import glob
    import signal
    import time
    from pathlib import Path

    certs = tmp_path / "certs"
    subprocess.run(
        [str(ROOT / "deploy/make_certs.sh"), str(certs), "1"], check=True, capture_output=True
    )
    before = set(glob.glob("/tmp/fedembodied-edge.*"))
    port, control = free_ports(2)
    fed = Federation(tmp_path)
    fed.start(
        "link",
        [str(ROOT / "deploy/superlink.sh"), "--tls", str(certs), "--host", "127.0.0.1",
         "--port", str(port), "--control-port", str(control)],
    )  # fmt: skip
    try:
        wait_listening("127.0.0.1", port)
        (edge,) = set(glob.glob("/tmp/fedembodied-edge.*")) - before
        assert (Path(edge) / "edge.pem").is_file()
        fed.kill("link", signal.SIGTERM)
        deadline = time.time() + 20
        while Path(edge).exists() and time.time() < deadline:
            time.sleep(0.2)
        assert not Path(edge).exists(), "the edge's key outlived superlink.sh"
    finally:
        fed.close()


@pytest.mark.lane
def test_a_node_runs_the_app_it_was_installed_with_and_refuses_a_modified_one(tmp_path):
    """Issue 62: a copy of this project with a few more lines, submitted with `flwr run`, ran
    on every node. With deploy/supernode.sh's default gate (deploy/app_gate.py) the node
    refuses it in one log line before any of its code runs (its marker file never appears),
    and then runs the unchanged app."""
    import io
    import zipfile

    from deploy.app_gate import fab_of

    port, control = free_ports(2)
    modified = tmp_path / "fedembodied"
    with zipfile.ZipFile(io.BytesIO(fab_of(ROOT))) as z:
        z.extractall(modified)
    marker = tmp_path / "the submitter's code ran"
    with open(modified / "clients" / "app.py", "a") as f:
        f.write(f"\nimport pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    fed = Federation(tmp_path)
    try:
        fed.start(
            "link",
            [str(ROOT / "deploy/superlink.sh"), "--host", "127.0.0.1", "--port", str(port),
             "--control-port", str(control)],
        )  # fmt: skip
        wait_listening("127.0.0.1", port)
        wait_listening("127.0.0.1", control)
        start_node(fed, port, 0, 1)
        fed.connect("loop", f"127.0.0.1:{control}")
        bad = submit(fed, modified, tmp_path / "out-bad", rounds=1, clients=1)
        assert fed.wait_finished("loop", bad, 300, what="the refusal") != "finished:completed"
        assert not marker.exists(), "the modified app's code ran on the node"
        refusals = [ln for ln in fed.log("sn0").splitlines() if "app refused: FAB sha256" in ln]
        assert refusals and "Traceback" not in fed.log("sn0"), fed.log("sn0")

        good = submit(fed, ROOT, tmp_path / "out-good", rounds=1, clients=1)
        status = fed.wait_finished("loop", good, 400, progress=fed.progress(tmp_path / "out-good"))
        assert status == "finished:completed", fed.log("link")
        assert rounds_done(tmp_path / "out-good") == 1
        assert not marker.exists()
    finally:
        fed.close()


@pytest.mark.lane
def test_a_locked_superlink_database_and_a_killed_launcher_do_not_stop_the_federation(tmp_path):
    """Issue 62: under load the SuperLink's SQLite database was locked and it answered 500; the
    honest nodes went silent, the ServerApp launcher (flower-superexec) died and every later
    run stayed pending. Here the database is held locked for 30 s mid-run: the run completes,
    its last rounds with both nodes; then the launcher is killed and the next run still runs
    (deploy/superlink.sh keeps it under deploy/supervise.py)."""
    import sqlite3
    import time

    port, control = free_ports(2)
    db = tmp_path / "state.db"
    fed = Federation(tmp_path)
    try:
        fed.start(
            "link",
            [str(ROOT / "deploy/superlink.sh"), "--host", "127.0.0.1", "--port", str(port),
             "--control-port", str(control), "--database", str(db)],
        )  # fmt: skip
        wait_listening("127.0.0.1", port)
        wait_listening("127.0.0.1", control)
        for k in (0, 1):
            start_node(fed, port, k, 2)
        fed.connect("loop", f"127.0.0.1:{control}")

        out = tmp_path / "out"
        run = submit(fed, ROOT, out, rounds=5, clients=2)
        wait_for(lambda: rounds_done(out) >= 1, 300, what="round 1", progress=fed.progress(out))
        lock = sqlite3.connect(db, timeout=60, isolation_level=None)
        lock.execute("BEGIN EXCLUSIVE")  # every write of the SuperLink now fails: 500
        time.sleep(30)
        lock.execute("ROLLBACK")
        lock.close()
        status = fed.wait_finished("loop", run, 600, progress=fed.progress(out))
        said = fed.cli("log", str(run), "loop", "--show").stdout[-4000:]
        assert status == "finished:completed", said
        rounds = pd.read_csv(out / "rounds.csv")
        assert list(rounds["round"]) == [1, 2, 3, 4, 5]
        assert rounds["n_accepted"].iloc[-1] == 2, rounds  # every honest node, at the end

        def parent(pid: str) -> str:
            return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]

        link = str(fed.procs["link"].pid)  # superlink.sh -> supervise.py -> flower-superexec
        every = subprocess.run(["pgrep", "-f", "flower-superexec"], capture_output=True, text=True)
        launcher = [p for p in every.stdout.split() if parent(parent(p)) == link]
        assert launcher, "no flower-superexec under this superlink.sh"
        subprocess.run(["kill", "-9", *launcher], check=True)
        out2 = tmp_path / "out2"
        run2 = submit(fed, ROOT, out2, rounds=1, clients=2)
        status = fed.wait_finished("loop", run2, 400, what="run 2", progress=fed.progress(out2))
        assert status == "finished:completed", fed.log("link")
    finally:
        fed.close()


def start_node(fed: Federation, port: int, partition: int, partitions: int) -> None:
    """deploy/supernode.sh for one silo, with its defaults (the app gate included)."""
    fed.start(
        f"sn{partition}",
        [str(ROOT / "deploy/supernode.sh"), "--superlink", f"127.0.0.1:{port}",
         "--partition-id", str(partition), "--num-partitions", str(partitions),
         "--port", str(free_port())],
    )  # fmt: skip


def submit(fed: Federation, app, out, rounds: int, clients: int) -> int:
    """`flwr run APP` on the loopback connection; the run's id."""
    started = fed.cli(
        "run", str(app), "loop", "--format", "json", "--run-config",
        f'num-server-rounds={rounds} num-clients={clients} out-dir="{out}" {SMALL}',
    )  # fmt: skip
    return json.loads(started.stdout)["run-id"]

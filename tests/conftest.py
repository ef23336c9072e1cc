"""Shared fixtures. Real data lives in ../shared/data beside the project (CI has it too)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
# the policy of a researcher who operates every node (deploy/policies/research.toml): for
# tests of what the papers compare beyond their own protections (fed-full, CDL reference, ...)
RESEARCH = {"policy": str(ROOT / "deploy" / "policies" / "research.toml")}
UDACITY = SHARED_DATA / "driving" / "udacity_simulator_wyckliffe"
PYTHON = sys.executable

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from launch.in_process import InProcessGrid  # noqa: E402  (the tests' grid, launch/in_process.py)

# Nodes with no policy keep their state and audit logs under $XDG_STATE_HOME/fedembodied
# (clients/policy.py): the tests' nodes write in a folder of this session (of each test, by the
# fixture below), never in $HOME.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="fedembodied-tests-state-")
os.environ["FEDEMBODIED_CACHE"] = tempfile.mkdtemp(prefix="fedembodied-tests-cache-")
os.environ.pop("FEDEMBODIED_POLICY", None)  # no policy of the machine's leaks into a test
# policy files the tests write must be writable by their owner only (clients/policy.py
# refuses others, as ssh does), whatever umask the machine running the suite has
os.umask(0o022)


# Tests that hold the machine's network run one after another within their group, in one
# xdist worker: the namespace tests (fixed namespace names) in one, the loopback deployments,
# the local SuperLink on Flower's default ports and the Ray cluster in the other. They mostly
# wait on sockets and are the longest, so they go first and the CPU-bound rest fills in.
SERIAL_FILES = {
    "test_security_netns.py": "netns",
    "test_deployment.py": "loopback",
    "test_flwr_run.py": "loopback",
    "test_ray_cluster.py": "loopback",
    "test_parity.py": "loopback",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        group = SERIAL_FILES.get(item.path.name)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: item.path.name not in SERIAL_FILES)  # stable: groups first


@pytest.fixture(autouse=True)
def _node_state_of_this_test(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "node-state"))


# Flower refuses to build a Message outside a run (flwr 1.41 checks a task identity); unit
# tests of handlers and strategies build messages directly, so give them a task identity.
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = 1


@pytest.fixture
def udacity_dir() -> Path:
    if not (UDACITY / "driving_log.csv").is_file():
        pytest.skip(f"real data not found at {UDACITY}")
    return UDACITY


def run_tokens_alive(token: str) -> list[int]:
    """Pids of processes started by a simulation.py run with this token."""
    from launch.superlink import processes_with_token

    return processes_with_token(token)


@pytest.fixture(autouse=True)
def _no_thread_outlives_its_test():
    yield
    while InProcessGrid.open:
        InProcessGrid.open.pop().close()


def assert_logged_as_sent(grid: InProcessGrid) -> int:
    """Every reply the grid got from each node is the tail of that node's own audit log
    (clients/audit.py): the same arrays (names, shapes, dtypes, bytes) and payload digest for
    what was sent, a refusal or failure for an error reply; and each log's chain holds.
    Returns the number of replies checked."""
    from clients import audit, policy

    checked = 0
    for node, ctx in grid.contexts.items():
        mine = [r for r in grid.replies if r.metadata.src_node_id == node]
        pid = int(ctx.node_config["partition-id"])
        path = policy.of_node(ctx.node_config).state_root() / "audit" / f"partition-{pid}.jsonl"
        log = audit.read(path) if mine else []
        assert len(log) >= len(mine), f"{path}: {len(log)} records for {len(mine)} replies"
        for rep, rec in zip(mine, log[len(log) - len(mine) :]):
            if rep.has_error():
                assert rec["status"] in ("refused", "failed"), rec
                continue
            arrays, digest, _ = audit.describe(rep.content)
            assert rec["status"] == "sent" and rec["arrays"] == arrays, (rec, arrays)
            assert rec["payload_sha256"] == digest and rec["bytes"] == sum(
                r.count_bytes() for r in rep.content.array_records.values()
            )
            checked += 1
    return checked

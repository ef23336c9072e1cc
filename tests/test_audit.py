"""Each party's audit log (clients/audit.py): what a run's nodes sent is in their own logs,
the logs verify offline, a changed, removed or reordered byte is caught, and `summary` counts
what the server's clients.csv counts."""

import json
import subprocess

import pandas as pd
import pytest

from clients.audit import BrokenLog, read
from clients.audit import main as audit_main
from config import parse
from config.schema import merged
from tests.conftest import InProcessGrid, assert_logged_as_sent
from tests.deployment import BIN
from tests.test_faults import DRIVING


def _run(tmp_path, method, extra=None, n=3):
    from clients.app import app
    from config.methods import server_module
    from tests.test_fedrl import SMALL as FEDRL

    base = FEDRL if method == "fedrl" else {**DRIVING, "method": method}
    cfg = merged({**base, **(extra or {}), "num-clients": n, "out-dir": str(tmp_path / "out")})
    policy = tmp_path / "policy.toml"
    policy.write_text(f'state-dir = "{tmp_path / "node"}"\n')
    grid = InProcessGrid(app, cfg, n, node_config_extra={"policy": str(policy)})
    server_module(method).run(grid, parse(cfg), method)
    return grid, tmp_path / "node" / "audit"


@pytest.mark.parametrize("method, n", [("fedavg", 3), ("gossip", 3), ("fedrl", 2)])
def test_a_runs_logs_verify_and_count_the_bytes_the_server_counted(tmp_path, method, n):
    grid, logs = _run(tmp_path, method, n=n)
    assert assert_logged_as_sent(grid) == len(grid.replies)
    clients = pd.read_csv(tmp_path / "out" / "clients.csv")
    clients = clients[clients["round"] > 0]
    for p in range(n):
        path = logs / f"partition-{p}.jsonl"
        assert audit_main(["verify", str(path)]) == 0
        recs = pd.DataFrame(read(path))
        assert (recs.run == 1).all() and set(recs.kind) >= {"query", "train"}
        mine = clients[
            clients.partition.astype(str)
            == (["alpha", "beta"][p] if n == 2 and method == "fedrl" else str(p))
        ]
        per_round = recs[recs["round"] > 0].groupby("round").bytes.sum()
        assert mine.set_index("round").bytes_up.astype(int).to_dict() == per_round.to_dict()
    assert audit_main(["summary", str(logs / "partition-0.jsonl")]) == 0


def _tamper(path, how):
    lines = path.read_bytes().splitlines(keepends=True)
    if how == "byte":  # one byte of a number in the middle of the log
        i = len(lines) // 2
        j = lines[i].index(b'"bytes": ') + len(b'"bytes": ')
        lines[i] = (
            lines[i][:j] + (b"9" if lines[i][j : j + 1] != b"9" else b"8") + lines[i][j + 1 :]
        )
    elif how == "last-byte":  # the newest record: no later record chains to it
        lines[-1] = lines[-1].replace(b'"sent"', b'"sant"')
    elif how == "space":  # the same JSON, one byte more
        lines[1] = lines[1].replace(b'": ', b'":  ', 1)
    elif how == "removed":
        del lines[2]
    elif how == "reordered":
        lines[1], lines[2] = lines[2], lines[1]
    path.write_bytes(b"".join(lines))


@pytest.mark.parametrize("how", ["byte", "last-byte", "space", "removed", "reordered"])
def test_verify_names_the_first_broken_record(tmp_path, how, capsys):
    _, logs = _run(tmp_path, "fedavg", n=2)
    path = logs / "partition-0.jsonl"
    before = len(read(path))
    assert before >= 4
    _tamper(path, how)
    with pytest.raises(BrokenLog, match=r"record \d+"):
        read(path)
    assert audit_main(["verify", str(path)]) == 1
    assert "BROKEN" in capsys.readouterr().err


def test_the_console_script_is_installed_and_exits_by_the_chain(tmp_path):
    """`fedembodied-audit` (pyproject [project.scripts]), as an operator runs it."""
    _, logs = _run(tmp_path, "fedavg", {"num-server-rounds": 1}, n=2)
    path = logs / "partition-1.jsonl"
    script = BIN / "fedembodied-audit"
    cmd = [str(script)] if script.exists() else [str(BIN / "python"), "-m", "clients.audit"]
    ok = subprocess.run([*cmd, "verify", str(path)], capture_output=True, text=True)
    assert ok.returncode == 0 and "OK" in ok.stdout, ok.stderr
    summary = subprocess.run([*cmd, "summary", str(path)], capture_output=True, text=True)
    assert summary.returncode == 0 and "head hash" in summary.stdout
    # the method and time of each row; no NaN noise columns for a method that adds none
    assert "fedavg" in summary.stdout and "nan" not in summary.stdout.lower()
    assert "partition 1: no noised release recorded" in summary.stdout
    rec = json.loads(path.read_text().splitlines()[0])
    assert rec["seq"] == 0 and rec["prev"] == "0" * 64
    _tamper(path, "byte")
    bad = subprocess.run([*cmd, "verify", str(path)], capture_output=True, text=True)
    assert bad.returncode == 1 and "record" in bad.stderr
    missing = subprocess.run([*cmd, "verify", str(tmp_path / "none.jsonl")], capture_output=True)
    assert missing.returncode == 2


def test_a_torn_last_line_is_moved_aside_and_the_chain_goes_on(tmp_path, capsys):
    """A crash mid-append leaves half a line; the node's next append used to fail on it with
    a JSONDecodeError, every message after. Now the torn bytes go to a named file, the chain
    continues from the last whole record and verifies; a corrupt *whole* last line is refused
    with one line naming the log."""
    from clients.audit import append

    log = tmp_path / "audit" / "partition-0.jsonl"
    append(log, {"round": 1, "status": "sent"})
    append(log, {"round": 2, "status": "sent"})
    with open(log, "ab") as f:
        f.write(b'{"round": 3, "stat')  # the crash
    append(log, {"round": 3, "status": "sent"})
    records = read(log)
    assert [r["round"] for r in records] == [1, 2, 3] and records[-1]["seq"] == 2
    (aside,) = tmp_path.glob("audit/partition-0.jsonl.torn-*")
    assert aside.read_bytes() == b'{"round": 3, "stat'
    assert "torn" in capsys.readouterr().err
    with open(log, "ab") as f:
        f.write(b"not json\n")
    with pytest.raises(BrokenLog, match="partition-0.jsonl: its last record is not a JSON"):
        append(log, {"round": 4})

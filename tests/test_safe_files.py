"""No write of a node or the server follows a symbolic link (issue 62): links planted at the
state store's temporary files, the audit log, the state folder's lock and the server's run lock
leave the files they point to untouched."""

import os

import pytest
from flwr.app import ConfigRecord, Context, RecordDict

from config import parse
from config.schema import ConfigError, merged


def _context(state_dir) -> tuple[Context, object]:
    policy = state_dir.parent / "policy.toml"
    policy.write_text(f'state-dir = "{state_dir}"\n')
    ctx = Context(
        run_id=7,
        node_id=1,
        node_config={"partition-id": 0, "num-partitions": 1, "policy": str(policy)},
        state=RecordDict(),
        run_config={},
    )
    return ctx, parse(merged({"out-dir": str(state_dir.parent / "out")}))


def test_the_state_stores_writes_never_follow_a_planted_link(tmp_path):
    from clients import state_store

    ctx, c = _context(tmp_path / "state")
    where = state_store.folder(ctx, c)
    where.mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    for name in ("owner.json.tmp", "newest.pb.tmp"):
        os.symlink(outside, where / name)
    state_store.claim(ctx, c)
    ctx.state["x"] = ConfigRecord({"a": 1})
    state_store.save(ctx, c, 1)
    assert outside.read_text() == "precious\n"
    assert (where / "newest.pb").is_file() and not (where / "newest.pb").is_symlink()
    assert state_store._owner(where / "owner.json")["run"] == 7
    # /x/out and /x/out/ are one run's folder
    trailing = parse(merged({"out-dir": str(tmp_path / "out") + "/"}))
    assert state_store.folder(ctx, trailing) == where


@pytest.mark.parametrize("what", ["audit", "state-lock", "run-lock"])
def test_a_link_where_a_log_or_a_lock_goes_is_refused_and_its_target_untouched(tmp_path, what):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    if what == "audit":
        from clients.audit import append

        log = tmp_path / "audit" / "partition-0.jsonl"
        log.parent.mkdir()
        os.symlink(outside, log)
        with pytest.raises(OSError):
            append(log, {"step": "x"})
    elif what == "state-lock":
        from clients import state_store

        ctx, c = _context(tmp_path / "state")
        where = state_store.folder(ctx, c)
        where.mkdir(parents=True)
        os.symlink(outside, where / ".lock")
        with pytest.raises(OSError):
            state_store.claim(ctx, c)
    else:
        from server.run_lock import LOCK, holding

        out = tmp_path / "out"
        out.mkdir()
        os.symlink(outside, out / LOCK)
        with pytest.raises(ConfigError, match="symbolic link there is refused"):
            with holding(out):
                pass
    assert outside.read_text() == "precious\n"


@pytest.mark.parametrize("how", ["0777", "0770", "someone else's link"])
def test_a_folder_someone_else_can_change_is_refused_for_policy_state_and_out_dir(tmp_path, how):
    """issue 62: a 0777 state-dir, and a policy file in a 0777 or symlinked folder, were
    accepted. Each folder above a policy file, a state-dir or an out-dir must be its user's or
    root's, not writable by group or others (unless sticky, as /tmp), and not a link someone
    else owns; each is refused naming the folder."""
    from clients import policy
    from server.run_lock import holding

    shared = tmp_path / "shared"
    shared.mkdir()
    if how == "someone else's link":
        real = tmp_path / "real"
        real.mkdir()
        shared.rmdir()
        os.symlink(real, shared)
        os.lchown(shared, 4321, 4321)  # a link another user owns (the tests run as root too)
        why = "symbolic link owned by uid 4321"
    else:
        os.chmod(shared, int(how, 8))
        why = "is writable by"
    pol = shared / "policy.toml"
    pol.write_text('state-dir = "/nonexistent-but-safe"\n')
    with pytest.raises(policy.PolicyError, match=f"policy file's folder .*{why}"):
        policy.load(pol)
    with pytest.raises(policy.PolicyError, match=f"state-dir {shared}/state: .*{why}"):
        policy.Policy(state_dir=str(shared / "state")).state_root()
    with pytest.raises(ConfigError, match=f"'out-dir' {shared}/out: .*{why}"):
        with holding(shared / "out"):
            pass
    os.chmod(tmp_path, 0o700)  # a folder of its own (and /tmp, sticky) is fine
    safe = tmp_path / "own"
    assert policy.Policy(state_dir=str(safe / "state")).state_root() == safe / "state"

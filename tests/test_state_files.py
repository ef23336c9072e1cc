"""A node's large arrays on its own disk (clients/state_store.put_arrays, issue 63): what an
adversarial review of the first version broke, kept broken-proof."""

import copy

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, RecordDict

from clients import state_store
from config import parse
from config.schema import merged


def _context(tmp_path, out: str, run_id: int = 7, resume: bool = False, k: int = 0) -> Context:
    cfg = merged({"method": "fedrl", "out-dir": out, "resume": resume, "resume-round": k})
    return Context(
        run_id=run_id,
        node_id=1,
        node_config={"partition-id": 0, "num-partitions": 2},
        state=RecordDict(),
        run_config=cfg,
    )


@pytest.fixture(autouse=True)
def _state_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def _arrays(v: float) -> dict:
    return {"replay.x": np.full(8, v, np.float32), "noise.key": np.arange(4, dtype=np.uint8)}


def test_attempts_killed_after_writing_never_push_out_the_file_the_context_names(tmp_path):
    ctx = _context(tmp_path, str(tmp_path / "out"))
    c = parse(ctx.run_config)
    state_store.put_arrays(ctx, c, "p", _arrays(1.0))
    for _ in range(state_store.KEEP_LIVE + 2):  # each wrote its file, its context was lost
        state_store.put_arrays(copy.deepcopy(ctx), c, "p", _arrays(2.0))
    assert state_store.get_arrays(ctx, c, "p")["replay.x"][0] == 1.0
    path = next(state_store.live_folder(ctx, c).glob("p-*.npz"))
    assert path.stat().st_mode & 0o077 == 0


def test_another_runs_files_are_never_touched(tmp_path):
    a = _context(tmp_path, str(tmp_path / "a"), run_id=1)
    b = _context(tmp_path, str(tmp_path / "b"), run_id=2)
    ca, cb = parse(a.run_config), parse(b.run_config)
    state_store.put_arrays(a, ca, "p", _arrays(1.0))
    for _ in range(state_store.KEEP_LIVE + 2):
        state_store.put_arrays(b, cb, "p", _arrays(2.0))
    assert state_store.get_arrays(a, ca, "p")["replay.x"][0] == 1.0
    assert state_store.live_folder(a, ca) != state_store.live_folder(b, cb)


def test_a_torn_newest_snapshot_resumes_from_the_one_before_and_nan_is_refused(tmp_path):
    out = str(tmp_path / "out")
    ctx = _context(tmp_path, out)
    c = parse(ctx.run_config)
    state_store.put_arrays(ctx, c, "p", _arrays(1.0))
    state_store.save(ctx, c, 1)
    state_store.put_arrays(ctx, c, "p", _arrays(2.0))
    state_store.save(ctx, c, 2)
    where = state_store.folder(ctx, c)
    newest = where / f"snap-p-{state_store.arrays_token(ctx, 'p')}.npz"
    newest.unlink()  # a copy lost between the two writes of a killed save
    resumed = _context(tmp_path, out, run_id=8, resume=True, k=2)
    rc = parse(resumed.run_config)
    assert state_store.restore(resumed, rc) == 1
    assert state_store.get_arrays(resumed, rc, "p")["replay.x"][0] == 1.0
    state_store.put_arrays(resumed, rc, "p", _arrays(np.nan))
    with pytest.raises(state_store.StateUnreadable, match="NaN"):
        state_store.get_arrays(resumed, rc, "p")
    assert isinstance(resumed.state[state_store.TAG], ConfigRecord)

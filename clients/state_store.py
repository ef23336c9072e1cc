"""A node's own state on its own disk, so that a resumed run continues with it.

Why: Flower keeps `context.state` (a CDL silo's sub-network, a kept optimizer, a FedRL party's
networks, replay buffer and environments, a FedVLN house's optimizer) in the SuperNode's
memory (in simulation, the launcher's), and a killed run loses it. After every message the
ClientApp writes its node's context state here; a run resumed after round k (run config
`resume = true`, `resume-round = k`, set by `simulation.py --resume`) reads it back before the
node's first message.

Where: under the `state-dir` of the node's own policy (clients/policy.py; the simulation
launcher's is `<out>/client-state`), in `runs/<digest of the run's out-dir>/partition-<k>`: the
run names which of the node's folders it continues (a resumed run has the same out-dir), never
where the node writes (issue 28: a submitter's out-dir chose every node's folder). Nothing is
kept for a run with no out-dir. One folder per node (partition), two snapshots each: the newest
and the one before it, tagged with their server round. A node may have begun round k+1 before the kill, so the resumed node loads the newest
snapshot of a round <= k. Format: Flower's own RecordDict protobuf (no pickle, no code).

Whose (issue 42): two runs given one out-dir would share every node's folder, and the last
writer would win silently. The server's out-dir lock (server/run_lock.py) stops that on one
server host; the node holds its own line too, because in deployment nothing keeps a process
alive between messages to hold a kernel lock. Each folder records its owner run and the time
of that run's last message (`owner.json`, under an flock while it is read and written). A fresh
run is refused while another run has used the folder within `LEASE_S`, naming that run; a run
that finds its folder taken over by another mid-run is refused too (never two writers). A
resumed run (`resume = true`) takes the folder over at once: resuming says the old run is dead.

Large arrays (issue 63): Flower carries `context.state` between the SuperNode and each message's
ClientApp process, both ways, on every message; a FedRL party's replay buffer and networks are
13-15 MB by round 200 of Table 1. `put_arrays` keeps such arrays in a file on the node's own
disk instead (`<state-dir>/live/partition-<k>/<name>-<run>-<token>.npz`, mode 0600: it holds
the party's secret noise key) and only their random token in `context.state`; `get_arrays`
reads the file the token names. A snapshot (`save`) copies that file beside the snapshot
(`snap-<name>-<token>.npz`, written before the `.pb` that names it), and `restore` copies it
back, so a resumed run finds the arrays of the round it resumes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import time
import uuid
from pathlib import Path

import numpy as np
from flwr.app import ConfigRecord, Context, RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict  # pylint: disable=E0611

from clients import policy
from config import Config
from contracts.safe_files import open_append, write_atomic

TAG = "state-store"  # ConfigRecord in context.state: the snapshot's round
CLAIM = "state-claim"  # ConfigRecord in context.state: this run has claimed the node's folder
OWNER = "owner.json"
LEASE_S = 600.0  # a run silent this long on a node no longer holds its folder against a fresh run
DISK = "on-disk"  # ConfigRecord in context.state: name -> token of arrays kept in a file
KEEP_LIVE = 3  # a run's newest files of one name kept (a relaunched message may read the last)


def folder(context: Context, c: Config) -> Path | None:
    if not c.run.out_dir:
        return None
    # normalised: /x/out and /x/out/ (or /x/./out) are one run's folder, not two
    run = hashlib.sha256(os.path.normpath(c.run.out_dir).encode()).hexdigest()[:16]
    root = policy.of_node(context.node_config).state_root()
    return root / "runs" / run / f"partition-{int(context.node_config.get('partition-id', 0))}"


class StateUnreadable(ValueError):
    """A node's saved state that does not parse; the message names the file."""


class StateInUse(RuntimeError):
    """A node's state folder that another run holds; the message names the run and the folder."""


def claim(context: Context, c: Config) -> None:
    """Make this run the owner of the node's folder (every message; a few ms), or refuse.

    Refused: a fresh run while another run's last message here is < LEASE_S old, and a run
    whose folder another run has taken over since this run claimed it."""
    where = folder(context, c)
    if where is None:
        return
    run, now = int(context.run_id), time.time()
    where.mkdir(parents=True, exist_ok=True)
    with open_append(where / ".lock", binary=False) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # nodes of one machine never interleave a claim
        owner = _owner(where / OWNER)
        if owner is not None and owner["run"] != run:
            age = max(0.0, now - owner["at"])
            if CLAIM in context.state:
                raise StateInUse(
                    f"this node's state folder {where} (out-dir {c.run.out_dir!r}) was taken "
                    f"over by run {owner['run']} {age:.0f} s ago; this run {run} stops here "
                    "rather than write beside it"
                )
            if not c.run.resume and age < LEASE_S:
                raise StateInUse(
                    f"this node's state folder {where} (out-dir {c.run.out_dir!r}) is in use "
                    f"by run {owner['run']} (its last message here {age:.0f} s ago): give this "
                    "run another out-dir, wait for that run to end, or resume it "
                    f"(resume = true; a folder silent for {LEASE_S:.0f} s is free)"
                )
        write_atomic(
            where / OWNER, json.dumps({"run": run, "at": now, "out-dir": c.run.out_dir}) + "\n"
        )
    context.state[CLAIM] = ConfigRecord({"run": run})


def _owner(path: Path) -> dict | None:
    """The folder's owner record; an unreadable one (torn, junk) counts as no owner: it guards
    against a live second writer, and a live writer rewrites it at every message."""
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        raw = json.loads(path.read_text())
        return {"run": int(raw["run"]), "at": float(raw["at"])}
    return None


def _read(path: Path) -> tuple[int, RecordDict] | None:
    """A snapshot, or None if there is none; one that does not parse (truncated, junk, not
    ours) is refused naming the file, never half-loaded."""
    if not os.path.lexists(path):
        return None
    if path.is_symlink() or not path.is_file():  # /dev/zero, a fifo, a link elsewhere
        raise StateUnreadable(
            f"this node's saved state {path} is not a regular file; remove it to start this "
            "node afresh"
        )
    try:
        proto = ProtoRecordDict()
        proto.ParseFromString(path.read_bytes())
        state = recorddict_from_proto(proto)
        snap = int(state[TAG]["round"]), state
    except Exception as e:  # protobuf's DecodeError, a missing tag, a wrong type
        raise StateUnreadable(
            f"this node's saved state {path} does not parse ({type(e).__name__}: {e}); "
            "restore it, or remove it to start this node afresh"
        ) from None
    for rname, record in state.array_records.items():
        for name, arr in record.items():
            a = arr.numpy()
            if a.dtype.kind in "fc" and not np.isfinite(a).all():
                raise StateUnreadable(
                    f"this node's saved state {path}: array {rname}/{name} holds NaN or "
                    "infinite values; remove it to start this node afresh"
                )
    return snap


@contextlib.contextmanager
def _locked(where: Path):
    """The node folder's lock: two processes of one node (a message Flower started twice)
    never interleave a snapshot's files, its .pb and the clean-up."""
    where.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open_append(where / ".lock", binary=False) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def save(context: Context, c: Config, server_round: int) -> None:
    """Write the node's state as of `server_round` (atomically; the previous round's snapshot
    is kept until a newer round's replaces it). Files the state names (put_arrays) are copied
    first, so a .pb never names a copy that is not there."""
    where = folder(context, c)
    if where is None or server_round <= 0:
        return
    with _locked(where):
        _snapshot_files(context, c, where)
        newest, before = where / "newest.pb", where / "before.pb"
        current = _read(newest)
        if current is not None and current[0] != server_round:
            os.replace(newest, before)  # a new round: the last one becomes "before"
        context.state[TAG] = ConfigRecord({"round": int(server_round)})
        write_atomic(newest, recorddict_to_proto(context.state).SerializeToString())
        _drop_unnamed_snapshots(where)


def live_folder(context: Context, c: Config) -> Path:
    """Where a node keeps its large arrays between messages (put_arrays): the run's own node
    folder when it has an out-dir (claimed by this run, so no other run writes there), else a
    folder of this run id."""
    where = folder(context, c)
    if where is not None:
        return where / "live"
    root = policy.of_node(context.node_config).state_root()
    partition = int(context.node_config.get("partition-id", 0))
    return root / "live" / f"run-{int(context.run_id)}" / f"partition-{partition}"


def _live_file(context: Context, c: Config, name: str, token: str) -> Path:
    return live_folder(context, c) / f"{name}-{int(context.run_id)}-{token}.npz"


def put_arrays(context: Context, c: Config, name: str, arrays: dict[str, np.ndarray]) -> str:
    """Keep `arrays` in a file on the node's disk and their token in context.state; returns
    the token (random: two versions never share one)."""
    before = arrays_token(context, name)
    token = uuid.uuid4().hex
    path = _live_file(context, c, name, token)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_atomic(path, buf.getbuffer())
    record = context.state[DISK] if DISK in context.state else ConfigRecord()
    record[name] = token
    context.state[DISK] = record
    _prune(path.parent, name, keep={token, before})
    return token


def arrays_token(context: Context, name: str) -> str:
    """The token of the arrays `name` this context holds ("" if none)."""
    return str(context.state[DISK].get(name, "")) if DISK in context.state else ""


def get_arrays(context: Context, c: Config, name: str) -> dict[str, np.ndarray] | None:
    """The arrays put_arrays kept for this context, None if it kept none; StateUnreadable
    naming the file if the file is gone, does not parse or holds NaN or infinite values."""
    token = arrays_token(context, name)
    if not token:
        return None
    path = _live_file(context, c, name, token)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)  # a link planted there is refused
        with os.fdopen(fd, "rb") as raw, np.load(raw, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except FileNotFoundError:
        raise StateUnreadable(
            f"this node's state file {path} is gone (was its state-dir cleaned during the "
            "run?); resume the run from its last snapshot"
        ) from None
    except Exception as e:  # a torn or foreign file, or a link
        raise StateUnreadable(
            f"this node's state file {path} does not parse ({type(e).__name__}: {e})"
        ) from None
    for k, a in arrays.items():
        if a.dtype.kind in "fc" and not np.isfinite(a).all():
            raise StateUnreadable(
                f"this node's state file {path}: {k} holds NaN or infinite values"
            )
    return arrays


def _prune(where: Path, name: str, keep: set[str]) -> None:
    """This folder's files of `name` but the newest KEEP_LIVE and those `keep` names (the one
    the context held before: a message that fails after writing leaves it the current one),
    and temporary files left by a killed write."""
    files = []
    for f in where.glob(f"{name}-*.npz"):
        with contextlib.suppress(OSError):
            files.append((f.stat().st_mtime, f))
    for _, f in sorted(files, reverse=True)[KEEP_LIVE:]:
        if not any(tok and f.name.endswith(f"-{tok}.npz") for tok in keep):
            with contextlib.suppress(OSError):
                f.unlink()
    for f in where.glob(f"{name}-*.npz.tmp"):
        with contextlib.suppress(OSError):
            if time.time() - f.stat().st_mtime > LEASE_S:
                f.unlink()


def _snapshot_files(context: Context, c: Config, where: Path) -> None:
    """Copy each live file context.state names beside the snapshot (before the .pb names it)."""
    if DISK not in context.state:
        return
    for name, token in context.state[DISK].items():
        snap = where / f"snap-{name}-{token}.npz"
        live = _live_file(context, c, name, str(token))
        if not snap.exists():  # 0600 from the start: the file holds the party's secret key
            try:
                write_atomic(snap, live.read_bytes())
            except FileNotFoundError:
                raise StateUnreadable(
                    f"this node's state file {live} is gone; the snapshot of this round is "
                    "not written (the previous one stands)"
                ) from None


def _drop_unnamed_snapshots(where: Path) -> None:
    """Snapshot files neither newest.pb nor before.pb names."""
    named = set()
    for pb in ("newest.pb", "before.pb"):
        with contextlib.suppress(StateUnreadable):
            snap = _read(where / pb)
            if snap is not None and DISK in snap[1]:
                named |= {f"snap-{n}-{t}.npz" for n, t in snap[1][DISK].items()}
    for f in where.glob("snap-*.npz"):
        if f.name not in named:
            with contextlib.suppress(OSError):
                f.unlink()


def restore(context: Context, c: Config) -> int | None:
    """In a resumed run, fill an empty context state with the newest snapshot of a round <=
    resume-round whose files are all there (copied back to this run's live folder); returns
    its round (None: nothing to restore, the node starts fresh)."""
    if not c.run.resume or TAG in context.state:
        return None
    where = folder(context, c)
    if where is None:
        return None
    k = c.run.resume_round
    with _locked(where):
        missing = []
        for name in ("newest.pb", "before.pb"):
            snap = _read(where / name)
            if snap is None or snap[0] > k:
                continue
            files = {
                kind: where / f"snap-{kind}-{token}.npz"
                for kind, token in (snap[1][DISK].items() if DISK in snap[1] else ())
            }
            gone = [str(f) for f in files.values() if not f.is_file()]
            if gone:  # a torn snapshot: the one before it, if it is whole
                missing += gone
                continue
            for kind, copy in files.items():
                live = _live_file(context, c, kind, str(snap[1][DISK][kind]))
                live.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                write_atomic(live, copy.read_bytes())  # 0600: it holds the party's key
            for key, record in snap[1].items():
                context.state[key] = record
            return snap[0]
        if missing:
            raise StateUnreadable(
                f"this node's saved state in {where} names {', '.join(missing)}, which is "
                "gone; restore it, or remove the folder to start this node afresh"
            )
    context.state[TAG] = ConfigRecord({"round": 0})  # nothing of this run: start fresh, once
    return None

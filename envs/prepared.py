"""Data a node prepares once and keeps on its own disk, in a form that loads in milliseconds.

Why (issue 43): in Flower's deployment engine every message runs in a fresh ClientApp process,
so whatever a process memoises is gone at the next message. A FedRL party rebuilt the usable
maps of its split (a BFS per map: 1-8 s) and re-read the paper's map file (~1 s) for *every*
message. What is kept here is a pure function of its key (the generator's parameters, or the
SHA-256 of the file it was read from), so a stale copy cannot be served: another key is another
file. A copy that does not load (torn, truncated, not ours) is computed again and replaced.

The folder is `$FEDEMBODIED_CACHE`, else `~/.cache/fedembodied`: the node's own disk, never
sent anywhere. Set `FEDEMBODIED_CACHE=off` to compute everything each time.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

VERSION = 1  # bump when what a kind stores changes meaning
Arrays = dict[str, np.ndarray]


def cache_dir() -> Path | None:
    where = os.environ.get("FEDEMBODIED_CACHE", "")
    if where == "off":
        return None
    return Path(where) if where else Path.home() / ".cache" / "fedembodied"


def kept(kind: str, key: tuple, compute: Callable[[], Arrays]) -> Arrays:
    """`compute()`'s arrays, read from the node's disk when an earlier process stored them
    under (`kind`, `key`), else computed and stored (atomically: a reader never sees half)."""
    root = cache_dir()
    if root is None:
        return compute()
    digest = hashlib.sha256(repr((VERSION, kind, key)).encode()).hexdigest()[:40]
    path = root / kind / f"{digest}.npz"
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        pass  # absent, or not a whole copy: computed below
    arrays = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except OSError:  # a read-only or full disk: the node computes each time, as before
        pass
    return arrays


_DIGESTS: dict[tuple, str] = {}


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes (what it says, not its name or mtime), once per process."""
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with p.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]

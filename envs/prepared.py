"""Data a node prepares once and keeps on its own disk, in a form that loads in milliseconds.

Why (issue 43): in Flower's deployment engine every message runs in a fresh ClientApp process,
so whatever a process memoises is gone at the next message. A FedRL party rebuilt the usable
maps of its split (a BFS per map: 1-8 s) and re-read the paper's map file (~1 s) for *every*
message. What is kept here is a pure function of its key (the generator's parameters, or the
SHA-256 of the bytes it was parsed from: `read_file`), so a stale copy cannot be served:
another key is another file. A copy that does not load or unpack (torn, truncated, another
layout) is computed again and replaced.

The folder is `$FEDEMBODIED_CACHE`, else `~/.cache/fedembodied`: the node's own disk, never
sent anywhere. A copy decides what a party computes, so only a folder and file this user owns
and no one else can write are used (an adversary with another local account could otherwise
plant one: the keys are digests of public files). Set `FEDEMBODIED_CACHE=off` to compute
everything each time.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, TypeVar

import numpy as np

VERSION = 1  # bump when what a kind stores changes meaning
Arrays = dict[str, np.ndarray]
T = TypeVar("T")


def cache_dir() -> Path | None:
    where = os.environ.get("FEDEMBODIED_CACHE", "")
    if where == "off":
        return None
    return Path(where) if where else Path.home() / ".cache" / "fedembodied"


def _ours(path: Path) -> bool:
    """Only this user may have written it: owned by us, writable by no one else. A copy another
    local user could plant or swap would decide what a party computes."""
    st = path.stat()
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


_WARNED: set[Path] = set()


def _untrusted(folder: Path) -> None:
    if folder not in _WARNED:
        _WARNED.add(folder)
        print(f"envs/prepared: {folder} is not this user's alone (owner or group/other write): "
              "nothing is kept there, each process prepares its data again (set "
              "FEDEMBODIED_CACHE to a folder of your own)", file=sys.stderr)  # fmt: skip


def kept(kind: str, key: tuple, compute: Callable[[], Arrays],
         read: Callable[[Arrays], T] = lambda a: a) -> T:  # fmt: skip
    """`read(compute())`, with `compute()`'s arrays read from the node's disk when an earlier
    process stored them under (`kind`, `key`), else computed and stored (atomically: a reader
    never sees half). A stored copy that does not load or that `read` refuses (torn, not ours,
    of another layout) is computed again; so is one in a folder or file this user does not
    own alone, and nothing is stored there."""
    root = cache_dir()
    if root is None:
        return read(compute())
    digest = hashlib.sha256(repr((VERSION, kind, key)).encode()).hexdigest()[:40]
    folder = root / kind
    path = folder / f"{digest}.npz"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        trusted = _ours(root) and _ours(folder)
    except OSError:  # a read-only or full disk: the node computes each time, as before
        trusted = None
    if trusted is False:
        _untrusted(folder)
    if trusted:
        try:
            if _ours(path):
                with np.load(path, allow_pickle=False) as z:
                    return read({k: z[k] for k in z.files})
        except Exception:  # noqa: BLE001  absent, torn or not ours: computed below
            pass
    arrays = compute()
    got = read(arrays)
    if trusted:
        try:
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
            os.replace(tmp, path)
        except OSError:
            pass
    return got


class FileBytes(NamedTuple):
    """A file's bytes and their SHA-256, read once: what is parsed is what is hashed, so a
    file rewritten between the two cannot have one version's parse kept under the other's key."""

    path: Path
    data: bytes
    digest: str

    @property
    def stream(self) -> io.BytesIO:
        return io.BytesIO(self.data)


def read_file(path: str | Path) -> FileBytes:
    data = Path(path).read_bytes()
    return FileBytes(Path(path), data, hashlib.sha256(data).hexdigest())


def pack_strings(name: str, items: list[str]) -> Arrays:
    """Strings as arrays (UTF-8 bytes and lengths; any str, lone surrogates included): a numpy
    string array would drop trailing NULs."""
    raw = [x.encode("utf-8", "surrogatepass") for x in items]
    return {f"{name}_utf8": np.frombuffer(b"".join(raw), np.uint8),
            f"{name}_len": np.array([len(x) for x in raw], np.int64)}  # fmt: skip


def unpack_strings(a: Arrays, name: str) -> list[str]:
    buf, ends = a[f"{name}_utf8"].tobytes(), np.cumsum(a[f"{name}_len"]).tolist()
    return [buf[s:e].decode("utf-8", "surrogatepass") for s, e in zip([0, *ends[:-1]], ends)]

"""Files a node or the server writes, opened without following a symbolic link.

Why: a node's state dir and the server's out-dir may be writable by someone else, or a path in
them may be a link planted there; `open(path, "a+")` or `tmp.write_text(...)` then follows the
link and writes (or truncates) a file outside (issue 62: `owner.json.tmp`, `newest.tmp`, the
audit log and `.run.lock`, made symlinks, overwrote or emptied files elsewhere). Every write of
ours goes through these: O_NOFOLLOW refuses a link at the last component, a temporary file is
created afresh (O_EXCL, after removing whatever was there: removing a link removes the link),
and `os.replace` renames over the target without following it.
"""

from __future__ import annotations

import os
from pathlib import Path

FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC


def open_append(path: Path, binary: bool = True):
    """`path` opened for reading and appending (created 0600 if absent), never through a link:
    OSError (ELOOP) if it is one."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | FLAGS, 0o600)
    return os.fdopen(fd, "a+b" if binary else "a+")


def open_lock(path: Path):
    """`path` opened read-write for a lock and its holder's line (created 0600), never through
    a link; the caller truncates it once it holds the lock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | FLAGS, 0o600)
    return os.fdopen(fd, "r+")


def write_atomic(path: Path, data: bytes | str) -> None:
    """`data` into `path` through a fresh temporary file beside it, renamed over `path` (a
    reader sees the old or the new file, never half of one; neither name is followed)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        os.unlink(tmp)  # whatever is there, a link included: the link goes, not its target
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | FLAGS, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)


def unsafe_folder(path: Path) -> str | None:
    """Why `path` (a folder, or where one will be made) is not safe to keep a node's or the
    server's files in, or None. Walked from the nearest existing folder up to `/`, as ssh
    walks a key's path: every folder owned by this user or root, none writable by group or
    others unless sticky (like /tmp: others cannot rename what they do not own), and no
    symbolic link other than root's (whoever owns a link can re-point it). Otherwise someone
    else could swap the files underneath (issue 62: a 0777 state-dir, a policy file in a 0777
    or symlinked folder, were accepted)."""
    import stat

    p = Path(os.path.abspath(path))
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    uid = os.getuid()
    for folder in (p, *p.parents):
        st = os.lstat(folder)
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid != 0:
                return f"{folder} is a symbolic link owned by uid {st.st_uid}"
            continue
        if st.st_uid not in (uid, 0):
            return f"{folder} is owned by uid {st.st_uid}, not by this user (uid {uid}) or root"
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            who = (
                "group and others"
                if st.st_mode & 0o022 == 0o022
                else ("group" if st.st_mode & 0o020 else "others")
            )
            return (
                f"{folder} is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}); "
                f"chmod go-w {folder}"
            )
    return None

"""A node runs only the app its operator approved (issue 62): Flower's own `flwr-clientapp`,
started only for a FAB whose SHA-256 the operator pinned, checked before any of its code runs.

Why this and not Flower's `--trusted-entities`: Flower 1.41 verifies a FAB's signature only
when the SuperLink vouches for a licence (`fab.verifications["valid_license"]`), which the
open-source SuperLink never sets, so a node with trusted entities refuses every app, ours too
(flwr/supernode/start_client_internal.py:344-353). A FAB is a deterministic zip of the app's
files (flwr/cli/build.py write_to_zip: fixed dates, .gitignore applied), so its SHA-256 names
the exact code a run would execute; `flwr run APP` submits those same bytes.

How it is wired (deploy/supernode.sh): the SuperNode's SuperExec starts `flwr-clientapp` from
PATH for every message; deploy/gate/flwr-clientapp, first on the node's PATH, runs `clientapp`
below, which hashes the FAB it pulled from the node and refuses it, in one log line, unless
the hash is in FEDEMBODIED_APPROVED_FABS (set by the operator's script, never by a run). The
FAB is only unpacked and imported (flwr.cli.install.install_from_fab, then the app's loader)
after that check, so an unapproved app's code never runs on the node. Everything here is the
operator's installed copy; nothing comes from the submitted FAB.

    python deploy/app_gate.py approve [APP_DIR]    # the line an operator pins for APP_DIR
    python deploy/app_gate.py pins [--file F] [--app DIR]   # what supernode.sh exports
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import stat
import sys
from pathlib import Path

ENV = "FEDEMBODIED_APPROVED_FABS"
HEX = re.compile(r"^[0-9a-f]{64}$")


class AppRefused(RuntimeError):
    """The FAB a run sent is not one this node's operator approved."""


def fab_of(app: Path) -> bytes:
    """The FAB `flwr run APP` would submit: Flower's own build, byte for byte."""
    from flwr.cli.build import build_fab_from_disk

    if not (app / "pyproject.toml").is_file():
        raise SystemExit(f"app_gate: {app}: no pyproject.toml, not a Flower app")
    return build_fab_from_disk(app)


def describe(fab: bytes) -> str:
    """'<sha256>  <publisher>/<name> <version>', the line an operator pins."""
    import io
    import tomllib
    import zipfile

    with zipfile.ZipFile(io.BytesIO(fab)) as z:
        cfg = tomllib.loads(z.read("pyproject.toml").decode())
    who = cfg.get("tool", {}).get("flwr", {}).get("app", {}).get("publisher", "?")
    project = cfg.get("project", {})
    return (
        f"{hashlib.sha256(fab).hexdigest()}  {who}/{project.get('name')} {project.get('version')}"
    )


def read_pins(path: str) -> list[str]:
    """The hashes in an operator's approved-apps file (one `<sha256> [comment]` a line, `#`
    comments). Read like a policy file: a regular file, not a link, owned by this user or
    root, not writable by group or others (whoever can edit it chooses the code that runs)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise SystemExit(f"--approved-apps {path}: cannot be opened ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise SystemExit(f"--approved-apps {path}: not a regular file")
        if st.st_uid not in (os.getuid(), 0) or st.st_mode & 0o022:
            raise SystemExit(
                f"--approved-apps {path}: someone other than this node's user or root can "
                f"change it (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}); "
                f"chmod go-w {path}"
            )
        text = f.read(1 << 20).decode("utf-8", "replace")
    pins = []
    for n, line in enumerate(text.splitlines(), start=1):
        word = line.split("#", 1)[0].split()
        if not word:
            continue
        if not HEX.match(word[0].lower()):
            raise SystemExit(
                f"--approved-apps {path}:{n}: expected a FAB's SHA-256 (64 hex digits), got "
                f"{word[0][:80]!r}; make one with: python deploy/app_gate.py approve APP_DIR"
            )
        pins.append(word[0].lower())
    if not pins:
        raise SystemExit(f"--approved-apps {path}: no FAB hash in it; the node would run nothing")
    return pins


def approved() -> set[str]:
    """The hashes the node's script exported; none (a gate started without them) approves
    nothing: the gate fails closed."""
    return {h for h in os.environ.get(ENV, "").split() if HEX.match(h)}


def check(fab_content: bytes) -> None:
    """AppRefused unless this FAB is one the operator approved."""
    digest = hashlib.sha256(fab_content).hexdigest()
    if digest not in approved():
        raise AppRefused(
            f"app refused: FAB sha256 {digest} is not approved by this node's operator "
            "(deploy/supernode.sh --approved-apps; python deploy/app_gate.py approve APP_DIR)"
        )


def gated(install, say):
    """Flower's `install_from_fab`, run only for an approved FAB: the first thing a ClientApp
    process does with the FAB it pulled (flwr/supernode/runtime/run_clientapp.py), before
    anything of it is unpacked or imported. `say` logs the refusal's one line."""

    def checked_install(fab_file, *args, **kwargs):
        content = fab_file if isinstance(fab_file, bytes) else Path(fab_file).read_bytes()
        try:
            check(content)
        except AppRefused as e:
            say(str(e))
            raise  # Flower's handler answers the message with an error reply
        return install(fab_file, *args, **kwargs)

    return checked_install


def clientapp() -> None:
    """Flower's `flwr-clientapp`, with the FAB checked before Flower unpacks or imports it."""
    from logging import ERROR

    import flwr.supernode.runtime.run_clientapp as runtime
    from flwr.supernode.cli.flwr_clientapp import flwr_clientapp
    from quick_poll import quick_object_pulls  # deploy/, beside this file

    flwr_log = runtime.log  # Flower's logger, as the ClientApp process uses it

    def quiet_log(level, msg, *args, **kwargs):
        if isinstance(kwargs.get("exc_info"), AppRefused):
            return  # said in one line already; no traceback of the gate itself
        flwr_log(level, msg, *args, **kwargs)

    runtime.install_from_fab = gated(runtime.install_from_fab, lambda m: flwr_log(ERROR, m))
    runtime.log = quiet_log
    quick_object_pulls()  # the message's objects: asked again after 0.02 s, not 1 s
    flwr_clientapp()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["clientapp"]:
        sys.argv = ["flwr-clientapp", *argv[1:]]
        clientapp()
        return 0
    ap = argparse.ArgumentParser(prog="app_gate.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("approve", help="print the line to pin for an app folder")
    a.add_argument("app", nargs="?", default=".")
    p = sub.add_parser("pins", help="the approved hashes, space-separated (for supernode.sh)")
    p.add_argument("--file", default="", help="an approved-apps file")
    p.add_argument("--app", default="", help="also approve the FAB of this app folder")
    args = ap.parse_args(argv)
    if args.cmd == "approve":
        print(describe(fab_of(Path(args.app).resolve())))
        return 0
    pins = read_pins(args.file) if args.file else []
    if args.app:
        pins.append(hashlib.sha256(fab_of(Path(args.app).resolve())).hexdigest())
    if not pins:
        raise SystemExit("app_gate.py pins: give --file or --app")
    print(" ".join(dict.fromkeys(pins)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

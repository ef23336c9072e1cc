"""deploy/app_gate.py: a node runs only a FAB its operator pinned (issue 62), checked before
Flower unpacks or imports it; the pin file is read like a policy file; the gate fails closed.
The deployed end-to-end check (a modified app refused by a live node, the approved one run) is
the lane test in tests/test_deployment.py."""

import hashlib
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from deploy import app_gate
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def fab() -> bytes:
    return app_gate.fab_of(ROOT)


def unpack(fab: bytes, where: Path) -> Path:
    app = where / "fedembodied"
    with zipfile.ZipFile(io.BytesIO(fab)) as z:
        z.extractall(app)
    for meta in (".info/CONTENT",):  # Flower's manifest is rebuilt by the next build
        (app / meta).unlink(missing_ok=True)
    return app


def test_the_pinned_hash_is_the_fab_flower_submits_and_one_changed_byte_is_another(fab, tmp_path):
    app = unpack(fab, tmp_path)
    assert hashlib.sha256(app_gate.fab_of(app)).digest() == hashlib.sha256(fab).digest()
    line = app_gate.describe(fab)
    assert line.split()[0] == hashlib.sha256(fab).hexdigest() and "fedembodied" in line
    with open(app / "clients" / "app.py", "a") as f:
        f.write("\n# one more line\n")
    assert app_gate.fab_of(app) != fab


def test_an_unapproved_fab_never_reaches_flowers_install_and_the_gate_fails_closed(
    fab, monkeypatch
):
    installed, said = [], []
    install = app_gate.gated(lambda f, *a, **k: installed.append(f), said.append)
    monkeypatch.setenv(app_gate.ENV, hashlib.sha256(fab).hexdigest())
    install(fab, skip_prompt=True)
    assert installed == [fab]  # the approved FAB goes on to Flower's install
    for env in ("0" * 64, "", "not-a-hash"):
        monkeypatch.setenv(app_gate.ENV, env)
        with pytest.raises(app_gate.AppRefused):
            install(fab, skip_prompt=True)
    other = fab + b"\0"
    monkeypatch.setenv(app_gate.ENV, hashlib.sha256(fab).hexdigest())
    with pytest.raises(app_gate.AppRefused, match=hashlib.sha256(other).hexdigest()):
        install(other)
    assert installed == [fab] and len(said) == 4 and all("app refused" in s for s in said)


def test_an_approved_apps_file_is_read_only_when_only_its_operator_can_change_it(tmp_path):
    h = "ab" * 32
    good = tmp_path / "approved"
    good.write_text(f"# our release\n{h}  fedembodied 0.1.0\n\n{h.upper()}\n")
    good.chmod(0o600)
    assert app_gate.read_pins(str(good)) == [h, h]
    good.chmod(0o666)
    with pytest.raises(SystemExit, match="chmod go-w"):
        app_gate.read_pins(str(good))
    good.chmod(0o600)
    link = tmp_path / "link"
    link.symlink_to(good)
    with pytest.raises(SystemExit, match="cannot be opened"):
        app_gate.read_pins(str(link))
    bad = tmp_path / "bad"
    bad.write_text(f"{h}\nfedembodied-latest\n")
    bad.chmod(0o600)
    with pytest.raises(SystemExit, match=r"bad:2: expected a FAB's SHA-256"):
        app_gate.read_pins(str(bad))
    empty = tmp_path / "empty"
    empty.write_text("# nothing yet\n")
    empty.chmod(0o600)
    with pytest.raises(SystemExit, match="no FAB hash"):
        app_gate.read_pins(str(empty))


@pytest.mark.parametrize(
    "args, says",
    [
        (["--approved-apps", "/nonexistent/approved"], "--approved-apps /nonexistent/approved"),
        (["--any-app", "--approved-apps", "x"], "contradict"),
    ],
)
def test_supernode_sh_refuses_a_bad_approval_before_starting_anything(args, says):
    r = subprocess.run(
        [str(ROOT / "deploy/supernode.sh"), "--superlink", "127.0.0.1:1", "--partition-id", "0",
         "--num-partitions", "1", *args],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "VENV": str(Path(sys.executable).parent.parent)},
    )  # fmt: skip
    assert r.returncode == 2 and says in r.stderr, r.stderr

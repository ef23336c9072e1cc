"""The package as a wheel: every package of the project is in it, and a one-round federated
run works from it alone, in a fresh virtual environment, outside the project folder (a broken
wheel left out config/, contracts/ and training/; setup.sh's editable install hid it)."""

import subprocess
import sys
import sysconfig
import zipfile

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

# a one-round FedAvg on two silos, the ServerApp and ClientApp of the wheel talking through a
# grid that hands each message to the ClientApp (no Ray, no SuperLink: only the package)
ONE_ROUND = r"""
import sys, uuid
import clients.app, server.app
assert "/site-packages/" in clients.app.__file__ and "/site-packages/" in server.app.__file__
from flwr.supercore.task_identity import TaskIdentity
TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = 1
from flwr.app import Context, RecordDict
rc = {"method": "fedavg", "num-server-rounds": 1, "num-clients": 2, "out-dir": sys.argv[1],
      "driving.image-size": 24, "driving.train-per-silo": 16, "driving.test-per-silo": 8,
      "driving.batch-size": 8}
ctx = {5000 + p: Context(run_id=1, node_id=5000 + p, node_config={"partition-id": p,
       "num-partitions": 2}, state=RecordDict(), run_config=rc) for p in range(2)}
class Grid:
    def get_node_ids(self): return list(ctx)
    def send_and_receive(self, msgs, timeout=None):
        out = []
        for m in msgs:
            m.metadata.__dict__["_message_id"] = str(uuid.uuid4())
            out.append(clients.app.app(m, ctx[m.metadata.dst_node_id]))
        return out
server.app.main(Grid(), Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                run_config=rc))
print("ONE ROUND OK")
"""


EVERY_HELP = r"""
import contextlib, importlib.util, io, runpy, sys
modules = sys.argv[1:]
for module in modules:
    assert "/site-packages/" in importlib.util.find_spec(module).origin, module
    sys.argv = [module, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        assert e.code in (0, None), (module, e.code)
    assert "usage:" in out.getvalue(), (module, out.getvalue()[-300:])
print("HELP OK", len(modules))
"""


def test_the_wheel_holds_every_package_and_runs_a_round_in_a_fresh_venv(tmp_path):
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(wheels), str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = wheels.glob("fedembodied-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    packages = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file())
    packages.remove("tests")
    for pkg in packages:  # every package of the project, none left out
        assert f"{pkg}/__init__.py" in names, f"{pkg} is not in {wheel.name}"
    assert any(n.endswith("entry_points.txt") for n in names)  # fedembodied-audit
    # a fresh venv: the wheel installed into it; the dependencies (torch, flwr, ...) seen
    # through a .pth line to this venv's site-packages, whose own .pth files (the editable
    # install of the project) are not read from there
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    inst = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site),
         str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert inst.returncode == 0, inst.stderr[-2000:]
    run = subprocess.run(
        [str(venv / "bin" / "python"), "-c", ONE_ROUND, str(tmp_path / "out")],
        cwd=tmp_path,  # not the project: nothing imports from the checkout
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0 and "ONE ROUND OK" in run.stdout, run.stderr[-3000:]
    assert (tmp_path / "out" / "rounds.csv").is_file()
    # every table and study script answers --help from the installed package alone
    scripts = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for p in (ROOT / "experiments").rglob("*.py")
        if p.name != "__init__.py" and "__main__" in p.read_text()
    )
    helps = subprocess.run(
        [str(venv / "bin" / "python"), "-c", EVERY_HELP, *scripts],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert helps.returncode == 0 and f"HELP OK {len(scripts)}" in helps.stdout, (
        helps.stdout[-2000:] + helps.stderr[-3000:]
    )

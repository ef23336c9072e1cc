# Copied into the venv's site-packages by setup.sh. Every process started from this venv (flwr, and the local
# SuperLink `flwr run .` starts by itself) runs Flower without installing packages at run time
# (Flower 1.41's FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION: no per-run `uv sync`, no CUDA
# download, works offline) and finds this venv's commands (flower-superlink, flower-superexec)
# even when the venv is not activated.
import os
import sys

os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
_bin = os.path.dirname(sys.executable)
if _bin not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _bin + os.pathsep + os.environ.get("PATH", "")

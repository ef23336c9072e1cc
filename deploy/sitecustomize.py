# Copied into the venv's site-packages by setup.sh. Every process started from this venv (flwr, and the local
# SuperLink `flwr run .` starts by itself) runs Flower without installing packages at run time
# (Flower 1.41's FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION: no per-run `uv sync`, no CUDA
# download, works offline) and finds this venv's commands (flower-superlink, flower-superexec)
# even when the venv is not activated.
import os
import sys

os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
# Only when no PATH entry is this folder under another name: a node whose venv is reached
# through a link (checkout/.venv -> elsewhere) runs sys.executable's resolved folder, and putting
# that first would put the venv's own flwr-clientapp ahead of the operator's gate
# (deploy/supernode.sh puts deploy/gate first; found with a linked venv, where every app ran).
_bin = os.path.dirname(sys.executable)
_path = os.environ.get("PATH", "").split(os.pathsep)
if not any(os.path.realpath(p) == os.path.realpath(_bin) for p in _path if p):
    os.environ["PATH"] = _bin + os.pathsep + os.environ.get("PATH", "")

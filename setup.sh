#!/usr/bin/env bash
# Quickstart command 1: set everything up, then run the main job on the embedded default data.
#   bash setup.sh            (set-up + FedAvg on 10 non-IID driving silos, 5 rounds)
#   bash setup.sh --no-run   (set-up only)
# Needs Python >= 3.11 with pip and venv; nothing else. torch 2.13.0 (CPU) is installed before
# anything that depends on torch, so pip never pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "setup.sh: Python >= 3.11 required ($PY is $("$PY" --version 2>&1))" >&2; exit 2; }
step() { echo "setup.sh [$1/5] $2 ($(date +%H:%M:%S))"; }
step 1 "virtual environment in .venv"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
step 2 "pip itself"
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
step 3 "torch 2.13.0, CPU build (first, so nothing pulls a CUDA build)"
.venv/bin/python -m pip install -q torch==2.13.0 2>&1 | grep -v "^WARNING: Location" || true
step 4 "the project and its dependencies: Flower 1.41 with Ray, pandas, ... (a few minutes the first time)"
.venv/bin/python -m pip install -q -e ".[test]" 2>&1 | grep -v "^WARNING: Location" || true
# plain `flwr run .` from this venv: no per-run `uv sync` (offline-safe), venv commands on PATH
cp deploy/sitecustomize.py "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/"
# the shipped node policies: writable by their owner only, or every node refuses them
chmod go-w deploy/policies/*.toml
step 5 "the deployed federation's edge: HAProxy from Debian's packages (deploy/superlink.sh)"
if ! command -v haproxy >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    { apt-get install -y -q haproxy || { apt-get update -q && apt-get install -y -q haproxy; }; } \
      > .venv/apt-haproxy.log 2>&1 || echo "setup.sh: apt-get install haproxy failed (.venv/apt-haproxy.log)" >&2
  else
    echo "setup.sh: haproxy is not installed; deployments and their tests need it: sudo apt-get install haproxy" >&2
  fi
fi
.venv/bin/python -c "import torch, flwr; print(f'set-up done: torch {torch.__version__}, flwr {flwr.__version__}')"
[ "${1:-}" = "--no-run" ] && exit 0
echo "main job: FedAvg, 10 non-IID driving silos, 5 rounds (simulation engine)"
exec .venv/bin/python simulation.py fedavg --rounds 5 --num-clients 10

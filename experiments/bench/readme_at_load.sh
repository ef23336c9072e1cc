#!/usr/bin/env bash
# The README's job of each method on a busy machine (issue 65): BUSY processes spinning on the
# CPU (default 6; with a study running beside them that makes load ~8 on 2 cores), then the
# quickstart job, the CDL example in full, and FedRL's and FedVLN's examples for 2 rounds (what
# failed on a busy machine was their start-up). One line per job: exit status, seconds, load.
#   bash experiments/bench/readme_at_load.sh [OUT_DIR]        (BUSY=8 for 8 of its own)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-$(mktemp -d /tmp/readme-at-load.XXXX)}
mkdir -p "$out"
busy=()
for _ in $(seq "${BUSY:-6}"); do python3 -c "while True: pass" & busy+=($!); done
trap 'kill "${busy[@]}" 2>/dev/null' EXIT
run() {
  local name=$1; shift; local t0; t0=$(date +%s)
  timeout 1500 "$@" --out "$out/$name" > "$out/$name.log" 2>&1
  echo "$name exit $? in $(( $(date +%s) - t0 )) s, load $(cut -d' ' -f1 /proc/loadavg)"
}
run quickstart .venv/bin/python simulation.py fedavg --rounds 5 --num-clients 10 --no-plots
run cdl .venv/bin/python simulation.py cdl --topology gaia-ring --rounds 10 --seed 0 --no-plots
run fedrl .venv/bin/python simulation.py fedrl --rounds 2 --no-plots
run fedvln .venv/bin/python simulation.py fedvln --stage agent --rounds 2 --no-plots

#!/usr/bin/env bash
# Start one SuperNode (one silo / house / party) of a deployed federation. Foreground.
#   deploy/supernode.sh --superlink HOST:PORT --partition-id I --num-partitions N
#       [--data-dir DIR] [--role alpha|beta] [--house SCAN] [--port 9094]
#       [--tls CA_CERT --key PRIVATE_KEY] [--policy POLICY.toml] [--once]
#       [--approved-apps FILE | --any-app]
# The node's identity goes in its node config; the app reads partition-id / num-partitions, and
# data-dir (this silo's own data folder), role (FedRL) or house (FedVLN) when given. --port is this node's local
# Runtime API port and must differ between SuperNodes on one host. --policy is this node's
# privacy policy (clients/policy.py, deploy/policies/paper.toml): what it may send whatever a
# run asks, where it keeps its state and audit log; without it the papers' protections hold.
# The node runs only an app its operator approved (deploy/app_gate.py): by default the FAB of this
# very checkout, i.e. a run must submit the same code the node was installed with; --approved-apps
# FILE pins other FABs instead (lines from `python deploy/app_gate.py approve APP_DIR`), checked
# before any of the app's code runs. --any-app turns the gate off: the node then runs whatever
# code a run's submitter ships, as root if the node is root (docs/security.md).
# The node polls quickly while a run is active (deploy/quick_poll.py: Flower's SuperNode, its
# 3-s idle sleep 0.2 s for a minute after each message), and each message's ClientApp process is
# forked by a warm parent that imported Flower and torch once (deploy/warm_start.py).
# The node runs under deploy/supervise.py: restarted when it exits or gives up on the SuperLink
# (TLS errors, restarts, network cuts), stopped with all its children on SIGTERM; --once runs
# it bare (a systemd unit with Restart=always can take the supervisor's place).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-$here/.venv}
export PATH="$VENV/bin:$PATH" FLWR_TELEMETRY_ENABLED=0
superlink=""; pid=""; num=""; data=""; role=""; house=""; port=9094; ca=""; key=""; policy=""
once=""; apps=""; any_app=""
while [ $# -gt 0 ]; do
  case "$1" in
    --superlink) superlink=$2; shift 2;;
    --partition-id) pid=$2; shift 2;;
    --num-partitions) num=$2; shift 2;;
    --data-dir) data=$2; shift 2;;
    --role) role=$2; shift 2;;
    --house) house=$2; shift 2;;
    --port) port=$2; shift 2;;
    --tls) ca=$2; shift 2;;
    --key) key=$2; shift 2;;
    --policy) policy=$2; shift 2;;
    --once) once=1; shift;;
    --approved-apps) apps=$2; shift 2;;
    --any-app) any_app=1; shift;;
    *) echo "supernode.sh: unknown option $1" >&2; exit 2;;
  esac
done
[ -n "$superlink" ] || { echo "supernode.sh: --superlink HOST:PORT is required" >&2; exit 2; }
[[ "$pid" =~ ^[0-9]+$ ]] || { echo "supernode.sh: --partition-id must be an integer" >&2; exit 2; }
[[ "$num" =~ ^[0-9]+$ ]] || { echo "supernode.sh: --num-partitions must be an integer" >&2; exit 2; }
cfg="partition-id=$pid num-partitions=$num"
[ -z "$data" ] || cfg="$cfg data-dir=\"$(cd "$data" && pwd)\""
[ -z "$role" ] || cfg="$cfg role=\"$role\""
[ -z "$house" ] || cfg="$cfg house=\"$house\""
if [ -n "$policy" ]; then  # checked now: a bad policy stops the node, not each message
  [ -f "$policy" ] || { echo "supernode.sh: --policy $policy: no such file" >&2; exit 2; }
  policy="$(cd "$(dirname "$policy")" && pwd)/$(basename "$policy")"
  (cd "$here" && "$VENV/bin/python" -m clients.policy "$policy") || exit 2
  cfg="$cfg policy=\"$policy\""
fi
if [ -n "$any_app" ]; then
  [ -z "$apps" ] || { echo "supernode.sh: --any-app and --approved-apps contradict" >&2; exit 2; }
  echo "supernode.sh: --any-app: this node runs any code a run submits" >&2
else  # the gate: Flower's SuperExec starts deploy/gate/flwr-clientapp for every message
  if [ -n "$apps" ]; then
    pins=$("$VENV/bin/python" "$here/deploy/app_gate.py" pins --file "$apps") || exit 2
  else
    pins=$("$VENV/bin/python" "$here/deploy/app_gate.py" pins --app "$here") || exit 2
  fi
  src="this checkout"; [ -z "$apps" ] || src="$apps"
  echo "supernode.sh: runs only the app(s) with FAB sha256 $pins ($src)" >&2
  export FEDEMBODIED_APPROVED_FABS="$pins" PATH="$here/deploy/gate:$PATH"
  # each message's ClientApp process forked by a warm parent (deploy/warm_start.py; imports done
  # once; FEDEMBODIED_WARM_START=0: a cold process per message, as Flower starts it)
  export FEDEMBODIED_WARM_DIR="${FEDEMBODIED_WARM_DIR:-${XDG_RUNTIME_DIR:-/tmp}/fedembodied-warm-$(id -u)}"
fi
security=(--insecure)
if [ -n "$ca" ]; then
  [ -n "$key" ] || { echo "supernode.sh: --tls needs --key (the node's registered EC key)" >&2; exit 2; }
  security=(--root-certificates "$ca" --auth-supernode-private-key "$key")
fi
# Flower's SuperNode with its poll sleeps shortened while a run is active (deploy/quick_poll.py;
# FEDEMBODIED_QUICK_POLL=0: Flower's own 3-s idle poll); its SuperExec asks for tasks every 0.1 s
export FLWR_SUPEREXEC_TASK_POLL_INTERVAL=${FLWR_SUPEREXEC_TASK_POLL_INTERVAL:-0.1}
node=("$VENV/bin/python" "$here/deploy/quick_poll.py" "${security[@]}" --superlink "$superlink" --port "$port" --node-config "$cfg")
[ -z "$once" ] || exec "${node[@]}"
exec "$VENV/bin/python" "$here/deploy/supervise.py" -- "${node[@]}"

#!/usr/bin/env bash
# Start the SuperLink of a deployed federation (one host). Runs in the foreground.
#   deploy/superlink.sh [--tls CERT_DIR] [--host 0.0.0.0] [--port 9092] [--control-port PORT]
#                       [--database FILE]
# Flower's SuperLink listens on 127.0.0.1:CONTROL_PORT (default PORT+1): Control (flwr run,
# flwr ls, flwr supernode register), ServerAppIo and Fleet, for this host only. HOST:PORT is
# deploy/fleet_gateway.py, which serves SuperNodes the Fleet API and nothing else (Flower 1.41
# has no Control-API authentication outside its enterprise edition; README "Security").
# State (runs, registered node keys, messages) is kept in FILE (default
# $FLWR_HOME/superlink/state.db), so a restarted SuperLink keeps its runs and registrations.
# With --tls, CERT_DIR holds ca.crt, server.pem, server.key (deploy/make_certs.sh) and SuperNodes
# must be registered (`flwr supernode register KEY.pub <connection>`) before they can join.
# Environment: FLWR_HOME (state, default ~/.flwr), VENV (default: the repo's .venv).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-$here/.venv}
export PATH="$VENV/bin:$PATH" RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0 FLWR_TELEMETRY_ENABLED=0
home=${FLWR_HOME:-$HOME/.flwr}
host=0.0.0.0; port=9092; control=""; tls=""; db="$home/superlink/state.db"
while [ $# -gt 0 ]; do
  case "$1" in
    --tls) tls=$2; shift 2;;
    --host) host=$2; shift 2;;
    --port) port=$2; shift 2;;
    --control-port) control=$2; shift 2;;
    --database) db=$2; shift 2;;
    *) echo "superlink.sh: unknown option $1" >&2; exit 2;;
  esac
done
[[ "$port" =~ ^[0-9]+$ ]] || { echo "superlink.sh: --port must be a number" >&2; exit 2; }
control=${control:-$((port + 1))}
[[ "$control" =~ ^[0-9]+$ ]] && [ "$control" != "$port" ] \
  || { echo "superlink.sh: --control-port must be a number other than --port" >&2; exit 2; }
mkdir -p "$(dirname "$db")"
security=(--insecure); gateway_tls=()
if [ -n "$tls" ]; then
  for f in ca.crt server.pem server.key; do
    [ -f "$tls/$f" ] || { echo "superlink.sh: $tls/$f not found (run deploy/make_certs.sh)" >&2; exit 2; }
  done
  security=(--ssl-ca-certfile "$tls/ca.crt" --ssl-certfile "$tls/server.pem"
            --ssl-keyfile "$tls/server.key" --enable-supernode-auth)
  gateway_tls=(--tls "$tls")
fi
flower-superlink "${security[@]}" --disable-runtime-dependency-installation \
  --database "$db" --host 127.0.0.1 --port "$control" &
link=$!
trap 'kill $link 2>/dev/null; wait $link 2>/dev/null' EXIT
trap 'exit 143' TERM INT
echo "superlink.sh: SuperLink on 127.0.0.1:$control (state $db); Fleet gateway on $host:$port"
python "$here/deploy/fleet_gateway.py" --listen "$host:$port" --upstream "127.0.0.1:$control" \
  "${gateway_tls[@]}" &
gateway=$!
trap 'kill $link $gateway 2>/dev/null; wait $link $gateway 2>/dev/null' EXIT
wait -n $link $gateway

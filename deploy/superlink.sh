#!/usr/bin/env bash
# Start the SuperLink of a deployed federation (one host). Runs in the foreground.
#   deploy/superlink.sh [--tls CERT_DIR] [--host 0.0.0.0] [--port 9092] [--control-port PORT]
#                       [--database FILE]
# Five processes, each kept running by deploy/supervise.py (restarted when it exits or gives up
# on the SuperLink), stopped together:
#  - Flower's SuperLink on 127.0.0.1:CONTROL_PORT (default PORT+1): Control (flwr run, flwr ls,
#    flwr supernode register), ServerAppIo and Fleet, for this host only (Flower 1.41 has no
#    Control-API authentication outside its enterprise edition; docs/security.md);
#  - Flower's SuperExec, which starts each run's ServerApp (the SuperLink runs with
#    --isolation process so that its launcher is ours to watch: in Flower's default mode the
#    SuperLink starts it once and nothing restarts it, and a SQLite "database is locked" error
#    once killed it, leaving every later run pending; issue 62). It and its ServerApps reach
#    the SuperLink through deploy/fleet_gateway.py --relay on a loopback port, which answers a
#    SuperLink 500 as a 503 that Flower's clients retry (plain HTTP on loopback; the relay
#    speaks TLS to the SuperLink when it has --tls);
#  - deploy/fleet_gateway.py on a unix socket: Fleet API only, a reply's sender bound to the
#    node that signed the call, object pulls limited to a node's own messages;
#  - the edge, HAProxy with deploy/edge.haproxy.cfg, on HOST:PORT (TLS with --tls): limits on
#    connections, per-address connections and rates, TLS handshakes, header time, body size.
# Edge limits (environment, defaults): EDGE_MAXCONN=2000 connections in all,
# EDGE_TLS_PER_S=200 new TLS sessions a second, EDGE_CONN_PER_ADDR=64 open connections per source
# address, EDGE_NEW_CONN_PER_ADDR=200 and EDGE_REQ_PER_ADDR=3000 new connections and requests
# per address per 10 s, EDGE_CLIENT_TIMEOUT=30s idle (TLS handshake included),
# EDGE_HEADER_TIMEOUT=10s for a request head, EDGE_MAX_BODY=67108864 bytes, EDGE_GATEWAY_CONN=32
# calls inside the gateway at once, EDGE_CALLS_PER_ADDR=8 of them from one source address. Raise
# the per-address ones when many SuperNodes share one
# address (NAT).
# State (runs, registered node keys, messages) is kept in FILE (default
# $FLWR_HOME/superlink/state.db), so a restarted SuperLink keeps its runs and registrations.
# With --tls, CERT_DIR holds ca.crt, server.pem, server.key (deploy/make_certs.sh) and SuperNodes
# must be registered (`flwr supernode register KEY.pub <connection>`) before they can join.
# Needs haproxy (Debian: apt-get install haproxy; setup.sh installs it when run as root).
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
  gateway_tls=(--tls "$tls" --database "$db")  # unregistered keys: refused before the body
fi
command -v haproxy >/dev/null || {
  echo "superlink.sh: haproxy not found: the edge needs it (apt-get install haproxy)" >&2; exit 2; }
edge=$(mktemp -d /tmp/fedembodied-edge.XXXXXX)  # short path: unix sockets allow 107 bytes
pids=()
# Teardown on every exit path, before the edge's key is written: the children may be gone
# already (a SIGTERM to the process group reaches them first), so nothing here may fail
# under `set -e` before the folder holding the key is removed.
stop() {
  trap - EXIT
  [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true
  [ ${#pids[@]} -eq 0 ] || wait "${pids[@]}" 2>/dev/null || true
  rm -rf "$edge"
}
trap stop EXIT
trap 'exit 143' TERM INT HUP
export EDGE_BIND="$host:$port" EDGE_GATEWAY="unix@$edge/gateway.sock"
export EDGE_MAXCONN=${EDGE_MAXCONN:-2000} EDGE_TLS_PER_S=${EDGE_TLS_PER_S:-200} \
  EDGE_CONN_PER_ADDR=${EDGE_CONN_PER_ADDR:-64} EDGE_NEW_CONN_PER_ADDR=${EDGE_NEW_CONN_PER_ADDR:-200} \
  EDGE_REQ_PER_ADDR=${EDGE_REQ_PER_ADDR:-3000} EDGE_CLIENT_TIMEOUT=${EDGE_CLIENT_TIMEOUT:-30s} \
  EDGE_HEADER_TIMEOUT=${EDGE_HEADER_TIMEOUT:-10s} EDGE_MAX_BODY=${EDGE_MAX_BODY:-67108864} \
  EDGE_GATEWAY_CONN=${EDGE_GATEWAY_CONN:-32} EDGE_CALLS_PER_ADDR=${EDGE_CALLS_PER_ADDR:-8}
if [ -n "$tls" ]; then  # HAProxy takes the certificate and its key in one file
  (umask 077; cat "$tls/server.pem" "$tls/server.key" > "$edge/edge.pem")
  export EDGE_PEM="$edge/edge.pem"
fi
haproxy -c -q -f "$here/deploy/edge.haproxy.cfg" \
  || { echo "superlink.sh: the edge's configuration does not load (EDGE_* values?)" >&2; exit 2; }
# --same-group: a signal to this script's process group (a SIGKILL included) still reaches
# every process, each run's ServerApp too (their launcher's restart leaves them running)
keep=("$VENV/bin/python" "$here/deploy/supervise.py" --same-group --)
relay=127.0.0.1:$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${keep[@]}" flower-superlink "${security[@]}" --disable-runtime-dependency-installation \
  --isolation process --database "$db" --host 127.0.0.1 --port "$control" &
pids+=($!)
"${keep[@]}" python "$here/deploy/fleet_gateway.py" --relay "$relay" \
  --upstream "127.0.0.1:$control" "${gateway_tls[@]:0:2}" &
pids+=($!)
# the ServerApp process it starts: Flower's, with quick object pulls (deploy/serverapp/flwr-serverapp)
PATH="$here/deploy/serverapp:$PATH" "${keep[@]}" flower-superexec --insecure \
  --runtime-api-address "$relay" &
pids+=($!)
"${keep[@]}" python "$here/deploy/fleet_gateway.py" --listen "$edge/gateway.sock" \
  --upstream "127.0.0.1:$control" --max-body "$EDGE_MAX_BODY" \
  --calls-per-source "$EDGE_CALLS_PER_ADDR" "${gateway_tls[@]}" &
pids+=($!)
"${keep[@]}" haproxy -db -f "$here/deploy/edge.haproxy.cfg" &
pids+=($!)
echo "superlink.sh: SuperLink on 127.0.0.1:$control (state $db); edge (HAProxy) on $host:$port"
wait -n "${pids[@]}"

#!/usr/bin/env bash
# Start the SuperLink of a deployed federation (one host). Runs in the foreground.
#   deploy/superlink.sh [--tls CERT_DIR] [--host 0.0.0.0] [--port 9092]
# With --tls, CERT_DIR holds ca.crt, server.pem, server.key (deploy/make_certs.sh) and SuperNodes
# must be registered (`flwr supernode register KEY.pub <connection>`) before they can join.
# Environment: FLWR_HOME (state, default ~/.flwr), VENV (default: the repo's .venv).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-$here/.venv}
export PATH="$VENV/bin:$PATH" RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0 FLWR_TELEMETRY_ENABLED=0
host=0.0.0.0; port=9092; tls=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tls) tls=$2; shift 2;;
    --host) host=$2; shift 2;;
    --port) port=$2; shift 2;;
    *) echo "superlink.sh: unknown option $1" >&2; exit 2;;
  esac
done
if [ -n "$tls" ]; then
  for f in ca.crt server.pem server.key; do
    [ -f "$tls/$f" ] || { echo "superlink.sh: $tls/$f not found (run deploy/make_certs.sh)" >&2; exit 2; }
  done
  exec flower-superlink --ssl-ca-certfile "$tls/ca.crt" --ssl-certfile "$tls/server.pem" \
    --ssl-keyfile "$tls/server.key" --enable-supernode-auth \
    --disable-runtime-dependency-installation --host "$host" --port "$port"
fi
exec flower-superlink --insecure --disable-runtime-dependency-installation --host "$host" --port "$port"

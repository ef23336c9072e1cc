#!/usr/bin/env bash
# Add a SuperLink connection to the flwr CLI's config ($FLWR_HOME/config.toml, default ~/.flwr),
# so that `flwr run . NAME` submits the app there.
#   deploy/connection.sh NAME HOST:PORT [CA_CERT]     (no CA_CERT = insecure)
set -euo pipefail
name=${1:?usage: connection.sh NAME HOST:PORT [CA_CERT]}; addr=${2:?HOST:PORT}; ca=${3:-}
home=${FLWR_HOME:-$HOME/.flwr}; mkdir -p "$home"; cfg="$home/config.toml"
if [ -f "$cfg" ] && grep -q "^\[superlink\.$name\]" "$cfg"; then
  echo "connection.sh: $cfg already has [superlink.$name]" >&2; exit 2
fi
[ -f "$cfg" ] && grep -q "^\[superlink\]" "$cfg" || printf '[superlink]\ndefault = "%s"\n\n' "$name" >> "$cfg"
{
  printf '[superlink.%s]\naddress = "%s"\n' "$name" "$addr"
  if [ -n "$ca" ]; then printf 'root-certificates = "%s"\n\n' "$(cd "$(dirname "$ca")" && pwd)/$(basename "$ca")"
  else printf 'insecure = true\n\n'; fi
} >> "$cfg"
echo "added connection '$name' ($addr) to $cfg"

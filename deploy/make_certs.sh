#!/usr/bin/env bash
# Self-signed CA and SuperLink certificate for trying TLS, plus one EC key pair per SuperNode.
#   deploy/make_certs.sh OUT_DIR NUM_NODES [SAN ...]
# The SANs always include IP:127.0.0.1 and DNS:localhost (the SuperLink's own process that starts
# ServerApps connects to it there; without them runs stay pending), plus any given: the
# SuperLink's real host name or IP (e.g. DNS:link.example.org IP:10.0.0.5). For production use a
# CA you trust. Keys are ECDSA P-256: a handshake costs the server a fraction of an RSA-4096
# one, which matters when a host opens thousands of TLS connections (docs/security.md).
set -euo pipefail
out=${1:?usage: make_certs.sh OUT_DIR NUM_NODES [SAN ...]}; n=${2:?NUM_NODES}; shift 2
san=$(echo "IP:127.0.0.1 DNS:localhost $*" | xargs -n1 | awk '!seen[$0]++' | paste -sd, -)
mkdir -p "$out"; cd "$out"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key
openssl req -new -x509 -key ca.key -sha256 -subj "/CN=fedembodied-ca" -days 365 -out ca.crt
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out server.key
openssl req -new -key server.key -subj "/CN=fedembodied-superlink" -out server.csr
printf "subjectAltName=%s\n" "$san" > server.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.pem \
  -days 365 -sha256 -extfile server.ext 2>/dev/null
for i in $(seq 0 $((n - 1))); do
  rm -f "supernode_$i" "supernode_$i.pub"
  ssh-keygen -q -t ecdsa -b 384 -N "" -f "supernode_$i"
done
echo "wrote $(pwd): ca.crt server.pem server.key, supernode_{0..$((n - 1))}[.pub]"

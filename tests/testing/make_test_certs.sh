#!/usr/bin/env bash
# Certificates for the TLS tests, made at test time with the openssl CLI (EC P-256 keys:
# fast to generate). Used by tests/testing/test_certs.cc and the binaries' TLS test.
#   make_test_certs.sh DIR
# writes into DIR (each as NAME.crt + NAME.key):
#   ca        the cluster's CA
#   server    the coordinator: CN ballast-coordinator, SAN IP:127.0.0.1 and DNS:localhost
#   admin     a client, CN ballastctl-admin (the admin CN the tests allow)
#   agent     a client, CN agent-node1 (valid, but not an admin)
#   rogue-ca  another CA, and rogue: a client it signed, CN ballastctl-admin
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"
days=2

new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }

make_ca() {
  new_key "$1"
  openssl req -x509 -new -key "$1.key" -out "$1.crt" -days "$days" -subj "/CN=$1" \
    -addext "basicConstraints=critical,CA:true" -addext "keyUsage=critical,keyCertSign,cRLSign"
}

# make_leaf NAME CN CA EXTENSIONS...
make_leaf() {
  local name=$1 cn=$2 ca=$3
  shift 3
  new_key "$name"
  openssl req -new -key "$name.key" -out "$name.csr" -subj "/CN=$cn"
  printf '%s\n' "$@" > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA "$ca.crt" -CAkey "$ca.key" -set_serial "0x$(openssl rand -hex 8)" \
    -days "$days" -out "$name.crt" -extfile "$name.ext" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

make_ca ca
make_ca rogue-ca
make_leaf server ballast-coordinator ca "subjectAltName=IP:127.0.0.1,DNS:localhost" \
  "extendedKeyUsage=serverAuth"
make_leaf admin ballastctl-admin ca "extendedKeyUsage=clientAuth"
make_leaf agent agent-node1 ca "extendedKeyUsage=clientAuth"
make_leaf rogue ballastctl-admin rogue-ca "extendedKeyUsage=clientAuth"

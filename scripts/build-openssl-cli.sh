#!/usr/bin/env bash
# Build the `openssl` command line tool from the very OpenSSL source the engine links
# (the openssl-src crate in Cargo's registry), into build/openssl/. Reference tools
# (s_server, s_client, speed, s_time) then run the same library version as pqlab.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="$PWD/build/openssl"
version=$(sed -n 's/^name = "openssl-src"/&/p;/^name = "openssl-src"/{n;s/version = "\(.*\)"/\1/p}' engine/Cargo.lock | tail -1)
[ -n "$version" ] || { echo "error: openssl-src not found in engine/Cargo.lock" >&2; exit 2; }
if [ -x "$prefix/bin/openssl" ] && [ "$(cat "$prefix/.version" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/openssl-src-"$version"/openssl 2>/dev/null | head -1)
[ -n "$src" ] || { (cd engine && cargo fetch -q); src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/openssl-src-"$version"/openssl | head -1); }
echo "== building the openssl command from openssl-src $version (~2 min)" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -a "$src/." "$work/"
cd "$work"
# The crate omits util/*.pl and test/; these options are the ones the crate itself builds with.
./Configure --prefix="$prefix" --openssldir="$prefix/ssl" --libdir=lib no-docs no-tests \
  no-shared no-module no-legacy >/dev/null
make -s -j"$(nproc)" >/dev/null 2>&1 || make -j"$(nproc)" >/dev/null
make -s install_sw >/dev/null
mkdir -p "$prefix/ssl"
# `openssl req` and friends need a config file; the crate ships none.
cat > "$prefix/ssl/openssl.cnf" <<'CNF'
openssl_conf = openssl_init
[openssl_init]
[req]
distinguished_name = req_dn
prompt = no
[req_dn]
CN = pqlab
CNF
echo "$version" > "$prefix/.version"
"$prefix/bin/openssl" version >&2

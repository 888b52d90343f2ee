#!/usr/bin/env bash
# Build wolfSSL (GPL-2.0-or-later) from the source the wolfssl-sys crate vendors in Cargo's
# registry, into build/wolfssl/: the static library the `pqlab-engine-wolfssl` program links,
# and wolfSSL's own tools document 004 measures with (examples/benchmark/tls_bench,
# wolfcrypt/benchmark/benchmark). Cached: done again only when the version or the options
# below change. The options are recorded in build/wolfssl/options.txt and in every run's
# metadata (the stack's `build_options` in `info`). Needs autoconf, automake and libtool
# (scripts/bootstrap.sh installs them): the crate ships wolfSSL's autotools sources, whose
# configure has the assembly options the CMake build lacks.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="$PWD/build/wolfssl"
crate=wolfssl-sys
manifest=scripts/wolfssl-source/Cargo.toml
version=$(sed -n "/^name = \"$crate\"/{n;s/version = \"\(.*\)\"/\1/p}" scripts/wolfssl-source/Cargo.lock | tail -1)
[ -n "$version" ] || { echo "error: $crate not found in scripts/wolfssl-source/Cargo.lock" >&2; exit 2; }

# What document 004 needs: TLS 1.3; ML-KEM alone and in the hybrids; ML-DSA; X25519, X448,
# EdDSA; wolfSSL's memory tracker and the examples' stack-size report; secrets for key logs;
# tls_bench and the wolfCrypt benchmark. Also: the OpenSSL-compatible calls for choosing
# signature schemes and reading the negotiated one, the peer's chain (sessioncerts), IP
# addresses in subjectAltName (the lab's server is named by its address), and wolfSSL's
# optimised maths and x86-64 assembly (as its documentation recommends for speed).
options=(
  --enable-static --disable-shared
  --enable-tls13
  --enable-mlkem --enable-tls-mlkem-standalone --enable-pqc-hybrids
  --enable-mldsa
  --enable-curve25519 --enable-ed25519 --enable-curve448 --enable-ed448
  --enable-trackmemory --enable-stacksize
  # The key-log callback only (HAVE_SECRET_CALLBACK with opensslextra): the engine writes
  # the lines itself, 0600, where --keylog says. Not --enable-keylog-export, which also makes
  # every connection append its secrets to ./sslkeylog.log (world-readable, in whatever
  # directory the user ran pqlab from) and print TLS 1.2 master secrets on stdout.
  CPPFLAGS=-DHAVE_SECRET_CALLBACK
  --enable-opensslextra --enable-sessioncerts --enable-ip-alt-name
  --enable-sp --enable-sp-math-all
  --enable-examples --enable-crypttests
)
if [ "$(uname -m)" = x86_64 ]; then
  options+=(--enable-sp-asm --enable-intelasm)
fi
stamp="$version ${options[*]}"
if [ -f "$prefix/lib/libwolfssl.a" ] && [ "$(cat "$prefix/.stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
for tool in autoreconf automake libtoolize make; do
  command -v "$tool" >/dev/null || {
    echo "error: $tool is needed to build wolfSSL (apt-get install autoconf automake libtool make)" >&2
    exit 2
  }
done
# The crate as Cargo downloaded it (registry/cache/*/NAME-VERSION.crate, a .tar.gz); on a
# fresh machine `cargo fetch` downloads it first.
packed() {
  for f in "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$crate-$version.crate"; do
    [ -f "$f" ] && { echo "$f"; return 0; }
  done
  return 0
}
crate_file=$(packed)
if [ -z "$crate_file" ]; then
  cargo fetch -q --locked --manifest-path "$manifest"
  crate_file=$(packed)
fi
[ -n "$crate_file" ] || { echo "error: cargo fetch did not download $crate $version" >&2; exit 3; }
echo "== building wolfSSL from $crate $version (the first time ~3 min on 2 cores)" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "$crate_file" -C "$work" --strip-components=2 "$crate-$version/wolfssl-src"
cd "$work"
./autogen.sh >autogen.log 2>&1 || { tail -20 autogen.log >&2; exit 3; }
./configure --prefix="$prefix" "${options[@]}" >configure.log 2>&1 || { tail -30 configure.log >&2; exit 3; }
# The library and the two tools only: the unit tests' sources are not in the crate.
make -j"$(nproc)" src/libwolfssl.la examples/benchmark/tls_bench \
  wolfcrypt/benchmark/benchmark >build.log 2>&1 || { tail -40 build.log >&2; exit 3; }
rm -rf "$prefix"
mkdir -p "$prefix/lib" "$prefix/bin" "$prefix/include"
cp src/.libs/libwolfssl.a "$prefix/lib/"
cp -a wolfssl "$prefix/include/"
find "$prefix/include" -name '*.am' -delete
# The tools are libtool wrappers when linked against the .la: take the real binaries.
for tool in examples/benchmark/tls_bench wolfcrypt/benchmark/benchmark; do
  dir=$(dirname "$tool") name=$(basename "$tool")
  if [ -x "$dir/.libs/$name" ]; then cp "$dir/.libs/$name" "$prefix/bin/"; else cp "$tool" "$prefix/bin/"; fi
done
{ echo "wolfSSL from $crate $version"; printf '%s\n' "${options[@]}"; } > "$prefix/options.txt"
echo "$stamp" > "$prefix/.stamp"
echo "== wolfSSL built into $prefix" >&2

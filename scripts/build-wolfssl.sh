#!/usr/bin/env bash
# Build wolfSSL (GPL-2.0-or-later) from the source the wolfssl-sys crate vendors in Cargo's
# registry, into build/wolfssl/, in three configurations of one source tree:
#
#   build/wolfssl/            the static library the `pqlab-engine-wolfssl` program links, and
#                             wolfSSL's own benchmarks from the same configuration:
#                             bin/tls_bench (examples/benchmark) and bin/benchmark (wolfCrypt's)
#   build/wolfssl/memory/     the same options plus wolfSSL's memory tracker and stack-size
#                             check: its example server and client (bin/server, bin/client),
#                             which print heap and stack use as document 004 measured them
#   build/wolfssl/no-pq/      the same options without ML-KEM, ML-DSA and the hybrids:
#                             bin/tls_bench only, for the binary size with and without them
#
# The tracker is kept out of the library the engine links: it takes a lock and walks a list
# on every allocation, which would be part of every timed wolfSSL handshake (document 004
# also built its benchmarks without it). Cached: done again only when the version or the
# options below change. Each configuration's options are in its options.txt; the library's
# are in every run's metadata (the stack's `build_options` in `info`). Needs autoconf,
# automake and libtool (scripts/bootstrap.sh installs them): the crate ships wolfSSL's
# autotools sources, whose configure has the assembly options the CMake build lacks.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="$PWD/build/wolfssl"
crate=wolfssl-sys
manifest=scripts/wolfssl-source/Cargo.toml
version=$(sed -n "/^name = \"$crate\"/{n;s/version = \"\(.*\)\"/\1/p}" scripts/wolfssl-source/Cargo.lock | tail -1)
[ -n "$version" ] || { echo "error: $crate not found in scripts/wolfssl-source/Cargo.lock" >&2; exit 2; }

# What document 004 needs: TLS 1.3; ML-KEM alone and in the hybrids; ML-DSA; X25519, X448,
# EdDSA; secrets for key logs; tls_bench and the wolfCrypt benchmark. Also: the
# OpenSSL-compatible calls for choosing signature schemes and reading the negotiated one, the
# peer's chain (sessioncerts), IP addresses in subjectAltName (the lab's server is named by
# its address), and wolfSSL's optimised maths and x86-64 assembly (as its documentation
# recommends for speed).
pq=(--enable-mlkem --enable-tls-mlkem-standalone --enable-pqc-hybrids --enable-mldsa)
options=(
  --enable-static --disable-shared
  --enable-tls13
  "${pq[@]}"
  --enable-curve25519 --enable-ed25519 --enable-curve448 --enable-ed448
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
# The memory configuration: wolfSSL's tracker (mem_track.h: allocations, bytes, peak, per
# process) and its examples' stack-size check (they run in a thread with a painted stack).
memory_options=("${options[@]}" --enable-trackmemory --enable-stacksize)
# Without post-quantum algorithms: ML-KEM is on by default in this release, so it is turned
# off explicitly.
no_pq_options=()
for o in "${options[@]}"; do
  case " ${pq[*]} " in *" $o "*) continue ;; esac
  no_pq_options+=("$o")
done
no_pq_options+=(--disable-mlkem --disable-mldsa --disable-pqc-hybrids)

stamp="$version 3 ${options[*]}"
if [ -f "$prefix/lib/libwolfssl.a" ] && [ -x "$prefix/memory/bin/server" ] \
   && [ -x "$prefix/no-pq/bin/tls_bench" ] && [ "$(cat "$prefix/.stamp" 2>/dev/null)" = "$stamp" ]; then
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
echo "== building wolfSSL from $crate $version in three configurations (the first time ~3 min on 2 cores)" >&2
work=$(mktemp -d)
mkdir -p build
staging=$(mktemp -d "$PWD/build/.wolfssl.XXXXXX")
chmod 755 "$staging"
trap 'rm -rf "$work" "$staging"' EXIT
tar -xzf "$crate_file" -C "$work" --strip-components=2 "$crate-$version/wolfssl-src"
cd "$work"
./autogen.sh >autogen.log 2>&1 || { tail -20 autogen.log >&2; exit 3; }

# configure OUT_DIR OPTIONS... ; then make TARGETS and copy the real binaries (libtool wraps
# programs linked against the .la) into OUT_DIR/bin.
build() {
  local out=$1; shift
  local -a targets=()
  while [ "$1" != -- ]; do targets+=("$1"); shift; done
  shift
  [ -f Makefile ] && make distclean >/dev/null 2>&1 || true
  ./configure --prefix="$prefix" "$@" >configure.log 2>&1 || { tail -30 configure.log >&2; exit 3; }
  make -j"$(nproc)" "${targets[@]}" >build.log 2>&1 || { tail -40 build.log >&2; exit 3; }
  mkdir -p "$out/bin"
  local t dir name
  for t in "${targets[@]}"; do
    case "$t" in *.la) continue ;; esac
    dir=$(dirname "$t") name=$(basename "$t")
    if [ -x "$dir/.libs/$name" ]; then cp "$dir/.libs/$name" "$out/bin/"; else cp "$t" "$out/bin/"; fi
  done
  { echo "wolfSSL from $crate $version"; printf '%s\n' "$@"; } > "$out/options.txt"
}

# The library the engine links, and the benchmarks from the same configuration.
build "$staging" src/libwolfssl.la examples/benchmark/tls_bench wolfcrypt/benchmark/benchmark -- "${options[@]}"
mkdir -p "$staging/lib" "$staging/include"
cp src/.libs/libwolfssl.a "$staging/lib/"
cp -a wolfssl "$staging/include/"
find "$staging/include" -name '*.am' -delete
# The examples with the tracker and the stack-size check.
build "$staging/memory" examples/server/server examples/client/client -- "${memory_options[@]}"
# tls_bench without the post-quantum algorithms.
build "$staging/no-pq" examples/benchmark/tls_bench -- "${no_pq_options[@]}"

cd - >/dev/null
rm -rf "$prefix"
mv "$staging" "$prefix"
echo "$stamp" > "$prefix/.stamp"
echo "== wolfSSL built into $prefix" >&2

#!/usr/bin/env bash
# Build wolfSSL (GPL-2.0-or-later) from the source the wolfssl-sys crate vendors in Cargo's
# registry, into build/wolfssl/: the static library the `pqlab-engine-wolfssl` program links,
# and wolfSSL's own tools document 004 measures with (examples/benchmark/tls_bench,
# wolfcrypt/benchmark/benchmark). Cached: done again only when the version or the options
# below change. The options are recorded in build/wolfssl/options.txt and in every run's
# metadata (the program's `info`).
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="$PWD/build/wolfssl"
crate=wolfssl-sys
manifest=scripts/wolfssl-source/Cargo.toml
version=$(sed -n "/^name = \"$crate\"/{n;s/version = \"\(.*\)\"/\1/p}" scripts/wolfssl-source/Cargo.lock | tail -1)
[ -n "$version" ] || { echo "error: $crate not found in scripts/wolfssl-source/Cargo.lock" >&2; exit 2; }

# What document 004 needs: TLS 1.3, ML-KEM alone and in its hybrids, ML-DSA, Ed25519 and
# X25519, the memory tracker, stack-size reports of the examples, secrets for key logs,
# tls_bench and the wolfCrypt benchmark; the OpenSSL-compatible calls for choosing signature
# schemes and reading the negotiated one, and the peer's chain (SESSION_CERTS).
options=(
  -DCMAKE_BUILD_TYPE=Release
  -DBUILD_SHARED_LIBS=OFF
  -DWOLFSSL_TLS13=yes
  -DWOLFSSL_MLKEM=yes
  -DWOLFSSL_TLS_NO_MLKEM_STANDALONE=no
  -DWOLFSSL_PQC_HYBRIDS=yes
  -DWOLFSSL_MLDSA=yes
  -DWOLFSSL_ECC=yes
  -DWOLFSSL_CURVE25519=yes
  -DWOLFSSL_ED25519=yes
  -DWOLFSSL_CURVE448=yes
  -DWOLFSSL_ED448=yes
  -DWOLFSSL_RSA_PSS=yes
  -DWOLFSSL_MEMORY=yes
  -DWOLFSSL_TRACKMEMORY=yes
  -DWOLFSSL_STACKSIZE=yes
  -DWOLFSSL_KEYLOG_EXPORT=yes
  -DWOLFSSL_OPENSSLEXTRA=yes
  -DCMAKE_C_FLAGS=-DSESSION_CERTS
  -DWOLFSSL_EXAMPLES=no
  -DWOLFSSL_CRYPT_TESTS=no
)
stamp="$version ${options[*]}"
if [ -f "$prefix/lib/libwolfssl.a" ] && [ "$(cat "$prefix/.stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
command -v cmake >/dev/null || { echo "error: cmake is needed to build wolfSSL (apt-get install cmake)" >&2; exit 2; }
src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$crate-$version"/wolfssl-src 2>/dev/null | head -1)
[ -n "$src" ] || { cargo fetch -q --locked --manifest-path "$manifest"; src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$crate-$version"/wolfssl-src | head -1); }
echo "== building wolfSSL from $crate $version (the first time ~4 min on 2 cores)" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$src" -B "$work" "${generator[@]}" -DCMAKE_INSTALL_PREFIX="$prefix" \
  "${options[@]}" >"$work/configure.log" 2>&1 || { tail -30 "$work/configure.log" >&2; exit 3; }
cmake --build "$work" -j"$(nproc)" >"$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; exit 3; }
rm -rf "$prefix"
cmake --install "$work" >/dev/null
# wolfSSL's own tools, against the installed library and its options.h (the CMake build
# would build them only with the unit tests, whose sources the crate leaves out).
mkdir -p "$prefix/bin"
cc=${CC:-cc}
"$cc" -O2 -I"$prefix/include" -I"$src" -o "$prefix/bin/tls_bench" \
  "$src/examples/benchmark/tls_bench.c" "$prefix/lib/libwolfssl.a" -lm -lpthread
"$cc" -O2 -I"$prefix/include" -I"$src" -o "$prefix/bin/benchmark" \
  "$src/wolfcrypt/benchmark/benchmark.c" "$prefix/lib/libwolfssl.a" -lm -lpthread
printf '%s\n' "wolfSSL from $crate $version" "${options[@]}" > "$prefix/options.txt"
echo "$stamp" > "$prefix/.stamp"
echo "== wolfSSL built into $prefix" >&2

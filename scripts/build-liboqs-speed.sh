#!/usr/bin/env bash
# Build liboqs's own benchmark programs (tests/speed_kem, tests/speed_sig) from the very
# liboqs source the engine links (vendored in the oqs-sys crate), with the options oqs-sys
# builds it with (Release, OQS_DIST_BUILD=ON, no OpenSSL inside), into build/liboqs-speed/.
# benchmarks/primitives_fidelity.py compares pqlab's liboqs timings with these.
# PQLAB_LIBOQS_ALGS: OQS_MINIMAL_BUILD list (default: the ML-KEM and ML-DSA sets, which is
# what the fidelity benchmark needs; "all" builds liboqs's default set, ~4 min on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
out="$PWD/build/liboqs-speed"
version=$(sed -n '/^name = "oqs-sys"/{n;s/version = "\(.*\)"/\1/p}' engine/Cargo.lock | tail -1)
[ -n "$version" ] || { echo "error: oqs-sys not found in engine/Cargo.lock" >&2; exit 2; }
algs=${PQLAB_LIBOQS_ALGS:-"KEM_ml_kem_512;KEM_ml_kem_768;KEM_ml_kem_1024;SIG_ml_dsa_44;SIG_ml_dsa_65;SIG_ml_dsa_87"}
stamp="$version|$algs"
if [ -x "$out/tests/speed_kem" ] && [ -x "$out/tests/speed_sig" ] \
   && [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/oqs-sys-"$version"/liboqs 2>/dev/null | head -1)
[ -n "$src" ] || { (cd engine && cargo fetch -q); src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/oqs-sys-"$version"/liboqs | head -1); }
command -v cmake >/dev/null && command -v ninja >/dev/null || {
  echo "error: cmake and ninja are needed (apt-get install cmake ninja-build)" >&2; exit 2; }
echo "== building liboqs speed_kem/speed_sig from oqs-sys $version" >&2
rm -rf "$out"
mkdir -p "$out"
minimal=()
[ "$algs" = all ] || minimal=("-DOQS_MINIMAL_BUILD=$algs")
cmake -S "$src" -B "$out" -GNinja -DCMAKE_BUILD_TYPE=Release -DOQS_BUILD_ONLY_LIB=OFF \
  -DOQS_USE_OPENSSL=OFF -DOQS_DIST_BUILD=ON "${minimal[@]}" >/dev/null
ninja -C "$out" speed_kem speed_sig >/dev/null
echo "$stamp" > "$out/.stamp"
"$out/tests/speed_kem" --info 2>/dev/null | head -3 >&2 || true

#!/usr/bin/env bash
# Install what pqlab needs on a fresh Debian/Ubuntu machine and build it. Idempotent:
# each step is skipped when already done. Needs Python 3.11+, a Rust toolchain, a C
# compiler, cmake and ninja; installs the rest (apt packages need root or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '== %s\n' "$*" >&2; }

# --- system packages ---------------------------------------------------------------------
# libclang-dev: bindgen (liboqs bindings). iproute2/ethtool: the two-host network lab.
# tcpdump: independent reading of the kept captures in tests. perl: OpenSSL's Configure.
need=()
[ -e /usr/lib/llvm-14/lib/libclang.so ] || ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 || need+=(libclang-dev)
command -v ip >/dev/null || need+=(iproute2)
command -v ethtool >/dev/null || need+=(ethtool)
command -v tcpdump >/dev/null || need+=(tcpdump)
command -v perl >/dev/null || need+=(perl)
# valgrind: the memory benchmark's independent instrument (benchmarks/memory_vs_valgrind.py).
command -v valgrind >/dev/null || need+=(valgrind)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "error: missing packages ${need[*]}; install them (apt-get install ${need[*]}) and rerun" >&2
    exit 2
  fi
  say "installing ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# --- Python environment ------------------------------------------------------------------
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c 'import pqlab, duckdb, pyarrow, matplotlib, rich, pytest' 2>/dev/null \
   || [ pyproject.toml -nt .venv/.pqlab-installed ]; then
  say "installing the pqlab Python package (editable) and its test tools"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -e '.[test]'
  touch .venv/.pqlab-installed
fi

# --- the engine (vendored OpenSSL 3.5.4 and liboqs 0.13.0) -------------------------------
say "building pqlab-engine (first build compiles OpenSSL and liboqs: ~6 min on 2 cores)"
(cd engine && cargo build --release --locked -q)

# --- the openssl command from the same OpenSSL source, for interop tests and benchmarks --
scripts/build-openssl-cli.sh

#!/usr/bin/env bash
# Install what pqlab needs on a fresh Debian/Ubuntu machine and build it. Idempotent:
# each step is skipped when already done. Needs Python 3.11+, a Rust toolchain, a C
# compiler, cmake and ninja; installs the rest (apt packages need root or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '== %s\n' "$*" >&2; }

# --- system packages ---------------------------------------------------------------------
# libclang-dev: bindgen (liboqs bindings). iproute2/ethtool: the two-host network lab.
# tcpdump: independent reading of the kept captures in tests; tshark: Wireshark's dissector,
# which decrypts them with the kept key logs in tests. perl: OpenSSL's Configure.
# openssh-server/-client: the remote-host tests run a real sshd in each of two namespaces
# (tests/test_remote.py; installing the package does not need the system sshd running).
need=()
[ -e /usr/lib/llvm-14/lib/libclang.so ] || ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 || need+=(libclang-dev)
command -v ip >/dev/null || need+=(iproute2)
command -v ethtool >/dev/null || need+=(ethtool)
command -v tcpdump >/dev/null || need+=(tcpdump)
command -v tshark >/dev/null || need+=(tshark)
# autoconf, automake, libtool: wolfSSL's configure (scripts/build-wolfssl.sh).
command -v autoreconf >/dev/null || need+=(autoconf)
command -v automake >/dev/null || need+=(automake)
command -v libtoolize >/dev/null || need+=(libtool)
command -v perl >/dev/null || need+=(perl)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh-keygen >/dev/null || need+=(openssh-client)
# valgrind: the memory benchmark's independent instrument (benchmarks/memory_vs_valgrind.py).
command -v valgrind >/dev/null || need+=(valgrind)
# nginx: a server pqlab did not write, for `pqlab probe`'s tests (tests/test_probe.py starts
# its own, with its own configuration and port; the system service is turned off again).
[ -x /usr/sbin/nginx ] || need+=(nginx)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "error: missing packages ${need[*]}; install them (apt-get install ${need[*]}) and rerun" >&2
    exit 2
  fi
  say "installing ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
  if [[ " ${need[*]} " == *" openssh-server "* ]] && command -v systemctl >/dev/null; then
    # Only the sshd binary is needed (the tests start their own, in namespaces): the
    # system ssh service the package enables is turned off again.
    $SUDO systemctl disable --now ssh.service ssh.socket >/dev/null 2>&1 || true
  fi
  if [[ " ${need[*]} " == *" nginx "* ]]; then
    if command -v systemctl >/dev/null; then
      $SUDO systemctl disable --now nginx.service >/dev/null 2>&1 || true
    fi
    # Without systemd the package's own start script may have started it.
    $SUDO /usr/sbin/nginx -s quit >/dev/null 2>&1 || true
  fi
fi

# --- a real browser for the report and TLS-client tests (optional) -----------------------
# chromium: tests/test_report_browser.py opens report.html in it, tests/test_browser_client.py
# makes it the TLS client of `pqlab serve`; libnss3-tools: certutil, to trust a run's root in
# a fresh NSS database. Without them those tests are skipped with a message, nothing fails;
# so this step never stops the set-up (no root/sudo, no apt, or no network: it says so).
browser=()
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || browser+=(chromium)
command -v certutil >/dev/null || browser+=(libnss3-tools)
if [ ${#browser[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    say "skipping ${browser[*]}: no apt-get here; the browser tests will be skipped"
  elif [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null; then
    say "skipping ${browser[*]}: needs root or sudo (apt-get install ${browser[*]}); the browser tests will be skipped"
  else
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"  # never wait for a password
    say "installing ${browser[*]} (for the browser tests)"
    if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install \
        -y -qq --no-install-recommends "${browser[@]}" >/dev/null; }; then
      say "could not install ${browser[*]} (apt failed, see above); the browser tests will be skipped"
    fi
  fi
fi

# --- a kernel with netem for the tests (optional) ----------------------------------------
# Debian's user-mode-linux package: a kernel that runs as a process and has sch_netem, so
# tests/test_netem_uml.py can prove the netem backend on machines whose kernel lacks it (see
# docs/network.md). Optional: where apt cannot install it, those tests skip and say why.
if [ ! -x /usr/bin/linux.uml ]; then
  if ! command -v apt-get >/dev/null; then
    say "note: no apt-get here; skipping user-mode-linux (the netem-in-UML tests will skip)"
  elif [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null; then
    say "note: not root and no sudo; skipping user-mode-linux (the netem-in-UML tests will skip)"
  else
    U=""; [ "$(id -u)" = 0 ] || U="sudo"
    say "installing user-mode-linux (a kernel with netem for the tests)"
    if ! { $U apt-get update -qq && DEBIAN_FRONTEND=noninteractive $U apt-get install -y -qq \
        --no-install-recommends user-mode-linux >/dev/null; }; then
      say "note: could not install user-mode-linux; the netem-in-UML tests will skip"
    fi
  fi
fi

# --- Python environment ------------------------------------------------------------------
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c 'import pqlab, duckdb, pyarrow, matplotlib, rich, pytest, asyncssh, yaml, orjson' 2>/dev/null \
   || [ pyproject.toml -nt .venv/.pqlab-installed ]; then
  say "installing the pqlab Python package (editable) and its test tools"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -e '.[test]'
  touch .venv/.pqlab-installed
fi
# The lab's own bytecode, as pip writes it for installed packages (an editable install's
# is written on first import, or never under PYTHONDONTWRITEBYTECODE: then every pqlab
# command and worker compiled its 150 modules anew, some 0.2 s each). Up-to-date files are
# skipped; an edited module's stale bytecode is ignored by Python and compiled again here.
.venv/bin/python -m compileall -q src/pqlab >/dev/null

# --- the engine (vendored OpenSSL 3.5.4 and liboqs 0.13.0) -------------------------------
# Two programs from one library: pqlab-engine, and pqlab-engine-wolfssl which links wolfSSL
# (GPL; built from the source the wolfssl-sys crate vendors, cached in build/wolfssl).
scripts/build-wolfssl.sh
say "building pqlab-engine and pqlab-engine-wolfssl (first build compiles OpenSSL, liboqs and aws-lc: ~12 min on 2 cores)"
(cd engine && cargo build --release --locked -q --workspace)

# --- the openssl command from the same OpenSSL source, for interop tests and benchmarks --
scripts/build-openssl-cli.sh

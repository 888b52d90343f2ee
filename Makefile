# pqlab: the two commands of the README are `make report` and `make test`.
# Both set up everything first (scripts/bootstrap.sh, idempotent).
.PHONY: setup engine report test lint unit quick benchmarks clean

VENV := .venv
PQLAB := $(VENV)/bin/pqlab

setup:
	scripts/bootstrap.sh

# Every program of the engine's workspace (the lab finds them in its manifests):
# pqlab-engine (MIT OR Apache-2.0) and pqlab-engine-wolfssl (GPL-2.0-or-later, with the
# wolfSSL that scripts/build-wolfssl.sh builds and caches in build/wolfssl).
engine:
	scripts/build-wolfssl.sh
	cd engine && cargo build --release --locked --workspace

# The default suite: every document's experiment, under 12 minutes on 2 cores.
report: setup
	$(PQLAB) suite --out results/default

lint:
	cd engine && cargo fmt --check
	cd engine && cargo clippy --release --locked --workspace --all-targets -q -- -D warnings
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

unit:
	cd engine && cargo test --release --locked --workspace -q
	$(VENV)/bin/pytest -q -ra

# The fast lane: the unit tests of both languages, nothing that makes network namespaces,
# needs root or runs whole experiments (pytest markers net, root, slow), under two minutes
# on 2 cores once the engine is built.
quick:
	cd engine && cargo test --release --locked --workspace --lib --bins -q -j 2
	$(VENV)/bin/pytest -q -m "not net and not root and not slow"

test: setup lint unit

benchmarks: setup
	$(VENV)/bin/python benchmarks/run_all.py

clean:
	rm -rf build $(VENV) results

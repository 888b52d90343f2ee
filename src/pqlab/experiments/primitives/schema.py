"""The primitives experiment's tables and their migrations."""

from __future__ import annotations

SAMPLES_DDL = """
CREATE TABLE IF NOT EXISTS primitive_samples (
    algorithm TEXT, backend TEXT, operation TEXT, i INTEGER, ns BIGINT, cycles BIGINT,
    dropped BOOLEAN)
"""


RUNS_DDL = """
CREATE TABLE IF NOT EXISTS primitive_runs (
    algorithm TEXT, backend TEXT, kind TEXT, operation TEXT, engine_args JSON,
    iterations INTEGER, warmup INTEGER, max_seconds DOUBLE, timed_runs INTEGER,
    kept INTEGER, warmup_runs INTEGER, budget_exhausted BOOLEAN, phase_seconds DOUBLE,
    checks_passed BIGINT, negative_checks JSON, seconds_per_op DOUBLE)
"""


# Runs made before the fixed-time mode.
MIGRATIONS = (
    "ALTER TABLE IF EXISTS primitive_runs ADD COLUMN IF NOT EXISTS seconds_per_op DOUBLE",
)


# What each cell's measuring process cost the machine (document 000 says the load is
# negligible): wall and CPU time (getrusage of the finished process), its peak resident set,
# and for the python harness its own per-sample floor and library versions.
RESOURCES_DDL = """
CREATE TABLE IF NOT EXISTS primitive_resources (
    algorithm TEXT, backend TEXT, program TEXT, wall_s DOUBLE, cpu_user_s DOUBLE,
    cpu_sys_s DOUBLE, max_rss_kib BIGINT, samples BIGINT, timer_overhead_ns BIGINT,
    harness JSON)
"""


# A temporary table: derived at export time from the raw samples, never stored (exports read
# the run read-only).
SUMMARY_DDL = """
CREATE OR REPLACE TEMP TABLE primitive_summary (
    algorithm TEXT, backend TEXT, operation TEXT, n INTEGER, mean_us DOUBLE, sd_us DOUBLE,
    q1_us DOUBLE, median_us DOUBLE, q3_us DOUBLE, robust_cv DOUBLE, min_us DOUBLE,
    max_us DOUBLE, p90_us DOUBLE, p99_us DOUBLE, ops_per_s DOUBLE, median_cycles DOUBLE,
    kind TEXT, family TEXT, nist_level INTEGER, budget_exhausted BOOLEAN)
"""

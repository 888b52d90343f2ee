"""The linktest experiment's tables."""

from __future__ import annotations

RESULTS_DDL = """
CREATE TABLE IF NOT EXISTS linktest (
    profile TEXT, shaper TEXT, check_name TEXT, direction TEXT, expected DOUBLE,
    measured DOUBLE, low DOUBLE, high DOUBLE, unit TEXT, n INTEGER, passed BOOLEAN,
    note TEXT)
"""


RAW_DDL = """
CREATE TABLE IF NOT EXISTS linktest_raw (
    profile TEXT, shaper TEXT, probe TEXT, direction TEXT, seq INTEGER, value_ns BIGINT)
"""


META_DDL = """
CREATE TABLE IF NOT EXISTS linktest_profiles (profile TEXT, shaper TEXT, choice TEXT,
    profile_json JSON, link_json JSON, topology_json JSON)
"""

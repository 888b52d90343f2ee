"""The sizes experiment's report: tables/sizes.csv, its figure and section, built from the
`primitive_sizes` table that `pqlab primitives` fills too (`pqlab.algorithms.sizes`)."""

from __future__ import annotations

from pqlab.algorithms import sizes


def export(store):
    return sizes.export(store)

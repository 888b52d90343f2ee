"""The linktest experiment's tables and report section, from the database alone."""

from __future__ import annotations

import numpy as np

from pqlab import figures
from pqlab.report.section import Section


def export(store):

    if not store.has_table("linktest"):
        return None
    section = Section(
        "Link physics checks",
        "<p>Each emulated link is checked against its profile with real traffic between the "
        "two namespaces: the TCP connect time against the configured RTT (within 2 % + "
        "0.5 ms), a bulk TCP transfer against the time serialisation of its bytes on the wire "
        "predicts (within 3 %), the share of lost UDP probes against the configured loss "
        "(99 % Wilson interval), and the one-way delay quantiles of the probes against netem's "
        "own model of the same send times (drawn from the same 4096-entry tables). "
        "<code>passed</code> says whether the measured value lies in "
        "<code>[low, high]</code>; a failed check means numbers measured over that link do "
        "not mean what the profile says.</p>",
    )
    csv = store.export_table(
        "linktest",
        "SELECT profile, shaper, check_name AS check, direction, expected, "
        "measured, low, high, unit, n, passed, note FROM linktest ORDER BY profile, shaper, "
        "check_name, direction",
    )
    section.table(csv, "Physics checks per profile and shaper")
    rows = store.query(
        "SELECT profile, shaper, direction, value_ns FROM linktest_raw "
        "WHERE probe = 'udp_one_way' ORDER BY profile, direction, seq"
    )
    if rows:
        import matplotlib.pyplot as plt

        keys = sorted({(r["profile"], r["shaper"], r["direction"]) for r in rows})
        fig, ax = plt.subplots(figsize=(7, 4))
        for key in keys:
            v = np.sort(
                [
                    r["value_ns"] / 1e6
                    for r in rows
                    if (r["profile"], r["shaper"], r["direction"]) == key
                ]
            )
            ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=" / ".join(key))
        ax.set_xlabel("one-way delay of UDP probes (ms)")
        ax.set_ylabel("CDF")
        ax.legend(fontsize=7)
        png = figures.save(fig, store, "linktest_delay_cdf")
        section.figure(png, "One-way delay of the UDP probes per profile and direction")
    return section

"""Comparisons across link profiles, as document 003 makes them: its figure 1 (the handshake
time's percentiles of a dataset pooled over profiles that differ only in RTT and loss, each
combination against the classical one) and each profile's degradation against the clean
link (no loss, no jitter) of the same RTT and bandwidth (its "97-331 % slower")."""

from __future__ import annotations

import json

import numpy as np

from pqlab import figures
from pqlab.experiments.ttlb import document, schema
from pqlab.experiments.ttlb.analyse import PERCENTILES, combination, combo_label, combo_order
from pqlab.tls.stacks import DEFAULT_STACK

# What may differ between the profiles of one pool (figure 1 pools RTT 35 and 200 ms with
# loss 0, 1, 3 and 10 %): the rest of the link (rate, jitter, queue, window, congestion
# control, MTU) must be the same.
POOL_VARIES = ({"name", "spec", "rtt_ms"}, {"delay_ms", "loss_pct", "loss_corr_pct"})
# What makes a link unclean: a degraded profile and its clean reference share the rest.
CLEAN_VARIES = (
    {"name", "spec"},
    {"loss_pct", "loss_corr_pct", "jitter_ms", "dist", "delay_corr_pct"},
)


def _key(desc: dict, varies: tuple[set, set]) -> str:
    top, per_direction = varies
    out = {k: v for k, v in desc.items() if k not in top and k not in ("c2s", "s2c")}
    for side in ("c2s", "s2c"):
        out[side] = {k: v for k, v in desc[side].items() if k not in per_direction}
    return json.dumps(out, sort_keys=True)


def is_clean(desc: dict) -> bool:
    """No loss and no jitter in either direction."""
    return not any(desc[s]["loss_pct"] or desc[s]["jitter_ms"] for s in ("c2s", "s2c"))


def pools(profiles: dict[str, dict]) -> list[list[str]]:
    """Groups of two or more profiles (name -> `LinkProfile.describe()`) that differ only in
    RTT and loss, each sorted by name."""
    groups: dict[str, list[str]] = {}
    for name, desc in profiles.items():
        groups.setdefault(_key(desc, POOL_VARIES), []).append(name)
    return [sorted(g) for g in groups.values() if len(g) >= 2]


def references(profiles: dict[str, dict]) -> dict[str, str]:
    """For every profile with loss or jitter, the clean profile of the same RTT, rate,
    window and the rest (none: the profile has no reference in the run)."""
    clean = {_key(d, CLEAN_VARIES): n for n, d in sorted(profiles.items()) if is_clean(d)}
    out = {}
    for name, desc in profiles.items():
        ref = clean.get(_key(desc, CLEAN_VARIES))
        if not is_clean(desc) and ref is not None:
            out[name] = ref
    return out


def pooled_percentiles(samples: list[list[float]]) -> dict[int, float]:
    """The percentiles of one dataset made of every profile's samples (the document's
    pooled dataset: a profile with more connections weighs more), not an average of the
    profiles' percentiles."""
    values = np.concatenate([np.asarray(s, dtype=float) for s in samples])
    return {p: float(np.percentile(values, p)) for p in PERCENTILES}


def increase_pct(value: float, baseline: float) -> float:
    return (value / baseline - 1) * 100


def pool_label(descs: list[dict]) -> str:
    """What a pool's profiles share and what varies, e.g. '1 Mbit/s, initcwnd 20: RTT 35,
    200 ms x loss 0, 1, 3, 10 %'."""
    first = descs[0]
    rate = first["s2c"]["rate_bps"]
    shared = [f"{rate / 1e6:g} Mbit/s" if rate else "unlimited rate"]
    if first["s2c"]["jitter_ms"]:
        shared.append(f"jitter {first['s2c']['jitter_ms']:g} ms {first['s2c']['dist']}")
    if first.get("initcwnd"):
        shared.append(f"initcwnd {first['initcwnd']}")
    rtts = sorted({round(d["rtt_ms"], 3) for d in descs})
    losses = sorted({d["s2c"]["loss_pct"] for d in descs})
    return (
        ", ".join(shared)
        + f": RTT {', '.join(f'{r:g}' for r in rtts)} ms x loss "
        + f"{', '.join(f'{x:g}' for x in losses)} %"
    )


def document_combination(combos: dict[tuple, int], base: tuple) -> tuple | None:
    """The combination the document set against its classical one: another key exchange
    and the larger chain (ML-DSA's, or the largest --chain-bytes size). `combos` maps
    (group, chain, chain size) to its chain's DER bytes; `base` is the classical one."""
    other = [c for c in combos if c[0] != base[0] and c[1:] != base[1:]]
    return max(other, key=lambda c: combos[c], default=None)


def _profiles(store) -> dict[str, dict]:
    """The run's emulated link profiles (a real network between host pairs has none)."""
    out = {}
    for r in store.query("SELECT profile, profile_json FROM ttlb_profiles"):
        desc = json.loads(r["profile_json"]) if r["profile_json"] else None
        if desc:
            out[r["profile"]] = desc
    return out


def _ttfb_samples(store) -> dict[tuple, list[float]]:
    """TTFB (ms) per (profile, data size, stack, group, chain, chain size), from raw rows."""
    out: dict[tuple, list[float]] = {}
    for r in store.query(
        f"SELECT profile, data_bytes, stack, grp, {schema.chain_sql(store)} AS chain, "
        "chain_bytes_requested, ttfb_ns FROM ttlb_raw ORDER BY profile, grp, chain, data_bytes, idx"
    ):
        key = (
            r["profile"], r["data_bytes"], r["stack"] or DEFAULT_STACK,
            (r["grp"], r["chain"], r["chain_bytes_requested"]),
        )  # fmt: skip
        out.setdefault(key, []).append(r["ttfb_ns"] / 1e6)
    return out


def _pooled_set(samples: dict, names: list[str], stack: str, base: tuple, combo: tuple):
    """The profiles of a pool where both the baseline and `combo` were measured at one
    response size, and that size: the smallest they share (the handshake alone where the
    run has 0). A combination measured on only some profiles is pooled over those, with the
    baseline over the same ones."""

    def sizes(n: str, c: tuple) -> set:
        return {k[1] for k in samples if k[0] == n and k[2] == stack and k[3] == c}

    shared = {n: sizes(n, base) & sizes(n, combo) for n in names}
    measured = [n for n in names if shared[n]]
    common = set.intersection(*(shared[n] for n in measured)) if measured else set()
    return measured, (min(common) if common else None)


def pooled_rows(store, summary: list[dict], base: tuple) -> list[dict]:
    """Figure 1's numbers: per pool of profiles, stack, combination and percentile, the
    pooled TTFB beside the classical combination's pooled TTFB over the same profiles, the
    increase and the ratio, and the document's ratio beside the combination it compared."""
    profiles = _profiles(store)
    samples = _ttfb_samples(store)
    der = {combination(r): r["chain_der_bytes"] for r in summary}
    out = []
    for names in pools(profiles):
        for stack in sorted({k[2] for k in samples if k[0] in names}):
            combos = {k[3] for k in samples if k[0] in names and k[2] == stack} - {base}
            doc = document_combination({c: der.get(c) or 0 for c in combos}, base)
            for combo in sorted(combos, key=combo_order):
                measured, size = _pooled_set(samples, names, stack, base, combo)
                if len(measured) < 2:
                    continue
                mine = [samples[(n, size, stack, combo)] for n in measured]
                theirs = [samples[(n, size, stack, base)] for n in measured]
                common = {
                    "pool": pool_label([profiles[n] for n in measured]),
                    "profiles": "; ".join(measured),
                    "n_profiles": len(measured),
                    "data_bytes": size,
                    "chain_der_bytes": der.get(combo),
                    "stack": stack,
                }
                out += [{**common, **r} for r in _pooled(combo, mine, theirs, base, doc)]
    return out


def _pooled(combo, mine, theirs, base, doc) -> list[dict]:
    """One combination's rows (p50, p75, p90) against the baseline's samples."""
    pooled, base_p = pooled_percentiles(mine), pooled_percentiles(theirs)
    return [
        {
            "group": combo[0],
            "chain": combo[1],
            "chain_bytes_requested": combo[2],
            "percentile": p,
            "n": sum(len(s) for s in mine),
            "ttfb_ms": pooled[p],
            "baseline": combo_label(base),
            "baseline_n": sum(len(s) for s in theirs),
            "baseline_ttfb_ms": base_p[p],
            "increase_pct": increase_pct(pooled[p], base_p[p]),
            "ratio": pooled[p] / base_p[p],
            "document_ratio": document.FIGURE1_RATIO if combo == doc else None,
        }
        for p in PERCENTILES
    ]


COLUMNS = (
    "pool", "profiles", "n_profiles", "data_bytes", "group", "chain", "chain_bytes_requested",
    "chain_der_bytes", "stack", "percentile", "n", "ttfb_ms", "baseline", "baseline_n",
    "baseline_ttfb_ms", "increase_pct", "ratio", "document_ratio",
)  # fmt: skip


def degradation_rows(store, summary: list[dict], base: tuple) -> list[dict]:
    """Per profile with loss or jitter, combination, response size, stack and percentile:
    TTFB and TTLB against the clean profile of the same RTT and bandwidth, with the
    document's numbers beside the rows of its own comparison."""
    profiles = _profiles(store)
    refs = references(profiles)
    cells = {
        (r["profile"], r["group"], r["chain"], r["chain_bytes_requested"], r["data_bytes"],
         r["stack"]): r
        for r in summary
    }  # fmt: skip
    combos = {combination(r): r["chain_der_bytes"] for r in summary}
    doc = document_combination(combos, base)
    out = []
    for (profile, *rest), r in sorted(cells.items(), key=lambda kv: str(kv[0])):
        ref = cells.get((refs.get(profile), *rest))
        if ref is None:
            continue
        combo = combination(r)
        for p in PERCENTILES:
            row = {
                "profile": profile,
                "reference_profile": ref["profile"],
                "group": r["group"],
                "chain": r["chain"],
                "chain_bytes_requested": r["chain_bytes_requested"],
                "stack": r["stack"],
                "data_bytes": r["data_bytes"],
                "percentile": p,
                "n": r["n"],
                "reference_n": ref["n"],
            }
            for what in ("ttfb", "ttlb"):
                value, reference = r[f"{what}_p{p}_ms"], ref[f"{what}_p{p}_ms"]
                row[f"{what}_ms"] = value
                row[f"reference_{what}_ms"] = reference
                row[f"{what}_degradation_pct"] = increase_pct(value, reference)
            row.update(_document_columns(profiles[profile], r["data_bytes"], combo, base, doc, p))
            out.append(row)
    return out


def _document_columns(desc: dict, size: int, combo, base, doc, p: int) -> dict:
    """The document's TTLBs beside pqlab's where the row is its comparison: the lossy
    link it names, 200 KiB, the classical combination (and the post-quantum one's lossy
    TTLB, for which it gives no lossless value)."""
    out = dict.fromkeys(
        ("document_ttlb_ms", "document_reference_ttlb_ms", "document_degradation_pct")
    )
    if not document.is_loss_condition(desc) or size != document.LOSS_RESPONSE_BYTES:
        return out
    if combo == base:
        out["document_ttlb_ms"] = document.CLASSICAL_LOSSY_MS[p]
        out["document_reference_ttlb_ms"] = document.CLASSICAL_LOSSLESS_MS[p]
        out["document_degradation_pct"] = document.degradation_pct(p)
    elif combo == doc:
        out["document_ttlb_ms"] = document.PQ_LOSSY_MS[p]
    return out


def extend_section(store, section, summary: list[dict], base: tuple) -> None:
    """Figure 1 pooled (table and one figure per pool and stack) and the degradation table
    (with a figure of the TTLB degradation at the largest response size)."""
    pooled = pooled_rows(store, summary, base)
    if pooled:
        section.table(
            store.export_rows("ttlb_pooled_ttfb", pooled, list(COLUMNS)),
            "Document 003's figure 1: the handshake time (TTFB) at the 50th, 75th and 90th "
            "percentiles of one dataset pooled over the profiles that differ only in RTT and "
            "loss, each combination beside the classical one over the same profiles "
            "(document_ratio: the document's 'about twice', beside the combination it "
            "compared)",
        )
        names: dict[str, int] = {}
        for key in dict.fromkeys((r["pool"], r["stack"], r["profiles"]) for r in pooled):
            rows = [r for r in pooled if (r["pool"], r["stack"], r["profiles"]) == key]
            name = pool_name(rows[0])
            names[name] = names.get(name, 0) + 1
            suffix = f"_{names[name]}" if names[name] > 1 else ""
            section.figure(
                _pooled_figure(store, rows, name + suffix),
                f"Handshake time pooled over {rows[0]['n_profiles']} profiles ({key[0]}), "
                "per percentile: the classical combination and each other (left; the "
                "document's bar at about twice the classical one marked), and the increase "
                "over the classical one (right); cf. the document's figure 1",
            )
    degraded = degradation_rows(store, summary, base)
    if degraded:
        section.table(
            store.export_rows("ttlb_degradation", degraded),
            "Each profile with loss or jitter against the clean profile of the same RTT, "
            "rate and window: TTFB and TTLB per combination, size and percentile, and the "
            "degradation in % (document_*: its TTLBs at 10 % loss, 200 ms, 1 Mbit/s, 200 KiB, "
            "'97-331 %' slower)",
            max_rows=90,
        )
        section.figure(
            _degradation_figure(store, degraded, base),
            "TTLB degradation of each profile with loss or jitter against the clean one of "
            "the same RTT and bandwidth, classical combination, largest response size, per "
            "percentile (black: the document's, where the profile is its own)",
        )


def _pooled_figure(store, rows: list[dict], name: str):
    plt = figures.plt
    combos = list(dict.fromkeys(combination(r) for r in rows))
    at = {(*combination(r), r["percentile"]): r for r in rows}
    x = np.arange(len(PERCENTILES))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / (len(combos) + 1)
    base = [at[(*combos[0], p)]["baseline_ttfb_ms"] for p in PERCENTILES]
    colors = figures.plt.rcParams["axes.prop_cycle"].by_key()["color"]
    left.bar(x, base, width, label=rows[0]["baseline"], color=colors[0])
    for i, combo in enumerate(combos, start=1):
        mine = [at[(*combo, p)] for p in PERCENTILES]
        color = colors[i % len(colors)]
        left.bar(x + i * width, [r["ttfb_ms"] for r in mine], width, color=color)
        right.bar(
            x + (i - 1) * 0.8 / len(combos), [r["increase_pct"] for r in mine],
            0.8 / len(combos), label=combo_label(combo), color=color,
        )  # fmt: skip
        ratio = mine[0]["document_ratio"]
        if ratio:
            left.plot(
                x + i * width, [b * ratio for b in base], "k_", ms=14, mew=2,
                label=f"document: about {ratio:g}x the classical",
            )  # fmt: skip
            right.plot(
                x + (i - 1) * 0.8 / len(combos), [(ratio - 1) * 100] * len(x), "k_", ms=14,
                mew=2, label=f"document: about +{(ratio - 1) * 100:g} %",
            )  # fmt: skip
    left.set_xticks(x + width * len(combos) / 2, [f"p{p}" for p in PERCENTILES])
    right.set_xticks(x + 0.4 - 0.4 / len(combos), [f"p{p}" for p in PERCENTILES])
    left.set_ylabel("pooled handshake time, TTFB (ms)")
    right.set_ylabel(f"increase over {rows[0]['baseline']} (%)")
    right.axhline(0, color="grey", lw=0.6)
    for ax in (left, right):
        ax.legend(fontsize=6)
    fig.suptitle(f"{rows[0]['pool']} ({rows[0]['n_profiles']} profiles pooled)", fontsize=9)
    return figures.save(fig, store, f"ttlb_pooled_ttfb_{name}")


def pool_name(row: dict) -> str:
    """A pool's part of a figure's file name: what its profiles share (and the stack when
    it is not the default)."""
    shared = row["pool"].split(":")[0]
    stack = f"_{row['stack']}" if row["stack"] != DEFAULT_STACK else ""
    return figures.safe_name(shared.replace(" ", "").replace("/", "") + stack)


def _degradation_figure(store, rows: list[dict], base: tuple):
    plt = figures.plt
    mine = [r for r in rows if combination(r) == base]
    rows = mine or rows
    size = max(r["data_bytes"] for r in rows)
    rows = [r for r in rows if r["data_bytes"] == size]
    keys = list(dict.fromkeys((r["profile"], r["stack"]) for r in rows))
    at = {(r["profile"], r["stack"], r["percentile"]): r for r in rows}
    x = np.arange(len(PERCENTILES))
    width = 0.8 / len(keys)
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, key in enumerate(keys):
        vals = [at[(*key, p)]["ttlb_degradation_pct"] for p in PERCENTILES]
        ax.bar(
            x + i * width, vals, width, label=f"{key[0]} vs {at[(*key, 50)]['reference_profile']}"
        )
        doc = [at[(*key, p)]["document_degradation_pct"] for p in PERCENTILES]
        if doc[0] is not None:
            ax.plot(x + i * width, doc, "k_", ms=14, mew=2, label="document (its TTLBs)")
    ax.set_xticks(x + width * (len(keys) - 1) / 2, [f"p{p}" for p in PERCENTILES])
    ax.set_ylabel(f"TTLB degradation at {size / 1024:g} KiB (%)")
    ax.set_title(
        combo_label(combination(rows[0])),
        fontsize=9,
    )
    ax.legend(fontsize=6)
    return figures.save(fig, store, "ttlb_degradation")

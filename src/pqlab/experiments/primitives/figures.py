"""Figures of the primitives experiment, drawn from raw samples (called by primitives.export).

- per operation: the distribution of every (algorithm, backend)'s samples, as histograms
  (the documents' figures 1-7), one panel per series on its own time axis;
- across algorithms: median with IQR per operation on a log axis;
- across backends: OpenSSL vs liboqs for the same algorithm, with the ratio written on it.
"""

from __future__ import annotations

import numpy as np

from pqlab import figures

MAX_PANELS = 24


def _label(r: dict) -> str:
    return f"{r['algorithm']} ({r['backend']})"


def _groups(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        group = "sig" if r["operation"] in ("sign", "verify") or r["kind"] == "sig" else "kem"
        out.setdefault(f"{group}-{r['operation']}", []).append(r)
    return out


def distributions(store, rows: list[dict]):
    """One histogram figure per operation group (built by a figure worker during the
    export: `distribution_figure`)."""
    for key, series in _groups(rows).items():
        panels = [
            (_label(r), r["_us"], r["median_us"], r["robust_cv"]) for r in series[:MAX_PANELS]
        ]
        png = figures.draw(store, f"primitives-dist-{key}", distribution_figure, key, panels)
        yield (
            png,
            (
                f"Distribution of {key.split('-', 1)[1]} times per algorithm and backend (n "
                "samples each, x axis clipped at the 99th percentile; red line: median)"
            ),
        )


def distribution_figure(key: str, panels: list[tuple]):
    """The histograms of one operation group: a panel per (label, samples in us, median,
    robust CV)."""
    import matplotlib.pyplot as plt

    cols = 2 if len(panels) > 4 else 1
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 1.6 * nrows + 0.6), squeeze=False)
    for ax, (label, us, median, robust_cv) in zip(axes.flat, panels, strict=False):
        hi = float(np.percentile(us, 99))
        shown = us[us <= hi]
        # One filled outline, not 50 bars: the same picture, a fiftieth of the artists.
        ax.hist(shown, bins=50, color="#4c72b0", histtype="stepfilled")
        ax.axvline(median, color="#c44e52", lw=1)
        ax.set_title(f"{label}: median {median:.3g} us, robust CV {robust_cv:.2f}", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("us (up to p99)", fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    group, op = key.split("-", 1)
    fig.suptitle(
        f"Distribution of {op} times ({'signatures' if group == 'sig' else 'KEMs and key agreements'})",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def comparison(store, rows: list[dict]):
    import matplotlib.pyplot as plt

    for group in ("kem", "sig"):
        sel = [r for r in rows if (r["kind"] == "sig") == (group == "sig")]
        if not sel:
            continue
        labels = list(dict.fromkeys(_label(r) for r in sel))
        # Three slots: key generation, then the two operations that use a key; key
        # agreements share the KEM slots (public_key with encaps, shared_secret with decaps).
        slots = [
            ["keygen"],
            ["encaps", "public_key", "sign"],
            ["decaps", "shared_secret", "verify"],
        ]
        slot_names = (
            ["keygen", "encaps / public_key", "decaps / shared_secret"]
            if group == "kem"
            else ["keygen", "sign", "verify"]
        )
        fig, ax = plt.subplots(figsize=(8, max(2.5, 0.5 * len(labels) + 1)))
        height = 0.8 / len(slots)
        for j, (ops, slot_name) in enumerate(zip(slots, slot_names, strict=True)):
            med, lo, hi, ys = [], [], [], []
            for i, lab in enumerate(labels):
                r = next((x for x in sel if _label(x) == lab and x["operation"] in ops), None)
                if r is None:
                    continue
                ys.append(i + (j - 1) * height)
                med.append(r["median_us"])
                lo.append(r["median_us"] - r["q1_us"])
                hi.append(r["q3_us"] - r["median_us"])
            if ys:
                ax.barh(
                    ys,
                    med,
                    height=height,
                    xerr=[lo, hi],
                    label=slot_name,
                    capsize=1.5,
                    error_kw={"lw": 0.6},
                )
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("median time per operation, us (log scale; whiskers: Q1-Q3)")
        ax.legend(fontsize=7)
        ax.set_title("KEMs and key agreements" if group == "kem" else "Signatures")
        png = figures.save(fig, store, f"primitives-compare-{group}")
        yield (
            png,
            (
                "Median time of each operation across algorithms and backends "
                f"({'KEMs / key agreements' if group == 'kem' else 'signatures'}; log scale)"
            ),
        )


def backends(store, ratios: list[dict]):
    import matplotlib.pyplot as plt

    if not ratios:
        return
    labels = [f"{r['algorithm']} {r['operation']}" for r in ratios]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(labels) + 1.2))
    y = np.arange(len(labels))
    ax.barh(y - 0.2, [r["openssl_median_us"] for r in ratios], height=0.4, label="OpenSSL")
    ax.barh(y + 0.2, [r["liboqs_median_us"] for r in ratios], height=0.4, label="liboqs")
    for i, r in enumerate(ratios):
        x = max(r["openssl_median_us"], r["liboqs_median_us"])
        ax.text(x * 1.08, i, f"{r['openssl_over_liboqs']:.1f}x", va="center", fontsize=7)
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("median us (log scale); label: OpenSSL time / liboqs time")
    ax.legend(fontsize=7)
    ax.set_title("Same algorithm, two libraries")
    png = figures.save(fig, store, "primitives-backends")
    yield (
        png,
        (
            "OpenSSL vs liboqs for the same algorithm and operation: the libraries differ "
            "several-fold, so a number measured with one does not describe the other"
        ),
    )


def draw_all(store, rows: list[dict], ratios: list[dict]):
    out = []
    out += list(backends(store, ratios))
    out += list(comparison(store, rows))
    out += list(distributions(store, rows))
    return out

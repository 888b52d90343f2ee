"""`pqlab plan`'s tables, figures and report section, from the database alone, and the
lines it prints in the terminal: per cell the predicted bytes, segments, round trips and
times (a range where a signature's size varies), the message sizes, TTLB per response
size, where each extra round trip begins (the cliffs), and the migration table."""

from __future__ import annotations

from pathlib import Path

from matplotlib.ticker import MaxNLocator

from pqlab import figures
from pqlab.report.section import Section, template

KEYS = 'stack, "group", server_sig, ca_sig, intermediates, send_root, client_sig, chain'


def _range(col: str, name: str | None = None) -> str:
    """min and max of a column over a cell's variants (equal when its sizes are fixed)."""
    name = name or col
    return f"min({col}) AS {name}_min, max({col}) AS {name}_max"


def _cells_table(store) -> Path:
    return store.export_table(
        "plan",
        f"""
        SELECT {KEYS}, any_value(chain_der_bytes) AS chain_der_bytes,
          any_value(chain_certs) AS chain_certs, any_value(padding_bytes) AS padding_bytes,
          path, any_value(rtt_ms) AS rtt_ms, any_value(bandwidth_bps) AS bandwidth_bps,
          any_value(loss_pct) AS loss_pct, any_value(initcwnd) AS initcwnd,
          any_value(mss) AS mss, any_value(client_hello_bytes) AS client_hello_bytes,
          any_value(client_hello_segments) AS client_hello_segments,
          {_range("server_flight_bytes")}, {_range("server_flight_segments")},
          {_range("flight_rounds")}, {_range("round_trips")}, {_range("ttfb_ms")},
          {_range("handshake_bytes")}, min(next_cliff_chain_bytes) AS next_cliff_chain_bytes,
          min(headroom_bytes) AS headroom_bytes, min(p_no_loss) AS p_no_loss, cell_id,
          any_value(cpu_ms) AS cpu_ms, any_value(per_packet_us) AS per_packet_us
        FROM plan_cells GROUP BY ALL ORDER BY stack, "group", server_sig, ca_sig,
          intermediates, chain_der_bytes, rtt_ms, bandwidth_bps, loss_pct, initcwnd""",
    )


def _messages_table(store) -> Path:
    return store.export_table(
        "plan_messages",
        f"""
        SELECT {KEYS}, any_value(chain_der_bytes) AS chain_der_bytes,
          any_value(chain_certs) AS chain_certs, any_value(mss) AS mss,
          any_value(client_hello_bytes) AS client_hello_record_bytes,
          any_value(server_hello_bytes) AS server_hello_bytes,
          any_value(encrypted_extensions_bytes) AS encrypted_extensions_bytes,
          {_range("certificate_request_bytes")},
          any_value(certificate_bytes) AS certificate_bytes,
          {_range("certificate_verify_bytes")}, any_value(finished_bytes) AS finished_bytes,
          any_value(bytes_through_certificate) AS bytes_through_certificate,
          {_range("server_flight_bytes")}, max(server_writes) AS server_writes,
          {_range("client_flight_bytes")}, any_value(write_model) AS write_model
        FROM plan_cells GROUP BY ALL ORDER BY stack, "group", server_sig, ca_sig,
          intermediates, chain_der_bytes""",
    )


def _ttlb_table(store) -> Path:
    keys = ", ".join(f"c.{k.strip()}" for k in KEYS.split(","))
    return store.export_table(
        "plan_ttlb",
        f"""
        SELECT {keys}, any_value(c.chain_der_bytes) AS chain_der_bytes, c.path, t.data_bytes,
          {_range("t.ttlb_ms", "ttlb_ms")}, {_range("t.ttlb_round_trips", "round_trips")},
          c.cell_id
        FROM plan_ttlb t JOIN plan_cells c ON c.cell_id = t.cell_id AND c.variant = t.variant
        GROUP BY ALL ORDER BY c.stack, c."group", c.server_sig, c.ca_sig, c.intermediates,
          chain_der_bytes, c.path, t.data_bytes""",
    )


def _cliffs_table(store) -> Path:
    return store.export_table(
        "plan_cliffs",
        """
        SELECT DISTINCT stack, "group", server_sig, ca_sig, intermediates, send_root,
          client_sig, chain_certs, initcwnd, mss, variant, round_trips, chain_der_bytes,
          server_flight_bytes
        FROM plan_cliffs ORDER BY stack, "group", server_sig, ca_sig, intermediates,
          initcwnd, mss, variant, round_trips""",
    )


def export(store):
    if not store.has_table("plan_cells") or not store.query("SELECT 1 FROM plan_cells LIMIT 1"):
        return None
    section = Section(
        "Predicted handshakes: bytes, segments, round trips and time", template("plan_intro")
    )
    if store.query("SELECT 1 FROM plan_migration LIMIT 1"):
        section.table(
            store.export_table(
                "plan_migration",
                'SELECT * FROM plan_migration ORDER BY "from", "to", rtt_ms, bandwidth_bps, '
                "loss_pct, initcwnd",
            ),
            "Migration: what the planned configuration adds per handshake and per 100 KiB "
            "response, per path (largest signatures where a size varies)",
        )
    section.table(
        _cells_table(store),
        "Per configuration and path: server flight, segments, round trips, TTFB (_min/_max "
        "over the signature's possible sizes), the next cliff and the headroom before it",
    )
    section.table(
        _messages_table(store),
        "Message sizes (bytes; ClientHello as records, the rest as handshake messages) and "
        "where the stack's writes cut the server flight",
    )
    section.table(_ttlb_table(store), "Time to last byte per response size", max_rows=90)
    section.table(
        _cliffs_table(store),
        "Cliffs: the chain size (DER bytes of the certificates sent) from which the "
        "handshake takes each extra round trip, for the configuration's group, signature, "
        "certificate count, initcwnd and MSS",
    )
    for png, caption in _figures(store):
        section.figure(png, caption)
    return section


def _figures(store) -> list[tuple[Path, str]]:
    out = [_steps_figure(store)]
    sweep = store.query(
        "SELECT count(DISTINCT chain_der_bytes) AS n FROM plan_cells "
        "WHERE chain_bytes_requested IS NOT NULL"
    )
    if sweep and sweep[0]["n"] > 2:
        out.append(_sweep_figure(store))
    rtts = store.query("SELECT count(DISTINCT rtt_ms) AS n FROM plan_cells")
    if rtts and rtts[0]["n"] > 2:
        out.append(_rtt_figure(store))
    return out


def _rtt_figure(store) -> tuple[Path, str]:
    """Predicted TTFB against the path's RTT, one line per configuration and rate (the
    algorithms' own chains, largest signatures)."""
    plt = figures.plt
    rows = store.query(
        'SELECT "group", server_sig, ca_sig, intermediates, bandwidth_bps, initcwnd, rtt_ms, '
        "max(ttfb_ms) AS ttfb, max(round_trips) AS rt FROM plan_cells "
        "WHERE chain_bytes_requested IS NULL AND loss_pct = 0 GROUP BY ALL ORDER BY rtt_ms"
    )
    fig, ax = plt.subplots(figsize=(8, 4.5))
    keys = dict.fromkeys(
        (
            r["group"],
            r["server_sig"],
            r["ca_sig"],
            r["intermediates"],
            r["bandwidth_bps"],
            r["initcwnd"],
        )
        for r in rows
    )
    for key in keys:
        pts = [
            r
            for r in rows
            if (
                r["group"],
                r["server_sig"],
                r["ca_sig"],
                r["intermediates"],
                r["bandwidth_bps"],
                r["initcwnd"],
            )
            == key
        ]
        rate = f"{key[4] / 1e6:g} Mbit/s" if key[4] else "unlimited"
        label = f"{key[0]} / {key[1]} / CA {key[2]}" + (f" +{key[3]} int." if key[3] else "")
        ax.plot(
            [r["rtt_ms"] for r in pts],
            [r["ttfb"] for r in pts],
            marker="o",
            label=f"{label}, {rate}, initcwnd {key[5]}",
        )
    ax.set_xlabel("round-trip time (ms)")
    ax.set_ylabel("predicted TTFB (ms)")
    ax.legend(fontsize=6)
    png = figures.save(fig, store, "plan_ttfb_vs_rtt")
    return png, "Predicted TTFB against the path's round-trip time (--rtt sweep)"


def _steps_figure(store) -> tuple[Path, str]:
    """Round trips against chain size, one step line per group / signer / certificate
    count / window (largest signatures), the configurations' own chains marked."""
    plt = figures.plt
    lines = store.query(
        'SELECT "group", server_sig, chain_certs, initcwnd, mss, round_trips, '
        "min(chain_der_bytes) AS at FROM plan_cliffs GROUP BY ALL ORDER BY ALL"
    )
    own = store.query(
        'SELECT "group", server_sig, chain_certs, initcwnd, mss, chain_der_bytes, '
        "max(round_trips) AS rt FROM plan_cells GROUP BY ALL"
    )
    fig, ax = plt.subplots(figsize=(8, 4.5))
    keys = sorted(
        {(r["group"], r["server_sig"], r["chain_certs"], r["initcwnd"], r["mss"]) for r in lines}
    )
    top = max([r["at"] for r in lines] + [r["chain_der_bytes"] for r in own] + [1]) * 1.1
    for key in keys:
        pts = [
            (r["at"], r["round_trips"])
            for r in lines
            if (r["group"], r["server_sig"], r["chain_certs"], r["initcwnd"], r["mss"]) == key
        ]
        xs = [0] + [x for x, _ in pts] + [top]
        ys = [pts[0][1] - 1] + [y for _, y in pts] + [pts[-1][1]]
        label = f"{key[0]} / {key[1]}, {key[2]} cert(s), initcwnd {key[3]}"
        (line,) = ax.step(xs, ys, where="post", label=label)
        for r in own:
            if (r["group"], r["server_sig"], r["chain_certs"], r["initcwnd"], r["mss"]) == key:
                ax.plot(r["chain_der_bytes"], r["rt"], "o", color=line.get_color())
    ax.set_xlabel("chain size: DER bytes of the certificates the server sends")
    ax.set_ylabel("handshake round trips (TCP + TLS)")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(0, top)
    ax.legend(fontsize=6)
    png = figures.save(fig, store, "plan_round_trips_vs_chain_bytes")
    return png, (
        "Where each extra round trip begins as the chain grows (steps), and the "
        "configurations' own chains (dots)"
    )


def _sweep_figure(store) -> tuple[Path, str]:
    """TTFB against the swept chain sizes, one line per path and configuration."""
    plt = figures.plt
    rows = store.query(
        'SELECT "group", server_sig, path, rtt_ms, chain_der_bytes, max(ttfb_ms) AS ttfb '
        "FROM plan_cells WHERE chain_bytes_requested IS NOT NULL GROUP BY ALL "
        "ORDER BY rtt_ms, path, chain_der_bytes"
    )
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for key in dict.fromkeys((r["group"], r["server_sig"], r["path"]) for r in rows):
        pts = [
            (r["chain_der_bytes"], r["ttfb"])
            for r in rows
            if (r["group"], r["server_sig"], r["path"]) == key
        ]
        ax.plot([x for x, _ in pts], [y for _, y in pts], label=f"{key[0]} / {key[1]}, {key[2]}")
    ax.set_xlabel("chain size: DER bytes of the certificates the server sends")
    ax.set_ylabel("predicted TTFB (ms)")
    ax.set_yscale("log")
    ax.legend(fontsize=6)
    png = figures.save(fig, store, "plan_ttfb_vs_chain_bytes")
    return png, "Predicted TTFB against chain size per path (--chain-bytes sweep)"


def terminal_lines(store, cell_ids: list[str], migration: tuple[str, str] | None) -> list[str]:
    """What `pqlab plan` prints: one line per cell, then the migration table."""
    out = []
    rows = store.query(
        "SELECT cell_id, any_value(path) AS path, any_value(chain_der_bytes) AS chain, "
        "any_value(client_hello_bytes) AS ch, any_value(client_hello_segments) AS chs, "
        f"{_range('server_flight_bytes', 'fb')}, {_range('server_flight_segments', 'seg')}, "
        f"{_range('round_trips', 'rt')}, {_range('ttfb_ms', 'ttfb')}, "
        "min(next_cliff_chain_bytes) AS cliff, min(headroom_bytes) AS headroom "
        "FROM plan_cells WHERE list_contains(?, cell_id) GROUP BY cell_id ORDER BY cell_id",
        [cell_ids],
    )
    for r in rows:
        what = r["cell_id"].split("|")
        cliff = (
            f"next round trip at {r['cliff']} B (+{r['headroom']} B)"
            if r["cliff"] is not None
            else "no further cliff below 128 KiB"
        )
        out.append(
            f"{' / '.join(what[:3])} [{what[3]}] on {r['path']}: chain {r['chain']} B, "
            f"ClientHello {r['ch']} B ({r['chs']} segment{'s' if r['chs'] > 1 else ''}), "
            f"server flight {_span(r, 'fb')} B in {_span(r, 'seg')} segments, "
            f"{_span(r, 'rt')} round trips ({_stalls(r)}), TTFB {_span(r, 'ttfb', '{:.1f}')} ms; "
            f"{cliff}"
        )
    if migration is not None:
        out += _migration_lines(store, *migration)
    return out


def _stalls(r: dict) -> str:
    """How often the flight waits for ACKs: round trips beyond the TCP and TLS ones."""
    lo, hi = r["rt_min"] - 2, r["rt_max"] - 2
    if hi <= 0:
        return "the flight fits the initial window"
    n = str(lo) if lo == hi else f"{lo}-{hi}"
    return f"the flight waits {n} round trip{'s' if hi > 1 else ''} for ACKs"


def _span(r: dict, name: str, fmt: str = "{}") -> str:
    lo, hi = fmt.format(r[f"{name}_min"]), fmt.format(r[f"{name}_max"])
    return lo if lo == hi else f"{lo}-{hi}"


def _migration_lines(store, today: str, planned: str) -> list[str]:
    rows = store.query(
        'SELECT * FROM plan_migration WHERE "from" = ? AND "to" = ? '
        "ORDER BY rtt_ms, bandwidth_bps, loss_pct, initcwnd",
        [today, planned],
    )
    out = ["", f"migration: {today}  ->  {planned}"]
    head = f"{'path':44} {'+bytes':>7} {'+RTT':>5} {'+TTFB ms':>9} {'+TTFB %':>8} {'+TTLB 100KiB ms':>16} {'+%':>7}"
    out.append(head)
    for r in rows:
        out.append(
            f"{r['path'][:44]:44} {r['extra_bytes']:>7} {r['extra_round_trips']:>5} "
            f"{r['extra_ttfb_ms']:>9.1f} {r['extra_ttfb_pct']:>7.1f}% "
            f"{r['extra_ttlb_ms']:>16.1f} {r['extra_ttlb_pct']:>6.1f}%"
        )
    return out

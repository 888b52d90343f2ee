"""Source document 003's own numbers, transcribed once, for the tables that set pqlab's
beside them: the relation its figure 1 shows, and the TTLBs from which it says a lossy
connection is already "97-331 %" slower than a lossless one."""

from __future__ import annotations

from pqlab.experiments.ttlb.analyse import PERCENTILES

# Figure 1 (1 Mbit/s; loss 0, 1, 3, 10 %; RTT 35 and 200 ms; initcwnd 20; the pooled
# dataset's 50th, 75th and 90th percentiles of the handshake time): the document prints no
# values. Its text says the ML-DSA-sized (16 KB) chain takes "nearly twice" the time of the
# 8 KB one, and its description of the bars says the post-quantum bar is about twice the
# classical one at each of the three percentiles.
FIGURE1_RATIO = 2.0

# The comparison after figure 4: 200 KiB from the server, RTT 200 ms, 1 Mbit/s, initcwnd 20.
# TTLB at p50, p75, p90 (ms), classical and post-quantum at 10 % loss, classical at 0 %.
LOSS_RESPONSE_BYTES = 200 * 1024
LOSS_RTT_MS = 200.0
LOSS_RATE_BPS = 1e6
LOSS_PCT = 10.0
LOSS_INITCWND = 20
CLASSICAL_LOSSY_MS = dict(zip(PERCENTILES, (4644.0, 7093.0, 10178.0), strict=True))
PQ_LOSSY_MS = dict(zip(PERCENTILES, (6010.0, 8883.0, 12378.0), strict=True))
CLASSICAL_LOSSLESS_MS = dict(zip(PERCENTILES, (2364.0, 2364.0, 2364.0), strict=True))
# What the text says of them: the post-quantum TTLB 20-30 % above the classical one, the
# classical one already 97-331 % above the lossless.
STATED_PQ_INCREASE_PCT = (20.0, 30.0)
STATED_DEGRADATION_PCT = (97.0, 331.0)


def degradation_pct(p: int) -> float:
    """The document's classical degradation at percentile p, from its own milliseconds."""
    return (CLASSICAL_LOSSY_MS[p] / CLASSICAL_LOSSLESS_MS[p] - 1) * 100


def is_loss_condition(profile: dict) -> bool:
    """Whether a profile (`LinkProfile.describe()`) is the document's lossy link: RTT
    200 ms, 1 Mbit/s, initcwnd 20, no jitter, 10 % loss from the server to the client, and
    10 % or none the other way (the document does not say whether netem ran on one veth
    end or both)."""
    c2s, s2c = profile["c2s"], profile["s2c"]
    return (
        abs(profile["rtt_ms"] - LOSS_RTT_MS) < 1e-6
        and profile.get("initcwnd") == LOSS_INITCWND
        and c2s["rate_bps"] == s2c["rate_bps"] == LOSS_RATE_BPS
        and not (c2s["jitter_ms"] or s2c["jitter_ms"])
        and s2c["loss_pct"] == LOSS_PCT
        and c2s["loss_pct"] in (0.0, LOSS_PCT)
    )


# Figure 6: the CDF of the post-quantum connections' TTLB with 200 KiB from the server, RTT
# 35 ms, initcwnd 20, one line per path: 1 Gbit/s without and with loss, 1 Mbit/s without and
# with loss, and paretonormal jitter (35/4 ms) on the 1 Gbit/s link. The losses are its
# text's ("1 Gbps with 5 % loss, 1 Mbps with 10 % loss"; the figure's description says 0 and
# 5 % in each tier). Each path as (rate bit/s, loss %, jitter ms, jitter distribution or
# None), the same each way.
FIGURE6_RESPONSE_BYTES = 200 * 1024
FIGURE6_RTT_MS = 35.0
FIGURE6_INITCWND = 20
FIGURE6_PATHS = (
    (1e9, 0.0, 0.0, None),
    (1e9, 5.0, 0.0, None),
    (1e6, 0.0, 0.0, None),
    (1e6, 10.0, 0.0, None),
    (1e9, 0.0, FIGURE6_RTT_MS / 4, "paretonormal"),
)


def figure6_path(profile: dict) -> tuple | None:
    """The figure 6 path a profile (`LinkProfile.describe()`) is, or None: RTT 35 ms,
    initcwnd 20, and one of the paths, the same each way."""
    c2s, s2c = profile["c2s"], profile["s2c"]
    if abs(profile["rtt_ms"] - FIGURE6_RTT_MS) > 1e-6:
        return None
    if profile.get("initcwnd") != FIGURE6_INITCWND:
        return None
    if any(c2s[k] != s2c[k] for k in ("rate_bps", "loss_pct", "jitter_ms", "dist")):
        return None
    jitter = s2c["jitter_ms"]
    path = (s2c["rate_bps"], s2c["loss_pct"], jitter, s2c["dist"] if jitter else None)
    return path if path in FIGURE6_PATHS else None


def is_figure6(profiles: list[dict]) -> bool:
    """Whether a figure's lines (their profiles) are figure 6's: each path once, no other."""
    paths = [figure6_path(p) for p in profiles]
    return None not in paths and sorted(paths, key=str) == sorted(FIGURE6_PATHS, key=str)

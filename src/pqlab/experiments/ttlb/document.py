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

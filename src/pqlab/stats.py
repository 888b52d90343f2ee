"""Statistics derived from raw samples: the documents' summary, percentiles, bootstrap CIs,
and noise warnings that say what to do.

Quantiles use numpy's default (linear interpolation, Hyndman-Fan type 7), the same as
pandas and Excel's PERCENTILE.INC that the documents' tables were made with.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np


def summarize(values) -> dict:
    """n, mean, sd (sample, ddof=1), Q1, median, Q3, robust CV = IQR/median, min, max, p90, p99."""
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        raise ValueError("no samples to summarize")
    q1, median, q3, p90, p99 = np.percentile(a, [25, 50, 75, 90, 99])
    return {
        "n": int(a.size),
        "mean": float(a.mean()),
        "sd": float(a.std(ddof=1)) if a.size > 1 else 0.0,
        "q1": float(q1),
        "median": float(median),
        "q3": float(q3),
        "robust_cv": float((q3 - q1) / median) if median else float("nan"),
        "min": float(a.min()),
        "max": float(a.max()),
        "p90": float(p90),
        "p99": float(p99),
    }


def percentiles(values, ps=(50, 75, 90)) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    return {f"p{p:g}": float(np.percentile(a, p)) for p in ps}


def drift(values, rounds) -> float | None:
    """How far a cell's timing moved while it ran, its cells interleaved in rounds: the
    median of its later rounds minus the median of its earlier ones (the earlier and later
    halves of its rounds; the middle one of an odd count in neither), relative to its overall
    median. None with fewer than two rounds or an empty half."""
    a = np.asarray(values, dtype=float)
    r = np.asarray(rounds, dtype=float)  # None (runs made before rounds) reads as NaN
    if a.size == 0 or r.size != a.size:
        return None
    a, r = a[~np.isnan(r)], r[~np.isnan(r)]
    distinct = np.unique(r)
    if distinct.size < 2:
        return None
    half = distinct.size // 2
    early, late = a[np.isin(r, distinct[:half])], a[np.isin(r, distinct[-half:])]
    overall = float(np.median(a))
    if early.size == 0 or late.size == 0 or overall == 0:
        return None
    return (float(np.median(late)) - float(np.median(early))) / overall


def within_drift(change: float, drifts) -> bool:
    """Whether a relative change is no larger than the drift the compared cells showed while they ran (the largest of their `drifts`, None ignored): such a
    difference may be the machine's, not the algorithms'."""
    known = [abs(d) for d in drifts if d is not None]
    return bool(known) and abs(change) <= max(known)


def bootstrap_ci(
    a, b=None, stat=np.median, n_boot: int = 2000, level: float = 0.95, seed: int = 12345
) -> tuple[float, float, float]:
    """Bootstrap CI of stat(a), or of the relative difference stat(b)/stat(a) - 1 if b is given.

    Returns (estimate, low, high). Deterministic for a given seed.
    """
    rng = np.random.default_rng(seed)
    a = np.asarray(a, dtype=float)
    if b is None:
        est = float(stat(a))
        boots = np.array([stat(rng.choice(a, a.size)) for _ in range(n_boot)])
    else:
        b = np.asarray(b, dtype=float)
        est = float(stat(b) / stat(a) - 1)
        boots = np.array(
            [stat(rng.choice(b, b.size)) / stat(rng.choice(a, a.size)) - 1 for _ in range(n_boot)]
        )
    lo, hi = np.percentile(boots, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return est, float(lo), float(hi)


class Cause(enum.Enum):
    """Every reason pqlab warns about a measurement: its code (stored with the warning), the
    title the report groups warnings under, and what to do about it. Listed in the order the
    report shows them, most actionable first."""

    LINKTEST_FAILED = (
        "linktest-failed",
        "The emulated link did not behave as its profile says",
        "numbers measured over this link do not mean what the profile says; check it with "
        "'pqlab linktest --profile ...'",
    )
    CAPTURE_DROPS = (
        "capture-drops",
        "Packets missing from a capture",
        "rerun the cell with fewer parallel jobs on the machine",
    )
    RETRANSMISSIONS = (
        "retransmissions",
        "Retransmissions on a lossless link",
        "the queue limit overflowed or the emulator fell behind; raise limit= or check with "
        "'pqlab linktest'",
    )
    CAPACITY_NOT_SATURATED = (
        "capacity-not-saturated",
        "A capacity maximum that did not saturate the server",
        "this rate is a lower bound on the server's capacity: give the load generator more "
        "CPUs (or its own host), add clients, or run on a quieter machine",
    )
    OFF_MODEL = (
        "off-model",
        "Measurements the wire model did not predict",
        "the warning names the mechanism that disagreed (docs/plan.md says where the model is "
        "known to be wrong); for times, check the link with 'pqlab linktest --profile ...': "
        "a busy machine or a wrong profile moves them away from the model",
    )
    DRIFT = (
        "drift",
        "Cells whose timings drifted while they ran",
        "something else used the machine for part of the run: a comparison whose difference "
        "is within the drift is not called significant; rerun on a quiet machine",
    )
    CLOCK_ORDER = (
        "clock-order",
        "Events across hosts closer than their clocks can tell apart",
        "the hosts are closer than the clock offset is known (a LAN): phases across hosts "
        "are marked below_clock_uncertainty; read the one-host phases, or synchronise the "
        "clocks better (PTP) for the cross-host ones",
    )
    PROBE_UNSEEN = (
        "probe-unseen",
        "A probe that saw only what its client knows",
        "run the probe as root (CAP_NET_RAW) so it captures the connection: message sizes "
        "and times, segments, round trips and congestion-window stalls come from the capture",
    )
    PROBE_SOURCES_DISAGREE = (
        "probe-sources-disagree",
        "A probe's capture and its client's own events disagree",
        "the capture lost packets or holds another connection; rerun the probe, and read "
        "its pcap with the key log in Wireshark",
    )
    PROBE_CHAIN_KEPT = (
        "probe-chain-kept",
        "A probe's client stack kept less of the server's chain than the server sent",
        "the chain reported is the one the capture shows; without a capture (run as root) "
        "probe with a stack that keeps whole chains (openssl, rustls): wolfSSL keeps at most "
        "9 certificates, and none over 9 KiB",
    )
    CPU_CONTENDED = (
        "cpu-contended",
        "The CPU was shared during timing",
        "run on a quiet machine; compare CPU-time figures, not wall-clock ones",
    )
    ENV_MASK_IGNORED = (
        "env-mask-ignored",
        "OPENSSL_ia32cap from the environment ignored",
        "pqlab sets the mask itself per --aesni/--mask; unset it",
    )
    NO_AESNI = ("no-aesni", "No AES-NI on this CPU", "run on a CPU with AES-NI to compare")
    BUDGET = (
        "budget",
        "Time budget reached before all samples",
        "raise --max-seconds for more samples of slow operations",
    )
    NOT_MEASURED = (
        "not-measured",
        "Algorithms not measured",
        "see 'pqlab algorithms' for what each backend provides",
    )
    FREQUENCY_SCALING = (
        "frequency-scaling",
        "CPU frequency scaling",
        "the clock speed changes under load and skews short timings; pin it with "
        "'cpupower frequency-set -g performance'",
    )
    TURBO = (
        "turbo",
        "CPU turbo / boost",
        "boost clocks depend on temperature and load; disable it for stable numbers, or "
        "compare only runs made together",
    )
    NOISY = (
        "noisy",
        "Measurement noise: robust CV above 10 %",
        "close other programs, pin the CPU governor to 'performance', or run more "
        "iterations; compare medians, not means",
    )
    OUTLIERS = (
        "outliers",
        "Outliers pull the mean up",
        "outliers dominate the mean (interrupts, page faults); rely on the median and quartiles",
    )
    FEW_SAMPLES = (
        "few-samples",
        "Few samples",
        "use more iterations (--iterations / -n) for stable quantiles",
    )
    INHERENT_VARIANCE = (
        "inherent-variance",
        "Variance by design, not noise",
        "this spread is the algorithm's own, not this machine's",
    )

    def __init__(self, code: str, title: str, advice: str):
        self.code = code
        self.title = title
        self.advice = advice

    @classmethod
    def of(cls, code: str) -> Cause | None:
        """The cause a stored code names (None: a code this pqlab does not know)."""
        return next((c for c in cls if c.code == code), None)


@dataclass(frozen=True)
class Warning_:
    """A warning about a measurement: its cause, what was seen and what to do about it (the
    cause's advice unless the caller knows better)."""

    cause: Cause
    subject: str
    message: str
    advice: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.cause, Cause):
            raise TypeError(f"a warning's cause is a stats.Cause, not {self.cause!r}")
        if not self.advice:
            object.__setattr__(self, "advice", self.cause.advice)

    @property
    def code(self) -> str:
        return self.cause.code


# Operations whose running time varies by design: the algorithm repeats a step a random
# number of times. Their spread is not measurement noise, so "close other programs" is the
# wrong advice; (family, operation) -> why, with the standard that says so. Falcon's signing
# also rejects samples, but per coefficient: its time spread is about 2 % here, so a wide
# spread there is noise and stays reported as such.
INHERENT_VARIANCE = {
    ("ML-DSA", "sign"): (
        "ML-DSA signing is a rejection-sampling loop: it restarts until the candidate "
        "signature passes its norm checks (FIPS 204, Algorithm 7 ML-DSA.Sign_internal), "
        "on average 4.25 / 5.1 / 3.85 times for ML-DSA-44 / 65 / 87 (FIPS 204, table 1)"
    ),
    ("Dilithium", "sign"): (
        "Dilithium (round 3, the ancestor of ML-DSA) signs with the same rejection-sampling "
        "loop, repeated a random number of times"
    ),
    ("RSA", "keygen"): (
        "RSA key generation tests random odd candidates until two primes are found "
        "(FIPS 186-5, appendix A.1.3); how many candidates that takes is random"
    ),
    ("Falcon", "keygen"): (
        "Falcon key generation draws f and g again until the NTRU equation can be solved "
        "with a short enough basis (Falcon specification 1.2, NTRUGen)"
    ),
}
INHERENT_ADVICE = (
    "this spread is the algorithm's own, not this machine's: closing programs or pinning "
    "the CPU will not remove it; read the median for a typical operation, p90/p99 for the "
    "slow tail a server's worst case sees, and the mean for throughput (operations per "
    "second of a busy server)"
)


def inherent_variance(family: str | None, operation: str) -> str | None:
    """Why `operation` of this algorithm family varies by design, or None."""
    return INHERENT_VARIANCE.get((family or "", operation))


def noise_warnings(
    subject: str, summary: dict, min_n: int = 30, inherent: str | None = None
) -> list[Warning_]:
    """Warnings about a series' sample count and spread. `inherent`: why this operation's
    time varies by design (see INHERENT_VARIANCE); a wide spread is then reported as the
    algorithm's (code "inherent-variance"), not as noise to remove."""
    out = []
    if summary["n"] < min_n:
        out.append(Warning_(Cause.FEW_SAMPLES, subject, f"only {summary['n']} samples"))
    cv = summary.get("robust_cv")
    wide = cv is not None and cv == cv and cv > 0.10
    heavy = summary["mean"] > 0 and summary["sd"] >= 0.5 * summary["mean"] and summary["n"] > 1
    if inherent and (wide or heavy):
        spread = f"robust CV {cv:.0%}" if wide else "standard deviation over half the mean"
        out.append(
            Warning_(
                Cause.INHERENT_VARIANCE,
                subject,
                f"{spread}: {inherent}",
                INHERENT_ADVICE,
            )
        )
        return out
    if wide:
        out.append(Warning_(Cause.NOISY, subject, f"robust CV {cv:.0%} is above 10%"))
    if heavy:
        out.append(Warning_(Cause.OUTLIERS, subject, "standard deviation is over half the mean"))
    return out

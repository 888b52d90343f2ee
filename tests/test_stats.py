import numpy as np
import pytest

from pqlab import stats


def test_summary_matches_definitions():
    values = np.arange(1, 101, dtype=float)  # 1..100
    s = stats.summarize(values)
    assert s["n"] == 100
    assert s["mean"] == pytest.approx(50.5)
    assert s["sd"] == pytest.approx(np.std(values, ddof=1))
    assert s["median"] == pytest.approx(50.5)
    assert s["q1"] == pytest.approx(25.75)  # numpy linear (type 7)
    assert s["q3"] == pytest.approx(75.25)
    assert s["robust_cv"] == pytest.approx((75.25 - 25.75) / 50.5)
    assert (s["min"], s["max"]) == (1, 100)
    assert s["p99"] == pytest.approx(99.01)


def test_summary_rejects_empty():
    with pytest.raises(ValueError):
        stats.summarize([])


def test_noise_warnings_say_what_to_do():
    noisy = stats.summarize([1, 1, 1, 2, 2, 3, 5, 8, 13, 21] * 5)
    warnings = stats.noise_warnings("x", noisy)
    assert any(w.code == "noisy" for w in warnings)
    assert all(w.advice for w in warnings)
    quiet = stats.summarize(np.full(200, 10.0) + np.linspace(0, 0.1, 200))
    assert stats.noise_warnings("y", quiet) == []


def test_bootstrap_is_deterministic_and_covers_the_difference():
    rng = np.random.default_rng(1)
    a = rng.normal(100, 5, 500)
    b = rng.normal(110, 5, 500)
    est, lo, hi = stats.bootstrap_ci(a, b)
    assert lo < est < hi
    assert 0.07 < lo and hi < 0.13
    assert stats.bootstrap_ci(a, b) == (est, lo, hi)

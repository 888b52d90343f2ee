"""Link profiles: parsing, presets, TOML files and grids, and the errors users see."""

from __future__ import annotations

import pytest

from pqlab.errors import UserError
from pqlab.net.profiles import PRESETS, load_profiles, load_toml, parse_profile


def test_cli_string_full():
    p = parse_profile(
        "rtt=50ms,rate=1mbit,loss=1%,jitter=8.75ms,dist=paretonormal,limit=1000,initcwnd=10"
    )
    for d in (p.c2s, p.s2c):
        assert d.delay_s == pytest.approx(0.025)
        assert d.jitter_s == pytest.approx(0.00875)
        assert d.dist == "paretonormal"
        assert d.loss_pct == 1.0
        assert d.rate_bps == 1e6
        assert d.limit == 1000
    assert p.rtt_s == pytest.approx(0.05)
    assert p.initcwnd == 10
    assert p.congestion_control == "cubic"  # default, always recorded
    assert p.describe()["congestion_control"] == "cubic"


def test_per_direction_and_preset_overrides():
    p = parse_profile("1mbps-200ms,s2c.loss=3%,c2s.rate=10mbit,cc=reno,mtu=1400")
    assert p.s2c.loss_pct == 3 and p.c2s.loss_pct == 0
    assert p.c2s.rate_bps == 10e6 and p.s2c.rate_bps == 1e6
    assert p.initcwnd == 20 and p.congestion_control == "reno" and p.mtu == 1400
    assert not p.symmetric
    one_way = parse_profile("delay=10ms,c2s.delay=30ms")
    assert one_way.rtt_s == pytest.approx(0.04)


def test_presets_cover_the_document():
    for name in ("lan", "1gbps-35ms", "1mbps-200ms", "lossy-10pct", "pareto-35ms"):
        assert name in PRESETS
        assert parse_profile(name).name == name
    pareto = parse_profile("pareto-35ms")
    assert pareto.s2c.dist == "paretonormal"
    assert pareto.s2c.jitter_s == pytest.approx(0.035 / 4)
    assert parse_profile("lossy-10pct").s2c.loss_pct == 10


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("delay=-5ms", "negative"),
        ("rtt=-1ms", "negative"),
        ("loss=150%", "outside 0-100%"),
        ("loss=-1%", "outside 0-100%"),
        ("foo=1", "unknown profile key 'foo'"),
        ("rtt=50ms,rat=1mbit", "did you mean rate"),
        ("nosuchpreset", "unknown link profile preset"),
        ("1mbps-20ms", "did you mean"),
        ("rtt=5ms,delay=1ms", "not both"),
        ("dist=pareto", "needs a jitter"),
        ("jitter=1ms,dist=gauss", "not one of uniform, normal, pareto, paretonormal"),
        ("x2y.loss=1%", "c2s. (client to server) or s2c."),
        ("rate=fast", "not a rate"),
        ("limit=0", "at least 1"),
        ("cc=vegas", "congestion control"),
        ("rtt", "unknown link profile preset"),
        ("", "empty link profile"),
    ],
)
def test_errors_are_one_clear_line(text, fragment):
    with pytest.raises(UserError) as e:
        parse_profile(text)
    msg = str(e.value)
    assert fragment in msg
    assert "\n" not in msg


def test_netem_arguments():
    p = parse_profile(
        "rtt=50ms,jitter=8.75ms,corr=25%,dist=paretonormal,loss=1%,"
        "loss_corr=10%,rate=1mbit,limit=500"
    )
    assert p.s2c.netem_args() == [
        "limit",
        "500",
        "delay",
        "25000us",
        "8750us",
        "25%",
        "distribution",
        "paretonormal",
        "loss",
        "random",
        "1%",
        "10%",
        "rate",
        "1000000bit",
    ]
    # Uniform jitter: netem's default without a table; tc has no uniform.dist to load.
    assert parse_profile("delay=5ms,jitter=1ms").c2s.netem_args() == [
        "limit",
        "1000",
        "delay",
        "5000us",
        "1000us",
    ]
    assert parse_profile("rate=1gbit").c2s.netem_args() == [
        "limit",
        "1000",
        "rate",
        "1000000000bit",
    ]


def test_linkem_config_is_exact():
    cfg = parse_profile("rtt=35ms,jitter=8.75ms,dist=paretonormal,rate=1gbit").linkem_config(seed=7)
    assert cfg["seed"] == 7
    a = cfg["a_to_b"]
    assert a["latency_ns"] == 17_500_000 and a["jitter_ns"] == 8_750_000
    assert a["rate_bps"] == 1_000_000_000 and a["overhead_bytes"] == 14


def test_toml_single_entries_and_grid(tmp_path):
    f = tmp_path / "links.toml"
    f.write_text('rtt = "40ms"\nrate = "2mbit"\n[c2s]\nloss = "1%"\n')
    (p,) = load_toml(f)
    assert p.name == "links" and p.c2s.loss_pct == 1 and p.s2c.loss_pct == 0
    g = tmp_path / "grid.toml"
    g.write_text(
        '[[profile]]\nname = "slow"\npreset = "1mbps-200ms"\ninitcwnd = 10\n\n'
        '[grid]\nrtt = ["35ms", "200ms"]\nrate = ["1mbit", "1gbit"]\nloss = ["0%", "3%"]\n'
        "initcwnd = 20\n"
    )
    profiles = load_profiles([str(g)])
    assert len(profiles) == 1 + 8
    assert profiles[0].name == "slow" and profiles[0].initcwnd == 10
    assert {p.name for p in profiles[1:]} >= {"rtt=35ms,rate=1mbit,loss=0%,initcwnd=20"}
    assert all(p.initcwnd == 20 for p in profiles[1:])


def test_toml_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('rtt = "50ms"\nloss = "200%"\n')
    with pytest.raises(UserError, match="outside 0-100%"):
        load_toml(bad)
    broken = tmp_path / "broken.toml"
    broken.write_text("rtt = \n")
    with pytest.raises(UserError, match="not valid TOML"):
        load_toml(broken)
    with pytest.raises(UserError, match="cannot read"):
        load_toml(tmp_path / "missing.toml")
    with pytest.raises(UserError, match="unique"):
        load_profiles(["lan", "lan"])


def test_limit_below_the_delay_line_warns():
    (w1, w2) = parse_profile("rtt=35ms,rate=1gbit").warnings()
    assert "limit=1000" in w1 and "raise limit=" in w1
    assert parse_profile("rtt=35ms,rate=1gbit,limit=5000").warnings() == []
    for name in PRESETS:  # the presets can carry their rate
        assert parse_profile(name).warnings() == [], name

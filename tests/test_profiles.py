"""Link profiles: parsing, presets, TOML files and grids, and the errors users see."""

from __future__ import annotations

import os

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
        ("loss=150%", "outside 0-50%"),
        ("loss=-1%", "outside 0-50%"),
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
    with pytest.raises(UserError, match="outside 0-50%"):
        load_toml(bad)
    broken = tmp_path / "broken.toml"
    broken.write_text("rtt = \n")
    with pytest.raises(UserError, match="not valid TOML"):
        load_toml(broken)
    with pytest.raises(UserError, match="does not exist"):
        load_toml(tmp_path / "missing.toml")
    with pytest.raises(UserError, match="unique"):
        load_profiles(["lan", "lan"])


def test_limit_below_the_delay_line_warns():
    (w1, w2) = parse_profile("rtt=35ms,rate=1gbit").warnings()
    assert "limit=1000" in w1 and "raise limit=" in w1
    assert parse_profile("rtt=35ms,rate=1gbit,limit=5000").warnings() == []
    for name in PRESETS:  # the presets can carry their rate
        assert parse_profile(name).warnings() == [], name


# --- Bounds: every field is refused out of range, with one line naming the key, the value
# and the accepted range, in strings, per-direction keys and TOML files alike.


def _error(fn, *args) -> str:
    with pytest.raises(UserError) as e:
        fn(*args)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_sub_bit_rate_is_refused_not_rounded_to_unlimited():
    # rate=0.4bit became 0: 'rate 0bit' for netem, unlimited for the userspace emulator, and
    # a ZeroDivisionError in linktest's packet_time_ns.
    msg = _error(parse_profile, "rtt=10ms,rate=0.4bit")
    assert "rate '0.4bit'" in msg and "accepted: 8kbit to 100gbit" in msg
    assert "profile 'rtt=10ms,rate=0.4bit'" in msg
    assert "accepted: 8kbit to 100gbit" in _error(parse_profile, "rate=7999bit")
    assert "accepted: 8kbit to 100gbit" in _error(parse_profile, "rate=101gbit")
    assert "s2c.rate '1bit'" in _error(parse_profile, "rtt=10ms,s2c.rate=1bit")


def test_rate_bounds_are_exact_in_both_shapers():
    low = parse_profile("rate=8kbit").c2s
    assert low.netem_args()[-2:] == ["rate", "8000bit"]
    assert low.linkem_config(14)["rate_bps"] == 8000
    high = parse_profile("rate=100gbit").c2s
    assert high.netem_args()[-1] == "100000000000bit"
    # netem keeps whole bytes per second: 12345 bit/s would be truncated to 12344 there.
    msg = _error(parse_profile, "rate=12345bit")
    assert "rate '12345bit'" in msg and "12344bit or 12352bit" in msg
    assert parse_profile("rate=1.5mbit").c2s.rate_bps == 1.5e6
    assert parse_profile("rate=none").c2s.rate_bps is None


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("rtt=100000s", "rtt '100000s' is out of range; accepted: 0 to 10s"),
        ("rtt=10.000001s", "accepted: 0 to 10s"),
        ("delay=5.1s", "delay '5.1s' is out of range; accepted: 0 to 5s"),
        ("c2s.delay=6s", "c2s.delay '6s' is out of range; accepted: 0 to 5s"),
        ("jitter=1.5s", "jitter '1.5s' is out of range; accepted: 0 to 1s"),
        ("s2c.jitter=2s", "s2c.jitter '2s' is out of range"),
        ("loss=50.1%", "loss '50.1%' is outside 0-50%"),
        ("s2c.loss=60", "s2c.loss '60' is outside 0-50%"),
        ("jitter=1ms,corr=100%", "corr '100%' is outside 0-99%"),
        ("loss=1%,loss_corr=100", "loss_corr '100' is outside 0-99%"),
        ("limit=100001", "limit (packets) '100001' must be at least 1 and at most 100000"),
        ("c2s.limit=0", "c2s.limit (packets) '0' must be at least 1 and at most 100000"),
        ("initcwnd=1001", "initcwnd (segments) '1001' must be at least 1 and at most 1000"),
        ("initrwnd=0", "initrwnd (segments) '0' must be at least 1 and at most 1000"),
        ("initcwnd=100000000000", "at most 1000"),
        ("mtu=575", "mtu (bytes) '575' must be at least 576 and at most 9000"),
        ("mtu=9001", "at least 576 and at most 9000"),
        ("rtt=3ns", "even number of nanoseconds"),
        ("delay=1.5ns", "whole number of nanoseconds"),
        ("jitter=0.4ns", "whole number of nanoseconds"),
        ("rtt=nan", "rtt 'nan' is not a duration"),
        ("rate=infgbit", "rate 'infgbit' is not a rate"),
        ("c2s.rtt=5ms", "rtt applies to the whole link"),
        ("rtt=5ms,rtt=50ms", "repeats 'rtt'"),
        ("corr=1%,delay_corr=2%,jitter=1ms", "repeats 'corr'"),
        ("name=", "name '' must be 1 to 200 printable characters"),
        ("name=a\x1b[31mred", "printable"),
        (",", "empty item"),
        ("rtt=5ms,", "empty item"),
        ("lan,", "empty item"),
        ("rtt=5ms,,rate=1mbit", "empty item"),
    ],
)
def test_out_of_range_values_are_refused(text, fragment):
    assert fragment in _error(parse_profile, text)


def test_bounds_themselves_are_accepted():
    p = parse_profile(
        "rtt=10s,jitter=1s,loss=50%,corr=99%,loss_corr=99%,limit=100000,"
        "initcwnd=1000,initrwnd=1000,mtu=9000,rate=8kbit"
    )
    assert p.rtt_s == 10 and p.c2s.delay_s == 5 and p.s2c.jitter_s == 1
    assert p.c2s.loss_pct == 50 and p.c2s.limit == 100_000 and p.mtu == 9000
    assert parse_profile("c2s.delay=5s,s2c.delay=0").rtt_s == 5
    assert parse_profile("rtt=2ns").c2s.linkem_config(14)["latency_ns"] == 1


def test_direction_keys_win_over_general_keys_in_any_order():
    # 's2c.loss=3%,loss=1%' used to set s2c to 1%: the order silently decided.
    for text in ("s2c.loss=3%,loss=1%", "loss=1%,s2c.loss=3%"):
        p = parse_profile(text)
        assert (p.c2s.loss_pct, p.s2c.loss_pct) == (1, 3), text


def test_overrides_after_a_preset_replace_its_values():
    p = parse_profile("1mbps-200ms,delay=10ms")  # the preset's rtt gives way to delay
    assert p.rtt_s == pytest.approx(0.02)
    p = parse_profile("lan,rtt=40ms,rate=2mbit")
    assert p.rtt_s == pytest.approx(0.04) and p.s2c.rate_bps == 2e6
    assert parse_profile("LAN").name == "lan"


def test_toml_values_have_the_same_bounds(tmp_path):
    f = tmp_path / "slow.toml"
    f.write_text('rtt = "10ms"\nrate = "0.4bit"\n')
    msg = _error(load_toml, f)
    assert "slow.toml" in msg and "rate '0.4bit'" in msg and "8kbit to 100gbit" in msg
    f.write_text('rtt = "10ms"\n[s2c]\nloss = "60%"\n')
    assert "s2c.loss '60%' is outside 0-50%" in _error(load_toml, f)
    f.write_text('[[profile]]\nrtt = "100000s"\n')
    msg = _error(load_toml, f)
    assert "[[profile]] 1" in msg and "rtt '100000s'" in msg and "0 to 10s" in msg
    f.write_text('[grid]\nrtt = ["10ms", "20s"]\n')
    msg = _error(load_toml, f)
    assert "[grid] 'rtt=20s'" in msg and "0 to 10s" in msg
    f.write_text("limit = 100001\n")  # a TOML integer
    assert "at most 100000" in _error(load_toml, f)
    f.write_text("rtt = 1e400\n")  # a TOML float that is infinite
    assert "rtt 'inf' is not a duration" in _error(load_toml, f)
    f.write_text("rtt = 0.00001\nname = 'tiny'\n")  # a float read as seconds, exactly
    assert load_toml(f)[0].rtt_s == pytest.approx(1e-5)


# --- Damaged TOML files: one line naming the file (and the line, where TOML says it).


def test_toml_not_utf8(tmp_path):
    f = tmp_path / "latin1.toml"
    f.write_bytes(b'rtt = "5ms"\nname = "caf\xe9"\n')
    msg = _error(load_toml, f)
    assert "latin1.toml" in msg and "not UTF-8" in msg and "0xe9 on line 2" in msg


def test_toml_with_byte_order_mark_is_read(tmp_path):
    f = tmp_path / "bom.toml"
    f.write_bytes('\ufeffrtt = "5ms"\n'.encode())
    assert load_toml(f)[0].rtt_s == pytest.approx(0.005)


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("rtt = \n", "not valid TOML: Invalid value (at line 1, column 7)"),
        ('rtt = "5ms"\nrtt = "6ms"\n', "not valid TOML"),
        ("a = " + "[" * 5000 + "]" * 5000 + "\n", "not valid TOML"),
        ("profile = [1, 2]\n", "profile entry 1 is not a table"),
        ('[profile]\nrtt = "5ms"\n', "must be an array of tables"),
        ('grid = "x"\n', "'grid' must be a table"),
        ("[grid]\nrtt = [{a = 1}]\n", "[grid] rtt has a table among its values"),
        ("[grid]\nrtt = []\n", "rtt is an empty list"),
        ("[grid.foo]\nx = 1\n", "[grid.foo] is a table"),
        ('preset = "lan,rtt=5ms"\n', "unknown link profile preset 'lan,rtt=5ms'"),
        ("preset = 5\n", "preset must be a preset name"),
        ("rtt = true\n", "rtt is a boolean"),
        ('rtt = ["5ms"]\n', "rtt is a list; give a string"),
        ("rtt = 1979-05-27\n", "rtt is a date"),
        ('[foo]\nrtt = "5ms"\n', "[foo] is a table"),
        ('[c2s]\nloss = ["1%"]\n', "c2s.loss is a list"),
        ("", "defines no profile"),
    ],
)
def test_damaged_toml_is_one_line(tmp_path, content, fragment):
    f = tmp_path / "damaged.toml"
    f.write_text(content)
    msg = _error(load_toml, f)
    assert "damaged.toml" in msg and fragment in msg


def test_toml_that_is_not_a_readable_file(tmp_path, monkeypatch):
    d = tmp_path / "dir.toml"
    d.mkdir()
    assert "is a directory; give a regular file" in _error(load_toml, d)
    assert "is a directory; give a regular file" in _error(load_profiles, [str(d)])
    assert "does not exist" in _error(load_toml, tmp_path / "missing.toml")
    assert "is not a file name" in _error(load_toml, "bad\x00.toml")
    assert "is a character device" in _error(load_toml, "/dev/null")
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * ((1 << 20) + 1))
    assert "larger than 1 MiB, the bound of a profile file" in _error(load_toml, big)
    # Unreadable (tests run as root, so simulate the permission error).
    f = tmp_path / "secret.toml"
    f.write_text('rtt = "5ms"\n')
    real_open = os.open

    def refuse(path, *a, **k):
        if str(path) == str(f):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(os, "open", refuse)
    msg = _error(load_toml, f)
    assert "cannot read profile file" in msg and "secret.toml" in msg
    assert "Permission denied" in msg


def test_grid_size_is_bounded(tmp_path):
    f = tmp_path / "huge.toml"
    ten = ", ".join(str(i) for i in range(1, 11))
    f.write_text(f"[grid]\ninitcwnd = [{ten}]\ninitrwnd = [{ten}]\nlimit = [{ten}]\n")
    assert len(load_toml(f)) == 1000  # the most a grid may make
    f.write_text(
        f"[grid]\ninitcwnd = [{ten}]\ninitrwnd = [{ten}]\nmtu = [1500, 1400]\nlimit = [{ten}]\n"
    )
    assert "[grid] makes 2000 profiles; at most 1000" in _error(load_toml, f)


def test_grid_per_direction_columns(tmp_path):
    f = tmp_path / "asym.toml"
    f.write_text('[grid]\nrtt = ["10ms"]\n[grid.s2c]\nloss = ["1%", "2%"]\n')
    profiles = load_toml(f)
    assert [p.s2c.loss_pct for p in profiles] == [1, 2]
    assert all(p.c2s.loss_pct == 0 for p in profiles)


def test_profile_strings_that_name_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lan").write_text('rtt = "7ms"\n')
    assert load_profiles(["lan"])[0].rtt_s == pytest.approx(0.0005)  # the preset wins
    assert load_profiles(["./lan"])[0].rtt_s == pytest.approx(0.007)
    # 'name=x.toml' is a profile string, not a file.
    assert load_profiles(["rtt=5ms,name=x.toml"])[0].name == "x.toml"


def test_empty_grid_is_refused(tmp_path):
    # Found by test_properties: the product of no lists is one profile named ''.
    f = tmp_path / "empty.toml"
    f.write_text("[grid]\n")
    assert "[grid] has no keys" in _error(load_toml, f)

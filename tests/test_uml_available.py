"""Whether a User-Mode Linux guest can run here: a host that refuses the kernel its ptrace
(Debian's 6.1 on a CPU with AMX) makes the netem tests skip with the console's reason; any
other failed boot is pqlab's own and leaves them to run, and fail."""

from __future__ import annotations

import pytest

from pqlab.net import uml

AMX_HOST = """\
mmapper_init - find_iomem failed
Failed to initialize ubd device 0 :Couldn't determine size of device's file
userspace - ptrace set fp regs failed, errno = 14
Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b
CPU: 0 PID: 1 Comm: init Not tainted 6.1.176 #1
"""
HARNESS_BUG = """\
mmapper_init - find_iomem failed
/init: line 12: mount: not found
Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100
"""


def _result(console: str, code: int | None) -> uml.GuestResult:
    return uml.GuestResult(["true"], code, "", "", console, 1.2, False)


@pytest.mark.parametrize(
    ("console", "code", "why"),
    [
        (AMX_HOST, None, "userspace - ptrace set fp regs failed, errno = 14; Kernel panic"),
        (HARNESS_BUG, None, None),
        ("", 0, None),
    ],
)
def test_only_a_host_that_refuses_ptrace_makes_the_guest_unavailable(
    monkeypatch, console, code, why
):
    monkeypatch.setattr(uml, "run", lambda argv, timeout: _result(console, code))
    uml._boots.cache_clear()
    try:
        got = uml._boots()
    finally:
        uml._boots.cache_clear()
    if why is None:
        assert got is None
    else:
        assert got.startswith(why)


def test_shaper_uml_runs_netem_in_the_guest():
    assert uml.as_netem(["ttlb", "--shaper", "uml", "-n", "3"]) == [
        "ttlb", "--shaper", "netem", "-n", "3",
    ]  # fmt: skip
    assert uml.as_netem(["linktest", "--shaper=uml"]) == ["linktest", "--shaper=netem"]
    assert uml.as_netem(["ttlb", "--profile", "uml"]) == ["ttlb", "--profile", "uml"]


def test_doctor_and_shaper_uml_say_the_same_about_this_host(tmp_path):
    """One detection: `pqlab doctor`'s line is `uml.available()`; where the guest cannot
    boot, `--shaper uml` is refused in one line with that reason before anything exists."""
    from conftest import run_pqlab

    ok, why = uml.available()
    doctor = run_pqlab("doctor", "--json", timeout=300)
    import json

    line = next(c for c in json.loads(doctor.stdout) if "--shaper uml" in c["check"])
    assert (line["ok"], line["detail"]) == (ok, why)
    if ok:
        pytest.skip("this host boots the guest: tests/test_netem_uml.py runs --shaper uml")
    out = tmp_path / "run"
    proc = run_pqlab("ttlb", "--shaper", "uml", "--profile", "1mbps-35ms", "--out", out,
                     timeout=300)  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: --shaper uml: ") and why in lines[0], lines[0]
    assert not out.exists()


def test_a_suite_step_cannot_ask_for_the_guest(tmp_path):
    from conftest import run_pqlab

    suite = tmp_path / "s.toml"
    suite.write_text('[[step]]\nexperiment = "ttlb"\nshaper = "uml"\nprofile = "1mbps-35ms"\n')
    proc = run_pqlab("suite", suite, "--check", "--out", tmp_path / "r", timeout=300)
    assert proc.returncode == 2 and "run that step as its own command" in proc.stderr

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

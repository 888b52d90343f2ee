"""Can this process build network namespaces? (CAP_NET_ADMIN and the tools it needs.)"""

from __future__ import annotations

import os
import shutil

from pqlab.errors import PrivilegeError

CAP_NET_ADMIN = 12
CAP_NET_RAW = 13  # packet captures (AF_PACKET sockets)
CAP_SYS_ADMIN = 21  # `ip netns add` mounts the namespace file under /run/netns
TOOLS = ("ip", "ethtool")


def _effective_caps() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        return None
    return None


def can_admin_network() -> tuple[bool, str]:
    """(True, what was found) if network namespaces can be made here, else (False, why)."""
    caps = _effective_caps()
    if caps is None:
        return False, "cannot read /proc/self/status to check capabilities (not Linux?)"
    missing = [
        name
        for bit, name in ((CAP_NET_ADMIN, "CAP_NET_ADMIN"), (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"))
        if not caps >> bit & 1
    ]
    if missing:
        return False, (
            f"this process lacks {' and '.join(missing)}; run as root "
            "(sudo pqlab ...) or in a container started with --cap-add NET_ADMIN "
            "--cap-add SYS_ADMIN"
        )
    tools = [t for t in TOOLS if not shutil.which(t)]
    if tools:
        return False, (
            f"{', '.join(tools)} not found on PATH; install iproute2 and ethtool "
            "(e.g. apt-get install iproute2 ethtool)"
        )
    return True, f"CAP_NET_ADMIN present (uid {os.geteuid()}); ip and ethtool found"


def can_capture() -> tuple[bool, str]:
    """(True, what was found) if this process may capture packets, else (False, why)."""
    caps = _effective_caps()
    if caps is None:
        return False, "cannot read /proc/self/status to check capabilities (not Linux?)"
    if not caps >> CAP_NET_RAW & 1:
        return False, (
            "this process lacks CAP_NET_RAW, which packet captures need; run as root "
            "(sudo pqlab ...) to capture"
        )
    return True, f"CAP_NET_RAW present (uid {os.geteuid()})"


def require_net_admin() -> None:
    """Raise PrivilegeError saying what to do if network namespaces cannot be made."""
    ok, why = can_admin_network()
    if not ok:
        raise PrivilegeError(f"network experiments need CAP_NET_ADMIN: {why}")

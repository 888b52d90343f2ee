"""The options every TLS experiment takes to run across real hosts, and their validation.

    --server-host [USER@]HOST[:PORT]   --client-host [USER@]HOST[:PORT]
    --inventory FILE --pairs CLIENTS:SERVERS ...   --ssh-config FILE

`plan(values, needs_capture)` turns them into a `pqlab.net.remote.RemotePlan` (every host
reached and checked over SSH) or None for a one-machine run; experiments pass its pairs to
`pqlab.net.shaping.build_hosts` and tag their results with the pair. See docs/remote.md.
"""

from __future__ import annotations

import os
import re
import shutil

from pqlab import metadata
from pqlab.errors import UserError
from pqlab.experiment import Option
from pqlab.net import remote

OPTIONS = (
    Option(
        "server-host",
        "run the TLS server (and its capture) on this host, reached over SSH: "
        "[USER@]HOST[:PORT] (see docs/remote.md)",
        metavar="USER@HOST[:PORT]",
    ),
    Option(
        "client-host",
        "run the TLS client (and its capture) on this host over SSH (default: this machine)",
        metavar="USER@HOST[:PORT]",
    ),
    Option(
        "inventory",
        "an Ansible inventory (INI or YAML) with the hosts named by --pairs",
        metavar="FILE",
    ),
    Option(
        "pairs",
        "host pairs from --inventory: CLIENTS:SERVERS, every host of group (or host) CLIENTS "
        "with every host of SERVERS; repeatable; the cells run on every pair",
        metavar="CLIENTS:SERVERS",
        repeat=True,
    ),
    Option(
        "ssh-config",
        "OpenSSH client configuration file for the hosts (default: ~/.ssh/config)",
        metavar="FILE",
    ),
)


def plan(values, needs_capture: bool, what: str, apart: str | None = None):
    """The validated host pairs (pqlab.net.remote.RemotePlan), or None: one machine.
    `apart`: why the experiment refuses a pair whose two sides are one machine."""

    return remote.plan(values, needs_capture, what, apart)


# The CPUs a process started there may run on, and whether taskset is there.
CPU_SCRIPT = r"""
echo "cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
echo "taskset=$(command -v taskset)"
"""


def parse_cpu_list(text: str) -> list[int]:
    """A kernel CPU list ("0-3,6,8-9") as CPU numbers; [] if it is not one."""
    out: list[int] = []
    for part in (text or "").strip().split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if not m:
            return []
        first, last = int(m.group(1)), int(m.group(2) or m.group(1))
        out.extend(range(first, last + 1))
    return sorted(set(out))


def host_cpus(remote_plan, spec) -> tuple[list[int], bool]:
    """(the CPUs a process on that host may run on, whether taskset is there) for one side
    of a pair: `spec` None or local is this machine; a remote host is asked over its SSH
    connection (opened when the plan checked it)."""
    if spec is None or spec.local:
        return sorted(os.sched_getaffinity(0)), shutil.which("taskset") is not None
    host = remote.remote_host(spec, remote_plan.config)
    out = host.conn.run(CPU_SCRIPT, what=f"reading the CPUs of {spec.name}").stdout
    kv = metadata.parse_kv(out)
    return parse_cpu_list(kv.get("cpus", "")), bool(kv.get("taskset"))


def is_remote(values) -> bool:
    return any(
        getattr(values, k, None) for k in ("server_host", "client_host", "inventory", "pairs")
    )


def refuse_profile_values(values, what: str) -> None:
    """A profile shapes the lab's own emulated link; across real hosts the network is the
    link, and pqlab does not shape real hosts' interfaces. Checked before any host is
    contacted."""

    if is_remote(values) and getattr(values, "profile", None):
        raise UserError(
            f"{what}: --profile shapes the link between the lab's namespaces; across real "
            "hosts the network between them is the link (drop --profile, or shape that "
            "network yourself and record how)"
        )

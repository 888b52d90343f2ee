"""Run one command inside a User-Mode Linux guest: a real kernel with netem on machines whose
own kernel lacks it.

Debian's `user-mode-linux` package ships `linux.uml`, a Linux kernel that runs as an
ordinary process, with its modules (among them `sch_netem`) in
/usr/lib/uml/modules/VERSION. `run(argv)` boots it with the host's own `/` as the guest's
root file system (hostfs, read-only), so the project's virtual environment, the engine and
every tool are there unchanged, and runs `argv` as the guest's root:

- the guest mounts /proc, /sys, a tmpfs on /run (`ip netns` keeps its files there) and
  overlays on /tmp, /var/tmp and the home directory (the host's files underneath, read-only;
  writes kept in guest memory and gone with the guest);
- it loads veth, sch_netem, sch_tbf, ifb, tun, overlay and the bridge (with what it needs)
  from the package's module tree (finit_module(2): the host needs no kmod, and has no
  /lib/modules for this kernel);
- each directory in `shares` is mounted writable at its own path, so what the command
  writes there is on the host afterwards; the harness's own control directory is one of
  them and carries the command's stdout, stderr and exit status back;
- then the guest syncs and powers itself off.

Time is bounded twice: inside by `timeout` (the command gets SIGTERM, then SIGKILL, and the
guest still reports), outside by killing the kernel's whole process group (linux.uml runs in
a session of its own; its helper processes outlive the main one otherwise). The same kill
runs on Ctrl-C or any other error. Nothing is left behind: the guest's memory is a deleted
file (in /dev/shm) that vanishes with the processes, and the control directory (init script,
command, outputs, the kernel's uml_dir) is removed.

    from pqlab.net import uml
    ok, why = uml.available()
    res = uml.run(["python", "-m", "pqlab", "linktest", "--shaper", "netem", ...],
                  shares=[out_dir], timeout=300)
    res.returncode, res.stdout, res.stderr

By hand: `python -m pqlab.net.uml [--share DIR] [--timeout S] -- COMMAND ...` (pqlab's venv
and engine are found inside as outside: PATH, PYTHONPATH, VIRTUAL_ENV and PQLAB_* pass
through).

This lives in the package, not under tests/, because it is how anyone proves the netem
backend on a kernel without netem (docs/network.md), by hand as well as in the test suite.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from pqlab import files
from pqlab.errors import Interrupted

KERNEL = "linux.uml"
MODULE_ROOT = Path("/usr/lib/uml/modules")
# Loaded in this order, each after the modules it depends on (the 6.1 package's
# modules.dep: the bridge of the netem link needs ipv6, llc and stp; ipv6 needs crc-ccitt).
MODULES = (
    "drivers/net/veth.ko",
    "net/sched/sch_netem.ko",
    "net/sched/sch_tbf.ko",
    "drivers/net/ifb.ko",
    "drivers/net/tun.ko",
    "fs/overlayfs/overlay.ko",
    "lib/crc-ccitt.ko",
    "net/ipv6/ipv6.ko",
    "net/llc/llc.ko",
    "net/802/stp.ko",
    "net/bridge/bridge.ko",
)
# Guest memory: the lab's Python processes, the engine and tmpfs contents. The host backs
# it lazily (a tmpfs file), so an idle guest costs what it touched (about 50-70 MiB).
DEFAULT_MEM = "512M"
# What the inner `timeout` leaves the guest for SIGKILL, sync and power-off.
INNER_MARGIN_S = 10.0
# Environment passed into the guest by default: how pqlab, its venv and engine are found.
PASS_ENV = re.compile(r"^(PATH|PYTHONPATH|VIRTUAL_ENV|HOME|LANG|LC_[A-Z]+|TZ|PQLAB_[A-Z0-9_]+)$")
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Paths go onto the kernel command line and into sh: keep them to safe characters.
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._+/-]*$")
_counter = itertools.count()
RT = int(os.environ.get("PQLAB_UML_RT_PRIORITY", "10"))

# finit_module(2) for each path; an already loaded module is fine. Run by the host's Python
# inside the guest (the guest has no kmod: neither has the host).
_LOADER = r"""
import ctypes, errno, os, platform, sys
NR = {"x86_64": 313, "aarch64": 273}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
bad = 0
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    r = libc.syscall(NR, fd, b"", 0)
    e = ctypes.get_errno()
    os.close(fd)
    if r != 0 and e != errno.EEXIST:
        print(f"pqlab-uml: cannot load {path}: {os.strerror(e)}", flush=True)
        bad = 1
sys.exit(bad)
"""


class GuestError(Exception):
    """The guest could not be booted, or its command failed (`GuestResult.check`): exit 6,
    pqlab's code for I/O and time limits."""

    exit_code = 6


@dataclass
class GuestResult:
    """What one guest run brought back."""

    argv: list[str]
    returncode: int | None  # the command's exit status; None if the guest never reported
    stdout: str
    stderr: str
    console: str  # the kernel's console: boot messages, the init script's own errors
    seconds: float  # boot to power-off (or kill), wall clock
    timed_out: bool
    kernel_version: str = ""
    notes: list[str] = field(default_factory=list)

    def check(self) -> GuestResult:
        """Raise GuestError (with the output's tail) unless the command exited 0."""
        if self.returncode != 0:
            raise GuestError(self.explain())
        return self

    def explain(self) -> str:
        what = (
            "timed out"
            if self.timed_out
            else "never reported an exit status"
            if self.returncode is None
            else f"exited {self.returncode}"
        )
        # A failed check can scroll out of the tail: name every failed one first.
        failed = [ln for ln in (self.stderr or "").splitlines() if ln.startswith("FAIL")]
        tail = ("--- failed checks ---\n" + "\n".join(failed) + "\n" if failed else "") + "\n".join(
            f"--- {name} (last lines) ---\n" + "\n".join(text.splitlines()[-40:])
            for name, text in (
                ("stderr", self.stderr),
                ("stdout", self.stdout),
                ("console", self.console),
            )
            if text.strip()
        )
        return f"{' '.join(self.argv)} in the UML guest {what} after {self.seconds:.1f} s\n{tail}"


def kernel_path() -> str | None:
    return shutil.which(KERNEL)


def kernel_version(kernel: str) -> str:
    """The kernel's release (`linux.uml --version` prints it and exits)."""
    try:
        out = subprocess.run(
            [kernel, "--version"],
            capture_output=True,
            text=True,
            timeout=20,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GuestError(f"{kernel} --version failed: {e}") from None
    version = out.stdout.strip().splitlines()[-1].strip() if out.stdout.strip() else ""
    if out.returncode != 0 or not re.fullmatch(r"[0-9][0-9A-Za-z.+_-]*", version):
        raise GuestError(
            f"{kernel} --version printed {out.stdout.strip()!r} (exit {out.returncode})"
        )
    return version


def available() -> tuple[bool, str]:
    """(True, what was found) if a UML guest with netem can be booted here, else (False, why):
    the kernel, its modules and room for its memory are there (`installed`), and a guest
    boots and runs a command (tried once per process)."""
    ok, why = installed()
    if not ok:
        return ok, why
    booted = _boots()
    if booted is not None:
        return False, f"{why}, but it does not run on this machine: {booted}"
    return ok, why


def installed() -> tuple[bool, str]:
    """(True, what was found) if the kernel, its netem modules and room for the guest's
    memory are here, else (False, why); whether it runs, `available` says."""
    kernel = kernel_path()
    if kernel is None:
        return False, (
            f"{KERNEL} not found: install Debian's user-mode-linux package "
            "(apt-get install user-mode-linux; scripts/bootstrap.sh does where apt works)"
        )
    try:
        version = kernel_version(kernel)
    except GuestError as e:
        return False, str(e)
    mods = MODULE_ROOT / version / "kernel"
    missing = [m for m in MODULES if not (mods / m).is_file()]
    if missing:
        return False, f"{KERNEL} {version}: modules missing under {mods}: {', '.join(missing)}"
    if not Path("/dev/shm").is_dir() and not os.environ.get("TMPDIR"):
        return False, "neither /dev/shm nor $TMPDIR exists for the guest's memory file"
    return True, f"{kernel} {version} with sch_netem in {mods}"


@functools.lru_cache(maxsize=1)
def _boots() -> str | None:
    """Why a guest cannot run on this host, from the console of one that tried; None when
    it ran, or failed otherwise (`run` then says how). The kernel runs its processes under
    the host's ptrace, and some hosts refuse it what it needs: Debian's 6.1 on a CPU with
    AMX cannot write a process's register state back ("userspace - ptrace set fp regs
    failed"), and its init dies. A failure of pqlab's own harness is not such a reason: the
    tests must see it."""
    try:
        res = run(["true"], timeout=60)
    except GuestError:
        return None
    if res.returncode == 0:
        return None
    lines = [ln.strip() for ln in res.console.splitlines()]
    host = [ln for ln in lines if ln.startswith("userspace - ptrace") or "check_ptrace" in ln]
    if not host:
        return None
    panic = [ln for ln in lines if "Kernel panic" in ln]
    why = "; ".join(host[:1] + panic[:1])
    if any("set fp regs" in ln for ln in host) and _cpu_has_amx():
        why += " (this CPU has AMX, whose register state this guest kernel cannot restore)"
    return why


def _cpu_has_amx() -> bool:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")[: 1 << 20]
    except OSError:
        return False
    flags = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return any(f.startswith("amx") for f in flags.split(":", 1)[-1].split())


def _safe(path: Path, what: str) -> str:
    text = str(path)
    if not _SAFE_PATH.match(text):
        raise GuestError(
            f"{what} {text!r}: the UML harness needs paths of letters, digits and ._+-/ "
            "(they go onto the kernel command line); set TMPDIR to such a directory"
        )
    return text


def init_script(
    ctl: Path, shares: list[Path], overlays: list[str], modules_dir: Path, python: str
) -> str:
    """The guest's /sbin/init: mounts, modules, the command, power-off."""
    q = shlex.quote
    mods = " ".join(q(str(modules_dir / m)) for m in MODULES)
    overlay_mounts = "\n".join(
        f"mkdir -p /run/pqlab-cow/{i}/upper /run/pqlab-cow/{i}/work && "
        f"mount -t overlay overlay -o lowerdir={d},upperdir=/run/pqlab-cow/{i}/upper,"
        f"workdir=/run/pqlab-cow/{i}/work {d} "
        f'|| fail "cannot mount an overlay on {d}"'
        for i, d in enumerate(overlays)
    )
    share_mounts = "\n".join(
        f"mkdir -p {q(str(s))} 2>/dev/null; mount -t hostfs -o {q(str(s))} hostfs {q(str(s))} "
        f'|| fail "cannot mount the share {s}"'
        for s in shares
    )
    return f"""#!/bin/sh
# The init of a pqlab UML guest (generated by pqlab.net.uml; removed after the run).
export PATH={GUEST_PATH}
off() {{ sync; echo o > /proc/sysrq-trigger; while :; do sleep 1; done; }}
fail() {{ echo "pqlab-uml: $*"; off; }}
mount -t proc proc /proc || fail "cannot mount /proc"
mount -t sysfs sysfs /sys || fail "cannot mount /sys"
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev || fail "cannot mount /dev"
mount -t tmpfs -o mode=0755 tmpfs /run || fail "cannot mount a tmpfs on /run"
mkdir -p /run/netns
# The guest's own loopback, as on any booted system (the engine's `tls hello` listens there).
ip link set lo up || fail "cannot bring up the loopback interface"
{q(python)} -c {q(_LOADER)} {mods} || fail "cannot load the kernel modules"
{overlay_mounts}
mount -t hostfs -o {q(str(ctl))} hostfs {q(str(ctl))} || fail "cannot mount the control directory"
{share_mounts}
echo "pqlab-uml: running the command"
/bin/sh {q(str(ctl / "command.sh"))} > {q(str(ctl / "stdout"))} 2> {q(str(ctl / "stderr"))} < /dev/null
echo $? > {q(str(ctl / "rc.tmp"))} && mv {q(str(ctl / "rc.tmp"))} {q(str(ctl / "rc"))}
echo "pqlab-uml: command done, powering off"
off
"""


def command_script(argv: list[str], env: dict[str, str], cwd: str, inner_timeout: float) -> str:
    q = shlex.quote
    env_words = " ".join(q(f"{k}={v}") for k, v in sorted(env.items()))
    return (
        "# The command of a pqlab UML guest (generated by pqlab.net.uml).\n"
        f"cd {q(cwd)} || exit 125\n"
        f"exec env -i {env_words} timeout --kill-after=5 {inner_timeout:.0f} "
        + " ".join(q(a) for a in argv)
        + "\n"
    )


def copy_on_write() -> list[str]:
    """Directories the guest overlays with guest memory: where programs expect to write
    (temporary files; caches under the home directory, e.g. matplotlib's font list, which
    the guest then reads from the host instead of rebuilding it on every boot)."""
    out = []
    for d in ("/tmp", "/var/tmp", str(Path.home())):
        p = Path(d)
        if d not in out and d != "/" and p.is_dir() and not p.is_symlink() and _SAFE_PATH.match(d):
            out.append(d)
    return out


def default_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if PASS_ENV.match(k)}
    env["PATH"] = os.environ.get("PATH", GUEST_PATH)
    env["TMPDIR"] = "/tmp"
    env.setdefault("HOME", "/root")
    return env


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the kernel's whole process group and wait until every member is gone."""
    pgid = proc.pid  # start_new_session: the kernel leads its own group
    deadline = time.monotonic() + 10
    while _group_alive(pgid) and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired, ChildProcessError):
            proc.wait(timeout=0.1)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    if _group_alive(pgid):
        raise GuestError(f"processes of the UML guest (process group {pgid}) survived SIGKILL")


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def run(
    argv: list[str],
    *,
    shares: list[str | Path] = (),
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float = 600,
    mem: str = DEFAULT_MEM,
    inner_timeout: float | None = None,
) -> GuestResult:
    """Boot a guest, run `argv` in it as root, power off; see the module's docstring.

    `timeout` bounds the whole run (boot to power-off; then the process group is killed);
    the command itself gets `inner_timeout` (default: `timeout` less 10 s for power-off)."""
    ok, why = installed()
    if not ok:
        raise GuestError(f"cannot boot a UML guest: {why}")
    kernel = kernel_path()
    version = kernel_version(kernel)
    modules_dir = MODULE_ROOT / version / "kernel"
    share_paths = [Path(s).resolve() for s in shares]
    for s in share_paths:
        if not s.is_dir():
            raise GuestError(f"share {s} is not a directory")
        _safe(s, "share")
    cwd = str(Path(cwd or os.getcwd()).resolve())
    python = _safe(Path(sys.executable), "the Python interpreter")
    inner = inner_timeout if inner_timeout is not None else max(1.0, timeout - INNER_MARGIN_S)
    ctl = Path(tempfile.mkdtemp(prefix="pqlab-uml-"))
    proc = None
    console = ctl / "console"
    start = time.monotonic()
    timed_out = False
    try:
        _safe(ctl, "the control directory")
        with files.Dir.open(ctl, "the control directory", private=True) as d:
            script = init_script(ctl, share_paths, copy_on_write(), modules_dir, python)
            init = d.write("init", script, 0o755)
            d.write(
                "command.sh",
                command_script([str(a) for a in argv], env or default_env(), cwd, inner),
            )
        umid = f"pqlab-{os.getpid()}-{next(_counter)}"
        cmdline = [
            *(["chrt", "-f", str(RT)] if RT else []),
            kernel,
            f"mem={mem}",
            "root=/dev/root",
            "rootfstype=hostfs",
            "rootflags=/",
            "ro",
            f"init={init}",
            "con=null",
            "ssl=null",
            "con0=null,fd:1",
            f"uml_dir={ctl}",
            f"umid={umid}",
            "quiet",
        ]
        kenv = {"PATH": GUEST_PATH}
        if os.environ.get("TMPDIR"):
            kenv["TMPDIR"] = os.environ["TMPDIR"]
        with console.open("wb") as out:
            proc = subprocess.Popen(
                cmdline,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=kenv,
                cwd=ctl,
            )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        _kill_group(proc)
        proc = None
        seconds = time.monotonic() - start
        rc_text = _read(ctl / "rc").strip()
        returncode = int(rc_text) if rc_text.lstrip("-").isdigit() else None
        if returncode in (124, 137) and seconds >= inner:
            timed_out = True
        return GuestResult(
            argv=[str(a) for a in argv],
            returncode=returncode,
            stdout=_read(ctl / "stdout"),
            stderr=_read(ctl / "stderr"),
            console=_read(console),
            seconds=seconds,
            timed_out=timed_out,
            kernel_version=version,
        )
    finally:
        if proc is not None:  # Ctrl-C or an error while the guest ran
            _kill_group(proc)
        shutil.rmtree(ctl, ignore_errors=True)


def as_netem(argv: list[str]) -> list[str]:
    """A pqlab command line with `--shaper uml` made `--shaper netem` (what it runs inside
    the guest, whose kernel has netem)."""
    out, it = [], iter(argv)
    for a in it:
        if a == "--shaper":
            value = next(it, None)
            out += [a] + (["netem" if value == "uml" else value] if value is not None else [])
        elif a == "--shaper=uml":
            out.append("--shaper=netem")
        else:
            out.append(a)
    return out


# The guest run of `--shaper uml` is bounded by the step's estimate times this, plus the
# boot and the export (`GUEST_MARGIN_S`): a run that takes longer is stopped, its finished
# cells kept (`--resume` finishes it).
GUEST_ESTIMATE_FACTOR = 4.0
GUEST_MARGIN_S = 600.0


def rerun(argv: list[str], run_dir: Path, estimate_s: float) -> GuestResult:
    """`pqlab ARGV` with --shaper uml, run inside a guest with --shaper netem: the run
    directory `run_dir` (made on the host, empty) shared with the guest, which writes the
    results there; the command's output and exit status are the guest's."""
    inner = [sys.executable, "-m", "pqlab", *as_netem(argv)]
    if not any(a == "--out" or a.startswith("--out=") for a in argv):
        inner += ["--out", str(run_dir)]
    timeout = GUEST_MARGIN_S + GUEST_ESTIMATE_FACTOR * max(estimate_s, 0.0)
    return run(inner, shares=[run_dir], env=default_env(), timeout=timeout)


def main(args: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m pqlab.net.uml",
        description="Run one command as root inside a User-Mode Linux guest with netem "
        "(the host's / read-only, /tmp copy-on-write, --share directories writable).",
    )
    p.add_argument("--share", action="append", default=[], metavar="DIR")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S")
    p.add_argument("--mem", default=DEFAULT_MEM)
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(args)
    argv = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not argv:
        p.error("give a command after --")

    def on_signal(signum, frame):
        raise Interrupted(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        res = run(argv, shares=a.share, timeout=a.timeout, mem=a.mem)
    except GuestError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except Interrupted as e:
        print("interrupted: the guest was killed and cleaned up", file=sys.stderr)
        return e.exit_code
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    if res.returncode is None or res.timed_out:
        print(f"error: {res.explain()}", file=sys.stderr)
        return 6
    return res.returncode


if __name__ == "__main__":
    sys.exit(main())

"""Remote hosts over SSH: one connection per host, processes under supervision, files.

asyncssh runs in one background thread with its own event loop (`_Loop`); the lab's threads
call into it with a bound on every wait. One `Connection` per host is reused for everything
(commands, processes, SFTP). `RemoteHost` is what the topology uses:

- `check(needs_capture)`: one round trip that removes what dead pqlab runs left in /tmp
  and reads the host (architecture, tools, CAP_NET_RAW, CPU, kernel, congestion control, ...)
- `open_run()`: a *keeper* session creates the run directory /tmp/pqlab-<run>-<host> (0700)
  and stays connected; `close_run()` tells it to stop what still runs and remove the
  directory. Should the SSH connection drop (the lab killed, the network gone), the keeper
  reads EOF and does the same by itself.
- the engine: reused from the remote PATH when its build id is this engine's, else copied
  over SFTP into the run directory and checked (sha256, then `info` runs there).
- `spawn(argv)`: a process under a POSIX-shell wrapper (`WRAPPER`): the program runs in its
  own process group under `timeout` (a lifetime bound), its pid is recorded in the run
  directory for the keeper, and a watcher kills the group when the session's stdin closes,
  which is what happens when the lab stops it or the connection drops. The wrapper reports
  the pid, the exit status and the CPU time (`times`) on stderr.

Host keys are checked like OpenSSH does (known_hosts; ~/.ssh/config is read; an unknown or
changed key is refused); pqlab has no option to skip the check.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import hashlib
import json
import os
import queue
import shlex
import signal as _signal
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from pqlab import engine, files, metadata
from pqlab.errors import EngineIOError, UserError
from pqlab.net.clock import rewrite_pcap
from pqlab.process import InFile, OutFile, Program

CONNECT_TIMEOUT = 20.0
COMMAND_TIMEOUT = 60.0
DEFAULT_LIFETIME_S = 24 * 3600  # no remote process outlives this, whatever happens
REQUIRED_TOOLS = ("sh", "ip", "ethtool", "setsid", "timeout", "kill", "cat", "rm", "mkdir")
PACKAGES = "iproute2, ethtool, util-linux, coreutils"


def _asyncssh():
    """asyncssh, imported where it is used (the lab starts without it). Its modules name DSA
    types in annotations, which newer cryptography releases warn about at import: ten lines
    about asyncssh's source, not about the user's hosts, so they are kept out of the one line
    an error is."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="DSA is deprecated")
        import asyncssh

    return asyncssh


class RemoteError(EngineIOError):
    """A remote host could not be reached, refused us, or failed: one line, exit 6."""


# --- the event loop thread ------------------------------------------------------------------


class _Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="pqlab-ssh", daemon=True)
        self.thread.start()

    def submit(self, coro) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro, timeout: float, what: str):
        """Run `coro` in the loop and wait for it, at most `timeout` seconds."""
        fut = self.submit(asyncio.wait_for(coro, timeout))
        try:
            return fut.result(timeout + 5)
        except (TimeoutError, concurrent.futures.TimeoutError):
            fut.cancel()
            raise RemoteError(f"{what} did not finish within {timeout:.0f} s") from None
        except BaseException:
            fut.cancel()
            raise

    def soon(self, fn, *args) -> None:
        self.loop.call_soon_threadsafe(fn, *args)


_the_loop: _Loop | None = None
_loop_lock = threading.Lock()


def _loop() -> _Loop:
    global _the_loop
    with _loop_lock:
        if _the_loop is None:
            _the_loop = _Loop()
        return _the_loop


# --- how to reach a host -------------------------------------------------------------------


@dataclass(frozen=True)
class SshOptions:
    """Everything asyncssh needs to reach one host; None/empty: the SSH configuration's
    (or asyncssh's) default."""

    host: str
    port: int | None = None
    user: str | None = None
    key_files: tuple[str, ...] = ()
    known_hosts: str | None = None
    proxy_jump: str | None = None
    proxy_command: str | None = None
    host_key_alias: str | None = None
    connect_timeout: float = CONNECT_TIMEOUT
    identities_only: bool = False
    config: tuple[str, ...] = ()  # OpenSSH client config files (default ~/.ssh/config)

    def kwargs(self) -> dict:
        kw: dict = {
            "connect_timeout": self.connect_timeout,
            "login_timeout": self.connect_timeout,
            # A dead connection is noticed within 15 s (the remote side notices by itself).
            "keepalive_interval": 5,
            "keepalive_count_max": 3,
        }
        if self.port:
            kw["port"] = self.port
        if self.user:
            kw["username"] = self.user
        if self.key_files:
            kw["client_keys"] = [os.path.expanduser(k) for k in self.key_files]
        if self.identities_only:
            kw["agent_path"] = None
        if self.known_hosts:
            kw["known_hosts"] = os.path.expanduser(self.known_hosts)
        if self.proxy_jump:
            kw["tunnel"] = self.proxy_jump
        if self.proxy_command:
            kw["proxy_command"] = self.proxy_command
        if self.host_key_alias:
            kw["host_key_alias"] = self.host_key_alias
        if self.config:
            kw["config"] = [os.path.expanduser(c) for c in self.config]
        return kw


def _sh_command(script: str, args=()) -> str:
    """A command line that runs `script` with POSIX sh whatever the login shell is."""
    return shlex.join(["sh", "-c", script, "pqlab", *map(str, args)])


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


class Connection:
    """One SSH connection, opened once and reused."""

    def __init__(self, opts: SshOptions, label: str):
        self.opts = opts
        self.label = label
        self.conn = None
        self._sftp = None
        self.peer_ip: str | None = None

    def open(self) -> None:
        if self.conn is not None:
            return
        asyncssh = _asyncssh()

        kw = self.opts.kwargs()

        async def go():
            options = asyncssh.SSHClientConnectionOptions(host=self.opts.host, **kw)
            if options.known_hosts is None:  # "UserKnownHostsFile none" in the config
                raise UserError(
                    f"{self.label}: the SSH configuration turns host-key checking off "
                    "(UserKnownHostsFile none); pqlab checks host keys: name a known_hosts file"
                )
            return await asyncssh.connect(self.opts.host, options=options)

        what = f"connecting to {self.label}"
        try:
            self.conn = _loop().call(go(), self.opts.connect_timeout + 10, what)
        except asyncssh.PermissionDenied as e:
            raise RemoteError(
                f"{self.label}: authentication failed ({e.reason}); check the user and "
                "that one of your keys (ssh-agent, IdentityFile, ansible_ssh_private_key_file) "
                "is authorised there"
            ) from None
        except asyncssh.HostKeyNotVerifiable as e:
            raise RemoteError(
                f"{self.label}: host key not verifiable ({e.reason}); pqlab checks host keys "
                "against known_hosts like ssh: connect once with ssh to check and store it"
            ) from None
        except asyncssh.Error as e:
            raise RemoteError(f"{self.label}: SSH failed: {e.reason}") from None
        except (OSError, ValueError) as e:
            raise RemoteError(f"cannot reach {self.label}: {e}") from None
        except RemoteError:
            raise RemoteError(
                f"cannot reach {self.label}: no SSH answer within {self.opts.connect_timeout:.0f} s"
            ) from None
        peer = self.conn.get_extra_info("peername")
        self.peer_ip = peer[0] if peer else None

    def run(self, script: str, args=(), timeout: float = COMMAND_TIMEOUT, what: str = "") -> Result:
        """Run a POSIX shell script there and wait (bounded)."""
        self.open()
        command = _sh_command(script, args)

        async def go():
            r = await self.conn.run(command, check=False, encoding="utf-8", errors="replace")
            return Result(
                r.exit_status if r.exit_status is not None else 255,
                str(r.stdout or ""),
                str(r.stderr or ""),
            )

        return self._call(go(), timeout, what or f"a command on {self.label}")

    def _call(self, coro, timeout: float, what: str):
        """Run coro in the SSH thread; a failed connection or transfer is a RemoteError."""
        asyncssh = _asyncssh()

        try:
            return _loop().call(coro, timeout, what)
        except (asyncssh.Error, OSError) as e:
            raise RemoteError(f"{self.label}: {what} failed: {e}") from None

    def sftp(self):
        self.open()

        async def go():
            if self._sftp is None:
                self._sftp = await self.conn.start_sftp_client()
            return self._sftp

        return self._call(go(), 30, "starting SFTP")

    def put(self, local: Path, remote: str, mode: int, timeout: float = 600) -> None:
        sftp = self.sftp()

        async def go():
            await sftp.put(str(local), remote)
            await sftp.chmod(remote, mode)

        self._call(go(), timeout, f"copying {local.name} there")

    def get(self, remote: str, local: Path, timeout: float = 600) -> None:
        sftp = self.sftp()

        async def go():
            await sftp.get(remote, str(local))

        self._call(go(), timeout, f"fetching {remote}")

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return

        async def go():
            conn.close()
            await conn.wait_closed()

        with contextlib.suppress(Exception):
            _loop().call(go(), 10, f"closing the connection to {self.label}")


# --- a supervised remote process ---------------------------------------------------------------

# $1 run directory, $2 lifetime (s), then the command. See the module docstring.
WRAPPER = r"""
d=$1; life=$2; shift 2
cd "$d" || exit 126
exec 3<&0 </dev/null
setsid timeout -s TERM -k 5 "$life" "$@" &
p=$!
: > "$d/pids/$p"
printf 'pqlab-remote-pid %s\n' "$p" >&2
setsid sh -c 'cat >/dev/null; kill -TERM -$1 2>/dev/null; sleep 3; kill -KILL -$1 2>/dev/null' pqlab-watch "$p" <&3 >/dev/null 2>&1 &
w=$!
exec 3<&-
wait "$p"; rc=$?
rm -f "$d/pids/$p"
kill -KILL -$w 2>/dev/null
printf 'pqlab-remote-exit %s\n' "$rc" >&2
times >&2
exit "$rc"
"""

# $1 run directory. Creates it, then waits for a line (or EOF: the lab went away) and
# removes it after stopping whatever of the run still runs.
KEEPER = r"""
d=$1
umask 077
mkdir -m 700 "$d" || exit 3
mkdir "$d/pids" "$d/in" "$d/out" || exit 3
echo $$ > "$d/keeper"
echo "pqlab-keeper-ready $d"
read -r _ || :
for f in "$d"/pids/*; do [ -e "$f" ] && kill -TERM -"${f##*/}" 2>/dev/null; done
i=0
while [ $i -lt 60 ]; do
  alive=0
  for f in "$d"/pids/*; do [ -e "$f" ] && kill -0 -"${f##*/}" 2>/dev/null && alive=1; done
  [ $alive = 0 ] && break
  sleep 0.1; i=$((i+1))
done
for f in "$d"/pids/*; do [ -e "$f" ] && kill -KILL -"${f##*/}" 2>/dev/null; done
rm -rf "$d" && echo "pqlab-keeper-done"
"""

# Run directories whose keeper is gone (a run that died with its connection still up when
# the keeper was killed, or a reboot): stop their processes and remove them.
STALE = r"""
for k in /tmp/pqlab-*/keeper; do
  [ -f "$k" ] || continue
  p=$(cat "$k" 2>/dev/null)
  [ -n "$p" ] && kill -0 "$p" 2>/dev/null && continue
  d=${k%/keeper}
  for f in "$d"/pids/*; do [ -e "$f" ] && kill -KILL -"${f##*/}" 2>/dev/null; done
  rm -rf "$d" && echo "stale=$d"
done
"""


class Lines:
    """Lines from the loop thread to a reader thread; iterating ends at `end()`."""

    def __init__(self) -> None:
        self._q: queue.Queue = queue.Queue()
        self._ended = False

    def put(self, line: str) -> None:
        self._q.put(line)

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            self._q.put(None)

    close = end

    def first(self, timeout: float) -> str | None:
        """The next line, or None at the end or after `timeout` seconds."""
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is None:
            self._q.put(None)
        return item

    def __iter__(self):
        while True:
            item = self._q.get()
            if item is None:
                self._q.put(None)  # later iterations end too
                return
            yield item


def _cpu_seconds(line: str) -> float | None:
    """`times`' children line, '0m0.200000s 0m0.010000s', as user + system seconds."""
    total = 0.0
    for word in line.split()[:2]:
        m, _, s = word.rstrip("s").partition("m")
        try:
            total += int(m) * 60 + float(s)
        except ValueError:
            return None
    return total


class RemoteChild:
    """A process on a remote host, with the interface of the TLS runner's local child:
    `stdout`/`stderr` (line iterables), `pid`, `returncode`, `reap(timeout)`, `signal(sig)`,
    `collect()` (fetch its output files), `release()`, `cpu_seconds()`."""

    def __init__(self, host: RemoteHost, command: str, what: str, outputs=(), markers=True):
        self.host = host
        self.what = what
        self.outputs: list[tuple[str, OutFile]] = list(outputs)
        self.stdout, self.stderr = Lines(), Lines()
        self.pid: int | None = None  # the remote process group
        self.returncode: int | None = None
        self._cpu: float | None = None
        self._markers = markers
        self._wrapper_rc: int | None = None
        self._times_left = 0
        self._proc = None
        self._start_error: BaseException | None = None
        self._started = threading.Event()
        self._pid_known = threading.Event()
        self._exited = threading.Event()
        _loop().submit(self._main(command))
        if not self._started.wait(30):
            raise RemoteError(f"{what} on {host.label}: no SSH session within 30 s")
        if self._start_error is not None:
            raise RemoteError(f"{what} on {host.label}: {self._start_error}")

    async def _main(self, command: str) -> None:
        asyncssh = _asyncssh()

        status, why = None, ""
        try:
            proc = await self.host.conn.conn.create_process(
                command, encoding="utf-8", errors="replace"
            )
        except (asyncssh.Error, OSError, AttributeError) as e:
            self._start_error = e
            self._started.set()
            self._done(None, f"could not start: {e}")
            return
        self._proc = proc
        self._started.set()
        try:
            await asyncio.gather(self._pump(proc.stdout, False), self._pump(proc.stderr, True))
            result = await proc.wait(check=False)
            status = result.exit_status
        except (asyncssh.Error, OSError) as e:
            why = f"the SSH connection to {self.host.label} failed: {e}"
        except BaseException as e:  # never leave a waiter hanging
            why = f"reading {self.what} from {self.host.label} failed: {e!r}"
            raise
        finally:
            self._done(status, why)

    async def _pump(self, reader, is_err: bool) -> None:
        async for line in reader:
            if is_err and self._markers and self._marker(line):
                continue
            (self.stderr if is_err else self.stdout).put(line)

    def _marker(self, line: str) -> bool:
        if self._times_left:
            self._times_left -= 1
            if self._times_left == 0:  # the second line: the children's times
                self._cpu = _cpu_seconds(line)
            return True
        if line.startswith("pqlab-remote-pid "):
            with contextlib.suppress(ValueError):
                self.pid = int(line.split()[1])
                self._pid_known.set()
            return True
        if line.startswith("pqlab-remote-exit "):
            with contextlib.suppress(ValueError):
                self._wrapper_rc = int(line.split()[1])
            self._times_left = 2
            return True
        return False

    def _done(self, status: int | None, why: str) -> None:
        if self._exited.is_set():
            return
        rc = self._wrapper_rc if self._wrapper_rc is not None else status
        if rc is None:
            rc = 255
            self.stderr.put(
                why or f"the SSH session to {self.host.label} ended before the process did\n"
            )
        elif rc > 128:  # killed by a signal: report it as Popen does
            rc = -(rc - 128)
        self.returncode = rc
        self.stdout.end()
        self.stderr.end()
        self._exited.set()

    # --- the local child's interface ----------------------------------------------------------
    def reap(self, timeout: float) -> bool:
        return self._exited.wait(timeout)

    def poll(self) -> int | None:
        return self.returncode

    def signal(self, sig: int) -> None:
        """Signal the remote process group (over a separate command on the connection); if
        that is impossible, close the session's stdin, which makes the watcher TERM it."""
        if self.returncode is not None:
            return
        if not self._pid_known.wait(5):
            self.release()
            return
        name = _signal.Signals(sig).name.removeprefix("SIG")
        script = '[ -e "$1/pids/$2" ] && kill -"$3" -"$2" 2>/dev/null; exit 0'
        try:
            self.host.conn.run(script, (self.host.run_dir, self.pid, name), timeout=15)
        except RemoteError:
            self.release()

    def write_line(self, text: str) -> None:
        proc = self._proc
        if proc is not None:
            _loop().soon(lambda: _quiet(proc.stdin.write, text + "\n"))

    def release(self) -> None:
        """Close our end of the session (the wrapper's watcher then stops the process)."""
        proc = self._proc
        if proc is not None:
            _loop().soon(lambda: _quiet(proc.stdin.write_eof))

    def collect(self) -> None:
        """Fetch the process's output files to their local paths (after it finished)."""
        for remote, out in self.outputs:
            self.host.fetch(remote, out)

    def cpu_seconds(self) -> float | None:
        return self._cpu


def _quiet(fn, *args) -> None:
    with contextlib.suppress(Exception):
        fn(*args)


# --- a remote host ------------------------------------------------------------------------------


@dataclass
class RemoteHost:
    """One host reached over SSH (see the module docstring). `label` names it in messages."""

    label: str
    opts: SshOptions
    test_offset_ns: int = 0  # TEST ONLY (pqlab.net.clock.test_offsets)
    conn: Connection = field(init=False)
    probe: dict = field(default_factory=dict)
    run_dir: str | None = None
    engine: str | None = None  # pqlab-engine there
    engine_source: str | None = None
    # Every built program of the engine there (pqlab-engine, pqlab-engine-wolfssl ...).
    programs: dict = field(default_factory=dict)
    stale_removed: list[str] = field(default_factory=list)
    _keeper: RemoteChild | None = None
    _users: int = 0
    _uploads: dict = field(default_factory=dict)
    _outputs: int = 0

    def __post_init__(self) -> None:
        self.conn = Connection(self.opts, self.label)

    # --- checking ---------------------------------------------------------------------------
    def check(self, needs_capture: bool) -> dict:
        """Connect, clear stale run directories, read the host; refuse one pqlab cannot use.
        Returns the probe (`pqlab.metadata.parse_kv` of HOST_SCRIPT)."""

        self.conn.open()
        r = self.conn.run(STALE + metadata.HOST_SCRIPT, what=f"reading {self.label}")
        kv = metadata.parse_kv(r.stdout)
        self.stale_removed = [line[6:] for line in r.stdout.splitlines() if line[:6] == "stale="]
        missing = [t for t in REQUIRED_TOOLS if not kv.get(f"tool_{t}")]
        if "machine" not in kv:
            raise RemoteError(f"{self.label}: could not read the host ({r.stderr.strip()[:200]})")
        if missing:
            raise UserError(
                f"{self.label} lacks {', '.join(missing)}; install them there ({PACKAGES})"
            )
        arch = engine.info().get("build", {}).get("target_arch")
        if arch and kv["machine"] != arch:
            raise UserError(
                f"{self.label} is {kv['machine']}, this engine is built for {arch}: pqlab "
                "copies its own engine, so both hosts need the lab machine's architecture"
            )
        if needs_capture and not metadata.has_capability(
            kv.get("capeff", "0"), metadata.CAP_NET_RAW
        ):
            raise UserError(
                f"{self.label}: capturing packets there needs CAP_NET_RAW, which user "
                f"{kv.get('user')} lacks: log in as root (root@...)"
            )
        self.probe = kv
        return kv

    def metadata(self) -> dict:

        return {**metadata.host_from_probe(self.probe), "ssh": self.label}

    def clock(self) -> dict:
        """The clock source and its synchronisation state now."""

        r = self.conn.run(metadata.CLOCK_SCRIPT, what=f"reading the clock of {self.label}")
        return metadata.parse_clock(r.stdout)

    # --- the run directory --------------------------------------------------------------------
    def open_run(self, run_id: str) -> str:
        """Create the run directory (with its keeper) and put the engine in place."""
        self._users += 1
        if self.run_dir is not None:
            return self.run_dir
        safe = "".join(c if c.isalnum() or c in ".-" else "_" for c in self.label)[:40]
        run_dir = f"/tmp/pqlab-{run_id}-{safe}"
        keeper = RemoteChild(
            self, _sh_command(KEEPER, [run_dir]), "the run directory's keeper", markers=False
        )
        self._keeper = keeper
        first = keeper.stdout.first(30) or ""
        if not first.startswith("pqlab-keeper-ready"):
            keeper.release()
            err = "".join(keeper.stderr) if keeper.reap(5) else "no answer within 30 s"
            self._keeper, self._users = None, 0
            raise RemoteError(f"{self.label}: could not create {run_dir}: {err.strip()[:200]}")
        self.run_dir = run_dir
        try:
            self._install_engine()
        except BaseException:
            self.close_run(force=True)
            raise
        return run_dir

    def close_run(self, force: bool = False) -> None:
        """Stop what still runs of this run there and remove its directory (bounded)."""
        self._users = 0 if force else max(0, self._users - 1)
        if self._users or self._keeper is None:
            return
        keeper, self._keeper = self._keeper, None
        keeper.write_line("done")
        keeper.release()
        if not keeper.reap(30):
            raise RemoteError(f"{self.label}: removing {self.run_dir} did not finish in 30 s")
        said = list(keeper.stdout)
        if "pqlab-keeper-done\n" not in said and keeper.returncode != 255:
            err = "".join(keeper.stderr).strip()[:200]
            raise RemoteError(f"{self.label}: could not remove {self.run_dir}: {err}")
        self.run_dir = None
        self.engine = None
        self.programs = {}
        self._uploads.clear()

    def _install_engine(self) -> None:
        """Every program of the engine built here, there: the same build (same build id) on
        its PATH, or copied into the run directory and checked."""
        for program in engine.built_programs():
            want = (engine.program_info(program) or {}).get("build_id")
            on_path = self.probe.get(f"tool_{program}")
            if on_path and want and self._build_id(on_path) == want:
                path, source = on_path, f"{on_path} (same build id)"
            else:
                path = f"{self.run_dir}/{program}"
                self.conn.put(engine.program_path(program), path, 0o700)
                got = self._build_id(path)
                if got != want:
                    raise RemoteError(
                        f"{self.label}: the {program} copied there reports build id {got}, "
                        f"not {want}"
                    )
                source = "copied from this machine"
            self.programs[program] = path
            if program == engine.MAIN:
                self.engine, self.engine_source = path, source

    def _sha256(self, path: str) -> str | None:
        if not self.probe.get("tool_sha256sum"):
            return None
        words = self.conn.run('sha256sum "$1"', [path]).stdout.split()
        return words[0] if words else None

    def _build_id(self, path: str) -> str | None:
        """The build id `info` reports there (an engine of protocol 1 reports none: then,
        as `pqlab.engine.info` does, the sha256 of the executable); None if it does not run."""
        r = self.conn.run('"$1" info', [path], timeout=120, what=f"engine info on {self.label}")
        for line in r.stdout.splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if rec.get("type") == "info":
                    return rec.get("build_id") or self._sha256(path)
        return None

    # --- files ------------------------------------------------------------------------------
    def upload(self, local: Path) -> str:
        st = local.stat()
        key = (str(local.resolve()), st.st_size, st.st_mtime_ns)
        if key not in self._uploads:
            digest = hashlib.sha256(key[0].encode()).hexdigest()[:12]
            remote = f"{self.run_dir}/in/{digest}-{local.name}"
            self.conn.put(local, remote, 0o600)
            self._uploads[key] = remote
        return self._uploads[key]

    def fetch(self, remote: str, out: OutFile) -> None:
        """Fetch `remote` to `out.path` (a secret keeps its 0600 file; a capture gets the
        TEST-ONLY offset, if one is set for this host)."""
        # A new file of a private name, 0600 (a key log is a secret; a capture may hold
        # payloads), that the SFTP client fills and that then replaces `out.path` (never
        # written through a link there; nothing half-fetched stays behind).
        with (
            files.Dir.open(out.path.parent) as d,
            d.filled_by_path(out.path.name, 0o600) as tmp,
        ):
            self.conn.get(remote, tmp)
            if out.kind == "pcap" and self.test_offset_ns:
                rewrite_pcap(tmp, tmp, lambda t: t + self.test_offset_ns, mode=0o600)

    # --- processes -------------------------------------------------------------------------
    def translate(self, argv) -> tuple[list[str], list[tuple[str, OutFile]]]:
        """The argv as it runs there, and the output files to fetch afterwards."""
        if self.run_dir is None:
            raise RemoteError(f"{self.label}: no run directory (the topology is not started)")
        out, outputs = [], []
        for a in argv:
            if isinstance(a, Program):
                out.append(self.programs.get(a.name, self.engine))
            elif isinstance(a, InFile):
                out.append(self.upload(Path(a.path)))
            elif isinstance(a, OutFile):
                self._outputs += 1
                remote = f"{self.run_dir}/out/{self._outputs}-{Path(a.path).name}"
                outputs.append((remote, a))
                out.append(remote)
            else:
                out.append(str(a))
        return out, outputs

    def spawn(self, argv, what: str, env: dict | None = None, lifetime: float | None = None):
        args, outputs = self.translate(argv)
        if env:
            args = ["env", *(f"{k}={v}" for k, v in env.items()), *args]
        life = int(lifetime or DEFAULT_LIFETIME_S)
        command = _sh_command(WRAPPER, [self.run_dir, life, *args])
        return RemoteChild(self, command, what, outputs)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.close_run(force=True)
        self.conn.close()


# --- one connection per host, closed at exit --------------------------------------------------

_hosts: dict[tuple, RemoteHost] = {}
_hosts_lock = threading.Lock()


def host(label: str, opts: SshOptions) -> RemoteHost:
    """The RemoteHost for these options (one per host and options, reused)."""
    key = (label, opts)
    with _hosts_lock:
        if key not in _hosts:
            _hosts[key] = RemoteHost(label, opts)
        return _hosts[key]


def close_all() -> None:
    """Remove every open run directory and close every connection (bounded)."""
    with _hosts_lock:
        hosts = list(_hosts.values())
        _hosts.clear()
    deadline = time.monotonic() + 60
    for h in hosts:
        if time.monotonic() < deadline:
            h.close()


atexit.register(close_all)

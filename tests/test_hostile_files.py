"""What pqlab writes, tried as an attacker and as an unlucky user would, through the real CLI
as root: it never writes through a link planted in a run directory, never takes over a file
it did not make (a key log included), never writes outside the run directory or the export
target, refuses directories that are not the user's own to write, and a full or read-only
disk is one line, exit 6, with nothing half-written left behind and the run's database not
blamed. After each case, the files outside the run directory are as they were (content,
mode, modification time)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, pqlab_env, run_pqlab

pytestmark = pytest.mark.root  # as pqlab runs (chown, mounts)

NOBODY = 65534
PASSWD = b"root:x:0:0:root:/root:/bin/bash\n"


def one_line(proc, code: int) -> str:
    """The one `error:` line of a refused command, with its exit code (progress lines, which
    start with `[`, aside)."""
    lines = [x for x in proc.stderr.strip().splitlines() if not x.startswith("[")]
    assert proc.returncode == code, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def snapshot(root: Path, skip: Path | None = None) -> dict:
    """Every entry under `root` (but `skip`): its mode, size, modification time, and its
    content (a hash) or link target."""
    out = {}
    for dirpath, dirs, names in os.walk(root):
        d = Path(dirpath)
        for name in dirs + names:
            p = d / name
            if skip is not None and (p == skip or skip in p.parents):
                continue
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                what = os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                what = hash(p.read_bytes())
            else:
                what = None
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, what)
    return out


class Victim:
    """A file like /etc/passwd and a directory like /etc, outside every run: after each case
    they are exactly as they were."""

    def __init__(self, base: Path):
        self.base = base
        base.mkdir()
        self.file = base / "passwd"
        self.file.write_bytes(PASSWD)
        os.chmod(self.file, 0o644)
        self.dir = base / "etc"
        self.dir.mkdir()
        (self.dir / "keep").write_text("keep\n")
        for p in (self.file, self.dir / "keep", self.dir):
            os.utime(p, ns=(1_000_000_000, 1_000_000_000))
        self.before = snapshot(base)

    def intact(self) -> None:
        assert snapshot(self.base) == self.before
        assert self.file.read_bytes() == PASSWD


SIZES = ("sizes", "--kem", "X25519", "--sig", "Ed25519", "--samples", "2")


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> Path:
    """A finished run to copy: tables, figures, report, database."""
    out = tmp_path_factory.mktemp("base") / "run"
    run_pqlab(*SIZES, "--out", out, check=True, timeout=300)
    return out


@pytest.fixture
def victim(tmp_path) -> Victim:
    return Victim(tmp_path / "outside")


def copy_run(base: Path, to: Path) -> Path:
    shutil.copytree(base, to, symlinks=True)
    return to


# --- 1: never through a link, never into another's directory -------------------------------


def test_a_lock_planted_as_a_link_is_not_written_through(tmp_path, victim, base_run):
    """The issue's case: `.lock -> victim` in a directory given as --out."""
    out = tmp_path / "pqr-a"
    out.mkdir()
    (out / ".lock").symlink_to(victim.file)
    line = one_line(run_pqlab(*SIZES, "--out", out), 2)
    assert "not empty and holds no pqlab run" in line
    # The same link in a real run: refused by a writer and by a reader alike.
    run = copy_run(base_run, tmp_path / "run")
    (run / ".lock").symlink_to(victim.file)
    assert "symbolic link" in one_line(run_pqlab(*SIZES, "--out", run, "--resume"), 2)
    assert "symbolic link" in one_line(run_pqlab("report", run), 2)
    victim.intact()
    # A hard link to someone's file: the writer does not write its PID into it.
    os.unlink(run / ".lock")
    os.link(victim.file, run / ".lock")
    assert "not a lock file" in one_line(run_pqlab(*SIZES, "--out", run, "--resume"), 2)
    assert victim.file.read_bytes() == PASSWD


def test_files_planted_as_links_in_a_run_are_replaced_not_followed(tmp_path, victim, base_run):
    run = copy_run(base_run, tmp_path / "run")
    exports = [
        run / "report.html",
        run / "tables" / "sizes.csv",
        run / "tables" / "sizes.parquet",
        next((run / "figures").glob("*.png")),
    ]
    for p in [*exports, run / "metadata.json"]:
        p.unlink()
        p.symlink_to(victim.file)
    proc = run_pqlab("report", run)
    assert proc.returncode == 0, proc.stderr
    for p in exports:
        assert not p.is_symlink() and p.stat().st_size > 0, p
    proc = run_pqlab(*SIZES, "--out", run, "--resume")
    assert proc.returncode == 0, proc.stderr
    meta = run / "metadata.json"
    assert not meta.is_symlink() and json.loads(meta.read_text())["invocations"]
    assert not [p for p in run.rglob("*") if p.name.endswith(".tmp")]
    victim.intact()


@pytest.mark.parametrize("sub", ["tables", "figures"])
def test_run_directories_planted_as_links_are_refused(tmp_path, victim, base_run, sub):
    run = copy_run(base_run, tmp_path / "run")
    shutil.rmtree(run / sub)
    (run / sub).symlink_to(victim.dir)
    assert "symbolic link" in one_line(run_pqlab("report", run), 2)
    assert "symbolic link" in one_line(run_pqlab(*SIZES, "--out", run, "--resume"), 2)
    victim.intact()


def test_certs_planted_as_a_link_to_a_system_directory_is_refused(tmp_path, victim, base_run):
    """`certs -> /etc` (here: a directory standing for it): the keys go nowhere."""
    run = copy_run(base_run, tmp_path / "run")
    (run / "certs").symlink_to(victim.dir)
    proc = run_pqlab("certs", "--ca-sig", "Ed25519", "--server-sig", "Ed25519", "--out", run)
    assert "symbolic link" in one_line(proc, 2)
    victim.intact()


@pytest.mark.parametrize("link", ["results.duckdb", "results.duckdb.wal"])
def test_database_files_planted_as_links_are_refused(tmp_path, victim, base_run, link):
    run = copy_run(base_run, tmp_path / "run")
    target = run / link
    if target.exists():
        target.unlink()
    target.symlink_to(victim.file)
    proc = run_pqlab(*SIZES, "--out", run, "--resume")
    assert proc.returncode == 2 and "symbolic link" in proc.stderr, proc.stderr
    victim.intact()


def test_run_directories_not_the_users_own_are_refused(tmp_path, victim, base_run):
    theirs = copy_run(base_run, tmp_path / "theirs")
    for p in [theirs, *theirs.rglob("*")]:
        os.lchown(p, NOBODY, NOBODY)
    assert "belongs to" in one_line(run_pqlab(*SIZES, "--out", theirs, "--resume"), 2)
    assert "belongs to" in one_line(run_pqlab("report", theirs), 2)
    # Readers still read it.
    assert "Structure: the same" in run_pqlab("compare", theirs, base_run).stdout
    # A directory others may write into: they could swap what pqlab writes.
    shared = copy_run(base_run, tmp_path / "shared")
    os.chmod(shared, 0o777)
    assert "writable by others" in one_line(run_pqlab(*SIZES, "--out", shared, "--resume"), 2)
    # A new run under a directory of another user: they could replace it with a link.
    parent = tmp_path / "parent"
    parent.mkdir()
    os.chown(parent, NOBODY, NOBODY)
    assert "belongs to" in one_line(run_pqlab(*SIZES, "--out", parent / "run"), 2)
    assert not (parent / "run").exists()
    # --out a link to a directory.
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert "symbolic link" in one_line(run_pqlab(*SIZES, "--out", tmp_path / "link"), 2)
    assert not list(real.iterdir())
    victim.intact()


# --- 2: --out /, /etc, and directories that hold something else ----------------------------


def test_system_directories_and_foreign_content_are_refused_as_out(tmp_path, victim):
    etc = (sorted(os.listdir("/etc")), os.stat("/etc").st_mtime_ns)
    for out in ("/", "/etc", "/usr/local/pqlab-run", "/proc/self", "/tmp", "/root"):
        line = one_line(run_pqlab(*SIZES, "--out", out), 2)
        assert "system directory" in line, line
    assert (sorted(os.listdir("/etc")), os.stat("/etc").st_mtime_ns) == etc
    assert not Path("/usr/local/pqlab-run").exists()
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine\n")
    assert "holds no pqlab run" in one_line(run_pqlab(*SIZES, "--out", busy), 2)
    assert sorted(p.name for p in busy.iterdir()) == ["notes.txt"]
    # A run's own directory as a link (`certs -> /etc`) makes no prepared run either.
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "certs").symlink_to(victim.dir)
    assert "holds no pqlab run" in one_line(run_pqlab(*SIZES, "--out", linked), 2)
    # A real one (certificates copied in, for two runs to share them) does.
    prepared = tmp_path / "prepared"
    (prepared / "certs").mkdir(parents=True)
    assert run_pqlab(*SIZES, "--out", prepared).returncode == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "not a pqlab run" in one_line(run_pqlab(*SIZES, "--out", empty, "--resume"), 2)
    assert not list(empty.iterdir())
    victim.intact()


# --- 3: a key log takes over no file ---------------------------------------------------------


def test_a_key_log_takes_over_no_file(tmp_path, victim):
    secret = tmp_path / "id_key"
    secret.write_text("-----BEGIN PRIVATE KEY-----\nMIIB\n")
    os.chmod(secret, 0o600)
    link = tmp_path / "link.log"
    link.symlink_to(victim.file)
    good = tmp_path / "good.log"
    good.write_text("CLIENT_RANDOM 00 11\n")
    os.chmod(good, 0o600)
    hard = tmp_path / "hard.log"
    os.link(good, hard)
    cases = {
        victim.file: "not 0600",
        link: "symbolic link",
        secret: "not a key log",
        hard: "hard links",
        tmp_path: "directory",
    }
    before = snapshot(tmp_path)
    for path, why in cases.items():
        assert why in one_line(run_pqlab("serve", "--keylog", path, "--port", "1"), 2)
        proc = run_pqlab("connect", "127.0.0.1:1", "--ca", victim.file, "--keylog", path)
        assert why in one_line(proc, 2)
    assert snapshot(tmp_path) == before
    # A connection that fails before any secret leaves no key log behind.
    fresh = tmp_path / "fresh.log"
    proc = run_pqlab("connect", "127.0.0.1:1", "--ca", victim.file, "--keylog", fresh)
    assert proc.returncode == 6, proc.stderr
    assert not fresh.exists()
    victim.intact()


def test_the_key_log_rule_is_the_engines():
    """The lab's rule, held to the examples the engine's (engine/src/secrets.rs) is."""
    from pqlab import files

    cases = json.loads((REPO / "tests" / "key_log_heads.json").read_text())
    for case in cases:
        head = case["head"].encode() if "head" in case else bytes.fromhex(case["head_hex"])
        assert files.is_key_log(head) == case["key_log"], case["why"]


# --- 4: export writes inside --to only ------------------------------------------------------


@pytest.mark.parametrize("name", ["../../x", "{tmp_path}/escape", "a/b"])
def test_export_refuses_table_names_that_leave_the_target(tmp_path, victim, base_run, name):
    import duckdb

    name = name.format(tmp_path=tmp_path)  # an absolute name: where it would land is checked
    run = copy_run(base_run, tmp_path / "run")
    con = duckdb.connect(str(run / "results.duckdb"))
    con.execute(f'CREATE TABLE "{name}" (a INTEGER)')
    con.execute(f'INSERT INTO "{name}" VALUES (1)')
    con.close()
    deep = tmp_path / "deep" / "a" / "b"
    deep.mkdir(parents=True)
    before = snapshot(tmp_path, skip=run)
    proc = run_pqlab("export", run, "--format", "csv", "--to", deep / "out")
    assert "would leave --to" in one_line(proc, 2)
    assert snapshot(tmp_path, skip=run) == before
    victim.intact()


# --- 16 and 18: full and read-only disks -----------------------------------------------------


def in_mount_namespace(
    tmp_path: Path, script: str, timeout: float = 600
) -> subprocess.CompletedProcess:
    """`script` (bash) in a private mount namespace (its mounts vanish with it), in a
    scratch directory of the test's. $PQLAB runs this checkout's pqlab."""
    env = {**pqlab_env(), "PQLAB": f"{sys.executable} -m pqlab"}
    scratch = tmp_path / "sh"
    scratch.mkdir(exist_ok=True)
    return subprocess.run(
        ["unshare", "-m", "bash", "-euc", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=scratch,
    )


def results(proc) -> dict[str, str]:
    """KEY=VALUE lines a namespace script printed on stdout."""
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def test_a_read_only_export_target_is_one_line(tmp_path, victim, base_run):
    ro = tmp_path / "ro"
    (ro / "empty").mkdir(parents=True)
    proc = in_mount_namespace(
        tmp_path,
        f"""
mount --bind {ro} {ro}; mount -o remount,bind,ro {ro}
for to in {ro}/new {ro}/empty; do
  set +e; $PQLAB export {base_run} --format csv --to $to 2>err; echo "rc=$?"; set -e
  echo "err=$(cat err)"
done
""",
    )
    assert proc.returncode == 0, proc.stderr
    for line in proc.stdout.splitlines():
        if line.startswith("rc="):
            assert line == "rc=6", proc.stdout
        if line.startswith("err="):
            assert "Read-only file system" in line and "Traceback" not in line, proc.stdout
    assert sorted(p.name for p in ro.iterdir()) == ["empty"]
    assert not list((ro / "empty").iterdir())
    victim.intact()


def test_memory_certs_on_a_read_only_file_system_is_refused_before_the_run(tmp_path, victim):
    certs = tmp_path / "certs"
    certs.mkdir()
    out = tmp_path / "run"
    proc = in_mount_namespace(
        tmp_path,
        f"""
mount --bind {certs} {certs}; mount -o remount,bind,ro {certs}
set +e; $PQLAB memory --groups X25519 --server-sig Ed25519 --ca-sig Ed25519 -n 2 --idle 0 \\
  --certs {certs} --out {out} 2>err; echo "rc=$?"; set -e
echo "err=$(cat err)"; echo "lines=$(wc -l < err)"
""",
    )
    r = results(proc)
    assert r["rc"] == "6" and r["lines"] == "1", proc.stdout + proc.stderr
    assert "read-only file system" in r["err"]
    assert not out.exists() and not list(certs.iterdir())
    victim.intact()


def test_a_full_disk_during_a_run_leaves_nothing_half_written(tmp_path, victim):
    """Whatever the run was writing when the disk filled (the database, metadata.json, a
    table, a figure, the report, the final checkpoint): exit 6 and one line that blames the
    disk, no temporary file left, no half-written file."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    outcomes = []
    for size in ("300k", "1200k", "8m"):
        proc = in_mount_namespace(
            tmp_path,
            f"""
mount -t tmpfs -o size={size} tmpfs {mnt}
set +e; $PQLAB {" ".join(SIZES)} --out {mnt}/run >/dev/null 2>err; echo "rc=$?"; set -e
echo "err=$(grep -v '^\\[sizes\\]' err | tr '\\n' '|')"
echo "tmp=$(find {mnt} -name '*.tmp' -o -name 'tmp_*' | tr '\\n' ' ')"
""",
        )
        r = results(proc)
        outcomes.append(r["rc"])
        assert r["rc"] in ("0", "6"), (size, proc.stdout, proc.stderr)
        assert r["tmp"].strip() == "", (size, r["tmp"])
        if r["rc"] == "6":
            lines = [x for x in r["err"].split("|") if x]
            assert len(lines) == 1 and lines[0].startswith("error: "), (size, lines)
            assert "No space left on device" in lines[0] and "damaged" not in lines[0]
    assert outcomes[0] == "6" and outcomes[-1] == "0", outcomes
    victim.intact()


FILL_AFTER_EXPORT = """
import sys
from pqlab import session
from pqlab.cli import main

exported = session.export

def export(store, html=True):
    exported(store, html)
    with open(sys.argv[1], "wb") as f:  # the disk fills between the export and the checkpoint
        try:
            while True:
                f.write(bytes(65536))
        except OSError:
            pass

session.export = export
sys.exit(main(sys.argv[2:]))
"""


def test_a_failed_final_checkpoint_fails_the_run_and_report_says_so(tmp_path, victim):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    fill = tmp_path / "fill.py"
    fill.write_text(FILL_AFTER_EXPORT)
    proc = in_mount_namespace(
        tmp_path,
        f"""
mount -t tmpfs -o size=16m tmpfs {mnt}
set +e
{sys.executable} {fill} {mnt}/filler {" ".join(SIZES)} --out {mnt}/run >/dev/null 2>err
echo "rc=$?"; echo "err=$(grep -v '^\\[sizes\\]' err | tr '\\n' '|')"
echo "wal=$(test -e {mnt}/run/results.duckdb.wal && echo yes)"
rm {mnt}/filler
$PQLAB report {mnt}/run >/dev/null 2>err; echo "report=$?"; echo "note=$(tr '\\n' '|' < err)"
$PQLAB {" ".join(SIZES)} --out {mnt}/run --resume >/dev/null 2>&1; echo "resume=$?"
echo "wal_after=$(test -e {mnt}/run/results.duckdb.wal && echo yes)"
echo "tmp=$(find {mnt} -name '*.tmp' | tr '\\n' ' ')"
""",
    )
    r = results(proc)
    assert r["rc"] == "6", proc.stdout + proc.stderr
    lines = [x for x in r["err"].split("|") if x]
    assert len(lines) == 1 and "final checkpoint failed" in lines[0], lines
    assert "No space left on device" in lines[0] and "damaged" not in lines[0]
    assert r["wal"] == "yes"
    assert r["report"] == "0" and "results.duckdb.wal holds results" in r["note"], r
    assert r["resume"] == "0" and r["wal_after"] == "" and r["tmp"].strip() == "", r
    victim.intact()


def test_a_full_disk_during_report_and_export_blames_the_disk(tmp_path, victim, base_run):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = in_mount_namespace(
        tmp_path,
        f"""
mount -t tmpfs -o size=64m tmpfs {mnt}
cp -a {base_run} {mnt}/run
used=$(df -k --output=used {mnt} | tail -1)
mount -o remount,size=$((used + 8))k {mnt}
set +e
$PQLAB report {mnt}/run 2>err; echo "report=$?"; echo "report_err=$(tr '\\n' '|' < err)"
$PQLAB export {mnt}/run --format csv --to {mnt}/out 2>err; echo "export=$?"
echo "export_err=$(tr '\\n' '|' < err)"
echo "tmp=$(find {mnt} -name '*.tmp' -o -name 'tmp_*' | tr '\\n' ' ')"
echo "out=$(test -e {mnt}/out && echo yes)"
""",
    )
    r = results(proc)
    for what in ("report", "export"):
        lines = [x for x in r[f"{what}_err"].split("|") if x]
        assert r[what] == "6", (what, proc.stdout, proc.stderr)
        assert len(lines) == 1 and "No space left on device" in lines[0], (what, lines)
        assert "damaged" not in lines[0]
    assert str(mnt / "out") in r["export_err"]  # the target is named, not the run
    assert r["tmp"].strip() == "" and r["out"] == "", r
    victim.intact()


# --- 18 and 1: the handshake's scratch directory, captures --------------------------------


HANDSHAKE = ("handshake", "--groups", "X25519", "--server-sig", "Ed25519", "--ca-sig", "Ed25519")


def test_work_is_private_and_pcap_never_followed(tmp_path, victim, base_run):
    """RUN/.work holds key logs: 0700 while the run uses it, and gone afterwards; a `.work`
    or `pcap` planted as a link is refused before anything is measured."""
    run = copy_run(base_run, tmp_path / "run")
    (run / ".work").symlink_to(victim.dir)
    argv = [*HANDSHAKE, "-n", "2", "--messages", "keylog", "--out", run]
    assert "symbolic link" in one_line(run_pqlab(*argv), 2)
    (run / ".work").unlink()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pqlab", *map(str, argv)],
        env=pqlab_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    modes = set()
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(run / ".work")
            if not stat.S_ISLNK(st.st_mode):
                modes.add(stat.S_IMODE(st.st_mode))
        time.sleep(0.002)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert modes == {0o700}, modes
    assert not os.path.lexists(run / ".work")
    other = copy_run(base_run, tmp_path / "other")
    (other / "pcap").symlink_to(victim.dir)
    proc = run_pqlab(*HANDSHAKE, "-n", "2", "--keep-pcap", "--out", other)
    assert "symbolic link" in one_line(proc, 2)
    victim.intact()

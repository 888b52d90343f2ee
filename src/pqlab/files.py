"""Every file and directory pqlab writes goes through here, so that nothing it writes can
land anywhere else or take over a file it did not make.

pqlab runs as root, and the directories it writes into may have been prepared by someone
else: a run directory handed over by a colleague, a directory in /tmp, a name planted as a
symbolic link. The rules, in one place:

- A directory is opened once (`Dir`), as a real directory (a symbolic link at its own name
  is refused, never followed) owned by a trusted user (root, the user running pqlab, or
  the user who ran sudo), writable by others only if sticky (they cannot then replace what
  pqlab puts there), and under ancestors that obey the same rule: nobody else can swap the
  directory, or one above it, for a link after it was checked. A run directory (`open_run`)
  and its sub-directories must be the invoking user's own and writable by nobody else.
- Every file is written relative to the directory's descriptor, under a fresh private name
  (O_CREAT | O_EXCL | O_NOFOLLOW, mode set on the descriptor) and renamed over its final name
  once complete: no symbolic link is followed, no existing file (nor a hard link to one) is
  written into, and a failed write (a full disk, a read-only file system) removes the
  half-written file.
- Modes change only through a descriptor (fchmod), never through a path.
- A write the file system refuses is one line (`StorageError`, exit 6) naming the file.
- A TLS key log (`--keylog`) is created new, or appended to only when it is already a key log
  of the user's own (`check_keylog`; the engine applies the same rule, engine/src/secrets.rs).

And every file pqlab reads goes through `read_input` (or `Dir.read_bytes`, inside a directory
it opened): a regular file only (a FIFO, a device, a directory or a socket is one line, and is
never waited on: it is opened O_NONBLOCK), read with a bound that depends on what the file is
(`READ_LIMITS`): a file larger than its bound is one line naming the bound.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from pqlab.errors import StorageError, UserError

# Directories that are no place for a run, nor for anything inside them.
SYSTEM_TREES = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sbin",
    "/sys", "/usr",
)  # fmt: skip
# Directories that hold other things: a run may live inside them, never be them.
SYSTEM_DIRS = (
    "/", "/home", "/media", "/mnt", "/opt", "/root", "/run", "/srv", "/tmp", "/var",
    "/var/cache", "/var/lib", "/var/log", "/var/mail", "/var/spool", "/var/tmp",
)  # fmt: skip

DB_NAME = "results.duckdb"  # what makes a directory a pqlab run
# The run's directories (exports; chains; kept captures; a probe's captures; the scratch of
# a run in progress). A directory holding nothing but some of them (a `certs/` copied in, so
# that two runs use the same certificates) may become a run.
RUN_DIRS = ("tables", "figures", "certs", "pcap", "captures", ".work")

# The errors that mean the file system refused a write (as opposed to a wrong name).
# (What to do about each.)
STORAGE_ERRNOS = {
    errno.ENOSPC: "free space and run again",
    errno.EDQUOT: "free space within your quota and run again",
    errno.EROFS: "give a directory on a writable file system",
    errno.EFBIG: "the file system takes no file that large",
    errno.EIO: "the disk failed: check it",
}


# How much pqlab reads of each kind of file it is given, at most (bytes). Each is a few
# times the largest such file pqlab or its users make; docs/security.md lists them.
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
READ_LIMITS = {
    "suite file": 1 * MiB,  # the full suite is 12 KiB
    "inventory": 4 * MiB,  # some ten thousand hosts with their variables
    "profile file": 1 * MiB,  # a profile file is a few lines
    "key log": 256 * MiB,  # about 200 bytes a connection: a million connections
    "capture": 4 * GiB,  # a kept capture of a large transfer; read in one piece
    "connection records": 1 * GiB,  # a cell's records are some 15 MB
    "certificate": 16 * MiB,  # a padded chain of a few hundred kB, PEM
    "table": 1 * GiB,  # a run's exported tables (CSV), read back by compare and report
    "figure": 64 * MiB,  # a run's PNG figures, embedded in report.html
    "record": 1 * MiB,  # a chain's certs.json, the engine's kept info
}


# The private name a file is written under before it is renamed over its own (`Dir`).
_PRIVATE = re.compile(r"(^|/)\.([^/]+)\.[0-9a-f]{12}\.tmp$")


def shown(path: str | Path) -> str:
    """`path` as a message names it: a file being written under its private name is named by
    the name it was to get."""
    return _PRIVATE.sub(r"\1\2", str(path))


def storage_error(e: OSError, what: str) -> UserError:
    """One line for a write that failed: `StorageError` (exit 6) when the file system refused
    it (full, read-only, quota, I/O, no permission), a `UserError` otherwise."""
    what = shown(what)
    reason = e.strerror or str(e)
    advice = STORAGE_ERRNOS.get(e.errno)
    if advice is not None or e.errno in (errno.EACCES, errno.EPERM):
        return StorageError(f"cannot write {what}: {reason}" + (f"; {advice}" if advice else ""))
    return UserError(f"cannot write {what}: {reason}")


def trusted_owners() -> set[int]:
    """Users whose directories pqlab writes into: root, the user running pqlab, and under
    sudo the user who ran it (their checkout, their results/)."""
    owners = {0, os.geteuid()}
    sudo = os.environ.get("SUDO_UID", "")
    if os.geteuid() == 0 and sudo.isdigit():
        owners.add(int(sudo))
    return owners


def _describe_owner(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _unsafe(st: os.stat_result, own: bool) -> str | None:
    """Why a directory with this status is no place to write, or None."""
    if own and st.st_uid != os.geteuid():
        return f"belongs to {_describe_owner(st.st_uid)}, not to the user running pqlab"
    if st.st_uid not in trusted_owners():
        return f"belongs to {_describe_owner(st.st_uid)}, who could replace what pqlab writes"
    others = stat.S_IMODE(st.st_mode) & (stat.S_IWGRP | stat.S_IWOTH)
    if others and (own or not st.st_mode & stat.S_ISVTX):
        who = "its group" if others == stat.S_IWGRP else "others"
        return f"is writable by {who}, who could replace what pqlab writes"
    return None


def check_ancestors(path: Path, what: str) -> None:
    """Every directory above `path` (links resolved) is one nobody untrusted can change."""
    parent = Path(os.path.realpath(path.parent if path.name else path))
    for d in (parent, *parent.parents):
        try:
            st = os.lstat(d)
        except OSError:
            continue  # not there yet: made by pqlab
        why = _unsafe(st, own=False)
        if why is not None:
            raise UserError(f"{what} {str(path)!r}: {str(d)!r} {why}; choose a directory of "
                            "your own")  # fmt: skip


def _kind(st: os.stat_result) -> str:
    """What a non-regular file is, for a message."""
    for test, what in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(st.st_mode):
            return what
    return "not a regular file"


def _read_fd(fd: int, shown: str, kind: str, limit: int | None, head: int | None = None) -> bytes:
    """The content of the open file `fd` (closed here): a regular file of at most `limit`
    bytes (the bound of `kind`), or one line naming `shown` and why not. `head`: its first
    `head` bytes, whatever its size."""
    limit = READ_LIMITS[kind] if limit is None else limit
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{shown} is {_kind(st)}; give a regular file")
        if head is not None:
            return os.read(fd, head)
        if st.st_size > limit:
            raise UserError(f"{shown} is larger than {_size(limit)}, the bound of a {kind}")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 * MiB, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # it grew while being read
                raise UserError(f"{shown} is larger than {_size(limit)}, the bound of a {kind}")
        return b"".join(chunks)
    except OSError as e:
        raise UserError(f"cannot read {shown}: {e.strerror or e}") from None
    finally:
        os.close(fd)


def _size(n: int) -> str:
    for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} bytes"


def read_input(
    path: str | Path, what: str, kind: str, limit: int | None = None, follow: bool = True,
    head: int | None = None,
) -> bytes:  # fmt: skip
    """The bytes of a file pqlab was given (`what` names it in messages, e.g. "suite file
    'x.toml'"): a regular file of at most READ_LIMITS[kind] bytes (or `limit`). Opened
    O_NONBLOCK, so a FIFO is refused rather than waited on; `follow` False refuses a
    symbolic link at the last component (a file inside a directory others may write).
    `head`: only the first `head` bytes are wanted (a file header), whatever the size."""
    text = str(path)
    if not text or "\0" in text:
        raise UserError(f"{what} is not a file name")
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(text, flags)
    except FileNotFoundError:
        raise UserError(f"{what} does not exist") from None
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise UserError(f"{what} is a symbolic link; pqlab reads no link here") from None
        raise UserError(f"cannot read {what}: {e.strerror or e}") from None
    if head is not None:
        return _read_fd(fd, what, kind, limit, head)
    return _read_fd(fd, what, kind, limit)


def read_input_text(
    path: str | Path, what: str, kind: str, limit: int | None = None, follow: bool = True,
    encoding: str = "utf-8",
) -> str:  # fmt: skip
    """`read_input`, decoded (`encoding`); a byte that is not text is one line naming it
    and its line."""
    data = read_input(path, what, kind, limit, follow)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UserError(
            f"{what} is not {encoding.upper()} text (byte 0x{data[e.start]:02x} on line {line})"
        ) from None


def parse_toml(text: str, what: str) -> dict:
    """A TOML document, or one line saying why not (never a traceback, however it nests)."""
    try:
        # A byte-order mark is how some editors say UTF-8; TOML itself does not allow one.
        return tomllib.loads(text.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError as e:
        # The message ends with "(at line L, column C)".
        raise UserError(f"{what} is not valid TOML: {' '.join(str(e).split())}") from None
    except RecursionError:
        raise UserError(f"{what} is not valid TOML: its arrays or tables nest too deeply") from None


def read_toml(path: str | Path, what: str, kind: str) -> dict:
    """The TOML document in the file `path` (`read_input_text`, `parse_toml`)."""
    return parse_toml(read_input_text(path, what, kind), what)


def check_name(name: str, what: str = "a file name") -> str:
    """`name` as one plain entry of a directory: no '/', not '.' or '..', no NUL, not empty."""
    if not name or name in (".", "..") or "/" in name or "\0" in name or len(name) > 255:
        raise UserError(f"{what} {name!r} is not a plain file name: it would leave its directory")
    return name


def _system(resolved: str) -> str | None:
    for tree in SYSTEM_TREES:
        if resolved == tree or resolved.startswith(tree + "/"):
            return tree
    if resolved in SYSTEM_DIRS or resolved == os.path.expanduser("~"):
        return resolved
    return None


class Dir:
    """A directory opened once; every file is made relative to its descriptor."""

    def __init__(self, fd: int, path: Path, own: bool):
        self.fd = fd
        self.path = Path(path)
        self.own = own  # the invoking user's own: sub-directories must be too
        self._subs: dict[str, Dir] = {}

    # --- opening -----------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | Path,
        what: str = "directory",
        create: bool = False,
        private: bool = False,
        own: bool = False,
    ) -> Dir:
        """Open `path` (made with its parents when `create`) as a directory to write into.
        `private`: mode 0700 (made so, or narrowed through the descriptor when it is the
        user's own). `own`: it must belong to the user running pqlab."""
        path = Path(path)
        own = own or private  # a private directory is made 0700: it must be the user's
        check_ancestors(path, what)
        made = False
        if create:
            try:
                os.makedirs(path.parent, mode=0o755, exist_ok=True)
                os.mkdir(path, 0o700 if private else 0o755)
                made = True
            except FileExistsError:
                pass
            except OSError as e:
                raise storage_error(e, f"{what} {str(path)!r}") from None
            if made:
                check_ancestors(path, what)  # the parents it made obey the rule too
        fd = cls._open_fd(None, path, f"{what} {str(path)!r}")
        d = cls(fd, path, own)
        try:
            d._check(what, private)
        except BaseException:
            d.close()
            raise
        return d

    @classmethod
    def reading(cls, path: str | Path, what: str = "directory") -> Dir:
        """Open `path` only to read what is in it (nothing is written through this `Dir`
        but the reader's lock, which `pqlab.store` makes without following links)."""
        path = Path(path)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise UserError(f"{what} {str(path)!r} does not exist") from None
        except NotADirectoryError:
            raise UserError(f"{what} {str(path)!r} is not a directory") from None
        except OSError as e:
            raise UserError(f"{what} {str(path)!r}: {e.strerror}") from None
        return cls(fd, path, own=False)

    @staticmethod
    def _open_fd(dir_fd: int | None, name: str | Path, shown: str) -> int:
        """A descriptor of the directory `name` (relative to `dir_fd`); `shown` names it in
        errors."""
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(name, flags, dir_fd=dir_fd)
        except FileNotFoundError:
            raise UserError(f"{shown} does not exist") from None
        except OSError as e:
            try:
                st = os.lstat(name, dir_fd=dir_fd)
            except OSError:
                st = None
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise UserError(
                    f"{shown} is a symbolic link; pqlab writes only into a real directory "
                    "(give the directory it points to, if that is meant)"
                ) from None
            if e.errno == errno.ENOTDIR:
                raise UserError(f"{shown} is not a directory") from None
            raise storage_error(e, shown) from None

    def _check(self, what: str, private: bool) -> None:
        st = os.fstat(self.fd)
        why = _unsafe(st, self.own)
        if why is not None:
            raise UserError(f"{what} {str(self.path)!r} {why}")
        mode = stat.S_IMODE(st.st_mode)
        if private and mode & 0o077:
            try:
                os.fchmod(self.fd, mode & ~0o077 | 0o700)
            except OSError as e:
                raise storage_error(e, f"{what} {str(self.path)!r}") from None

    def sub(self, name: str, private: bool = False, create: bool = True) -> Dir:
        """The sub-directory `name` (made if missing when `create`): a real directory, not a
        link, held to the same ownership as this one."""
        key = check_name(name)
        if key in self._subs:
            if private:
                self._subs[key]._check("directory", private)
            return self._subs[key]
        if create:
            try:
                os.mkdir(name, 0o700 if private else 0o755, dir_fd=self.fd)
            except FileExistsError:
                pass
            except OSError as e:
                raise storage_error(e, str(self.path / name)) from None
        fd = self._open_fd(self.fd, name, f"directory {str(self.path / name)!r}")
        d = Dir(fd, self.path / name, self.own or private)
        try:
            d._check("directory", private)
        except BaseException:
            d.close()
            raise
        self._subs[key] = d
        return d

    def fresh_sub(self, prefix: str, private: bool = True) -> Dir:
        """A new, empty sub-directory of a name nobody had (for a program to fill, then
        `rename` into place)."""
        for _ in range(100):
            name = f"{prefix}{secrets.token_hex(6)}"
            try:
                os.mkdir(check_name(name), 0o700 if private else 0o755, dir_fd=self.fd)
            except FileExistsError:
                continue
            except OSError as e:
                raise storage_error(e, str(self.path / name)) from None
            return self.sub(name, private=private, create=False)
        raise StorageError(f"cannot make a new directory in {self.path}")

    def close(self) -> None:
        for d in self._subs.values():
            d.close()
        self._subs.clear()
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Dir:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- entries -----------------------------------------------------------------------
    def path_of(self, name: str) -> Path:
        """The path of entry `name` (for messages, and for programs given a path)."""
        return self.path / check_name(name)

    def entry(self, name: str) -> os.stat_result | None:
        """The entry's own status (a link is not followed); None when there is none."""
        try:
            return os.stat(check_name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def names(self) -> list[str]:
        return os.listdir(self.fd)

    def check_file(self, name: str, what: str | None = None) -> bool:
        """Whether the regular file `name` is there; a link, a directory, a file of another
        user or one with other hard links is refused (it is not pqlab's to write)."""
        st = self.entry(name)
        if st is None:
            return False
        label = what or str(self.path_of(name))
        if stat.S_ISLNK(st.st_mode):
            raise UserError(f"{label} is a symbolic link; pqlab does not write through links")
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{label} is not a regular file")
        if st.st_uid != os.geteuid() or st.st_nlink != 1:
            who = (
                f"belongs to {_describe_owner(st.st_uid)}"
                if st.st_uid != os.geteuid()
                else f"has {st.st_nlink} hard links"
            )
            raise UserError(f"{label} {who}; pqlab writes only files of its own")
        return True

    def remove(self, name: str) -> None:
        """Remove the entry `name` if there (a link is removed, not followed)."""
        try:
            os.unlink(check_name(name), dir_fd=self.fd)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            raise UserError(f"{self.path_of(name)} is a directory, not a file") from None
        except OSError as e:
            raise storage_error(e, str(self.path_of(name))) from None

    def remove_tree(self, name: str) -> None:
        """Remove `name` and everything under it, never following a link (shutil.rmtree
        with a descriptor walks by descriptors)."""
        self._forget(name)
        st = self.entry(name)
        if st is None:
            return
        if not stat.S_ISDIR(st.st_mode):
            self.remove(name)
            return
        shutil.rmtree(name, dir_fd=self.fd, ignore_errors=True)

    def rename(self, name: str, new: str, into: Dir | None = None) -> bool:
        """Rename entry `name` to `new` (in `into`, a directory on the same file system, or
        here). A directory is only renamed onto a missing or empty one: False when `new`
        already holds another (someone made it first)."""
        target = into or self
        try:
            os.rename(check_name(name), check_name(new), src_dir_fd=self.fd, dst_dir_fd=target.fd)
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return False
            raise storage_error(e, str(target.path_of(new))) from None
        self._forget(name)
        target._forget(new)
        return True

    def _forget(self, name: str) -> None:
        """Drop the opened sub-directory `name` (renamed or removed)."""
        sub = self._subs.pop(name, None)
        if sub is not None:
            sub.close()

    # --- writing -----------------------------------------------------------------------
    def _new_file(self, name: str, mode: int) -> tuple[int, str]:
        """A new file of a private name beside `name`: (descriptor, its name)."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        base = check_name(name)[:200]
        for _ in range(100):
            tmp = f".{base}.{secrets.token_hex(6)}.tmp"
            try:
                fd = os.open(tmp, flags, 0o600, dir_fd=self.fd)
            except FileExistsError:
                continue
            except OSError as e:
                raise storage_error(e, str(self.path_of(name))) from None
            os.fchmod(fd, mode)
            return fd, tmp
        raise StorageError(f"cannot make a new file in {self.path}")

    @contextlib.contextmanager
    def _renamed_over(self, name: str, mode: int) -> Iterator[tuple[int, str]]:
        """A new file of a private name beside `name` (its descriptor and name), renamed
        over `name` when the block ends; removed instead when the block fails."""
        fd, tmp = self._new_file(name, mode)
        done = False
        try:
            yield fd, tmp
            os.rename(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            done = True
        except OSError as e:
            raise storage_error(e, str(self.path_of(name))) from None
        finally:
            if not done:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=self.fd)

    @contextlib.contextmanager
    def replacing(self, name: str, mode: int = 0o644) -> Iterator[BinaryIO]:
        """A file object whose content becomes `name` when the block ends: written under a
        private name, renamed over `name` (a link there is replaced, never followed; an
        existing file is replaced, never written into). An error (a full disk) removes the
        new file and leaves `name` as it was."""
        with self._renamed_over(name, mode) as (fd, _), os.fdopen(fd, "wb") as f:
            yield f

    @contextlib.contextmanager
    def filled_by_path(self, name: str, mode: int = 0o644) -> Iterator[Path]:
        """The path of a new, empty file of a private name, for a program that writes by
        path (DuckDB's COPY); it becomes `name` when the block ends, or is removed."""
        with self._renamed_over(name, mode) as (fd, tmp):
            os.close(fd)
            yield self.path / tmp

    def write(self, name: str, data: bytes | str, mode: int = 0o644) -> Path:
        """Write `data` as the file `name` (see `replacing`); its path."""
        with self.replacing(name, mode) as f:
            f.write(data.encode() if isinstance(data, str) else data)
        return self.path_of(name)

    def create(self, name: str, mode: int = 0o600) -> Path:
        """An empty new file `name` that was not there (O_EXCL); its path."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(check_name(name), flags, mode, dir_fd=self.fd)
        except FileExistsError:
            raise UserError(f"{self.path_of(name)} exists already") from None
        except OSError as e:
            raise storage_error(e, str(self.path_of(name))) from None
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        return self.path_of(name)

    def read_bytes(self, name: str, kind: str = "record", limit: int | None = None) -> bytes:
        """The content of the regular file `name`, of at most READ_LIMITS[kind] bytes (a
        link, a FIFO, anything but a regular file is refused, never followed or waited on)."""
        shown = str(self.path_of(name))
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(check_name(name), flags, dir_fd=self.fd)
        except FileNotFoundError:
            raise UserError(f"{shown} does not exist") from None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UserError(f"{shown} is a symbolic link; pqlab reads no link here") from None
            raise UserError(f"cannot read {shown}: {e.strerror or e}") from None
        return _read_fd(fd, shown, kind, limit)

    def copy_into(self, name: str, target: Dir, mode: int, kind: str = "table") -> None:
        """Copy the file `name` (a `kind` of file, bounded as such) to `target` (same
        name), with `mode`."""
        target.write(name, self.read_bytes(name, kind), mode)


def discard(d: Dir, made: bool) -> None:
    """Close `d`, and remove it with everything in it when it was `made` by the work that
    failed (nothing half-made stays behind)."""
    d.close()
    if made:
        with contextlib.suppress(UserError, OSError), Dir.open(d.path.parent) as parent:
            parent.remove_tree(d.path.name)


def write_file(path: str | Path, data: bytes | str, mode: int = 0o644) -> Path:
    """Write one file at `path`, wherever it is, by the rules of `Dir` (its directory must be
    one nobody untrusted can change; the name is replaced, never written through)."""
    path = Path(path)
    with Dir.open(path.parent or Path(".")) as d:
        return d.write(path.name, data, mode)


def check_output_file(text: str, flag: str) -> Path:
    """A file the user names for pqlab to write (replaced whole when it exists), checked
    before anything is computed: a plain name in a directory pqlab may write into, not a
    link, not a directory."""
    path = Path(text)
    if not text or path.name in ("", ".", ".."):
        raise UserError(f"{flag} {text!r} is not a file name; give a file name")
    with Dir.open(path.parent, f"{flag} {text!r}: the directory") as d:
        _check_writable_fs(path.parent, path, flag)
        st = d.entry(path.name)
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise UserError(f"{flag} {text!r} is a symbolic link; give the file itself")
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise UserError(f"{flag} {text!r} is a directory; give a file name")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UserError(f"{flag} {text!r} is not a regular file")
    return path


# --- run directories ----------------------------------------------------------------------


def is_run(path: Path) -> bool:
    """Whether `path` holds a pqlab run (a results database that is a regular file)."""
    try:
        return stat.S_ISREG(os.lstat(path / DB_NAME).st_mode)
    except OSError:
        return False


def check_out(path: str | Path, resume: bool = False, flag: str = "--out") -> Path:
    """A usable run directory: checked before anything runs, so a bad --out fails at once
    rather than after the first measurement. Refused: `/` and the system's own directories,
    what `check_writable` refuses (a link, not a directory, another user's, writable by
    others, read-only, under a directory an untrusted user could change), a non-empty
    directory that is not a pqlab run, and with `resume` anything but a pqlab run."""
    path = Path(path)
    resolved = os.path.realpath(path)
    system = _system(resolved)
    if system is not None:
        raise UserError(
            f"{flag} {str(path)!r} is {'' if resolved == system else 'inside '}the system "
            f"directory {system!r}; give a directory of your own (e.g. results/NAME)"
        )
    check_writable(path, flag, expand=False)
    if os.path.lexists(path) and not is_run(path):
        _check_empty(path, flag)
    if resume and not is_run(path):
        raise UserError(
            f"--resume: {str(path)!r} is not a pqlab run (no {DB_NAME} there); leave "
            "--resume out to start a run"
        )
    return path


def _check_empty(path: Path, flag: str) -> None:
    """An existing directory that is not a run: pqlab makes one there only if it is empty,
    or holds nothing but a run's own directories (real ones, not links)."""
    if os.path.lexists(path / DB_NAME):
        what = "a symbolic link" if os.path.islink(path / DB_NAME) else "not a regular file"
        raise UserError(f"{flag} {str(path)!r}: {DB_NAME} there is {what}")
    try:
        other = [
            name
            for name in os.listdir(path)
            if name not in RUN_DIRS or not stat.S_ISDIR(os.lstat(path / name).st_mode)
        ]
    except OSError as e:
        raise UserError(f"{flag} {str(path)!r}: {e.strerror}") from None
    if other:
        raise UserError(
            f"{flag} {str(path)!r} is not empty and holds no pqlab run (no {DB_NAME}; it holds "
            f"{', '.join(repr(n) for n in sorted(other)[:3])}"
            f"{' ...' if len(other) > 3 else ''}); give a new or empty directory"
        )


def check_writable(path: str | Path, flag: str, expand: bool = True) -> Path:
    """A directory pqlab keeps files in (made if missing), checked before anything runs:
    a real directory (not a link) of the user's own, writable by nobody else, on a file
    system that is not read-only, under ancestors nobody untrusted can change."""
    path = Path(path).expanduser() if expand else Path(path)
    check_ancestors(path, flag)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        _check_parent(path, flag)
        return path
    except OSError as e:
        raise UserError(f"{flag} {str(path)!r}: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UserError(f"{flag} {str(path)!r} is a symbolic link; give the directory itself")
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{flag} {str(path)!r} exists and is not a directory")
    why = _unsafe(st, own=True)
    if why is not None:
        raise UserError(f"{flag} {str(path)!r} {why}")
    _check_writable_fs(path, path, flag)
    return path


def _check_parent(path: Path, flag: str) -> None:
    """A directory to be made: its nearest existing ancestor is a writable directory."""
    parent = Path(os.path.realpath(path.parent))
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{flag} {str(path)!r}: {str(parent)!r} is not a directory")
    _check_writable_fs(parent, path, flag)


def _check_writable_fs(existing: Path, path: Path, flag: str) -> None:
    """`existing` (`path`, or the ancestor it will be made in) can be written now."""
    try:
        read_only = os.statvfs(existing).f_flag & os.ST_RDONLY
    except OSError:
        read_only = False
    if read_only:
        raise StorageError(
            f"{flag} {str(path)!r}: {str(existing)!r} is on a read-only file system; give a "
            "directory pqlab can write"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {str(path)!r}: {str(existing)!r} is not writable")


def open_run(path: str | Path, create: bool = True) -> tuple[Dir, bool]:
    """The run directory, checked (`check_out`) and opened once; made when missing and
    `create`. Returns it and whether it was made now (so a start that fails can remove
    it again)."""
    path = Path(path)
    if create:
        check_out(path)
    existed = os.path.lexists(path)
    if not existed and not create:
        raise UserError(f"{str(path)!r} does not exist")
    run = Dir.open(path, "run directory", create=create, own=True)
    return run, not existed


# --- key logs -------------------------------------------------------------------------------

# An existing key log is appended to only if its first KEYLOG_CHECKED_BYTES hold nothing but
# NSS key log lines (`LABEL <hex> <hex>`), `#` comments and blank lines. The engine applies
# the same rule with the same numbers (engine/src/secrets.rs `is_key_log`).
KEYLOG_CHECKED_BYTES = 64 * 1024
_KEYLOG_LINE = re.compile(rb"[A-Z][A-Z0-9_]* +[0-9a-fA-F]+ +[0-9a-fA-F]+ *")


def is_key_log(head: bytes) -> bool:
    """Whether the first bytes of a file are those of a key log (empty counts): every
    complete line in them an NSS key log line, a comment or blank, and at least one complete
    line unless the file is empty."""
    if not head:
        return True
    lines = head.split(b"\n")[:-1]  # complete lines only: the last may be cut at the limit
    if not lines:
        return False
    for line in lines:
        line = line.rstrip(b"\r")
        if line.strip() and not line.startswith(b"#") and not _KEYLOG_LINE.fullmatch(line):
            return False
    return True


def check_keylog(text: str, flag: str = "--keylog") -> Path:
    """A key log path pqlab may hand to the engine: a new file in a directory nobody
    untrusted can change (the engine creates it 0600 when the first secret comes), or an
    existing key log of the user's own: a regular file (not a link), with one link, mode
    0600, holding key log lines. Nothing is created or changed here."""
    path = Path(text)
    if not text or path.name in ("", ".", ".."):
        raise UserError(f"{flag} {text!r} is not a file name; give a file name")
    with Dir.open(path.parent, f"{flag} {text!r}: the directory") as d:
        if not os.access(path.parent, os.W_OK | os.X_OK):
            raise UserError(f"{flag} {text!r}: {str(path.parent)!r} is not writable")
        st = d.entry(path.name)
        if st is not None:
            why = _not_a_key_log(d, path.name, st)
            if why is not None:
                raise UserError(f"{flag} {text!r} {why}")
    return path


def _not_a_key_log(d: Dir, name: str, st: os.stat_result) -> str | None:
    """Why the existing entry `name` of `d` is no key log pqlab may append to, or None."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link; give a new file name"
    if stat.S_ISDIR(st.st_mode):
        return "is a directory; give a file name"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.geteuid():
        return f"exists and belongs to {_describe_owner(st.st_uid)}; give a new file"
    if st.st_nlink != 1:
        return f"exists and has {st.st_nlink} hard links; give a new file"
    if stat.S_IMODE(st.st_mode) != 0o600:
        return (
            f"exists with mode {stat.S_IMODE(st.st_mode):04o}, not 0600; pqlab appends secrets "
            "only to a key log nobody else can read (give a new file)"
        )
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=d.fd)
        with os.fdopen(fd, "rb") as f:
            head = f.read(KEYLOG_CHECKED_BYTES)
    except OSError as e:
        return f"cannot be read: {e.strerror}"
    if not is_key_log(head):
        return (
            "exists and is not a key log (its lines are not LABEL HEX HEX); pqlab appends "
            "secrets only to a key log: give a new file"
        )
    return None

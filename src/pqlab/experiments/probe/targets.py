"""The targets of a scan (`pqlab probe --targets FILE`): one per line (`HOST:PORT`,
`[IPv6]:PORT` or an `https://` URL, then optionally a name after whitespace; `#` starts a
comment; `-` reads standard input), or the hosts of one group of an Ansible inventory
(`--targets-from-inventory GROUP`). Every line is checked before anything is sent: a bad
one is one error naming its line. Names are resolved later, target by target, by the scan."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from urllib.parse import urlsplit

from pqlab import files
from pqlab.errors import UserError
from pqlab.net import inventory

# A scan's file is read whole before anything is sent; these bound what it may hold.
MAX_TARGETS = 100_000
KIND = "targets file"  # its bound: files.READ_LIMITS
MAX_NAME = 100
# The inventory variables a target's port is read from, first found wins (default 443).
PORT_VARS = ("pqlab_probe_port", "https_port")
DEFAULT_PORT = 443


@dataclass(frozen=True)
class TargetLine:
    """One target as given: where it was (line), the text, and its parts."""

    line: int
    text: str  # HOST:PORT or the URL, as given
    name: str  # what the target is called in tables (default: `text`)
    host: str  # name or address, without brackets
    port: int
    path: str | None = None  # of an https:// URL


def split_target(text: str) -> tuple[str, int, str | None]:
    """(host, port, path) of `HOST:PORT`, `[IPv6]:PORT` or `https://HOST[:PORT][/PATH]`;
    a UserError saying what is accepted otherwise."""
    if "://" in text:
        url = urlsplit(text)
        if url.scheme != "https" or not url.hostname:
            raise UserError(f"{text!r}: a URL target is https://HOST[:PORT][/PATH]")
        try:
            port = url.port or 443
        except ValueError:
            raise UserError(f"{text!r}: the port is not a number from 1 to 65535") from None
        return url.hostname, port, (url.path or "/") + (f"?{url.query}" if url.query else "")
    m = re.fullmatch(r"\[([^\[\]]+)\]:(\d{1,5})|([^:\[\]\s]+):(\d{1,5})", text)
    if not m or not 0 < int(m.group(2) or m.group(4)) < 65536:
        raise UserError(
            f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:4433, example.com:443, [::1]:443)"
        )
    return m.group(1) or m.group(3), int(m.group(2) or m.group(4)), None


def check_name(name: str, what: str) -> str:
    if len(name) > MAX_NAME or "|" in name or name.startswith("+") or not name.isprintable():
        raise UserError(
            f"{what}: name {name!r}: at most {MAX_NAME} printable characters, no '|', "
            "not starting with '+'"
        )
    return name


def parse_lines(text: str, source: str) -> list[TargetLine]:
    """The targets of a file's text; `source` names the file in errors."""
    out: list[TargetLine] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        where = f"{source}:{number}"
        words = line.split(None, 1)
        try:
            host, port, path = split_target(words[0])
        except UserError as e:
            raise UserError(f"{where}: {e}") from None
        name = check_name(words[1].strip() if len(words) > 1 else words[0], where)
        if name in seen:
            raise UserError(f"{where}: the target {name!r} is named on line {seen[name]} too")
        seen[name] = number
        out.append(TargetLine(number, words[0], name, host, port, path))
        if len(out) > MAX_TARGETS:
            raise UserError(f"{where}: more than {MAX_TARGETS:,} targets; split the scan")
    if not out:
        raise UserError(f"{source} names no target (one HOST:PORT or https:// URL a line)")
    return out


def read_text(path: str, what: str = "--targets") -> str:
    """A targets file (or inventory) read whole by the bounded reader of every file pqlab
    is given, or standard input for `-` (at most as many bytes)."""
    if path != "-":
        return files.read_input_text(path, f"{what} {path!r}", KIND)
    data = sys.stdin.buffer.read(files.READ_LIMITS[KIND] + 1)
    if len(data) > files.READ_LIMITS[KIND]:
        raise UserError(
            f"{what} -: standard input holds more than {files.READ_LIMITS[KIND] // 2**20} MiB"
        )
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UserError(f"{what} -: not UTF-8 text (byte {e.start}, line {line})") from None


def from_file(path: str) -> list[TargetLine]:
    return parse_lines(read_text(path), "standard input" if path == "-" else path)


def from_inventory(path: str, group: str) -> list[TargetLine]:
    """The hosts of `group` in the Ansible inventory `path`: each host's `ansible_host` (else
    its name) on the port of its `pqlab_probe_port` or `https_port` variable (else 443),
    named by its inventory name."""
    inv = inventory.parse(read_text(path), path)
    out = []
    for number, host in enumerate(inv.resolve(group), 1):
        variables = inv.host_vars(host)
        address = variables.get("ansible_host", host)
        port_text = next((variables[v] for v in PORT_VARS if v in variables), DEFAULT_PORT)
        where = f"{path}: host {host!r}"
        text = f"[{address}]:{port_text}" if ":" in address else f"{address}:{port_text}"
        try:
            h, port, _ = split_target(text)
        except UserError as e:
            raise UserError(f"{where}: {e}") from None
        out.append(TargetLine(number, text, check_name(host, where), h, port))
    if not out:
        raise UserError(f"{path}: group {group!r} holds no host")
    if len(out) > MAX_TARGETS:
        raise UserError(f"{path}: group {group!r} holds more than {MAX_TARGETS:,} hosts")
    return out

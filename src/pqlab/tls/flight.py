"""How a TLS stack hands a flight to TCP and how TCP puts it on the wire: the model behind
document 000's explanation of handshake timings (section 4-3-2) and behind every prediction
pqlab makes of a flight's writes, segments and congestion-window stalls.

Two mechanisms, each a small pure function here:

- **the stack's write model** (`WriteModel`, from the stack's own report in `info`): OpenSSL
  collects a flight's records in a 4096-byte buffer and writes it when it fills or when the
  flight ends (bf_buff.c); a stack that writes a whole flight at once has no intermediate
  writes. `WriteModel.writes(record_sizes)` gives the stream offsets at which data reaches
  the socket.
- **TCP**: with TCP_NODELAY (every stack pqlab runs sets it) each write leaves as full
  segments of MSS bytes and a short tail; the sender may have `initcwnd` segments in flight
  before the first ACK (Linux counts segments, RFC 6928: 10). `segments(writes, mss)` gives
  the segment ends, `segments_through(offset, ...)` how many carry a stream prefix.

`document_case` and `cv_stalls` restate section 4-3-2-1-1's three cases and conditions with
this model, so the thresholds the document derived for OpenSSL (4096, 8192, 12784, 13984,
14232 bytes) follow from it (`thresholds`), and the same questions get answers for any
other stack's write model.
"""

from __future__ import annotations

from dataclasses import dataclass

from pqlab.tls import wire

DEFAULT_MSS = wire.DEFAULT_MSS  # IPv4 over a 1500-byte MTU with TCP timestamps
DEFAULT_INITCWND = wire.LINUX_INITCWND  # RFC 6928, Linux's default
OPENSSL_BUFFER = 4096  # OpenSSL's buffering BIO during the handshake (bf_buff.c default)


@dataclass(frozen=True)
class WriteModel:
    """How a stack hands a flight's records to the socket.

    kind "buffer": records are collected in a buffer of `buffer_bytes`; data that fits is
    kept, otherwise the buffer is topped up and written, data of at least the buffer size
    goes straight through, and a smaller rest is kept (OpenSSL's bf_buff.c
    `buffer_write`); the buffer is written at the end of the flight.
    kind "flight": the whole flight is written at once, after its last record.
    kind "record": every record is written as soon as it is made.

    `records` is how the stack frames a flight's encrypted messages: "message" (each in
    records of its own, OpenSSL) or "flight" (the messages joined and cut into records of up
    to 16 KiB, rustls)."""

    kind: str
    buffer_bytes: int | None = None
    records: str = "message"

    def __post_init__(self) -> None:
        if self.kind not in ("buffer", "flight", "record"):
            raise ValueError(f"unknown write model {self.kind!r}")
        if self.records not in ("message", "flight"):
            raise ValueError(f"unknown record framing {self.records!r}")
        if self.kind == "buffer" and not (self.buffer_bytes and self.buffer_bytes > 0):
            raise ValueError("a buffer write model needs its buffer size")

    def describe(self) -> str:
        if self.kind == "buffer":
            how = f"{self.buffer_bytes}-byte write buffer, flushed when full and at the end"
        elif self.kind == "flight":
            how = "the whole flight in one write"
        else:
            how = "one write per record"
        if self.records == "flight":
            return how + "; encrypted messages joined into shared records"
        return how + "; a record per message"

    def writes(self, record_sizes: list[int]) -> list[int]:
        """Stream offsets (from the flight's start) at which data is handed to the socket,
        for records written in this order and the flight ending after the last one."""
        if self.kind == "flight":
            return [sum(record_sizes)] if record_sizes else []
        if self.kind == "record":
            out, offset = [], 0
            for n in record_sizes:
                offset += n
                out.append(offset)
            return out
        return _buffered_writes(record_sizes, int(self.buffer_bytes or 0))


def _buffered_writes(record_sizes: list[int], size: int) -> list[int]:
    writes, held, offset = [], 0, 0
    for n in record_sizes:
        if size - held >= n:
            held += n
            offset += n
            continue
        if held:
            take = size - held
            offset += take
            n -= take
            writes.append(offset)
            held = 0
        if n >= size:
            offset += n
            writes.append(offset)
            n = 0
        held = n
        offset += n
    if held:
        writes.append(offset)
    return writes


OPENSSL = WriteModel("buffer", OPENSSL_BUFFER)


def segments(writes: list[int], mss: int = DEFAULT_MSS) -> list[int]:
    """Stream offsets at the end of each TCP segment, when every write leaves at once as
    full segments and a short tail (TCP_NODELAY; the window open: `pqlab.tls.wire` models
    what a full window does)."""
    return wire.cut(writes, mss)


def segments_through(offset: int, writes: list[int], mss: int = DEFAULT_MSS) -> int:
    """How many segments carry the stream's bytes up to `offset` (the segment holding byte
    offset-1 included)."""
    return next((i + 1 for i, end in enumerate(segments(writes, mss)) if end >= offset), 0)


@dataclass(frozen=True)
class Flight:
    """The server flight of a TLS 1.3 handshake as stream bytes (records as written, framing
    included): ServerHello, then the encrypted records up to and including Certificate, then
    CertificateVerify, then Finished."""

    server_hello: int
    through_certificate: int  # stream offset at the end of Certificate (ServerHello included)
    through_certificate_verify: int
    through_finished: int

    def record_sizes(self) -> list[int]:
        """The flight as the records its messages end in (what the write model sees)."""
        ends = [
            self.server_hello,
            self.through_certificate,
            self.through_certificate_verify,
            self.through_finished,
        ]
        return [b - a for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def cv_stalls(
    flight: Flight,
    model: WriteModel = OPENSSL,
    mss: int = DEFAULT_MSS,
    initcwnd: int = DEFAULT_INITCWND,
) -> bool:
    """Whether the initial congestion window runs out before CertificateVerify is out, when
    the flight is written without an ACK arriving in between: the situation of document
    000's conditions 1-3 (section 4-3-2-1-1)."""
    writes = model.writes(flight.record_sizes())
    return segments_through(flight.through_certificate_verify, writes, mss) > initcwnd


def document_case(flight: Flight, model: WriteModel = OPENSSL) -> int | None:
    """Document 000's case for a flight on a buffering stack: 1 if ServerHello + Certificate
    is below one buffer (4096 bytes), 2 if below two (8192), 3 if it still fits the first
    nine segments (8192-12784 bytes on OpenSSL); None otherwise or for other write models."""
    if model.kind != "buffer":
        return None
    b = int(model.buffer_bytes or 0)
    sh_cert = flight.through_certificate
    if sh_cert < b:
        return 1
    if sh_cert < 2 * b:
        return 2
    if sh_cert <= thresholds(model)["nine_segments"]:
        return 3
    return None


def thresholds(
    model: WriteModel = OPENSSL, mss: int = DEFAULT_MSS, initcwnd: int = DEFAULT_INITCWND
) -> dict[str, int]:
    """The byte thresholds of document 000's section 4-3-2 for a buffering stack, from the
    model: a first buffer leaves as 3 segments (4096 = 1448 + 1448 + 1200), so with
    initcwnd 10:
    - `cwnd_after_one_buffer`: a prefix longer than one buffer plus 7 full segments needs an
      11th segment (14232 on OpenSSL: condition 1, and the Certificate limit of feature 2);
    - `cwnd_after_two_buffers`: after two buffers (6 segments), 4 more full ones (13984:
      condition 2);
    - `nine_segments`: one buffer plus 6 full segments, the most that leaves a 10th segment
      (12784: the upper bound of case 3)."""
    if model.kind != "buffer":
        return {}
    b = int(model.buffer_bytes or 0)
    per_buffer = len(segments([b], mss))
    return {
        "buffer": b,
        "two_buffers": 2 * b,
        "nine_segments": b + (initcwnd - 1 - per_buffer) * mss,
        "cwnd_after_two_buffers": 2 * b + (initcwnd - 2 * per_buffer) * mss,
        "cwnd_after_one_buffer": b + (initcwnd - per_buffer) * mss,
    }

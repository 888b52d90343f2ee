"""What a TLS 1.3 connection will do on a path, predicted from the sizes of what it carries:
the catalogue's algorithm sizes (`pqlab.tls.messages`), the certificate builder's DER sizes
(`pqlab.tls.chains`), the stack's ClientHello (`stacks.client_hello`) and write model
(`pqlab.tls.flight`), replayed by the wire model (`pqlab.tls.wire`).

`Handshake` holds the sizes of one configuration; `predict` runs it over a `wire.Link`,
with the CPU time each side spends before writing when the caller knows it (`Timing`: zero
for `pqlab plan`, the cell's own for the predictions `pqlab handshake` stores).
Variable-size signatures (ECDSA, Falcon) give two handshakes, the smallest and the largest
(`Handshake.extremes`), so a prediction is a range where the sizes are.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass, field, replace

from pqlab.catalog import Algorithm
from pqlab.tls import messages, stacks, wire
from pqlab.tls.flight import WriteModel


@dataclass(frozen=True)
class ClientAuth:
    """Mutual TLS: the client's signer, the DER sizes of the certificates it sends and the
    DER size of its CA's Name (which a server may list in its CertificateRequest)."""

    signer: Algorithm
    chain_der: tuple[int, ...]
    ca_name_bytes: int
    signature: int = 0  # its CertificateVerify signature (bytes; `Handshake.extremes`)


@dataclass(frozen=True)
class Handshake:
    """The sizes of one handshake configuration (bytes on the wire)."""

    group: Algorithm
    signer: Algorithm  # the server's CertificateVerify algorithm
    chain_der: tuple[int, ...]  # DER bytes of each certificate the server sends, leaf first
    client_hello: int  # ClientHello record bytes (the stack's, `stacks.client_hello`)
    write_model: WriteModel
    signature: int  # CertificateVerify signature bytes
    change_cipher_spec: bool = True
    server_name_ack: bool = False  # the server acknowledges an SNI the client sent
    suite: str = messages.DEFAULT_SUITE
    session_id: int = 32  # the ClientHello's legacy_session_id, echoed in the ServerHello
    client_auth: ClientAuth | None = None  # mutual TLS
    # whether the server names the CAs it accepts in its CertificateRequest (mutual TLS)
    names_client_cas: bool = True

    @classmethod
    def of(cls, group, signer, chain_der, client_hello, stack, sni: bool = False, **kw):
        """A handshake on `stack` (`pqlab.tls.stacks.Stack`), with the largest signatures
        (`extremes` gives the smallest too)."""
        auth = kw.pop("client_auth", None)
        if auth is not None and not auth.signature:
            auth = replace(auth, signature=messages.signature_bytes(auth.signer)[1])
        kw["client_auth"] = auth
        return cls(
            group=group,
            signer=signer,
            chain_der=tuple(chain_der),
            client_hello=client_hello,
            write_model=stack.write_model,
            signature=messages.signature_bytes(signer)[1],
            change_cipher_spec=stack.change_cipher_spec,
            server_name_ack=stack.server_name_ack and sni,
            **kw,
        )

    def extremes(self) -> tuple[Handshake, Handshake]:
        """(smallest, largest) of this handshake over what its sizes may be: the
        signatures' (ECDSA, Falcon) and, in mutual TLS, a CertificateRequest with or without
        the client CAs' names (RFC 8446 lets a server leave them out)."""
        low, high = messages.signature_bytes(self.signer)
        small, large = replace(self, signature=low), replace(self, signature=high)
        if self.client_auth is not None:
            c_low, c_high = messages.signature_bytes(self.client_auth.signer)
            small = replace(
                small,
                client_auth=replace(self.client_auth, signature=c_low),
                names_client_cas=False,
            )
            large = replace(
                large,
                client_auth=replace(self.client_auth, signature=c_high),
                names_client_cas=True,
            )
        return small, large

    @property
    def certificate_request(self) -> int:
        """The CertificateRequest's bytes in mutual TLS (0 without): pqlab's servers accept
        exactly the client's one scheme."""
        if self.client_auth is None:
            return 0
        names = (self.client_auth.ca_name_bytes,) if self.names_client_cas else ()
        return messages.certificate_request(1, names)

    def with_chain(self, chain_der: tuple[int, ...]) -> Handshake:
        return replace(self, chain_der=tuple(chain_der))

    @functools.cached_property
    def _flights(self) -> tuple[messages.ServerFlight, tuple[int, ...], tuple[int, ...]]:
        """The server's flight, the offsets of its writes and those of the client's second
        flight (without a request): the same for every prediction of this handshake, so
        worked out once (the handshake is frozen)."""
        flight = messages.server_flight(
            self.group,
            list(self.chain_der),
            self.signature,
            self.suite,
            records=self.write_model.records,
            server_name_ack=self.server_name_ack,
            change_cipher_spec=self.change_cipher_spec,
            certificate_request=self.certificate_request,
            session_id=self.session_id,
        )
        recs = messages.client_flight(
            self.suite,
            change_cipher_spec=self.change_cipher_spec,
            chain_der=list(self.client_auth.chain_der) if self.client_auth else None,
            signature=self.client_auth.signature if self.client_auth else 0,
            records=self.write_model.records,
        )
        return (
            flight,
            tuple(self.write_model.writes(flight.record_sizes())),
            tuple(self.write_model.writes(recs)),
        )

    def server_flight(self) -> messages.ServerFlight:
        return self._flights[0]

    def server_writes(self) -> list[int]:
        """Stream offsets at which the server's flight reaches the socket."""
        return list(self._flights[1])

    def client_writes(self, request: int | None) -> list[int]:
        """Stream offsets (from the end of the ClientHello) at which the client's second
        flight reaches the socket (the stack's write model: one flush on OpenSSL), then its
        request for `request` bytes in a write of its own (None: no request)."""
        writes = list(self._flights[2])
        if request is not None:
            writes.append(writes[-1] + messages.request_record(request))
        return writes


def of_chain(
    stack, group: Algorithm, signer: Algorithm, chain, server_name: str, **kw
) -> Handshake:
    """The handshake a client of `stack` makes to a server of `chain` (`pqlab.tls.chains`)
    reached as `server_name` (an IP address sends no SNI), offering `group` and the
    signer's scheme only (and, in mutual TLS, its own, to sign with), as pqlab's clients
    do; the ClientHello measured from the stack."""
    auth = kw.get("client_auth")
    offered = [signer] + ([auth.signer] if auth is not None else [])
    hello = stacks.client_hello(
        stack,
        stack.group_name(group),
        ",".join(dict.fromkeys(stack.sigalg_name(a) for a in offered)),
        server_name,
        str(chain.root),
    )
    return Handshake.of(
        group,
        signer,
        chain.sent_der,
        hello.record_bytes,
        stack,
        sni=not _is_ip(server_name),
        session_id=hello.session_id_bytes,
        **kw,
    )


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Timing:
    """CPU time before each side writes (seconds): the client's ClientHello after it saw
    the SYN-ACK, each of the server's flight writes after the ClientHello arrived (in
    order; missing ones take the last), the client's second flight after the server's
    Finished arrived, the response after the request arrived."""

    client_hello: float = 0.0
    server_writes: tuple[float, ...] = ()
    client_flight: float = 0.0
    response: float = 0.0

    def server_at(self, i: int) -> float:
        if not self.server_writes:
            return 0.0
        return self.server_writes[min(i, len(self.server_writes) - 1)]


NO_CPU = Timing()


def _offsets(sizes: list[int]) -> list[int]:
    out, total = [], 0
    for n in sizes:
        total += n
        out.append(total)
    return out


@dataclass
class Outcome:
    """A prediction with the sizes it came from."""

    handshake: Handshake
    flight: messages.ServerFlight
    writes: list[int]
    wire: wire.Prediction = field(repr=False)

    @property
    def flight_bytes(self) -> int:
        return self.flight.bytes


def predict(
    hs: Handshake,
    link: wire.Link,
    response_bytes: int | None = None,
    timing: Timing = NO_CPU,
) -> Outcome:
    """One connection of `hs` over `link`, with a response of `response_bytes` bytes (None:
    the handshake alone)."""
    writes = hs.server_writes()
    server = wire.Side(tuple((timing.server_at(i), w) for i, w in enumerate(writes)))
    client = hs.client_writes(response_bytes)
    client_side = wire.Side(tuple((timing.client_flight, o) for o in client))
    response = None
    if response_bytes is not None:
        recs = messages.response_records(response_bytes)
        response = wire.Side(tuple((timing.response, o) for o in _offsets(recs)))
    result = wire.connection(
        link,
        wire.Side.at_once([hs.client_hello]),
        server,
        client_side,
        response,
        client_hello_delay_s=timing.client_hello,
    )
    return Outcome(hs, hs.server_flight(), writes, result)


# Cliffs are looked for up to this many DER bytes of chain: beyond, TLS stacks refuse
# certificates (rustls: 64 KiB each) or handshake messages long before.
CLIFF_LIMIT = 131_072
CLIFF_STEP = 1024


def chain_of(total: int, count: int) -> tuple[int, ...]:
    """A chain of `count` certificates taking `total` DER bytes in all. Only the total and
    the count reach the wire (the Certificate message frames every certificate alike), so
    the first carries the bytes."""
    return (total,) + (0,) * (count - 1)


def round_trips(hs: Handshake, link: wire.Link) -> int:
    return predict(hs, link).wire.round_trips


def cliffs(
    hs: Handshake, link: wire.Link, limit: int = CLIFF_LIMIT, step: int = CLIFF_STEP
) -> list[tuple[int, int]]:
    """Where each extra round trip begins as the chain grows (the handshake's certificate
    count kept): (round trips, the smallest chain DER total that takes them), from a chain
    of one byte per certificate up to `limit` bytes. The total is scanned in `step`s and
    every increase bisected to the byte."""
    count = len(hs.chain_der)

    def at(total: int) -> int:
        return round_trips(hs.with_chain(chain_of(total, count)), link)

    out: list[tuple[int, int]] = []
    low = count
    current = at(low)
    while low < limit:
        high = min(low + step, limit)
        r = at(high)
        if r > current:
            a, b = low, high
            while b - a > 1:
                mid = (a + b) // 2
                if at(mid) > current:
                    b = mid
                else:
                    a = mid
            current = at(b)
            out.append((current, b))
        low = high
    return out

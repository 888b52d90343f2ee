"""Key-log decryption of TLS 1.3 captures (pqlab.tls.keylog) and the payload side of
pqlab.pcap it needs.

Oracles, weakest last:
  - RFC 8448 section 3 ("Simple 1-RTT Handshake"): its key schedule values, traffic keys
    and IVs, its encrypted records of both directions and their plaintext. The records are
    AEAD-sealed, so a single wrong hex digit would fail authentication: the vectors check
    themselves. The traffic secrets are also re-derived from the RFC's X25519 keys and
    handshake messages, tying the key log lines to the trace.
  - OpenSSL itself (root only): real handshakes between two network namespaces, captured
    whole; the boundaries decrypted from the capture must equal the engine's message
    callback events exactly, for every handshake.
  - Records sealed here (`Sealer`) for what neither produces: the other two AEADs in pure
    tests, a HelloRetryRequest, messages cut across records, padding, KeyUpdate.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from netleaks import nothing_left  # noqa: F401
from pqlab import catalog, pcap, process
from pqlab.errors import UserError
from pqlab.experiments.handshake import analyse
from pqlab.pcap import ACK, FIN, PSH, SYN
from pqlab.tls import keylog as kl
from pqlab.tls import records, runner
from pqlab.tls.records import TlsRecord
from tls_helpers import make_chain as engine_certs

# --- RFC 8448 section 3 ------------------------------------------------------------------------

RFC_CLIENT_RANDOM = "cb34ecb1e78163ba1c38c6dacb196a6dffa21a8d9912ec18a2ef6283024dece7"
RFC_CLIENT_X25519 = "49af42ba7f7994852d713ef2784bcbcaa7911de26adc5642cb634540e7ea5005"
RFC_SERVER_X25519 = "b1580eeadf6dd589b8ef4f2d5652578cc810e9980191ec8d058308cea216a21e"
RFC_EARLY_SECRET = "33ad0a1c607ec03b09e6cd9893680ce210adf300aa1f2660e1b22e10f170f92a"
RFC_DERIVED_FOR_HANDSHAKE = "6f2615a108c702c5678f54fc9dbab69716c076189c48250cebeac3576c3611ba"
RFC_SHARED_SECRET = "8bd4054fb55b9d63fdfbacf9f04b9f0d35e6d63f537563efd46272900f89492d"
RFC_HANDSHAKE_SECRET = "1dc826e93606aa6fdc0aadc12f741b01046aa6b99f691ed221a9f0ca043fbeac"
RFC_MASTER_SECRET = "18df06843d13a08bf2a449844c5f8a478001bc4d4c627984d5a41da8d0402919"
RFC_SECRETS = {
    "CLIENT_HANDSHAKE_TRAFFIC_SECRET": "b3eddb126e067f35a780b3abf45e2d8f3b1a950738f52e9600746a0e27a55a21",
    "SERVER_HANDSHAKE_TRAFFIC_SECRET": "b67b7d690cc16c4e75e54213cb2d37b4e9c912bcded9105d42befd59d391ad38",
    "CLIENT_TRAFFIC_SECRET_0": "9e40646ce79a7f9dc05af8889bce6552875afa0b06df0087f792ebb7c17504a5",
    "SERVER_TRAFFIC_SECRET_0": "a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb631643",
}
# (key, iv) the RFC prints for each traffic secret.
RFC_KEYS = {
    "CLIENT_HANDSHAKE_TRAFFIC_SECRET": (
        "dbfaa693d1762c5b666af5d950258d01",
        "5bd3c71b836e0b76bb73265f",
    ),
    "SERVER_HANDSHAKE_TRAFFIC_SECRET": (
        "3fce516009c21727d0f2e4e86ee403bc",
        "5d313eb2671276ee13000b30",
    ),
    "CLIENT_TRAFFIC_SECRET_0": ("17422dda596ed5d9acd890e3c63f5051", "5b78923dee08579033e523d9"),
    "SERVER_TRAFFIC_SECRET_0": ("9f02283b6c9c07efc26bb9f2ac92e356", "cf782b88dd83549aadf1e984"),
}
RFC_CLIENT_HELLO_RECORD = (
    "16030100c4010000c00303cb34ecb1e78163ba1c38c6dacb196a6dffa21a8d9912ec18a2ef6283024dece7"
    "000006130113031302010000910000000b0009000006736572766572ff01000100000a00140012001d0017"
    "001800190100010101020103010400230000003300260024001d002099381de560e4bd43d23d8e435a7dba"
    "feb3c06e51c13cae4d5413691e529aaf2c002b0003020304000d0020001e04030503060302030804080508"
    "0604010501060102010402050206020202002d00020101001c00024001"
)
RFC_SERVER_HELLO_RECORD = (
    "160303005a020000560303a6af06a4121860dc5e6e60249cd34c95930c8ac5cb1434dac155772ed3e26928"
    "00130100002e00330024001d0020c9828876112095fe66762bdbf7c672e156d6cc253b833df1dd69b1b04e"
    "751f0f002b00020304"
)
# {server} EncryptedExtensions, Certificate, CertificateVerify, Finished: one record.
RFC_SERVER_FLIGHT_RECORD = (
    "17030302a2d1ff334a56f5bff6594a07cc87b580233f500f45e489e7f33af35edf7869fcf40aa40aa2b8ea"
    "73f848a7ca07612ef9f945cb960b4068905123ea78b111b429ba9191cd05d2a389280f526134aadc7fc78c"
    "4b729df828b5ecf7b13bd9aefb0e57f271585b8ea9bb355c7c79020716cfb9b1183ef3ab20e37d57a6b9d7"
    "477609aee6e122a4cf51427325250c7d0e509289444c9b3a648f1d71035d2ed65b0e3cdd0cbae8bf2d0b22"
    "7812cbb360987255cc744110c453baa4fcd610928d809810e4b7ed1a8fd991f06aa6248204797e36a6a73b"
    "70a2559c09ead686945ba246ab66e5edd8044b4c6de3fcf2a89441ac66272fd8fb330ef8190579b3684596"
    "c960bd596eea520a56a8d650f563aad27409960dca63d3e688611ea5e22f4415cf9538d51a200c27034272"
    "968a264ed6540c84838d89f72c24461aad6d26f59ecaba9acbbb317b66d902f4f292a36ac1b639c637ce34"
    "3117b659622245317b49eeda0c6258f100d7d961ffb138647e92ea330faeea6dfa31c7a84dc3bd7e1b7a6c"
    "7178af36879018e3f252107f243d243dc7339d5684c8b0378bf30244da8c87c843f5e56eb4c5e8280a2b48"
    "052cf93b16499a66db7cca71e4599426f7d461e66f99882bd89fc50800becca62d6c74116dbd2972fda1fa"
    "80f85df881edbe5a37668936b335583b599186dc5c6918a396fa48a181d6b6fa4f9d62d513afbb992f2b99"
    "2f67f8afe67f76913fa388cb5630c8ca01e0c65d11c66a1e2ac4c85977b7c7a6999bbf10dc35ae69f55156"
    "14636c0b9b68c19ed2e31c0b3b66763038ebba42f3b38edc0399f3a9f23faa63978c317fc9fa66a73f60f0"
    "504de93b5b845e275592c12335ee340bbc4fddd502784016e4b3be7ef04dda49f4b440a30cb5d2af939828"
    "fd4ae3794e44f94df5a631ede42c1719bfdabf0253fe5175be898e750edc53370d2b"
)
RFC_CLIENT_FINISHED_RECORD = (
    "170303003575ec4dc238cce60b298044a71e219c56cc77b0517fe9b93c7a4bfc44d87f38f80338ac98fc46"
    "deb384bd1caeacab6867d726c40546"
)
RFC_SERVER_TICKET_RECORD = (
    "17030300de3a6b8f90414a97d6959c3487680de5134a2b240e6cffac116e95d41d6af8f6b580dcf3d11d63"
    "c758db289a015940252f55713e061dc13e078891a38efbcf5753ad8ef170ad3c7353d16d9da773b9ca7f2b"
    "9fa1b6c0d4a3d03f75e09c30ba1e62972ac46f75f7b981be63439b2999ce13064615139891d5e4c5b406f1"
    "6e3fc181a77ca475840025db2f0a77f81b5ab05b94c01346755f69232c86519d86cbeeac87aac347d143f9"
    "605d64f650db4d023e70e952ca49fe5137121c74bc2697687e248746d6df353005f3bce18696129c815355"
    "6b3b6c6779b37bf15985684f"
)
RFC_CLIENT_APPLICATION_RECORD = (
    "1703030043a23f7054b62c94d0affafe8228ba55cbefacea42f914aa66bcab3f2b9819a8a5b46b395bd54a"
    "9a20441e2b62974e1f5a6292a2977014bd1e3deae63aeebb21694915e4"
)
RFC_SERVER_APPLICATION_RECORD = (
    "17030300432e937e11ef4ac740e538ad36005fc4a46932fc3225d05f82aa1b36e30efaf97d90e6dffc602d"
    "cb501a59a8fcc49c4bf2e5f0a21c0047c2abf332540dd032e167c2955d"
)
RFC_CLIENT_ALERT_RECORD = "1703030013c9872760655666b74d7ff1153efd6db6d0b0e3"
RFC_SERVER_ALERT_RECORD = "1703030013b58fd67166ebf599d24720cfbe7efa7a8864a9"
# The plaintext handshake messages the RFC prints.
RFC_ENCRYPTED_EXTENSIONS = (
    "080000240022000a00140012001d00170018001901000101010201030104001c0002400100000000"
)
RFC_CERTIFICATE = (
    "0b0001b9000001b50001b0308201ac30820115a003020102020102300d06092a864886f70d01010b050030"
    "0e310c300a06035504031303727361301e170d3136303733303031323335395a170d323630373330303132"
    "3335395a300e310c300a0603550403130372736130819f300d06092a864886f70d010101050003818d0030"
    "818902818100b4bb498f8279303d980836399b36c6988c0c68de55e1bdb826d3901a2461eafd2de49a91d0"
    "15abbc9a95137ace6c1af19eaa6af98c7ced43120998e187a80ee0ccb0524b1b018c3e0b63264d449a6d38"
    "e22a5fda430846748030530ef0461c8ca9d9efbfae8ea6d1d03e2bd193eff0ab9a8002c47428a6d35a8d88"
    "d79f7f1e3f0203010001a31a301830090603551d1304023000300b0603551d0f0404030205a0300d06092a"
    "864886f70d01010b05000381810085aad2a0e5b9276b908c65f73a7267170618a54c5f8a7b337d2df7a594"
    "365417f2eae8f8a58c8f8172f9319cf36b7fd6c55b80f21a03015156726096fd335e5e67f2dbf102702e60"
    "8ccae6bec1fc63a42a99be5c3eb7107c3c54e9b9eb2bd5203b1c3b84e0a8b2f759409ba3eac9d91d402dcc"
    "0cc8f8961229ac9187b42b4de10000"
)
RFC_CERTIFICATE_VERIFY = (
    "0f000084080400805a747c5d88fa9bd2e55ab085a61015b7211f824cd484145ab3ff52f1fda8477b0b7abc"
    "90db78e2d33a5c141a078653fa6bef780c5ea248eeaaa785c4f394cab6d30bbe8d4859ee511f602957b154"
    "11ac027671459e46445c9ea58c181e818e95b8c3fb0bf3278409d3be152a3da5043e063dda65cdf5aea20d"
    "53dfacd42f74f3"
)
RFC_SERVER_FINISHED = "140000209b9b141d906337fbd2cbdce71df4deda4ab42c309572cb7fffee5454b78f0718"
RFC_CLIENT_FINISHED = "14000020a8ec436d677634ae525ac1fcebe11a039ec17694fac6e98527b642f2edd5ce61"
RFC_NEW_SESSION_TICKET = (
    "040000c90000001efad6aac502000000b22c035d829359ee5ff7af4ec900000000262a6494dc486d2c8a34"
    "cb33fa90bf1b0070ad3c498883c9367c09a2be785abc55cd226097a3a982117283f82a03a143efd3ff5dd3"
    "6d64e861be7fd61d2827db279cce145077d454a3664d4e6da4d29ee03725a6a4dafcd0fc67d2aea7052951"
    "3e3da2677fa5906c5b3f7d8f92f228bda40dda721470f9fbf297b5aea617646fac5c03272e970727c621a7"
    "9141ef5f7de6505e5bfbc388e93343694093934ae4d3570008002a000400000400"
)

RFC_CLIENT_STREAM = bytes.fromhex(
    RFC_CLIENT_HELLO_RECORD
    + RFC_CLIENT_FINISHED_RECORD
    + RFC_CLIENT_APPLICATION_RECORD
    + RFC_CLIENT_ALERT_RECORD
)
RFC_SERVER_STREAM = bytes.fromhex(
    RFC_SERVER_HELLO_RECORD
    + RFC_SERVER_FLIGHT_RECORD
    + RFC_SERVER_TICKET_RECORD
    + RFC_SERVER_APPLICATION_RECORD
    + RFC_SERVER_ALERT_RECORD
)
# What the trace must give, worked out by hand from the RFC's record and message lengths
# (record = 5-byte header + fragment; message = 4-byte header + body).
RFC_EXPECTED_CLIENT = [
    TlsRecord("client", 5 + 0xC4, 22, (("ClientHello", 4 + 0xC0),)),
    TlsRecord("client", 201 + 5 + 0x35, 23, (("Finished", 36),)),
    TlsRecord("client", 259 + 5 + 0x43, 23, ()),  # 50 bytes of application data
    TlsRecord("client", 331 + 5 + 0x13, 23, ()),  # close_notify
]
RFC_EXPECTED_SERVER = [
    TlsRecord("server", 5 + 0x5A, 22, (("ServerHello", 4 + 0x56),)),
    TlsRecord(
        "server",
        95 + 5 + 0x2A2,
        23,
        (
            ("EncryptedExtensions", 4 + 0x24),
            ("Certificate", 4 + 0x1B9),
            ("CertificateVerify", 4 + 0x84),
            ("Finished", 4 + 0x20),
        ),
    ),
    TlsRecord("server", 774 + 5 + 0xDE, 23, (("NewSessionTicket", 4 + 0xC9),)),
    TlsRecord("server", 1001 + 5 + 0x43, 23, ()),
    TlsRecord("server", 1073 + 5 + 0x13, 23, ()),
]


def rfc_keylog_text(client_random: str = RFC_CLIENT_RANDOM) -> str:
    return "".join(f"{label} {client_random} {secret}\n" for label, secret in RFC_SECRETS.items())


def hkdf_extract(salt: bytes, ikm: bytes) -> bytes:
    return hmac.new(salt, ikm, hashlib.sha256).digest()


def test_hkdf_expand_label_gives_rfc8448_keys_and_ivs():
    suite = kl.SUITES[0x1301]
    for label, secret in RFC_SECRETS.items():
        key, iv = kl.traffic_key_iv(bytes.fromhex(secret), suite)
        assert (key.hex(), iv.hex()) == RFC_KEYS[label], label
    # With a context too: Derive-Secret(early secret, "derived", "").
    derived = kl.hkdf_expand_label(
        bytes.fromhex(RFC_EARLY_SECRET), "derived", hashlib.sha256().digest(), 32, suite.hash
    )
    assert derived.hex() == RFC_DERIVED_FOR_HANDSHAKE


def test_rfc8448_key_log_secrets_follow_from_its_handshake():
    """The four secrets the RFC key log carries, re-derived from the trace's own X25519
    keys and messages: the key log below is the RFC's handshake, not just numbers."""
    sha = kl.SUITES[0x1301].hash
    client = X25519PrivateKey.from_private_bytes(bytes.fromhex(RFC_CLIENT_X25519))
    server = X25519PrivateKey.from_private_bytes(bytes.fromhex(RFC_SERVER_X25519))
    shared = client.exchange(
        X25519PublicKey.from_public_bytes(server.public_key().public_bytes_raw())
    )
    assert shared.hex() == RFC_SHARED_SECRET
    early = hkdf_extract(bytes(32), bytes(32))
    assert early.hex() == RFC_EARLY_SECRET
    empty = hashlib.sha256().digest()
    hs = hkdf_extract(kl.hkdf_expand_label(early, "derived", empty, 32, sha), shared)
    assert hs.hex() == RFC_HANDSHAKE_SECRET
    hello_hash = hashlib.sha256(
        bytes.fromhex(RFC_CLIENT_HELLO_RECORD)[5:] + bytes.fromhex(RFC_SERVER_HELLO_RECORD)[5:]
    ).digest()
    for label, name in (("c hs traffic", "CLIENT"), ("s hs traffic", "SERVER")):
        secret = kl.hkdf_expand_label(hs, label, hello_hash, 32, sha)
        assert secret.hex() == RFC_SECRETS[f"{name}_HANDSHAKE_TRAFFIC_SECRET"]
    master = hkdf_extract(kl.hkdf_expand_label(hs, "derived", empty, 32, sha), bytes(32))
    assert master.hex() == RFC_MASTER_SECRET
    flight = RFC_ENCRYPTED_EXTENSIONS + RFC_CERTIFICATE + RFC_CERTIFICATE_VERIFY
    full_hash = hashlib.sha256(
        bytes.fromhex(RFC_CLIENT_HELLO_RECORD)[5:]
        + bytes.fromhex(RFC_SERVER_HELLO_RECORD)[5:]
        + bytes.fromhex(flight + RFC_SERVER_FINISHED)
    ).digest()
    for label, name in (("c ap traffic", "CLIENT"), ("s ap traffic", "SERVER")):
        secret = kl.hkdf_expand_label(master, label, full_hash, 32, sha)
        assert secret.hex() == RFC_SECRETS[f"{name}_TRAFFIC_SECRET_0"]


def test_rfc8448_records_open_to_the_rfc_plaintext():
    suite = kl.SUITES[0x1301]

    def opener(label: str) -> kl.RecordProtection:
        return kl.RecordProtection(bytes.fromhex(RFC_SECRETS[label]), suite, label)

    def open_record(prot: kl.RecordProtection, record_hex: str) -> tuple[int, bytes]:
        raw = bytes.fromhex(record_hex)
        return prot.open(raw[:5], raw[5:])

    flight = RFC_ENCRYPTED_EXTENSIONS + RFC_CERTIFICATE + RFC_CERTIFICATE_VERIFY
    server_hs = opener("SERVER_HANDSHAKE_TRAFFIC_SECRET")
    assert open_record(server_hs, RFC_SERVER_FLIGHT_RECORD) == (
        22,
        bytes.fromhex(flight + RFC_SERVER_FINISHED),
    )
    client_hs = opener("CLIENT_HANDSHAKE_TRAFFIC_SECRET")
    assert open_record(client_hs, RFC_CLIENT_FINISHED_RECORD) == (
        22,
        bytes.fromhex(RFC_CLIENT_FINISHED),
    )
    server_ap = opener("SERVER_TRAFFIC_SECRET_0")
    assert open_record(server_ap, RFC_SERVER_TICKET_RECORD) == (
        22,
        bytes.fromhex(RFC_NEW_SESSION_TICKET),
    )
    assert open_record(server_ap, RFC_SERVER_APPLICATION_RECORD) == (23, bytes(range(50)))
    assert open_record(server_ap, RFC_SERVER_ALERT_RECORD) == (21, b"\x01\x00")
    client_ap = opener("CLIENT_TRAFFIC_SECRET_0")
    assert open_record(client_ap, RFC_CLIENT_APPLICATION_RECORD) == (23, bytes(range(50)))
    assert open_record(client_ap, RFC_CLIENT_ALERT_RECORD) == (21, b"\x01\x00")


def test_rfc8448_trace_gives_the_callback_representation():
    log = kl.parse_keylog(rfc_keylog_text(), "rfc8448.keys")
    client, server = kl.decrypt_streams(RFC_CLIENT_STREAM, RFC_SERVER_STREAM, log)
    assert client == RFC_EXPECTED_CLIENT
    assert server == RFC_EXPECTED_SERVER


def test_rfc8448_wrong_sequence_number_fails_authentication():
    """The per-record nonce matters: the NewSessionTicket opened as the second record
    under its key (sequence 1 instead of 0) must not authenticate."""
    suite = kl.SUITES[0x1301]
    label = "SERVER_TRAFFIC_SECRET_0"
    prot = kl.RecordProtection(bytes.fromhex(RFC_SECRETS[label]), suite, label)
    prot.seq = 1
    raw = bytes.fromhex(RFC_SERVER_TICKET_RECORD)
    with pytest.raises(InvalidTag):
        prot.open(raw[:5], raw[5:])


# --- the key log file -----------------------------------------------------------------------------


def test_keylog_skips_comments_blank_lines_and_unknown_labels(tmp_path):
    r = RFC_CLIENT_RANDOM
    path = tmp_path / "keys.log"
    path.write_text(
        "# SSL/TLS secrets log file, generated by NSS\n\n"
        f"CLIENT_RANDOM {'11' * 32} {'22' * 48}\n"
        f"SOME_FUTURE_LABEL {r} {'33' * 32} extra fields\n"
        + rfc_keylog_text()
        + f"   EXPORTER_SECRET {r} {'44' * 32}   \n"
    )
    log = kl.read_keylog(path)
    entry = log.secrets[bytes.fromhex(r)]
    assert {k: v.hex() for k, v in entry.items() if k in RFC_SECRETS} == RFC_SECRETS
    assert "SOME_FUTURE_LABEL" not in entry
    assert log.lookup(bytes.fromhex(r), "EXPORTER_SECRET", "x") == bytes.fromhex("44" * 32)


@pytest.mark.parametrize(
    "line, why",
    [
        ("garbage", "not a key log line"),
        (f"CLIENT_HANDSHAKE_TRAFFIC_SECRET {RFC_CLIENT_RANDOM}", "found 1 field"),
        (f"CLIENT_HANDSHAKE_TRAFFIC_SECRET {'ab' * 31} {'00' * 32}", "64 hex digits"),
        (f"CLIENT_HANDSHAKE_TRAFFIC_SECRET {RFC_CLIENT_RANDOM} 0g{'00' * 31}", "not hex"),
        (f"SERVER_TRAFFIC_SECRET_0 {RFC_CLIENT_RANDOM} {'00' * 32}", "second, different"),
    ],
)
def test_malformed_keylog_line_names_file_and_line(tmp_path, line, why):
    path = tmp_path / "bad.log"
    path.write_text("# comment\n" + rfc_keylog_text() + line + "\n")
    with pytest.raises(kl.KeyLogError, match=rf"bad\.log, line 6: .*{why}"):
        kl.read_keylog(path)


def test_message_names_match_the_callback_path():
    """Every name the lab's callback path gives a handshake type is the one this module
    gives it (the engine names types; records.MESSAGE_NAMES renames some)."""
    engine_names = {
        1: "client_hello",
        2: "server_hello",
        4: "new_session_ticket",
        8: "encrypted_extensions",
        11: "certificate",
        13: "certificate_request",
        15: "certificate_verify",
        20: "finished",
    }
    for code, engine_name in engine_names.items():
        assert kl.HANDSHAKE_NAMES[code] == records.MESSAGE_NAMES[engine_name]
    assert set(records.MESSAGE_NAMES.values()) <= set(kl.HANDSHAKE_NAMES.values())
    assert kl.HANDSHAKE_NAMES[24] == "key_update"  # not renamed: the engine's own name


# --- synthetic TLS 1.3 connections sealed here -----------------------------------------------------


def hs(msg_type: int, body: bytes) -> bytes:
    return bytes([msg_type]) + len(body).to_bytes(3, "big") + body


def client_hello(random: bytes, filler: int = 300) -> bytes:
    return hs(1, b"\x03\x03" + random + b"\x00" + bytes(filler))


def server_hello(random: bytes, suite: int, version: int | None = 0x0304) -> bytes:
    exts = b""
    if version is not None:
        exts += b"\x00\x2b\x00\x02" + version.to_bytes(2, "big")
    exts += b"\x00\x33\x00\x24" + bytes(0x24)  # a key_share-sized extension, not parsed
    body = b"\x03\x03" + random + b"\x00" + suite.to_bytes(2, "big") + b"\x00"
    return hs(2, body + len(exts).to_bytes(2, "big") + exts)


class Sealer:
    """The sending side of RFC 8446 5.2-5.3, written here independently of the module
    (only the key derivation is shared, and that is checked against RFC 8448 above)."""

    def __init__(self, suite: int, secret: bytes):
        s = kl.SUITES[suite]
        self.suite = s
        key, self.iv = kl.traffic_key_iv(secret, s)
        self.aead = s.aead(key)
        self.seq = 0

    def seal(self, inner_type: int, content: bytes, padding: int = 0) -> bytes:
        inner = content + bytes([inner_type]) + bytes(padding)
        header = b"\x17\x03\x03" + (len(inner) + 16).to_bytes(2, "big")
        seq = self.seq.to_bytes(12, "big")
        nonce = bytes(a ^ b for a, b in zip(self.iv, seq, strict=True))
        self.seq += 1
        return header + self.aead.encrypt(nonce, inner, header)


class Side:
    """One side's byte stream, with the records it should read back as."""

    def __init__(self, sender: str):
        self.sender = sender
        self.stream = b""
        self.expected: list[TlsRecord] = []

    def plain(self, ctype: int, payload: bytes, *messages: tuple[str, int]) -> None:
        self.stream += bytes([ctype, 3, 3]) + len(payload).to_bytes(2, "big") + payload
        self.expected.append(TlsRecord(self.sender, len(self.stream), ctype, tuple(messages)))

    def sealed(self, record: bytes, *messages: tuple[str, int]) -> None:
        self.stream += record
        self.expected.append(TlsRecord(self.sender, len(self.stream), 23, tuple(messages)))


def secrets_for(random: bytes, hash_len: int) -> dict[str, bytes]:
    return {
        label: hashlib.sha384(label.encode() + random).digest()[:hash_len] for label in RFC_SECRETS
    }


def keylog_text(random: bytes, secrets: dict[str, bytes]) -> str:
    return "".join(f"{label} {random.hex()} {s.hex()}\n" for label, s in secrets.items())


def build_connection(suite: int, hello_retry: bool = False, key_update: bool = True):
    """A full synthetic TLS 1.3 connection written the way a stack without OpenSSL's
    one-message-per-record habit might: the server's encrypted flight is one handshake
    byte string cut into 16384-byte records (a 40 000-byte Certificate spans three
    records, a record holds the end of one message and the start of the next), padding on
    some records, a KeyUpdate and NewSessionTickets. Returns (client Side, server Side,
    key log text)."""
    random = bytes(range(32))
    secrets = secrets_for(random, kl.SUITES[suite].hash_len)
    client, server = Side("client"), Side("server")

    ch = client_hello(random)
    client.plain(22, ch, ("ClientHello", len(ch)))
    if hello_retry:
        hrr = server_hello(kl.HELLO_RETRY_RANDOM, suite)
        server.plain(22, hrr, ("ServerHello", len(hrr)))
        server.plain(20, b"\x01")
        client.plain(20, b"\x01")
        ch2 = client_hello(random, filler=1200)
        client.plain(22, ch2, ("ClientHello", len(ch2)))
    sh = server_hello(bytes(range(100, 132)), suite)
    server.plain(22, sh, ("ServerHello", len(sh)))
    if not hello_retry:
        server.plain(20, b"\x01")
        client.plain(20, b"\x01")

    seal_s = Sealer(suite, secrets["SERVER_HANDSHAKE_TRAFFIC_SECRET"])
    messages = [
        ("EncryptedExtensions", hs(8, bytes(10))),
        ("Certificate", hs(11, bytes(range(256)) * 156)),  # 39 936 + 4 bytes
        ("CertificateVerify", hs(15, bytes(2500))),
        ("Finished", hs(20, bytes(48))),
    ]
    flight = b"".join(m for _, m in messages)
    ends, total = [], 0
    for name, m in messages:
        total += len(m)
        ends.append((total, name, len(m)))
    chunk = 16384
    for start in range(0, len(flight), chunk):
        stop = min(start + chunk, len(flight))
        done = tuple((n, ln) for end, n, ln in ends if start < end <= stop)
        server.sealed(seal_s.seal(22, flight[start:stop], padding=7 * (start // chunk)), *done)

    seal_s = Sealer(suite, secrets["SERVER_TRAFFIC_SECRET_0"])
    ticket = hs(4, bytes(180))
    server.sealed(
        seal_s.seal(22, ticket + ticket), ("NewSessionTicket", 184), ("NewSessionTicket", 184)
    )

    seal_c = Sealer(suite, secrets["CLIENT_HANDSHAKE_TRAFFIC_SECRET"])
    fin = hs(20, bytes(48))
    client.sealed(seal_c.seal(22, fin), ("Finished", 52))
    seal_c = Sealer(suite, secrets["CLIENT_TRAFFIC_SECRET_0"])
    client.sealed(seal_c.seal(23, b"GET 100\n", padding=100))
    if key_update:
        update = hs(24, b"\x00")
        client.sealed(seal_c.seal(22, update), ("key_update", 5))
        next_secret = kl.hkdf_expand_label(
            secrets["CLIENT_TRAFFIC_SECRET_0"],
            "traffic upd",
            b"",
            kl.SUITES[suite].hash_len,
            kl.SUITES[suite].hash,
        )
        seal_c = Sealer(suite, next_secret)
    client.sealed(seal_c.seal(23, b"more data after the update"))
    client.sealed(seal_c.seal(21, b"\x01\x00"))
    server.sealed(seal_s.seal(23, b"x" * 100))
    server.sealed(seal_s.seal(21, b"\x01\x00"))
    return client, server, keylog_text(random, secrets)


@pytest.mark.parametrize("suite", [0x1301, 0x1302, 0x1303], ids=lambda s: kl.SUITES[s].name)
def test_every_aead_with_spanning_and_coalesced_messages(suite):
    client, server, text = build_connection(suite)
    got_c, got_s = kl.decrypt_streams(client.stream, server.stream, kl.parse_keylog(text))
    assert got_c == client.expected
    assert got_s == server.expected
    # The flight really is cut: the Certificate ends in the third encrypted record.
    assert [r.messages for r in got_s[2:5]] == [
        (("EncryptedExtensions", 14),),
        (),
        (("Certificate", 39940), ("CertificateVerify", 2504), ("Finished", 52)),
    ]


def test_hello_retry_request_is_followed_to_the_real_server_hello():
    client, server, text = build_connection(0x1302, hello_retry=True)
    got_c, got_s = kl.decrypt_streams(client.stream, server.stream, kl.parse_keylog(text))
    assert got_c == client.expected
    assert got_s == server.expected
    assert [m for r in got_c for m, _ in r.messages].count("ClientHello") == 2
    assert [m for r in got_s for m, _ in r.messages].count("ServerHello") == 2


def test_a_connection_that_ended_at_its_handshake_needs_no_application_secrets():
    """A client that gave up after the server's flight (a chain too large, a failed check)
    logged only the handshake secrets: its handshake still decrypts; a record that needs
    the application keys still names the missing secret."""
    client, server, text = build_connection(0x1301, key_update=False)
    handshake_only = "".join(line + "\n" for line in text.splitlines() if "HANDSHAKE" in line)
    keys = kl.parse_keylog(handshake_only)

    def through(side, name):
        end = next(r.end for r in side.expected if any(m == name for m, _ in r.messages))
        return side.stream[:end], [r for r in side.expected if r.end <= end]

    (c_stream, c_want), (s_stream, s_want) = (
        through(client, "Finished"),
        through(server, "Finished"),
    )
    assert kl.decrypt_streams(c_stream, s_stream, keys) == (c_want, s_want)
    with pytest.raises(kl.KeyLogError, match="no SERVER_TRAFFIC_SECRET_0"):
        kl.decrypt_streams(c_stream, server.stream, keys)


def test_tls12_server_hello_is_refused():
    random = bytes(32)
    ch, sh = client_hello(random), server_hello(bytes(range(32)), 0xC02F, version=None)
    client = bytes([22, 3, 3]) + len(ch).to_bytes(2, "big") + ch
    server = bytes([22, 3, 3]) + len(sh).to_bytes(2, "big") + sh
    with pytest.raises(kl.KeyLogError, match=r"not TLS 1\.3.*TLS 1\.3 only"):
        kl.decrypt_streams(client, server, kl.KeyLog("k"))


def test_ccm_suite_is_refused_by_name():
    random = bytes(32)
    ch, sh = client_hello(random), server_hello(bytes(range(32)), 0x1304)
    client = bytes([22, 3, 3]) + len(ch).to_bytes(2, "big") + ch
    server = (
        bytes([22, 3, 3]) + len(sh).to_bytes(2, "big") + sh + bytes([23, 3, 3, 0, 17]) + bytes(17)
    )
    with pytest.raises(kl.KeyLogError, match="TLS_AES_128_CCM_SHA256 is not supported"):
        kl.decrypt_streams(client, server, kl.KeyLog("k"))


def test_finished_sharing_a_record_with_later_messages_is_an_error():
    """A key change must fall on a record boundary (RFC 8446 5.1); reading on would
    decrypt the rest with the wrong key."""
    client, server, text = build_connection(0x1301)
    random = bytes(range(32))
    secrets = secrets_for(random, 32)
    seal = Sealer(0x1301, secrets["CLIENT_HANDSHAKE_TRAFFIC_SECRET"])
    prefix_end = client.expected[1].end  # after ClientHello and CCS
    bad = client.stream[:prefix_end] + seal.seal(22, hs(20, bytes(32)) + hs(4, bytes(8)))
    with pytest.raises(kl.KeyLogError, match="more handshake data follows the key change"):
        kl.decrypt_streams(bad, server.stream, kl.parse_keylog(text))


def test_split_records_refuses_cut_and_foreign_streams():
    with pytest.raises(kl.KeyLogError, match=r"offset 0 needs 200 bytes .* ends after 10"):
        kl.split_records(bytes([22, 3, 3, 0, 200]) + bytes(10), "s")
    with pytest.raises(kl.KeyLogError, match="2 bytes into a record header at offset 6"):
        kl.split_records(bytes([20, 3, 3, 0, 1, 1, 22, 3]), "s")
    with pytest.raises(kl.KeyLogError, match="no TLS record at offset 0.*carrying TLS"):
        kl.split_records(b"GET / HTTP/1.1\r\n", "s")


# --- captures: payload, reassembly, the whole pipeline --------------------------------------------

CLIENT_IP, SERVER_IP, PORT = "198.18.0.1", "198.18.0.2", 4433


class Capture:
    """Frames of one connection as a capture holds them, in the order `add` is called."""

    def __init__(self, cport: int = 40000, cisn: int = 7000, sisn: int = 90000):
        self.cport, self.cisn, self.sisn = cport, cisn, sisn
        self.frames: list[pcap.Frame] = []

    def add(
        self, from_client: bool, flags: int, start: int = 0, payload: bytes = b"", ack: int = 0
    ) -> None:
        t = 1_000_000 * (len(self.frames) + 1)
        if from_client:
            src, dst, sp, dp, isn, peer = (
                CLIENT_IP,
                SERVER_IP,
                self.cport,
                PORT,
                self.cisn,
                self.sisn,
            )
        else:
            src, dst, sp, dp, isn, peer = (
                SERVER_IP,
                CLIENT_IP,
                PORT,
                self.cport,
                self.sisn,
                self.cisn,
            )
        seq = isn if flags & SYN else isn + 1 + start
        ackno = peer + 1 + ack if flags & ACK else 0
        self.frames.append(
            pcap.build_tcp_frame(
                t, src, dst, sp, dp, seq, ackno, flags, len(payload), payload=payload
            )
        )

    def handshake(self) -> None:
        self.add(True, SYN)
        self.add(False, SYN | ACK, ack=0)
        self.add(True, ACK, ack=0)

    def stream(self, from_client: bool, data: bytes, mss: int, peer_ack: int = 0) -> None:
        for start in range(0, len(data), mss):
            self.add(from_client, ACK | PSH, start, data[start : start + mss], ack=peer_ack)

    def write(self, path: Path) -> Path:
        pcap.write_pcap(path, self.frames)
        return path


def read_connection(path: Path, keep_payload: bool = True) -> pcap.Connection:
    (conn,) = pcap.split_connections(pcap.tcp_packets(path, keep_payload=keep_payload), PORT)
    return conn


def test_reassembly_merges_out_of_order_retransmitted_and_overlapping_segments(tmp_path):
    data = bytes(range(256)) * 20  # 5120 bytes
    cap = Capture()
    cap.handshake()
    pieces = [(0, 1000), (2000, 3000), (1000, 2000), (0, 1000), (2500, 3600), (3600, 5120)]
    for start, stop in pieces:  # out of order, a retransmission, an overlap
        cap.add(False, ACK | PSH, start, data[start:stop], ack=0)
    cap.add(True, ACK, ack=5120)
    conn = read_connection(cap.write(tmp_path / "c.pcap"))
    assert pcap.reassemble(conn, False) == data
    assert pcap.reassemble(conn, True) == b""


def test_reassembly_reports_a_gap_with_its_range(tmp_path):
    data = bytes(3000)
    cap = Capture()
    cap.handshake()
    cap.add(False, ACK | PSH, 0, data[:1000], ack=0)
    cap.add(False, ACK | PSH, 1400, data[1400:], ack=0)
    conn = read_connection(cap.write(tmp_path / "gap.pcap"))
    with pytest.raises(
        UserError,
        match=r"198\.18\.0\.1:40000 -> 198\.18\.0\.2:4433: .* server stream bytes 1000\.\.1399",
    ):
        pcap.reassemble(conn, False)


def test_reassembly_reports_acknowledged_bytes_missing_at_the_end(tmp_path):
    cap = Capture()
    cap.handshake()
    cap.add(True, ACK | PSH, 0, bytes(500), ack=0)
    cap.add(False, ACK, ack=900)  # the server saw 900 bytes; the capture has 500
    conn = read_connection(cap.write(tmp_path / "tail.pcap"))
    with pytest.raises(UserError, match="acknowledged client stream bytes up to 899"):
        pcap.reassemble(conn, True)


def test_reassembly_allows_the_ack_of_a_fin(tmp_path):
    cap = Capture()
    cap.handshake()
    cap.add(True, ACK | PSH, 0, b"hello", ack=0)
    cap.add(True, ACK | FIN, 5, ack=0)
    cap.add(False, ACK, ack=6)  # FIN takes one sequence number
    assert pcap.reassemble(read_connection(cap.write(tmp_path / "fin.pcap")), True) == b"hello"


def test_reassembly_refuses_overlaps_that_disagree(tmp_path):
    cap = Capture()
    cap.handshake()
    cap.add(True, ACK | PSH, 0, b"abcdef", ack=0)
    cap.add(True, ACK | PSH, 3, b"XYZ", ack=0)
    conn = read_connection(cap.write(tmp_path / "conflict.pcap"))
    with pytest.raises(UserError, match="different bytes for stream offsets 3..5"):
        pcap.reassemble(conn, True)


def test_reassembly_needs_the_payload(tmp_path):
    cap = Capture()
    cap.handshake()
    cap.add(True, ACK | PSH, 0, b"abc", ack=0)
    conn = read_connection(cap.write(tmp_path / "h.pcap"), keep_payload=False)
    assert conn.segments[-1].payload is None and conn.segments[-1].payload_len == 3
    with pytest.raises(UserError, match="keep_payload=True"):
        pcap.reassemble(conn, True)


def test_snaplen_cut_capture_is_refused_by_name(tmp_path):
    cap = Capture()
    cap.handshake()
    cap.add(True, ACK | PSH, 0, bytes(1000), ack=0)
    frames = [pcap.Frame(f.ts_ns, f.data[:128], len(f.data)) for f in cap.frames]
    path = tmp_path / "cut.pcap"
    pcap.write_pcap(path, frames, snaplen=128)
    # Headers-only reading is unaffected ...
    (conn,) = pcap.split_connections(pcap.tcp_packets(path), PORT)
    assert conn.segments[-1].payload_len == 1000
    # ... a payload reader refuses it, naming the file, the packet and the snaplen.
    with pytest.raises(UserError, match=r"cut\.pcap: packet 4 .* 128 of its 1054 .*snaplen is 128"):
        pcap.tcp_packets(path, keep_payload=True)
    (tmp_path / "rfc.keys").write_text(rfc_keylog_text())
    with pytest.raises(UserError, match="snaplen is 128"):
        kl.records_from_capture(path, tmp_path / "rfc.keys", PORT)


def rfc_capture(cisn: int = 7000, sisn: int = 90000, mss: int = 300) -> Capture:
    """The RFC 8448 trace as one captured connection: MSS-sized segments, the server's
    flight delivered out of order with one retransmission."""
    cap = Capture(cisn=cisn, sisn=sisn)
    cap.handshake()
    cap.stream(True, RFC_CLIENT_STREAM[:201], mss)
    server = RFC_SERVER_STREAM
    cap.add(False, ACK | PSH, 300, server[300:600], ack=201)
    cap.add(False, ACK | PSH, 0, server[0:300], ack=201)
    cap.add(False, ACK | PSH, 0, server[0:300], ack=201)  # retransmitted
    cap.add(False, ACK | PSH, 600, server[600:], ack=201)
    cap.add(True, ACK | PSH, 201, RFC_CLIENT_STREAM[201:], ack=len(server))
    cap.add(True, ACK | FIN, len(RFC_CLIENT_STREAM), ack=len(server))
    cap.add(False, ACK | FIN, len(server), ack=len(RFC_CLIENT_STREAM) + 1)
    return cap


def test_records_from_capture_reads_the_rfc8448_trace(tmp_path):
    path = rfc_capture().write(tmp_path / "rfc.pcap")
    (tmp_path / "rfc.keys").write_text(rfc_keylog_text())
    got = kl.records_from_capture(path, tmp_path / "rfc.keys", PORT)
    assert got == {40000: (RFC_EXPECTED_CLIENT, RFC_EXPECTED_SERVER)}


def test_keylog_of_another_connection_is_an_error(tmp_path):
    path = rfc_capture().write(tmp_path / "rfc.pcap")
    other = tmp_path / "other.keys"
    other.write_text(rfc_keylog_text(client_random="ab" * 32))
    with pytest.raises(
        kl.KeyLogError,
        match=rf"connection 198\.18\.0\.1:40000 -> 198\.18\.0\.2:4433, server stream: the key "
        rf"log .*other\.keys has no secrets for this connection's client random {RFC_CLIENT_RANDOM}",
    ):
        kl.records_from_capture(path, other, PORT)


def test_keylog_with_wrong_secrets_fails_authentication(tmp_path):
    path = rfc_capture().write(tmp_path / "rfc.pcap")
    wrong = tmp_path / "wrong.keys"
    wrong.write_text(
        rfc_keylog_text().replace(RFC_SECRETS["SERVER_HANDSHAKE_TRAFFIC_SECRET"], "5a" * 32)
    )
    with pytest.raises(kl.KeyLogError, match="record 2 .* does not authenticate with the key"):
        kl.records_from_capture(path, wrong, PORT)


def test_corrupted_record_byte_is_an_error(tmp_path):
    cap = rfc_capture()
    # One byte flipped inside the encrypted server flight: frame 5 carries server stream
    # bytes 300..599, and 54 bytes of Ethernet, IPv4 and TCP headers precede them.
    frame = cap.frames[4]
    data = bytearray(frame.data)
    data[54 + 200] ^= 0x01
    cap.frames[4] = pcap.Frame(frame.ts_ns, bytes(data), frame.orig_len)
    path = cap.write(tmp_path / "bad.pcap")
    (tmp_path / "rfc.keys").write_text(rfc_keylog_text())
    with pytest.raises(
        kl.KeyLogError,
        match=r"server stream, record 2 \(stream offset 95\): does not authenticate .*damaged",
    ):
        kl.records_from_capture(path, tmp_path / "rfc.keys", PORT)


def test_reused_client_port_is_refused_but_kept_apart_by_connection(tmp_path):
    first, again = rfc_capture(), rfc_capture(cisn=123456, sisn=654321)
    frames = first.frames + [pcap.Frame(f.ts_ns + 10**9, f.data, f.orig_len) for f in again.frames]
    path = tmp_path / "two.pcap"
    pcap.write_pcap(path, frames)
    (tmp_path / "rfc.keys").write_text(rfc_keylog_text())
    both = kl.records_by_connection(path, tmp_path / "rfc.keys", PORT)
    assert [(c, s) for _, c, s in both] == [(RFC_EXPECTED_CLIENT, RFC_EXPECTED_SERVER)] * 2
    with pytest.raises(kl.KeyLogError, match="client port 40000 carries two connections"):
        kl.records_from_capture(path, tmp_path / "rfc.keys", PORT)


# --- real handshakes: OpenSSL's callback against the capture ---------------------------------------

HANDSHAKES_PER_CELL = 3
MATRIX_GROUPS = ["X25519", "X25519MLKEM768", "ML-KEM-1024"]
MATRIX_SIGS = [("RSA-2048", "RSA:2048"), ("ECDSA-P256", "EC:P-256"), ("ML-DSA-44", "ML-DSA-44")]
SUITES = ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"]
CA = "ML-DSA-44"


def tls_name(name: str) -> str:
    return catalog.resolve(name).tls_name


def make_chain(directory: Path, ca: str, server: str, *extra: str) -> dict:
    files = engine_certs(directory, ca, server, *extra)["files"]
    return {"chain": files["chain"], "key": files["server_key"], "root": files["root_cert"]}


def run_cell(topo, work: Path, name: str, chain: dict, port: int, **tls) -> dict:
    """Captures on both hosts (whole packets), the engine's server with --keylog and its
    client with events on, as the handshake lab's run_cell does; returns the paths and
    the engine's connection records."""
    n = tls.get("n", HANDSHAKES_PER_CELL)
    keylog_path = work / f"{name}.keys.log"
    pcaps = {side: work / f"{name}.{side}.pcap" for side in ("client", "server")}
    procs: list[process.EngineProcess] = []
    try:
        caps = {}
        for side in ("client", "server"):
            caps[side] = runner.start_capture(topo, side, port, pcaps[side], 262144, 120)
            procs.append(caps[side])
        common = ["--sigalgs", tls["sigalg"], "--ciphersuites", tls["suite"]]
        server = process.EngineProcess(
            [
                "tls",
                "server",
                "--listen",
                f"{topo.server_ip}:{port}",
                "--cert-chain",
                chain["chain"],
                "--key",
                chain["key"],
                "--groups",
                tls["server_groups"],
                *common,
                "--max-connections",
                n,
                "--response-mode",
                "none",
                "--keylog",
                keylog_path,
            ],
            "TLS server",
            topo=topo,
            side="server",
        )
        procs.append(server)
        server.wait_for("listening", 30)
        client = process.EngineProcess(
            [
                "tls",
                "client",
                "--connect",
                f"{topo.server_ip}:{port}",
                "--ca",
                chain["root"],
                "--groups",
                tls["client_groups"],
                *common,
                "-n",
                n,
                "--events",
                "on",
                "--time-limit",
                60,
            ],
            "TLS client",
            topo=topo,
            side="client",
        )
        procs.append(client)
        client_recs = [r for r in client.finish(90) if r["type"] == "connection"]
        server_recs = [r for r in server.finish(30) if r["type"] == "connection"]
        for cap in caps.values():
            runner.stop_capture(cap)
    finally:
        for p in procs:
            p.stop()
    assert len(client_recs) == n and len(server_recs) == n
    return {
        "pcaps": pcaps,
        "keylog": keylog_path,
        "port": port,
        "pairs": analyse.pair_records(client_recs, server_recs),
    }


def compare_cell(cell: dict, suite: str) -> int:
    """Assert that both captures, decrypted with the key log, give exactly the callback's
    records for every handshake of the cell; the number of handshakes compared."""
    for side, path in cell["pcaps"].items():
        decrypted = kl.records_from_capture(path, cell["keylog"], cell["port"])
        assert len(decrypted) == len(cell["pairs"]), side
        for crec, srec in cell["pairs"]:
            assert crec["negotiated"]["cipher_standard_name"] == suite
            want_c = records.from_events(crec, "client")
            want_s = records.from_events(srec, "server")
            got_c, got_s = decrypted[int(crec["local"].rsplit(":", 1)[1])]
            assert got_c == want_c, f"{side} capture, client records"
            assert got_s == want_s, f"{side} capture, server records"
            names = [m for r in want_s for m, _ in r.messages]
            assert names[-4:] == [
                "EncryptedExtensions",
                "Certificate",
                "CertificateVerify",
                "Finished",
            ]
            assert any(m == "Finished" for r in want_c for m, _ in r.messages)
    return len(cell["pairs"])


@pytest.mark.net
@pytest.mark.usefixtures("nothing_left")
def test_keylog_equals_openssl_callback_on_real_handshakes(tmp_path, capsys):
    from pqlab.net.topology import TwoHosts

    chains = {sig: make_chain(tmp_path / sig, CA, spec) for sig, spec in MATRIX_SIGS}
    big = make_chain(tmp_path / "big", "SLH-DSA-SHA2-128f", "ML-DSA-87", "--chain-with-root")
    compared: dict[str, int] = {}
    with TwoHosts() as topo:
        port = 4500
        for gi, group in enumerate(MATRIX_GROUPS):
            for si, (sig, _) in enumerate(MATRIX_SIGS):
                suite = SUITES[(gi + si) % 3]  # each suite meets each group and signer
                port += 1
                cell = run_cell(
                    topo,
                    tmp_path,
                    f"{group}_{sig}",
                    chains[sig],
                    port,
                    server_groups=tls_name(group),
                    client_groups=tls_name(group),
                    sigalg=tls_name(sig),
                    suite=suite,
                )
                for c, _ in cell["pairs"]:
                    assert c["negotiated"]["group"].lower() == tls_name(group).lower()
                compared[f"{group}/{sig}/{suite}"] = compare_cell(cell, suite)
        # A chain whose Certificate message (~37.6 kB) spans three records.
        cell = run_cell(
            topo,
            tmp_path,
            "big",
            big,
            port + 1,
            server_groups="X25519MLKEM768",
            client_groups="X25519MLKEM768",
            sigalg=tls_name("ML-DSA-87"),
            suite="TLS_AES_256_GCM_SHA384",
        )
        compared["X25519MLKEM768/ML-DSA-87 under SLH-DSA-SHA2-128f + root"] = compare_cell(
            cell, "TLS_AES_256_GCM_SHA384"
        )
        _, srec = cell["pairs"][0]
        sent = records.from_events(srec, "server")
        cert = next(i for i, r in enumerate(sent) if any(m == "Certificate" for m, _ in r.messages))
        assert dict(sent[cert].messages)["Certificate"] > 2 * 16384
        # Two encrypted records carry only Certificate bytes before the one completing it.
        assert [(r.content_type, r.messages) for r in sent[cert - 2 : cert]] == [(23, ())] * 2
    with capsys.disabled():
        print(f"\nkey log vs callback: {sum(compared.values())} handshakes, both captures, equal")
        for cell_name, n in compared.items():
            print(f"  {cell_name}: {n}")


@pytest.mark.net
@pytest.mark.usefixtures("nothing_left")
def test_keylog_follows_a_real_hello_retry_request(tmp_path):
    """The client offers x25519 first (its only key share) and X25519MLKEM768 second; the
    server accepts only X25519MLKEM768 and so asks again (HelloRetryRequest)."""
    from pqlab.net.topology import TwoHosts

    chain = make_chain(tmp_path / "ec", CA, "EC:P-256")
    with TwoHosts() as topo:
        cell = run_cell(
            topo,
            tmp_path,
            "hrr",
            chain,
            4600,
            server_groups="X25519MLKEM768",
            client_groups="x25519:X25519MLKEM768",
            sigalg=tls_name("ECDSA-P256"),
            suite="TLS_CHACHA20_POLY1305_SHA256",
        )
    assert compare_cell(cell, "TLS_CHACHA20_POLY1305_SHA256") == HANDSHAKES_PER_CELL
    for crec, srec in cell["pairs"]:
        assert crec["negotiated"]["group"] == "X25519MLKEM768"
        client_names = [m for r in records.from_events(crec, "client") for m, _ in r.messages]
        server_names = [m for r in records.from_events(srec, "server") for m, _ in r.messages]
        assert client_names.count("ClientHello") == 2
        assert server_names.count("ServerHello") == 2


@pytest.mark.net
@pytest.mark.usefixtures("nothing_left")
def test_real_capture_with_another_runs_keylog_or_a_flipped_byte_is_an_error(tmp_path):
    from pqlab.net.topology import TwoHosts

    chain = make_chain(tmp_path / "ec", CA, "EC:P-256")
    cells = []
    with TwoHosts() as topo:
        for i in range(2):
            cells.append(
                run_cell(
                    topo,
                    tmp_path,
                    f"run{i}",
                    chain,
                    4700 + i,
                    server_groups="x25519",
                    client_groups="x25519",
                    sigalg=tls_name("ECDSA-P256"),
                    suite="TLS_AES_128_GCM_SHA256",
                    n=1,
                )
            )
    a, b = cells
    with pytest.raises(kl.KeyLogError, match="has no secrets for this connection's client random"):
        kl.records_from_capture(a["pcaps"]["server"], b["keylog"], a["port"])
    # Flip one byte in the middle of the server's encrypted Certificate record.
    path = a["pcaps"]["server"]
    conn = next(
        c for c in pcap.split_connections(pcap.tcp_packets(path, keep_payload=True), a["port"])
    )
    _, srec = a["pairs"][0]
    cert_end = next(
        r.end
        for r in records.from_events(srec, "server")
        if any(m == "Certificate" for m, _ in r.messages)
    )
    target = cert_end - 20
    raw = bytearray(path.read_bytes())
    seg = next(s for s in conn.segments if not s.from_client and s.start <= target < s.end)
    where = raw.find(seg.payload)
    assert where > 0
    raw[where + target - seg.start] ^= 0x80
    bad = tmp_path / "flipped.pcap"
    bad.write_bytes(bytes(raw))
    with pytest.raises(kl.KeyLogError, match="does not authenticate .*damaged"):
        kl.records_from_capture(bad, a["keylog"], a["port"])

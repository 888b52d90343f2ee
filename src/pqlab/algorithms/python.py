"""The `python` backend of `pqlab primitives`: document 000's own measuring harness.

Document 000 timed its primitives from Python: the `cryptography` package for X25519, P-256
and RSA, liboqs-python for ML-KEM and ML-DSA, one `time.perf_counter` pair around each
single call, 1000 runs with the first dropped. This module measures the same way with the
`cryptography` package from PyPI (whose wheels bundle their own OpenSSL, with ML-KEM-768/1024
and ML-DSA), so a run can put the document's harness next to the engine's C-level timings of
the same algorithms and show what the interpreter adds.

It runs as its own process (`python -m pqlab.algorithms.python kem|sig ...`,
started by `pqlab primitives` like the engine) and speaks the engine's protocol for
`pqlab-engine kem|sig` (docs/primitives.md): `start`, one `sample` per timed run, `op_done`,
`checks`, `sizes`, or `error`. The measuring loop is the engine's (engine/src/primitives/
measure.rs), written again here: phases (key generation; then the two operations that use a
key), batches of up to 128, a warm-up of at most 2 s per phase, `iterations + 1` timed runs
per operation with the first stored as dropped, and every output checked (a failed check is
an error record and exit code 5, never a number), plus negative checks per cell that must
fail.

Which algorithms it measures comes from the catalogue's `python` field: the name of the
`cryptography` class family (`X25519`, `X448`, `EC`, `RSA`, `Ed25519`, `Ed448`, `MLKEM768`,
`MLKEM1024`, `MLDSA44`, ...), with the catalogue's `params` (curve, bits, padding, digest).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

import pqlab
from pqlab.procstat import vm_hwm_kib

MESSAGE_LEN = 64
BATCH = 128
WARMUP_MAX_NS = 2_000_000_000
FILL = b"pqlab: a message to sign, one per timed signature. "
PROGRAM = "pqlab.algorithms.python"
PARAM_KEYS = {"curve", "group", "bits", "padding", "digest"}


class CheckFailed(Exception):
    """An operation's output was wrong: no number may be reported for this cell."""


class Unsupported(Exception):
    """The installed `cryptography` cannot run this algorithm."""


def message(j: int) -> bytes:
    """Distinct 64-byte message number j (the engine's `measure::message`)."""
    return j.to_bytes(8, "big") + bytes(FILL[i % len(FILL)] for i in range(MESSAGE_LEN - 8))


def flip(data: bytes) -> bytes:
    b = bytearray(data)
    b[len(b) // 2] ^= 0x01
    return bytes(b)


def timed(fn: Callable, *args):
    """One operation timed alone, as document 000 did: a perf_counter pair around the call.
    `fn` is the library's own method (or a C-level partial of it), so nothing of this
    harness but this frame sits between the two clock reads."""
    t0 = time.perf_counter_ns()
    r = fn(*args)
    t1 = time.perf_counter_ns()
    return r, t1 - t0


def timed_verify(fn: Callable, *args):
    """A timed `verify` call of cryptography, which raises on a bad signature: (ok, ns)."""
    from cryptography.exceptions import InvalidSignature

    t0 = time.perf_counter_ns()
    try:
        fn(*args)
        ok = True
    except InvalidSignature:
        ok = False
    t1 = time.perf_counter_ns()
    return ok, t1 - t0


def call(c: tuple):
    """Run an untimed (function, *args) call, as the checks do."""
    return c[0](*c[1:])


def _noop():
    return None


def timer_overhead_ns(n: int = 2000) -> int:
    """Median time `timed` reports for a call of an empty Python function: the part of every
    sample that is the harness itself (timer reads, the call, the interpreter loop)."""
    return int(statistics.median(timed(_noop)[1] for _ in range(n)))


def versions() -> dict:
    import cryptography
    from cryptography.hazmat.backends.openssl import backend

    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "cryptography": cryptography.__version__,
        "openssl": backend.openssl_version_text(),
        "timer": "time.perf_counter_ns",
        "timer_resolution_ns": int(time.get_clock_info("perf_counter").resolution * 1e9) or 1,
    }


# --- adapters over `cryptography` ---------------------------------------------------------


def _der_spki(pub) -> int:
    from cryptography.hazmat.primitives import serialization as s

    return len(pub.public_bytes(s.Encoding.DER, s.PublicFormat.SubjectPublicKeyInfo))


def _der_pkcs8(key) -> int:
    from cryptography.hazmat.primitives import serialization as s

    return len(key.private_bytes(s.Encoding.DER, s.PrivateFormat.PKCS8, s.NoEncryption()))


def _hash(name: str):
    from cryptography.hazmat.primitives import hashes

    algs = {"SHA256": hashes.SHA256, "SHA384": hashes.SHA384, "SHA512": hashes.SHA512}
    if name.upper() not in algs:
        raise ValueError(f"digest {name!r} is not one of {', '.join(algs)}")
    return algs[name.upper()]()


def _curve(name: str):
    from cryptography.hazmat.primitives.asymmetric import ec

    curves = {"P-256": ec.SECP256R1, "P-384": ec.SECP384R1, "P-521": ec.SECP521R1}
    if name not in curves:
        raise ValueError(f"curve {name!r} is not one of {', '.join(curves)}")
    return curves[name]()


class MlKem:
    """ML-KEM through `cryptography.hazmat.primitives.asymmetric.mlkem`. `encaps` works on a
    public-key object imported once from the key's bytes (as a peer holds it), like the
    engine's OpenSSL backend."""

    kind = "kem"

    def __init__(self, name: str):
        from cryptography.hazmat.primitives.asymmetric import mlkem

        try:
            self.priv_cls = getattr(mlkem, f"{name}PrivateKey")
            self.pub_cls = getattr(mlkem, f"{name}PublicKey")
        except AttributeError:
            raise Unsupported(f"this cryptography has no {name}") from None

    def keygen_call(self) -> tuple:
        return (self.priv_cls.generate,)

    def public(self, key):
        return self.pub_cls.from_public_bytes(key.public_key().public_bytes_raw())

    def encaps_call(self, pub) -> tuple:
        return (pub.encapsulate,)  # -> (shared secret, ciphertext)

    def decaps_call(self, key, ct: bytes) -> tuple:
        return (key.decapsulate, ct)

    def key_sizes(self, key) -> dict:
        pub = key.public_key()
        return {
            "public_key": len(pub.public_bytes_raw()),
            "secret_key": None,
            "public_key_der": _der_spki(pub),
            "secret_key_der": _der_pkcs8(key),
        }

    def notes(self) -> dict:
        return {
            "secret_key": "cryptography exports only the 64-byte seed (d, z), not the "
            "expanded decapsulation key: no raw size",
            "secret_key_der": "PKCS#8 as cryptography writes it (seed-only, RFC 9935)",
        }


class KeyAgreement:
    """X25519 / X448 / ECDH. `public_key` = export the key share and import it as the peer
    does; `derive` = the shared secret with an imported peer share (engine semantics)."""

    kind = "kex"

    def __init__(self, name: str, params: dict):
        from cryptography.hazmat.primitives.asymmetric import ec, x448, x25519

        self.name = name
        if name == "X25519":
            self.priv_cls, self.pub_cls = x25519.X25519PrivateKey, x25519.X25519PublicKey
        elif name == "X448":
            self.priv_cls, self.pub_cls = x448.X448PrivateKey, x448.X448PublicKey
        elif name == "EC":
            self.curve = _curve(params.get("curve") or params.get("group") or "")
            self.ec = ec
            self.ecdh = ec.ECDH()
        else:
            raise Unsupported(f"no key agreement {name!r} in this harness")

    def keygen_call(self) -> tuple:
        if self.name == "EC":
            return (self.ec.generate_private_key, self.curve)
        return (self.priv_cls.generate,)

    def _wire(self, pub) -> bytes:
        if self.name == "EC":
            from cryptography.hazmat.primitives import serialization as s

            return pub.public_bytes(s.Encoding.X962, s.PublicFormat.UncompressedPoint)
        return pub.public_bytes_raw()

    def public_key(self, key):
        """The exported key share and the peer's imported object: (wire bytes, object)."""
        wire = self._wire(key.public_key())
        if self.name == "EC":
            peer = self.ec.EllipticCurvePublicKey.from_encoded_point(self.curve, wire)
        else:
            peer = self.pub_cls.from_public_bytes(wire)
        return wire, peer

    def wire_of(self, peer) -> bytes:
        return self._wire(peer)

    def public_key_call(self, key) -> tuple:
        # Two library calls (export, then the peer's import), as in the engine.
        return (self.public_key, key)

    def derive_call(self, key, peer) -> tuple:
        if self.name == "EC":
            return (key.exchange, self.ecdh, peer)
        return (key.exchange, peer)

    def key_sizes(self, key) -> dict:
        from cryptography.hazmat.primitives import serialization as s

        if self.name == "EC":
            secret = (key.curve.key_size + 7) // 8
        else:
            secret = len(key.private_bytes(s.Encoding.Raw, s.PrivateFormat.Raw, s.NoEncryption()))
        return {
            "public_key": len(self._wire(key.public_key())),
            "secret_key": secret,
            "public_key_der": _der_spki(key.public_key()),
            "secret_key_der": _der_pkcs8(key),
        }

    def notes(self) -> dict:
        return {"public_key": "the key share as sent in TLS (EC: uncompressed SEC 1 point)"}


class Signature:
    """RSA (PSS or PKCS#1 v1.5), ECDSA, Ed25519/Ed448 and ML-DSA (pure, empty context)."""

    kind = "sig"

    def __init__(self, name: str, params: dict):
        self.name = name
        self.params = params
        self.scalar_len = None
        if name == "RSA":
            from cryptography.hazmat.primitives.asymmetric import padding, rsa

            self.bits = int(params.get("bits") or 0)
            if self.bits < 1024:
                raise ValueError("RSA needs bits=<modulus size>")
            digest = _hash(params.get("digest", "SHA256"))
            self.rsa = rsa
            if params.get("padding") == "pss":
                pad = padding.PSS(mgf=padding.MGF1(digest), salt_length=padding.PSS.DIGEST_LENGTH)
            elif params.get("padding") == "pkcs1":
                pad = padding.PKCS1v15()
            else:
                raise ValueError("RSA needs padding=pss or padding=pkcs1")
            self.extra = (pad, digest)
        elif name == "EC":
            from cryptography.hazmat.primitives.asymmetric import ec

            self.curve = _curve(params.get("curve", ""))
            self.ec = ec
            self.extra = (ec.ECDSA(_hash(params.get("digest", "SHA256"))),)
            self.scalar_len = (self.curve.key_size + 7) // 8
        elif name in ("Ed25519", "Ed448"):
            from cryptography.hazmat.primitives.asymmetric import ed448, ed25519

            self.priv_cls = {
                "Ed25519": ed25519.Ed25519PrivateKey,
                "Ed448": ed448.Ed448PrivateKey,
            }[name]
            self.extra = ()
        elif name.startswith("MLDSA"):
            from cryptography.hazmat.primitives.asymmetric import mldsa

            self.priv_cls = getattr(mldsa, f"{name}PrivateKey", None)
            if self.priv_cls is None:
                raise Unsupported(f"this cryptography has no {name}")
            self.extra = ()
        else:
            raise Unsupported(f"no signature algorithm {name!r} in this harness")

    def keygen_call(self) -> tuple:
        if self.name == "RSA":
            return (self.rsa.generate_private_key, 65537, self.bits)
        if self.name == "EC":
            return (self.ec.generate_private_key, self.curve)
        return (self.priv_cls.generate,)

    def sign_call(self, key, m: bytes) -> tuple:
        return (key.sign, m, *self.extra)

    def verify_call(self, pub, m: bytes, sig: bytes) -> tuple:
        return (pub.verify, sig, m, *self.extra)  # raises InvalidSignature if bad

    def verify(self, pub, m: bytes, sig: bytes) -> bool:
        """Untimed verification, for the checks."""
        return timed_verify(*self.verify_call(pub, m, sig))[0]

    def key_sizes(self, key) -> dict:
        pub = key.public_key()
        if self.name == "RSA":
            public, secret = key.key_size // 8, None
        elif self.name == "EC":
            from cryptography.hazmat.primitives import serialization as s

            public = len(pub.public_bytes(s.Encoding.X962, s.PublicFormat.UncompressedPoint))
            secret = self.scalar_len
        elif self.name.startswith("MLDSA"):
            public, secret = len(pub.public_bytes_raw()), None
        else:
            public, secret = len(pub.public_bytes_raw()), len(key.private_bytes_raw())
        return {
            "public_key": public,
            "secret_key": secret,
            "public_key_der": _der_spki(pub),
            "secret_key_der": _der_pkcs8(key),
        }

    def signature_sizes(self, sig: bytes) -> tuple[int, int]:
        raw = 2 * self.scalar_len if self.name == "EC" else len(sig)
        return raw, len(sig)

    def notes(self) -> dict:
        n = {
            "public_key": "RSA: modulus length; ECDSA: uncompressed SEC 1 point; others: raw",
            "signature": "ECDSA: r||s (fixed); signature_der: the DER form cryptography returns",
        }
        if self.name.startswith("MLDSA"):
            n["secret_key"] = "cryptography exports only the 32-byte seed: no raw size"
        return n


def adapter(kind: str, name: str, params: dict):
    """The adapter for a catalogue `python` name; Unsupported if this cryptography lacks it."""
    try:
        if kind == "sig":
            return Signature(name, params)
        if name.startswith("MLKEM"):
            return MlKem(name)
        return KeyAgreement(name, params)
    except ImportError as e:
        raise Unsupported(f"cryptography cannot provide {name}: {e}") from None


def available(kind: str, name: str, params: dict) -> str | None:
    """None when this installation can measure the algorithm, else why not (the class is
    missing, or the OpenSSL inside `cryptography` refuses it)."""
    from cryptography.exceptions import UnsupportedAlgorithm

    try:
        a = adapter(kind, name, params)
        if name.startswith(("MLKEM", "MLDSA")):
            call(a.keygen_call())  # cheap; raises if the bundled OpenSSL lacks it
    except (Unsupported, UnsupportedAlgorithm, ValueError) as e:
        return str(e)
    return None


# --- the measuring loop (the engine's measure.rs) ------------------------------------------


class Plan:
    def __init__(self, iterations: int, warmup: int, max_seconds: float | None, samples=True):
        self.iterations = iterations
        self.warmup = warmup
        self.max_seconds = max_seconds
        self.emit_samples = samples


def _past(deadline: int | None) -> bool:
    return deadline is not None and time.monotonic_ns() >= deadline


def run_phase(plan: Plan, ops: list[str], batch, emit) -> None:
    """Warm-up, then `iterations + 1` timed runs of every operation of the phase in batches;
    `batch(n, min, deadline)` returns one list of ns per operation (equal lengths)."""
    cap = WARMUP_MAX_NS
    if plan.max_seconds:
        cap = min(cap, int(plan.max_seconds * 1e9))
    warm_deadline = time.monotonic_ns() + cap
    warmed = 0
    while warmed < plan.warmup and not _past(warm_deadline):
        got = batch(min(plan.warmup - warmed, BATCH), 1, warm_deadline)
        warmed += len(got[0])
    total = plan.iterations + 1
    start = time.monotonic_ns()
    deadline = start + int(plan.max_seconds * 1e9) if plan.max_seconds else None
    done, exhausted = 0, False
    while done < total:
        if done >= 2 and _past(deadline):
            exhausted = True
            break
        n = min(total - done, BATCH)
        got = batch(n, min(max(2 - done, 0), n), deadline)
        k = len(got[0])
        if plan.emit_samples:
            for op, samples in zip(ops, got, strict=True):
                for j, ns in enumerate(samples):
                    i = done + j
                    emit(
                        {
                            "type": "sample",
                            "op": op,
                            "index": i,
                            "ns": ns,
                            "cycles": None,
                            "dropped": i == 0,
                        }
                    )
        done += k
    elapsed = (time.monotonic_ns() - start) / 1e9
    for op in ops:
        emit(
            {
                "type": "op_done",
                "op": op,
                "timed_runs": done,
                "kept": done - 1,
                "requested": plan.iterations,
                "warmup_runs": warmed,
                "budget_exhausted": exhausted,
                "phase_seconds": elapsed,
            }
        )


class Sizes:
    FIELDS = (
        "public_key",
        "secret_key",
        "ciphertext",
        "shared_secret",
        "signature",
        "public_key_der",
        "secret_key_der",
        "signature_der",
    )

    def __init__(self):
        self.ranges: dict[str, tuple[int, int]] = {}
        self.keys = 0
        self.outputs = 0

    def add(self, field: str, v: int | None) -> None:
        if v is None:
            return
        lo, hi = self.ranges.get(field, (v, v))
        self.ranges[field] = (min(lo, v), max(hi, v))

    def key(self, sizes: dict) -> None:
        for k, v in sizes.items():
            self.add(k, v)
        self.keys += 1

    def record(self, notes: dict) -> dict:
        rec = {"type": "sizes"}
        for f in self.FIELDS:
            r = self.ranges.get(f)
            rec[f] = {"min": r[0], "max": r[1]} if r else None
        rec.update(keys_observed=self.keys, outputs_observed=self.outputs, notes=notes)
        # The last record: this process's own peak resident set (see pqlab.procstat).

        rec["vm_hwm_kib"] = vm_hwm_kib(os.getpid())
        return rec


def _batch_loop(n: int, minimum: int, deadline, c: tuple) -> tuple[list, list[int]]:
    """Up to n timed runs of the call `c` = (function, *args) (at least `minimum` before
    honouring the deadline)."""
    outs, times = [], []
    for i in range(n):
        if i >= minimum and _past(deadline):
            break
        r, ns = timed(*c)
        outs.append(r)
        times.append(ns)
    return outs, times


def measure_kem(k, plan: Plan, emit) -> None:
    sizes, checks = Sizes(), 0

    def keygen_batch(n, minimum, deadline):
        nonlocal checks
        keys, times = _batch_loop(n, minimum, deadline, k.keygen_call())
        for key in keys:
            ss, ct = call(k.encaps_call(k.public(key)))
            if call(k.decaps_call(key, ct)) != ss:
                raise CheckFailed("a generated key pair does not decapsulate its own encapsulation")
            sizes.key(k.key_sizes(key))
            _kem_sizes(sizes, ct, ss)
            checks += 1
        return [times]

    run_phase(plan, ["keygen"], keygen_batch, emit)
    key = call(k.keygen_call())
    pub = k.public(key)

    def op_batch(n, minimum, deadline):
        nonlocal checks
        outs, te = _batch_loop(n, minimum, deadline, k.encaps_call(pub))
        td = []
        for ss, ct in outs:
            got, ns = timed(*k.decaps_call(key, ct))
            td.append(ns)
            if got != ss:
                raise CheckFailed("decapsulated secret differs from the encapsulated one")
            _kem_sizes(sizes, ct, ss)
            checks += 1
        return [te, td]

    run_phase(plan, ["encaps", "decaps"], op_batch, emit)
    # The check must be able to fail: a corrupted ciphertext must not give the same secret.
    ss, ct = call(k.encaps_call(pub))
    try:
        outcome = "different secret" if call(k.decaps_call(key, flip(ct))) != ss else None
    except Exception:  # noqa: BLE001 - any refusal counts as "rejected"
        outcome = "error"
    if outcome is None:
        raise CheckFailed("a corrupted ciphertext decapsulated to the same secret")
    emit(
        {
            "type": "checks",
            "passed": checks,
            "negative": [{"name": "corrupted ciphertext", "outcome": outcome}],
        }
    )
    emit(sizes.record(k.notes()))


def _kem_sizes(sizes: Sizes, ct: bytes, ss: bytes) -> None:
    sizes.add("ciphertext", len(ct))
    sizes.add("shared_secret", len(ss))
    sizes.outputs += 1


def measure_kex(x, plan: Plan, emit) -> None:
    sizes, checks = Sizes(), 0
    peer = call(x.keygen_call())
    peer_share = x.public_key(peer)[1]

    def keygen_batch(n, minimum, deadline):
        nonlocal checks
        keys, times = _batch_loop(n, minimum, deadline, x.keygen_call())
        for key in keys:
            mine = call(x.derive_call(key, peer_share))
            theirs = call(x.derive_call(peer, x.public_key(key)[1]))
            if mine != theirs:
                raise CheckFailed("the two sides derived different secrets")
            ks = x.key_sizes(key)
            sizes.key(ks)
            sizes.add("ciphertext", ks["public_key"])  # the peer's key share, as table 1
            sizes.add("shared_secret", len(mine))
            sizes.outputs += 1
            checks += 1
        return [times]

    run_phase(plan, ["keygen"], keygen_batch, emit)
    key = call(x.keygen_call())
    wire = x.public_key(key)[0]
    reference = call(x.derive_call(peer, x.public_key(key)[1]))

    def op_batch(n, minimum, deadline):
        nonlocal checks
        shares, tp = _batch_loop(n, minimum, deadline, x.public_key_call(key))
        for w, obj in shares:
            if w != wire or x.wire_of(obj) != wire:
                raise CheckFailed("the imported key share differs from the exported public key")
        ts = []
        for _ in shares:
            got, ns = timed(*x.derive_call(key, peer_share))
            ts.append(ns)
            if got != reference:
                raise CheckFailed("the two sides derived different secrets")
            checks += 1
        return [tp, ts]

    run_phase(plan, ["public_key", "shared_secret"], op_batch, emit)
    other = call(x.keygen_call())
    if call(x.derive_call(key, x.public_key(other)[1])) == reference:
        raise CheckFailed("a different peer key produced the same secret")
    emit(
        {
            "type": "checks",
            "passed": checks,
            "negative": [{"name": "different peer key", "outcome": "different secret"}],
        }
    )
    emit(sizes.record(x.notes()))


def measure_sig(s, plan: Plan, emit) -> None:
    sizes, checks, counter = Sizes(), 0, 0

    def sig_sizes(sig: bytes) -> None:
        raw, der = s.signature_sizes(sig)
        sizes.add("signature", raw)
        sizes.add("signature_der", der)
        sizes.outputs += 1

    def keygen_batch(n, minimum, deadline):
        nonlocal checks, counter
        keys, times = _batch_loop(n, minimum, deadline, s.keygen_call())
        for key in keys:
            counter += 1
            m = message(counter)
            sig = call(s.sign_call(key, m))
            if not s.verify(key.public_key(), m, sig):
                raise CheckFailed("a signature by a generated key does not verify")
            sizes.key(s.key_sizes(key))
            sig_sizes(sig)
            checks += 1
        return [times]

    run_phase(plan, ["keygen"], keygen_batch, emit)
    key = call(s.keygen_call())
    pub = key.public_key()
    last: list = []

    def op_batch(n, minimum, deadline):
        nonlocal checks, counter
        sigs, tsig = [], []
        for i in range(n):
            if i >= minimum and _past(deadline):
                break
            counter += 1
            m = message(counter)
            sig, ns = timed(*s.sign_call(key, m))
            sigs.append((m, sig))
            tsig.append(ns)
        tver = []
        for m, sig in sigs:
            ok, ns = timed_verify(*s.verify_call(pub, m, sig))
            tver.append(ns)
            if not ok:
                raise CheckFailed("a signature failed to verify")
            sig_sizes(sig)
            checks += 1
        last[:] = [sigs[-1]]
        return [tsig, tver]

    run_phase(plan, ["sign", "verify"], op_batch, emit)
    m, sig = last[0]
    if s.verify(pub, m, flip(sig)):
        raise CheckFailed("a corrupted signature verified")
    if s.verify(pub, message(2**64 - 1), sig):
        raise CheckFailed("a signature verified for a different message")
    emit(
        {
            "type": "checks",
            "passed": checks,
            "negative": [
                {"name": "corrupted signature", "outcome": "rejected"},
                {"name": "different message", "outcome": "rejected"},
            ],
        }
    )
    emit(sizes.record(s.notes()))


OPERATIONS = {
    "kem": ["keygen", "encaps", "decaps"],
    "kex": ["keygen", "public_key", "shared_secret"],
    "sig": ["keygen", "sign", "verify"],
}


def measure(a, plan: Plan, emit) -> None:
    """Measure one adapter: the records of one cell, through `emit`."""
    {"kem": measure_kem, "kex": measure_kex, "sig": measure_sig}[a.kind](a, plan, emit)


# --- the program ------------------------------------------------------------------------


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"python -m {PROGRAM}", description=__doc__.split("\n")[0])
    p.add_argument("subcommand", choices=("kem", "sig"))
    p.add_argument("--backend", choices=("python",), default="python")
    p.add_argument("--alg", required=True)
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--iterations", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--max-seconds", type=float, default=None)
    p.add_argument("--no-samples", action="store_true")
    return p.parse_args(argv)


def _params(items: list[str]) -> dict:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or k not in PARAM_KEYS:
            raise ValueError(
                f"--param {item!r}: use KEY=VALUE with KEY one of {sorted(PARAM_KEYS)}"
            )
        out[k] = v
    return out


def _emit_to(stream):
    def emit(rec: dict) -> None:
        stream.write(json.dumps(rec) + "\n")

    return emit


def main(argv: list[str] | None = None) -> int:
    out = sys.stdout
    emit = _emit_to(out)
    try:
        args = _parse(sys.argv[1:] if argv is None else argv)
        params = _params(args.param)
        if args.iterations < 1 or args.warmup < 0:
            raise ValueError("--iterations must be at least 1 and --warmup at least 0")
        a = adapter(args.subcommand, args.alg, params)
        plan = Plan(args.iterations, args.warmup, args.max_seconds or None, not args.no_samples)
        emit(
            {
                "type": "start",
                "kind": a.kind,
                "backend": "python",
                "algorithm": args.alg,
                "params": params,
                "operations": OPERATIONS[a.kind],
                "iterations": plan.iterations,
                "warmup": plan.warmup,
                "max_seconds": plan.max_seconds,
                "batch": BATCH,
                "message_bytes": MESSAGE_LEN,
                "clock": "time.perf_counter_ns",
                "cycles": "none",
                "dropped": "index 0 of each operation (one extra timed run)",
                "harness": {**versions(), "timer_overhead_ns": timer_overhead_ns()},
                "pid": os.getpid(),
            }
        )
        measure(a, plan, emit)
    except BrokenPipeError:  # the reader went away (`... | head`): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
        return 1
    except CheckFailed as e:
        emit({"type": "error", "kind": "check", "message": f"check failed: {e}; no numbers are "
              "reported for this run"})  # fmt: skip
        return 5
    except (ValueError, Unsupported) as e:
        emit({"type": "error", "kind": "usage", "message": str(e)})
        return 2
    except Exception as e:  # noqa: BLE001 - the library failed: one error record, exit 3
        emit({"type": "error", "kind": "library", "message": f"{type(e).__name__}: {e}"})
        return 3
    try:
        out.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
    return 0


def command(args: list[str]) -> list[str]:
    """The argv that runs this harness with engine-style `args` (kem|sig --backend python
    ...), in this interpreter."""
    return [sys.executable, "-m", PROGRAM, *map(str, args)]


def environment() -> dict:
    """PYTHONPATH so the child imports this very pqlab (a worktree or an installed copy)."""

    src = os.path.dirname(os.path.dirname(os.path.abspath(pqlab.__file__)))
    old = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": src + (os.pathsep + old if old else "")}


if __name__ == "__main__":
    sys.exit(main())

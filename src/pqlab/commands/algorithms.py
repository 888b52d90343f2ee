"""`pqlab algorithms`: the algorithm catalogue and what this build of the engine provides.

Lists every catalogued algorithm (or the ones named) with kind, family, NIST level, raw
sizes, TLS code point and the backends that this engine build actually provides (checked
against `pqlab-engine info`, not just the catalogue).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from pqlab import catalog, engine
from pqlab.errors import EngineError, UserError
from pqlab.tls import stacks

DOCUMENTS = ("000", "001", "002", "003", "004")
BACKEND_CHOICES = ("openssl", "liboqs", "python", "any", "none")


def provided(info: dict) -> dict[str, set[str] | None]:
    """Lower-cased names each backend of this engine build provides (None: not reported,
    e.g. an engine built before `info` listed OpenSSL's algorithms)."""
    ossl = info.get("openssl", {})
    openssl_names: set[str] | None = None
    if "keymgmt" in ossl:
        openssl_names = set()
        for group in ("keymgmt", "kems", "signatures"):
            for m in ossl.get(group, []):
                names = (m.get("name"), *m.get("names", ()))
                openssl_names.update(n.lower() for n in names if n)
    oqs = info.get("liboqs", {})
    liboqs_names: set[str] | None = None
    if "kems" in oqs or "sigs" in oqs:
        liboqs_names = {k["name"].lower() for k in (*oqs.get("kems", []), *oqs.get("sigs", []))}
    return {"openssl": openssl_names, "liboqs": liboqs_names}


def available_backends(
    alg: catalog.Algorithm, have: dict[str, set[str] | None] | None
) -> list[str]:
    """The catalogued backends of `alg` that this build provides (the catalogue's where the
    engine does not say)."""
    if have is None:
        return list(alg.backends)
    return [b for b in alg.backends if have[b] is None or getattr(alg, b).lower() in have[b]]


def parse_document(text: str) -> str:
    m = re.fullmatch(r"\s*0*([0-4])(?:_[0-9a-f]+(?:\.txt)?)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"document {text!r} is not one of the source documents; use one of "
            f"{', '.join(DOCUMENTS)}"
        )
    return f"{int(m.group(1)):03d}"


def parse_kind(text: str) -> str:
    kind = text.strip().lower()
    if kind not in ("kem", "kex", "sig"):
        raise argparse.ArgumentTypeError(
            f"kind {text!r} is not known; use kem (KEMs and key agreement), kex "
            "(key agreement only) or sig"
        )
    return kind


def parse_backend(text: str) -> str:
    backend = text.strip().lower()
    if backend not in BACKEND_CHOICES:
        raise argparse.ArgumentTypeError(
            f"backend {text!r} is not known; use one of {', '.join(BACKEND_CHOICES)}"
        )
    return backend


def register(sub) -> None:
    p = sub.add_parser(
        "algorithms",
        help="list the algorithm catalogue and what this build provides",
        description=__doc__,
    )
    p.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="show only these algorithms (any alias; e.g. P-256 '2048-bit RSA')",
    )
    p.add_argument(
        "--kind",
        type=parse_kind,
        metavar="{kem,kex,sig}",
        help="kem (KEMs and key agreement), kex or sig",
    )
    p.add_argument(
        "--backend",
        type=parse_backend,
        metavar="{openssl,liboqs,python,any,none}",
        help="only algorithms this build provides through openssl / liboqs / any engine "
        "backend, 'none' for catalogued algorithms without one, or python for those the "
        "python harness (the cryptography package) can time",
    )
    p.add_argument(
        "--document",
        type=parse_document,
        metavar="000..004",
        help="only algorithms that this source document uses",
    )
    p.add_argument("--family", help="only this family (e.g. ML-KEM, CROSS, UOV)")
    p.add_argument(
        "--names",
        dest="show_names",
        action="store_true",
        help="show each algorithm's names and identifiers per library instead: OpenSSL, "
        "the TLS name (OpenSSL or oqs-provider) and code point, liboqs, wolfSSL (name, "
        "code point, certificate OID where it differs, as document 004 lists them), the "
        "python harness's cryptography class, and the certificate OID",
    )
    p.add_argument(
        "--tls",
        action="store_true",
        help="list, per TLS stack of this engine build, every group, server signer, client "
        "signer and CA algorithm it can use, with code points and the stack's own names "
        "(with NAME or other filters: only those algorithms)",
    )
    p.add_argument(
        "--stack",
        metavar="NAME",
        help="with --tls: only this stack (comma separated for several)",
    )
    p.add_argument("--json", action="store_true", help="print JSON (every catalogue field)")
    p.set_defaults(func=run)


def select(args, have: dict[str, set[str] | None] | None) -> list[catalog.Algorithm]:
    if args.names:
        algs = []
        for name in args.names:
            found = catalog.find(name, args.kind)
            if not found:
                catalog.resolve(name, args.kind)  # raises with the closest names
            algs += [a for a in found if a not in algs]
    else:
        algs = catalog.all_algorithms(args.kind)
    if args.document:
        algs = [a for a in algs if args.document in a.documents]
    if args.family:
        fam = catalog.normalize(args.family)
        families = sorted({a.family for a in catalog.all_algorithms()})
        if not any(catalog.normalize(f) == fam for f in families):
            raise UserError(f"family {args.family!r} is not known; families: {', '.join(families)}")
        algs = [a for a in algs if catalog.normalize(a.family) == fam]
    if args.backend:

        def keep(a: catalog.Algorithm) -> bool:
            if args.backend == "python":
                return bool(a.python)  # the python harness (pqlab primitives only)
            avail = available_backends(a, have)
            if args.backend == "any":
                return bool(avail)
            if args.backend == "none":
                return not avail
            return args.backend in avail

        algs = [a for a in algs if keep(a)]
    return algs


def to_json(alg: catalog.Algorithm, have: dict[str, set[str] | None] | None) -> dict:
    d = {k: v for k, v in vars(alg).items()}
    d["aliases"] = list(alg.aliases)
    d["documents"] = list(alg.documents)
    d["backends"] = list(alg.backends)
    d["available"] = None if have is None else available_backends(alg, have)
    d["tls_usable"] = tls_roles(alg)
    return d


def tls_roles(alg: catalog.Algorithm) -> dict[str, list[str]] | None:
    """Per TLS stack of this engine build, the roles `alg` can play there (None: the engine
    cannot be asked)."""
    try:
        all_stacks = stacks.all_stacks()
    except (UserError, EngineError):
        return None
    roles = ("group",) if alg.kind != "sig" else ("server", "client", "ca")
    return {
        name: [r for r in roles if st.usable(alg, r)] for name, st in sorted(all_stacks.items())
    }


def _tls_text(alg: catalog.Algorithm) -> str:
    roles = tls_roles(alg)
    if roles is None:
        return "?"
    parts = [f"{stack}:{'+'.join(r)}" for stack, r in roles.items() if r]
    return " ".join(parts) or "-"


def _size(alg: catalog.Algorithm, key: str) -> str:
    v = alg.sizes.get(key)
    return "-" if v is None else str(v)


def rows(algs: list[catalog.Algorithm], have: dict[str, set[str] | None] | None) -> list[list[str]]:
    out = []
    for a in algs:
        code = a.tls_code
        tls = "-" if code is None else f"0x{code:04x}" + ("" if a.tls_registry == "iana" else "*")
        avail = available_backends(a, have)
        missing = [b for b in a.backends if b not in avail]
        backends = ",".join(avail + (["python"] if a.python else [])) or "-"
        if missing:
            backends += f" (not built: {','.join(missing)})"
        out.append(
            [
                a.name,
                a.kind,
                a.family,
                "-" if a.nist_level is None else str(a.nist_level),
                _size(a, "public_key"),
                _size(a, "secret_key"),
                _size(a, "signature" if a.kind == "sig" else "ciphertext"),
                _size(a, "shared_secret"),
                tls,
                _tls_text(a),
                backends,
                ",".join(a.documents) or "-",
            ]
        )
    return out


HEADER = [
    "algorithm",
    "kind",
    "family",
    "level",
    "pk",
    "sk",
    "ct/sig",
    "ss",
    "tls",
    "in TLS (stack:roles)",
    "backends",
    "documents",
]


NAMES_HEADER = [
    "algorithm",
    "openssl",
    "tls name",
    "tls code",
    "liboqs",
    "wolfssl",
    "wolfssl code",
    "oid",
    "wolfssl oid",
    "python",
]


def _tls_code(a: catalog.Algorithm) -> str:
    code = a.tls_code
    if code is None:
        return "-"
    return f"0x{code:04x}" + ("" if a.tls_registry == "iana" else "*")


def _tls_name(a: catalog.Algorithm) -> str:
    if not a.tls_name:
        return "-"
    return a.tls_name + (" (oqs-provider)" if a.tls_registry == "oqs-provider" else "")


def _wolfssl_code(a: catalog.Algorithm) -> str:
    if a.wolfssl_code is None:
        return "-"
    differs = a.tls_code is not None and a.tls_code != a.wolfssl_code
    return f"{a.wolfssl_code} (0x{a.wolfssl_code:04x})" + (" !=" if differs else "")


def name_rows(algs: list[catalog.Algorithm]) -> list[list[str]]:
    """One row per algorithm: its name and identifiers in each library."""
    out = []
    for a in algs:
        oid = a.oid or "-"
        if a.key_oid:
            oid += f" (key {a.key_oid})"
        out.append(
            [
                a.name,
                a.openssl or "-",
                _tls_name(a),
                _tls_code(a),
                a.liboqs or "-",
                a.wolfssl or "-",
                _wolfssl_code(a),
                oid,
                a.wolfssl_oid or "-",
                a.python or "-",
            ]
        )
    return out


NAMES_NOTE = (
    "openssl: EVP name (EC, RSA, DH take a curve / size parameter). tls name / tls code: "
    "the -groups / -sigalgs name and the TLS NamedGroup or SignatureScheme code point; * and "
    "'(oqs-provider)': oqs-provider 0.10's private-use values, not IANA. wolfssl, wolfssl "
    "code, wolfssl oid: as document 004 lists them (decimal, as there, and hex); '!=' marks "
    "a wolfSSL code point that differs from the tls code; wolfssl oid is listed only where document "
    "004's certificate OID differs from oid (Falcon, the SHAKE SPHINCS+ sets; its Dilithium "
    "OIDs equal oid). oid: the certificate's signatureAlgorithm OID (signatures) or "
    "the SubjectPublicKeyInfo OID (key exchange). python: the cryptography class family "
    "the python harness uses (pqlab primitives --backend python)."
)


def format_table(table: list[list[str]], header: list[str] | None = None) -> str:
    header = header or HEADER
    widths = [max(len(r[i]) for r in [header, *table]) for i in range(len(header))]
    right = {3, 4, 5, 6, 7} if header is HEADER else set()
    lines = []
    for r in [header, *table]:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


TLS_ROLES = ("group", "server", "client", "ca")
TLS_HEADER = ["stack", "role", "algorithm", "code", "registry", "stack's name"]


def tls_rows(chosen: list[stacks.Stack], algs: list[catalog.Algorithm]) -> list[dict]:
    """Every (stack, role, algorithm) this build can run, catalogue order, and the stack's
    code points that name no catalogue entry (so nothing the stack can do is hidden)."""
    out = []
    known_groups = {a.tls_group for a in catalog.all_algorithms("kem") if a.tls_group}
    known_sigs = {a.tls_sigscheme for a in catalog.all_algorithms("sig") if a.tls_sigscheme}
    for st in chosen:
        for role in TLS_ROLES:
            for a in algs:
                if (role == "group") != (a.kind != "sig") or not st.usable(a, role):
                    continue
                code = a.tls_group if role == "group" else a.tls_sigscheme
                out.append(
                    {
                        "stack": st.name,
                        "role": role,
                        "algorithm": a.name,
                        "code": None if role == "ca" and code is None else code,
                        "registry": a.tls_registry or "-",
                        "stack_name": (
                            st.groups.get(code) if role == "group" else st.sigalgs.get(code)
                        )
                        or "-",
                    }
                )
        for table, known, role in (
            (st.groups, known_groups, "group"),
            (st.sigalgs, known_sigs, "server"),
        ):
            for code, name in sorted(table.items()):
                if code not in known:
                    out.append(
                        {
                            "stack": st.name,
                            "role": role,
                            "algorithm": "(not catalogued)",
                            "code": code,
                            "registry": "-",
                            "stack_name": name,
                        }
                    )
    return out


def run_tls(args, algs: list[catalog.Algorithm]) -> None:
    names = args.stack.split(",") if args.stack else sorted(stacks.all_stacks())
    chosen = [stacks.get(n.strip()) for n in names if n.strip()]
    if not chosen:
        raise UserError(f"--stack {args.stack!r} names no stack")
    rows = tls_rows(chosen, algs)
    if args.json:
        out = [
            {
                "name": st.name,
                "implementation": st.implementation,
                "message_events": st.message_events,
                "limits": st.limits,
                "algorithms": [r for r in rows if r["stack"] == st.name],
            }
            for st in chosen
        ]
        print(json.dumps(out, indent=2))
        return
    for st in chosen:
        print(f"{st.name}: {st.implementation}")
    table = [
        [
            r["stack"],
            r["role"],
            r["algorithm"],
            "-" if r["code"] is None else f"0x{r['code']:04x}",
            r["registry"],
            r["stack_name"],
        ]
        for r in rows
    ]
    print(format_table(table, TLS_HEADER) if table else "no algorithm matches these filters")
    print(
        f"\n{len(rows)} (stack, role, algorithm) rows. role: group = key exchange; server / "
        "client = certificate key and CertificateVerify signer; ca = signs certificates "
        "(no code point needed). registry: iana, or oqs-provider's private-use code point. "
        "Validation of every command uses this same answer."
    )


def run(args) -> int:
    if args.stack and not args.tls:
        raise UserError("--stack NAME goes with --tls (the stacks' algorithms)")
    if args.tls:
        run_tls(args, select(args, None))
        return 0
    have: dict[str, set[str] | None] | None
    warning = ""
    try:
        have = provided(engine.info())
    except (UserError, EngineError) as e:
        have = None
        warning = f"note: cannot ask the engine what this build provides ({e}); backends shown are the catalogue's"
    algs = select(args, have)
    try:
        _print(args, algs, have)
    except BrokenPipeError:  # `pqlab algorithms | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if warning:
        print(warning, file=sys.stderr)
    return 0


def _print(args, algs: list[catalog.Algorithm], have: dict[str, set[str] | None] | None) -> None:
    if args.json:
        print(json.dumps([to_json(a, have) for a in algs], indent=2))
    elif args.show_names:
        if not algs:
            print("no catalogued algorithm matches these filters")
        else:
            print(format_table(name_rows(algs), NAMES_HEADER))
            print(f"\n{len(algs)} algorithms. {NAMES_NOTE}")
    else:
        if not algs:
            print("no catalogued algorithm matches these filters")
        else:
            print(format_table(rows(algs, have)))
            print(
                f"\n{len(algs)} algorithms. Sizes in bytes as the algorithm defines them "
                "(pk public key, sk secret key, ct ciphertext or sig signature, ss shared "
                "secret). level: NIST category ('-' classical). tls: TLS NamedGroup / "
                "SignatureScheme code point; * = oqs-provider's private-use value, not IANA. "
                "in TLS: the roles each TLS stack of this engine build can use it in (group: "
                "key exchange; server/client: certificate and CertificateVerify; ca: signs "
                "certificates)."
            )

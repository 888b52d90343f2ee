"""`pqlab doctor`: what this machine can run (engine, privileges, netem, the User-Mode Linux
guest of `--shaper uml`, tools)."""

from __future__ import annotations

import json

from pqlab import engine, metadata
from pqlab.errors import UserError
from pqlab.net import privileges, shaping, uml


def checks() -> list[tuple[str, bool, str]]:
    out = []
    try:
        info = engine.info()
        out.append(
            (
                "engine",
                True,
                f"{engine.engine_path()} - {info['openssl']['version_text']}"
                f", liboqs {info['liboqs']['version']}",
            )
        )
    except Exception as e:  # noqa: BLE001 - doctor reports every failure
        out.append(("engine", False, str(e)))
    try:
        ok, why = privileges.can_admin_network()
        out.append(("CAP_NET_ADMIN (network experiments)", ok, why))
    except ImportError:
        out.append(("CAP_NET_ADMIN (network experiments)", False, "network support not built"))
    try:
        ok, why = shaping.netem_available()
        out.append(("kernel netem", ok, why))
    except (ImportError, AttributeError):
        pass
    # The same test `--shaper uml` makes before it runs anything (a guest booted once).
    ok, why = uml.available()
    out.append(("User-Mode Linux guest with netem (--shaper uml)", ok, why))
    cpu = metadata.cpu_info()
    out.append(
        (
            "CPU",
            True,
            f"{cpu['model']}; AES-NI {'yes' if cpu['aes_ni'] else 'no'}; "
            f"governor {cpu['governor']}",
        )
    )
    return out


def register(sub) -> None:
    p = sub.add_parser("doctor", help="check what this machine can run", description=__doc__)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    results = checks()
    if args.json:
        print(json.dumps([{"check": c, "ok": ok, "detail": d} for c, ok, d in results], indent=2))
    else:
        for check, ok, detail in results:
            print(f"{'ok ' if ok else 'NO '} {check}: {detail}")
    if not results[0][1]:
        raise UserError("the engine is not usable; run 'make engine'")
    return 0

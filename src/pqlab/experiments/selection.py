"""Which (algorithm, backend) cells the primitives and sizes experiments measure: the
--kem/--sig/--backend options, catalogue lookup, the document-000 default set, and each
cell's engine arguments."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from pqlab import catalog, units
from pqlab.catalog import Algorithm
from pqlab.errors import UserError
from pqlab.experiment import Option

# TLS group spellings the catalogue may carry in `openssl` for key agreements, mapped to the
# EVP algorithm and group the engine expects (see docs/primitives.md, "engine arguments").
_GROUP_ALIASES = {
    "p256": ("EC", "P-256"),
    "secp256r1": ("EC", "P-256"),
    "prime256v1": ("EC", "P-256"),
    "p384": ("EC", "P-384"),
    "secp384r1": ("EC", "P-384"),
    "p521": ("EC", "P-521"),
    "secp521r1": ("EC", "P-521"),
    "ffdhe2048": ("DH", "ffdhe2048"),
    "ffdhe3072": ("DH", "ffdhe3072"),
    "ffdhe4096": ("DH", "ffdhe4096"),
}


@dataclass(frozen=True)
class Cell:
    algorithm: Algorithm
    backend: str

    @property
    def cell_id(self) -> str:
        return f"{self.algorithm.name}|{self.backend}"

    @property
    def subcommand(self) -> str:
        return "sig" if self.algorithm.kind == "sig" else "kem"

    def engine_args(self) -> list[str]:
        """The engine's arguments for this cell, from the catalogue entry."""
        alg = self.algorithm
        name = alg.backend_name(self.backend)
        args = [self.subcommand, "--backend", self.backend]
        if self.backend == "liboqs":
            args += ["--alg", name]
            oid = alg.key_oid or alg.oid
            if oid:
                args += ["--oid", oid]
            return args
        params = {k: _param_str(v) for k, v in (alg.params or {}).items()}
        key = name.replace("-", "").replace("_", "").lower()
        if alg.kind == "kex" and key in _GROUP_ALIASES:
            name, group = _GROUP_ALIASES[key]
            if "curve" not in params and "group" not in params:
                params["group"] = group
        args += ["--alg", name]
        for k, v in sorted(params.items()):
            args += ["--param", f"{k}={v}"]
        return args


def _param_str(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _resolve(names: list[str], kind: str) -> list[Algorithm]:
    """Catalogue lookup; the single name "all" means every algorithm of that kind."""
    if [n.lower() for n in names] == ["all"]:
        return catalog.all_algorithms(kind)
    return catalog.resolve_list(names, kind)


def select_cells(
    kem_names: list[str], sig_names: list[str], backend: str
) -> tuple[list[Cell], list[str]]:
    """Resolve names (or the document-000 default set) to cells; every error before any work.

    Explicitly named algorithms must be provided by the chosen backend; the default set is
    filtered to what the backend provides; the names left out are returned with the cells.
    """
    if backend not in ("openssl", "liboqs", "all"):
        raise UserError(f"--backend {backend!r} is not one of openssl, liboqs, all")
    explicit = bool(kem_names or sig_names)
    if explicit:
        algs = _resolve(kem_names, "kem") + _resolve(sig_names, "sig")
        # "all" asks for what the build provides: filter like the default set.
        explicit = not any(
            [n.lower() for n in names] == ["all"] for names in (kem_names, sig_names)
        )
    else:
        algs = [a for a in catalog.all_algorithms() if "000" in a.documents]
        if not algs:
            raise UserError(
                "the catalogue tags no algorithm with document 000; "
                "name algorithms with --kem / --sig"
            )
    cells, skipped = [], []
    for alg in algs:
        provided = alg.backends
        if backend == "all":
            if not provided:
                if explicit:
                    raise UserError(f"{alg.name} is not provided by any backend of this build")
                skipped.append(alg.name)
                continue
            cells += [Cell(alg, b) for b in provided]
        elif backend in provided:
            cells.append(Cell(alg, backend))
        elif explicit:
            raise UserError(
                f"{alg.name} is not provided by backend {backend!r}; it is provided by "
                f"{', '.join(provided) or 'no backend of this build'} (use --backend all)"
            )
        else:
            skipped.append(alg.name)
    if not cells:
        raise UserError(f"no algorithm of the default set is provided by backend {backend!r}")
    return cells, skipped


SELECTION_OPTIONS = (
    Option(
        "kem",
        "KEMs / key exchanges, comma-separated (e.g. ML-KEM-768,X25519), or all",
        metavar="LIST",
    ),
    Option(
        "sig",
        "signature algorithms, comma-separated (e.g. ML-DSA-44,P-256), or all",
        metavar="LIST",
    ),
    Option(
        "backend",
        "library to measure: openssl, liboqs or all (every backend that provides each algorithm)",
        default="all",
        metavar="openssl|liboqs|all",
    ),
)


def names_option(text: str | None, option: str) -> list[str]:
    """A user's comma-separated names; given but empty (",") is an error, not the default."""
    return units.parse_list(text, option, example="ML-KEM-768,X25519")


def selection(values) -> tuple[list[Cell], list[str]]:
    """The (algorithm, backend) cells the selection options name, and the default-set names
    no backend of this build provides (reported, not measured)."""
    cells, skipped = select_cells(
        names_option(values.kem, "--kem"), names_option(values.sig, "--sig"), values.backend
    )
    if skipped:
        print(
            f"note: not measured (no backend of this build provides them): {', '.join(skipped)}",
            file=sys.stderr,
        )
    return cells, skipped

"""Which (algorithm, backend) cells the primitives and sizes experiments measure: the
--kem/--sig/--backend options, catalogue lookup, the document-000 default set, and each
cell's engine arguments."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from pqlab import catalog, units
from pqlab.algorithms import python as pp
from pqlab.catalog import Algorithm
from pqlab.errors import UserError
from pqlab.experiment import CellId, Option

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
    def cell_id(self) -> CellId:
        return CellId((self.algorithm.name, self.backend))

    @property
    def subcommand(self) -> str:
        return "sig" if self.algorithm.kind == "sig" else "kem"

    def engine_args(self) -> list[str]:
        """The engine's arguments for this cell, from the catalogue entry (for the python
        harness the same arguments: it speaks the engine's protocol)."""
        alg = self.algorithm
        if self.backend == "python":
            args = [self.subcommand, "--backend", "python", "--alg", alg.python]
            for k, v in sorted((alg.params or {}).items()):
                args += ["--param", f"{k}={_param_str(v)}"]
            return args
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


def shared_keygen(cells: list[Cell]) -> dict[CellId, Cell]:
    """The cells whose key generation another cell of the same list times: the catalogue's
    `same_keys_as` entry on the same engine backend (cell id -> that cell). Such a cell's
    engine run skips its key generation phase; the other's samples stand for both. The
    python harness times its own."""
    by_key = {(c.algorithm.name, c.backend): c for c in cells}
    out = {}
    for c in cells:
        source = by_key.get((c.algorithm.same_keys_as, c.backend))
        if source is not None and c.backend != "python":
            out[c.cell_id] = source
    return out


def _param_str(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _resolve(names: list[str], kind: str) -> list[Algorithm]:
    """Catalogue lookup; the single name "all" means every algorithm of that kind."""
    if [n.lower() for n in names] == ["all"]:
        return catalog.all_algorithms(kind)
    return catalog.resolve_list(names, kind)


ENGINE_BACKENDS = catalog.BACKENDS  # the engine's: openssl, liboqs
BACKEND_CHOICES = (*ENGINE_BACKENDS, "python")


def parse_backends(text: str, python_ok: bool = True) -> tuple[str, ...]:
    """--backend: one name, a comma-separated list, or "all" (every engine backend; the
    python harness measures the interpreter too, so it runs only when named)."""
    names = [n.strip().lower() for n in (text or "").split(",")]
    if names == ["all"]:
        return ENGINE_BACKENDS
    if not all(names) or any(n not in BACKEND_CHOICES for n in names):
        raise UserError(
            f"--backend {text!r} is not one of {', '.join(BACKEND_CHOICES)}, all, or a "
            "comma-separated list of them (e.g. python,openssl,liboqs)"
        )
    if "python" in names and not python_ok:
        raise UserError(
            f"--backend {text!r}: the python harness only times operations (pqlab "
            "primitives); sizes come from the engine's encoders: use openssl or liboqs"
        )
    return tuple(dict.fromkeys(names))


def provided_by(alg: Algorithm) -> tuple[str, ...]:
    """The backends the catalogue says provide `alg`: the engine's, then the python harness
    where the `cryptography` package has it (the catalogue's `python` field)."""
    return (*alg.backends, *(("python",) if alg.python else ()))


def _not_provided(alg: Algorithm, chosen: tuple[str, ...]) -> UserError:
    provided = provided_by(alg)
    asked = f"backend {chosen[0]!r}" if len(chosen) == 1 else f"any of {', '.join(chosen)}"
    hint = " (use --backend all)" if set(provided) & set(ENGINE_BACKENDS) else ""
    if "python" in provided and not set(provided) & set(chosen):
        hint = f" (use --backend {','.join(provided)})"
    return UserError(
        f"{alg.name} is not provided by {asked}; it is provided by "
        f"{', '.join(provided) or 'no backend of this build'}{hint}"
    )


def _python_unavailable(cells: list[Cell]) -> dict[str, str]:
    """Cells of the python harness whose algorithm this `cryptography` cannot run: why."""

    out = {}
    for c in cells:
        if c.backend == "python":
            why = pp.available(c.algorithm.kind, c.algorithm.python, c.algorithm.params or {})
            if why:
                out[c.cell_id] = why
    return out


def select_cells(
    kem_names: list[str], sig_names: list[str], backend: str, python_ok: bool = True
) -> tuple[list[Cell], list[str]]:
    """Resolve names (or the document-000 default set) to cells; every error before any work.

    Explicitly named algorithms must be provided by one of the chosen backends (cells are
    made for each chosen backend that provides them); the default set is filtered to what
    the backends provide; the names left out are returned with the cells.
    """
    chosen = parse_backends(backend, python_ok)
    cells, skipped, explicit = _cells(kem_names, sig_names, chosen)
    bad = _python_unavailable(cells)
    if bad and explicit:
        cid, why = next(iter(bad.items()))
        raise UserError(f"{cid.split('|')[0]} cannot run in the python harness here: {why}")
    for cid in bad:
        skipped.append(f"{cid.split('|')[0]} (python)")
    cells = [c for c in cells if c.cell_id not in bad]
    if not cells:
        raise UserError(f"no algorithm of the default set is provided by backend {backend!r}")
    return cells, skipped


def _cells(
    kem_names: list[str], sig_names: list[str], chosen: tuple[str, ...]
) -> tuple[list[Cell], list[str], bool]:
    """Cells for the chosen backends, the default-set names left out, and whether the
    names were explicit (errors) rather than a set to filter (the default set, "all")."""
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
        provided = provided_by(alg)
        mine = [b for b in chosen if b in provided]
        if mine:
            cells += [Cell(alg, b) for b in mine]
        elif explicit:
            if chosen == ENGINE_BACKENDS and not alg.backends:
                raise UserError(f"{alg.name} is not provided by any backend of this build")
            raise _not_provided(alg, chosen)
        else:
            skipped.append(alg.name)
    return cells, skipped, explicit


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
        "library to measure: openssl, liboqs, python (document 000's harness: Python timing "
        "the `cryptography` package; primitives only), a comma-separated list of them, or "
        "all (every engine backend that provides each algorithm; python only when named)",
        default="all",
        metavar="openssl|liboqs|python|LIST|all",
    ),
)


def names_option(text: str | None, option: str) -> list[str]:
    """A user's comma-separated names; given but empty (",") is an error, not the default."""
    return units.parse_list(text, option, example="ML-KEM-768,X25519")


def selection(values, python_ok: bool = False) -> tuple[list[Cell], list[str]]:
    """The (algorithm, backend) cells the selection options name, and the default-set names
    no backend of this build provides (reported, not measured). `python_ok`: the caller can
    run the python harness (primitives; not sizes)."""
    cells, skipped = select_cells(
        names_option(values.kem, "--kem"),
        names_option(values.sig, "--sig"),
        values.backend,
        python_ok,
    )
    if skipped:
        print(
            "note: not measured (the chosen backends of this build do not provide them): "
            + ", ".join(skipped),
            file=sys.stderr,
        )
    return cells, skipped

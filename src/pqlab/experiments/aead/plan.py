"""The aead experiment's options and their validation: ciphers, AES-NI masks, modes,
directions, record sizes and seconds per cell, and the cell ids.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pqlab.errors import UserError
from pqlab.experiment import CellId, Cells, Option
from pqlab.units import parse_list, parse_size

NAME = "aead"


CELLS = Cells(NAME, ("cipher", "aesni", "mask", "mode", "direction", "record_bytes"), aux=("cpu",))


CIPHERS = [
    "aes-128-gcm",
    "aes-256-gcm",
    "aes-128-ccm",
    "aes-256-ccm",
    "chacha20-poly1305",
    "aes-128-ecb",
    "aes-256-ecb",
    "aes-128-ctr",
    "aes-256-ctr",
    "chacha20",
]


MAX_RECORD = 16 * 1024 * 1024 - 1  # CCM with a 12-byte nonce has a 3-byte length field


MAX_SECONDS = 30.0


# The documents' mask clears bit 57 (AES-NI) and bit 33 (PCLMULQDQ) of CPUID(1) ECX:EDX.
# Because it has no ':' part, OpenSSL 3.5 also zeroes every further word (CPUID 7: AVX2,
# AVX-512, VAES, VPCLMULQDQ, BMI2, ADX, SHA-NI). The precise mask clears the same two bits,
# then bits 41/42 (VAES, VPCLMULQDQ = CPUID(7).ECX bits 9/10) of the second word, and passes
# '~0' for the three remaining words so that OpenSSL keeps them.
MASKS = {
    "documents": "~0x200000200000000",
    "precise": "~0x200000200000000:~0x60000000000:~0:~0:~0",
}


@dataclass
class Plan:
    ciphers: list[str]
    sizes: list[int]
    aesni: list[str]
    masks: list[str]
    modes: list[str]
    directions: list[str]
    seconds: float

    def environments(self) -> list[tuple[str, str, str | None]]:
        """(aesni, mask name, OPENSSL_ia32cap value or None) for each engine environment."""
        out = []
        if "on" in self.aesni:
            out.append(("on", "none", None))
        if "off" in self.aesni:
            out += [("off", m, MASKS[m]) for m in self.masks]
        return out

    def as_dict(self) -> dict:
        return asdict(self)


def cell_id(cipher, aesni, mask, mode, direction, size) -> CellId:
    return CELLS.id(cipher, aesni, mask, mode, direction, size)


OPTIONS = (
    Option(
        "ciphers",
        "comma-separated ciphers (default: all): " + ", ".join(CIPHERS),
        default=",".join(CIPHERS),
        metavar="LIST",
    ),
    Option(
        "sizes",
        "record sizes in bytes, comma separated",
        default="16,64,256,1024,8192,16384",
        metavar="LIST",
    ),
    Option("aesni", "on, off or on,off", default="on,off", metavar="LIST"),
    Option(
        "mask",
        "CPU mask for AES-NI off: documents (~0x200000200000000, as the documents; also "
        "disables AVX2/AVX-512/VAES), precise (AES-NI, PCLMULQDQ, VAES, VPCLMULQDQ only), or "
        "both",
        default="documents",
        metavar="NAME",
    ),
    Option("mode", "fair, speed-compatible or both", default="fair", metavar="MODE"),
    Option("speed-compatible", "same as --mode speed-compatible", flag=True),
    Option("directions", "encrypt, decrypt or both", default="encrypt,decrypt", metavar="LIST"),
    Option(
        "seconds",
        "timed seconds per cell, like openssl speed's 3 s",
        default="3",
        metavar="S",
    ),
)


def _choose(text: str, option: str, accepted: tuple[str, ...], both: list[str] | None = None):
    """A comma-separated choice from `accepted` ("both" meaning `both`), or UserError."""
    values = parse_list(text, option)
    if both is not None and values == ["both"]:
        return list(both)
    if not values or any(v not in accepted for v in values):
        words = ", ".join(accepted) + (" or both" if both else "")
        raise UserError(f"{option} {text!r}: use {words}")
    return list(dict.fromkeys(values))


def _record_sizes(text: str, ciphers: list[str]) -> list[int]:
    sizes = []
    for item in parse_list(text, "--sizes", example="16,1024,16384"):
        n = parse_size(item, "record size")
        if not 1 <= n <= MAX_RECORD:
            raise UserError(f"record size {item!r} is outside 1..{MAX_RECORD} bytes")
        sizes.append(n)
    if not sizes:
        raise UserError("--sizes is empty; give e.g. 16,1024,16384")
    for c in ciphers:
        bad = [s for s in sizes if s % 16]
        if c.endswith("-ecb") and bad:
            raise UserError(
                f"{c} encrypts whole 16-byte blocks; record size {bad[0]} is not a multiple of 16"
            )
    return list(dict.fromkeys(sizes))


def from_values(args) -> Plan:
    """Validate everything before the first measurement; raise UserError on bad input."""
    ciphers = [c.lower() for c in parse_list(args.ciphers, "--ciphers")]
    if not ciphers:
        raise UserError("--ciphers is empty; choose from " + ", ".join(CIPHERS))
    for c in ciphers:
        if c not in CIPHERS:
            raise UserError(f"unknown cipher {c!r} in --ciphers; choose from " + ", ".join(CIPHERS))
    mode_text = "speed-compatible" if args.speed_compatible else args.mode
    modes = ("fair", "speed-compatible")
    try:
        seconds = float(args.seconds)
    except ValueError:
        raise UserError(f"--seconds {args.seconds!r} is not a number of seconds") from None
    if not 0 < seconds <= MAX_SECONDS:
        raise UserError(f"--seconds {args.seconds!r} must be above 0 and at most {MAX_SECONDS:g}")
    return Plan(
        ciphers=list(dict.fromkeys(ciphers)),
        sizes=_record_sizes(args.sizes, ciphers),
        aesni=_choose(args.aesni, "--aesni", ("on", "off")),
        masks=_choose(args.mask, "--mask", tuple(MASKS), both=list(MASKS)),
        modes=_choose(mode_text, "--mode", modes, both=list(modes)),
        directions=_choose(
            args.directions, "--directions", ("encrypt", "decrypt"), both=["encrypt", "decrypt"]
        ),
        seconds=seconds,
    )

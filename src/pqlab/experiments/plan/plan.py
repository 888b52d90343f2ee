"""`pqlab plan`'s options and plan: the handshake configurations (groups x server
signatures x CA signatures x intermediates, or the two of a migration), the chain sizes
(the algorithms' own, or `--chain-bytes` points), the grid of paths (RTT x bandwidth x loss x
initcwnd, one MSS) and the response sizes, all validated before anything is computed."""

from __future__ import annotations

from dataclasses import dataclass, field

from pqlab import catalog, units
from pqlab.catalog import Algorithm
from pqlab.errors import UserError
from pqlab.experiment import CellId, Cells, Option
from pqlab.net import privileges, profiles
from pqlab.net.shaping import check_shaper
from pqlab.options.shaper import shaper_option
from pqlab.options.tls import client_auth_options, parse_client_auth, parse_stack, stack_option
from pqlab.tls import stacks, wire

DEFAULT_GROUPS = ["X25519", "X25519MLKEM768"]
DEFAULT_SIGS = ["ECDSA-P256", "ML-DSA-44"]
DEFAULT_RTTS = "10ms,50ms,200ms"
DEFAULT_SIZES = "0,10KiB,100KiB"
MIGRATION_RESPONSE = 100 * 1024  # the migration table's "per 100 KiB response"
CHAIN_STEP = 1000  # default step of a --chain-bytes range
MAX_CHAIN_BYTES = 1 << 20
MAX_INTERMEDIATES = 4
MAX_CELLS = 20_000
MAX_RESPONSE = 1 << 30

CELLS = Cells("plan", ("group", "server_sig", "ca_sig", "chain", "path"), tls=True)

OPTIONS = (
    Option(
        "groups",
        f"key-exchange groups (default: {','.join(DEFAULT_GROUPS)})",
        metavar="LIST",
    ),
    Option(
        "server-sig",
        "server certificate / CertificateVerify signature algorithms (default: "
        f"{','.join(DEFAULT_SIGS)})",
        metavar="LIST",
    ),
    Option(
        "ca-sig",
        "root CA signature algorithms (default: each server signature's own)",
        metavar="LIST",
    ),
    Option(
        "intermediates",
        f"intermediate CAs between the root and the server certificate, 0-{MAX_INTERMEDIATES}; "
        "a list sweeps",
        default="0",
        metavar="LIST",
    ),
    Option(
        "intermediate-sig",
        "signature algorithm of the intermediate CAs (default: the root's)",
        metavar="ALG",
    ),
    Option(
        "send-root",
        "the server sends the root CA certificate too (as document 000's servers did)",
        flag=True,
    ),
    Option(
        "chain-bytes",
        "DER bytes of the certificates the server sends, instead of the algorithms' own sizes: "
        f"a list (8000,16000) or a range (2000..40000, steps of {CHAIN_STEP}; "
        "2000..40000/500)",
        metavar="SIZES",
    ),
    Option(
        "from",
        "migration table: the configuration today, GROUP,SERVER_SIG[,CA_SIG] (with --to)",
        metavar="GROUP,SIG[,CA]",
    ),
    Option(
        "to",
        "migration table: the configuration planned, GROUP,SERVER_SIG[,CA_SIG] (with --from)",
        metavar="GROUP,SIG[,CA]",
    ),
    *client_auth_options(),
    stack_option(),
    Option("rtt", "round-trip times of the paths", default=DEFAULT_RTTS, metavar="LIST"),
    Option(
        "bandwidth",
        "bottleneck rates of the paths (e.g. 1mbit,100mbit; none: unlimited)",
        default="none",
        metavar="LIST",
    ),
    Option(
        "loss",
        "packet loss per direction (the times assume none; a lossy path gets the chance "
        "that a handshake loses nothing)",
        default="0",
        metavar="LIST",
    ),
    Option(
        "initcwnd", "server initial congestion windows (segments)", default="10", metavar="LIST"
    ),
    Option(
        "mss",
        "TCP payload per segment (1448: a 1500-byte MTU with timestamps)",
        default=str(wire.DEFAULT_MSS),
        metavar="BYTES",
    ),
    Option(
        "sizes",
        "response sizes for TTLB (0: the handshake alone)",
        default=DEFAULT_SIZES,
        metavar="LIST",
    ),
    Option(
        "calibrate",
        "add what a measurement on this machine holds beyond the network: each "
        "configuration's handshake CPU and the link emulator's time per packet, measured "
        "first through --shaper (needs root)",
        flag=True,
    ),
    shaper_option("with --calibrate, the link emulator to calibrate"),
)


@dataclass(frozen=True)
class Config:
    """One handshake configuration."""

    group: Algorithm
    server_sig: Algorithm
    ca_sig: Algorithm
    intermediates: int = 0
    intermediate_sig: Algorithm | None = None
    client_sig: Algorithm | None = None  # mutual TLS: the client's certificate algorithm
    client_ca: Algorithm | None = None  # and its CA's (default: the server's root's)

    @property
    def client_ca_sig(self) -> Algorithm | None:
        return (self.client_ca or self.ca_sig) if self.client_sig else None

    @property
    def intermediate_algs(self) -> tuple[Algorithm, ...]:
        return (self.intermediate_sig or self.ca_sig,) * self.intermediates

    def label(self) -> str:
        text = f"{self.group.name} / {self.server_sig.name} / CA {self.ca_sig.name}"
        if self.intermediates:
            text += f" / {self.intermediates} x {(self.intermediate_sig or self.ca_sig).name}"
        if self.client_sig:
            text += f" / client {self.client_sig.name} (CA {self.client_ca_sig.name})"
        return text


@dataclass
class Plan:
    configs: list[Config]
    chain_bytes: list[int] | None  # None: the algorithms' own certificates
    paths: list  # pqlab.net.profiles.LinkProfile, one per grid point
    mss: int
    sizes: list[int]
    send_root: bool = False
    stack: stacks.Stack = field(default_factory=stacks.get)
    migration: tuple[Config, Config] | None = None
    calibrate: bool = False
    shaper: str = "auto"

    def chain_points(self) -> list[int | None]:
        return list(self.chain_bytes) if self.chain_bytes else [None]

    def chain_label(self, config: Config, point: int | None) -> str:
        parts = [f"{point}B"] if point is not None else []
        if config.intermediates:
            parts.append(f"{config.intermediates}x{config.intermediate_algs[0].name}")
        if config.client_sig:
            parts.append(f"client-{config.client_sig.name}-{config.client_ca_sig.name}")
        return "+".join(parts) or "own"

    def cell_id(self, config: Config, point: int | None, path) -> CellId:
        return CELLS.id(
            config.group,
            config.server_sig,
            config.ca_sig,
            self.chain_label(config, point),
            path.name,
            stack=self.stack.name,
            options=("root",) if self.send_root else (),
        )

    @property
    def cells(self) -> int:
        return len(self.configs) * len(self.chain_points()) * len(self.paths)


def _names(values, attr: str, option: str, default: list[str] | None) -> list[str]:
    text = getattr(values, attr)
    if text is None:
        return list(default or [])
    return units.parse_list(text, option, example="X25519,X25519MLKEM768")


def _config_of(text: str, option: str, stack) -> Config:
    parts = units.parse_list(text, option, example="X25519,ECDSA-P256", max_items=3)
    if len(parts) < 2:
        raise UserError(
            f"{option} {units.show(text)}: give GROUP,SERVER_SIG[,CA_SIG], e.g. X25519,ECDSA-P256"
        )
    group = catalog.resolve(parts[0], "kem")
    server = catalog.resolve(parts[1], "sig")
    ca = catalog.resolve(parts[2], "sig") if len(parts) == 3 else server
    stacks.require([group], stack, "group", option)
    stacks.require([server], stack, "server", option)
    stacks.require([ca], stack, "ca", option)
    return Config(group, server, ca)


def _configs(values, stack) -> tuple[list[Config], tuple[Config, Config] | None]:
    today = getattr(values, "from", None)
    if today is not None or values.to is not None:
        if today is None or values.to is None:
            raise UserError(
                "--from and --to go together: the configuration today and the planned one"
            )
        given = [o for o in ("groups", "server_sig", "ca_sig") if getattr(values, o) is not None]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise UserError(
                f"{flag}: --from and --to name the configurations; give one or the other"
            )
        pair = (
            _config_of(today, "--from", stack),
            _config_of(values.to, "--to", stack),
        )
        return list(pair), pair
    groups = catalog.resolve_list(_names(values, "groups", "--groups", DEFAULT_GROUPS), "kem")
    servers = catalog.resolve_list(
        _names(values, "server_sig", "--server-sig", DEFAULT_SIGS), "sig"
    )
    cas = catalog.resolve_list(_names(values, "ca_sig", "--ca-sig", None), "sig")
    stacks.require(groups, stack, "group", "--groups")
    stacks.require(servers, stack, "server", "--server-sig")
    stacks.require(cas, stack, "ca", "--ca-sig")
    configs = [Config(g, s, c) for g in groups for s in servers for c in (cas or [s])]
    return configs, None


def _with_client_auth(configs: list[Config], values, stack) -> list[Config]:
    """Every configuration once per --client-sig entry ('none': no client certificate)."""
    signers, ca = parse_client_auth(values, stack)
    return [
        Config(c.group, c.server_sig, c.ca_sig, c.intermediates, c.intermediate_sig, s, ca)
        for c in configs
        for s in signers or [None]
    ]


def _with_intermediates(configs: list[Config], values, stack) -> list[Config]:
    counts = [
        units.parse_positive_int(n, "--intermediates", minimum=0, maximum=MAX_INTERMEDIATES)
        for n in units.parse_list(values.intermediates or "0", "--intermediates", example="0,1,2")
    ]
    inter = None
    if values.intermediate_sig:
        inter = catalog.resolve(values.intermediate_sig, "sig")
        stacks.require([inter], stack, "ca", "--intermediate-sig")
    out = []
    for c in configs:
        for n in dict.fromkeys(counts):
            out.append(Config(c.group, c.server_sig, c.ca_sig, n, inter if n else None))
    return out


def _paths(values, mss: int) -> list:
    rtts = units.parse_list(values.rtt, "--rtt", example=DEFAULT_RTTS)
    rates = units.parse_list(values.bandwidth, "--bandwidth", example="1mbit,1gbit")
    losses = units.parse_list(values.loss, "--loss", example="0,1%")
    windows = units.parse_list(values.initcwnd, "--initcwnd", example="10,20")
    out = []
    for rtt in rtts:
        for rate in rates:
            for loss in losses:
                for w in windows:
                    spec = f"rtt={rtt}"
                    spec += "" if rate.lower() in ("none", "unlimited") else f",rate={rate}"
                    spec += "" if units.parse_percent(loss, "--loss") == 0 else f",loss={loss}"
                    spec += f",initcwnd={w}"
                    if mss != wire.DEFAULT_MSS:
                        spec += f",mtu={mss + wire.TCP_IP_HEADERS}"
                    out.append(profiles.parse_profile(spec))
    return out


def from_values(values) -> Plan:
    """Validate everything; compute nothing."""
    stack = parse_stack(values)
    configs, migration = _configs(values, stack)
    configs = _with_client_auth(_with_intermediates(configs, values, stack), values, stack)
    if migration is not None:
        if len(configs) != 2:
            raise UserError(
                "--intermediates or --client-sig with --from/--to: give one value, for both"
            )
        migration = (configs[0], configs[1])
    mss = units.parse_positive_int(
        values.mss, "--mss", minimum=profiles.MTU_MIN - wire.TCP_IP_HEADERS,
        maximum=profiles.MTU_MAX - wire.TCP_IP_HEADERS,
    )  # fmt: skip
    chain_bytes = None
    if values.chain_bytes is not None:
        chain_bytes = units.parse_size_points(
            values.chain_bytes, "--chain-bytes", CHAIN_STEP, maximum=MAX_CHAIN_BYTES
        )
    sizes = [
        units.parse_size(s, "--sizes entry", maximum=MAX_RESPONSE)
        for s in units.parse_list(values.sizes, "--sizes", example=DEFAULT_SIZES)
    ]
    if migration is not None:
        sizes.append(MIGRATION_RESPONSE)
    plan = Plan(
        configs=configs,
        chain_bytes=chain_bytes,
        paths=_paths(values, mss),
        mss=mss,
        sizes=sorted(set(sizes)),
        send_root=bool(values.send_root),
        stack=stack,
        migration=migration,
        calibrate=bool(values.calibrate),
        shaper=values.shaper or "auto",
    )
    if plan.calibrate:
        if any(c.client_sig for c in configs):
            raise UserError(
                "--calibrate measures server-authenticated handshakes; leave out --client-sig"
            )
        privileges.require_net_admin()
        check_shaper(plan.shaper)
    for c in configs:
        stacks.require_chains([c.server_sig], [c.ca_sig], stack, plan.send_root)
    if plan.cells > MAX_CELLS:
        raise UserError(
            f"this plan has {plan.cells} cells (configurations x chain sizes x paths); at most "
            f"{MAX_CELLS}: sweep fewer points"
        )
    return plan

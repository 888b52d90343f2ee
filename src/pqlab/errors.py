"""The errors pqlab reports to users as one line, and the exit codes that go with them.

Exit codes (the engine uses the same numbers for the same kinds, see
docs/engine-protocol.md): 0 success, 2 a mistake in what was asked (usage), 3 the engine or a
crypto/TLS library failed, 4 a privilege is missing (CAP_NET_ADMIN), 5 a measured operation
failed its check (wrong group negotiated, a signature that does not verify, a record that
does not decrypt), 6 an I/O error (files, sockets, time limits), 7 the peer misbehaved,
130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
"""


class UserError(Exception):
    """A mistake in what the user asked for: printed as one `error: ...` line, exit 2."""

    exit_code = 2


class PrivilegeError(UserError):
    """The operation needs a privilege (CAP_NET_ADMIN) that this process lacks."""

    exit_code = 4


class StorageError(UserError):
    """The file system refused a write (full, read-only, over quota, an I/O error, no
    permission): nothing half-written is left, exit 6."""

    exit_code = 6


class EngineError(Exception):
    """The engine or a library failed: exit 3. Subclasses name the kind of failure."""

    exit_code = 3
    kind = "library"


class CheckError(EngineError):
    """A measured operation failed its check: exit 5."""

    exit_code = 5
    kind = "check"


class EngineIOError(EngineError):
    """Files, sockets or a time limit: exit 6."""

    exit_code = 6
    kind = "io"


class PeerError(EngineError):
    """The TLS peer misbehaved or went away: exit 7."""

    exit_code = 7
    kind = "peer"


class EngineUsageError(EngineError):
    """The engine refused its arguments. The lab validates before calling it, so this is a
    gap in that validation or a value only the library can judge: exit 2, like a user error."""

    exit_code = 2
    kind = "usage"


ENGINE_ERRORS = {
    cls.kind: cls for cls in (EngineError, CheckError, EngineIOError, PeerError, EngineUsageError)
}


def engine_error(kind: str | None, message: str) -> EngineError:
    """The exception for an engine error record's `kind`."""
    return ENGINE_ERRORS.get(kind or "library", EngineError)(message)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT, exit 130) or SIGTERM (exit 143): unwind, clean up, keep finished cells."""

    def __init__(self, signum: int = 2):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

"""The errors pqlab reports to users as one line, and the exit codes that go with them."""


class UserError(Exception):
    """A mistake in what the user asked for: printed as one `error: ...` line, exit 2."""

    exit_code = 2


class PrivilegeError(UserError):
    """The operation needs a privilege (CAP_NET_ADMIN) that this process lacks."""

    exit_code = 4


class EngineError(Exception):
    """The engine failed or a measured operation failed its check: exit 3."""

    exit_code = 3

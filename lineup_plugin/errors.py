"""Every exception lineup-plugin raises, in one place.

The hierarchy::

    LineUpError
    ├── ProtocolError            a wire message is malformed, of the wrong type or unknown
    │   └── VersionError         an envelope of an unknown major version (never executed)
    ├── CallStateError           a call was asked to make a transition its state does not allow
    ├── ToolError                a tool definition or registration is wrong
    │   ├── DuplicateToolError   two plugins registered the same tool name
    │   ├── ArgumentsError       a call's arguments do not match the action's inputSchema
    │   └── RendererError        a plugin's App renderer cannot be registered (missing, too big, not its tool)
    ├── HandedOverError          this process stopped serving: a live call goes on in the next one
    ├── OwnerUnreachable         the process serving the App cannot be reached to forward a call (try again)
    ├── ConfigError              a setting has a bad value (the message names the setting)
    ├── StoreError               the durable store cannot be opened or written
    │   └── StoreBusyError       another process already holds the store's database file
    ├── MediaError               a file sent either way was refused (too large, wrong type, damaged...)
    ├── PushError                a Web Push subscription was refused, or the push keys cannot be kept
    │   └── PushServiceNotAllowed    its endpoint is at a push service the push_services setting does not name
    └── TransportError           a transport cannot connect, send or receive
        ├── AuthError            the peer refused our credentials, or we refused theirs
        └── RelayError           the WuKongIM server answered with a failure reason code
            ├── RelayAuthError       the server refused the agent's uid/token (also an AuthError)
            ├── RelayProtocolError   the server sent bytes that are not valid wkproto
            └── RelayTimeoutError    an expected CONNACK, SENDACK or PONG did not arrive in time

Messages are short, lowercase and name what is wrong (for protocol errors, the field path).
"""

from __future__ import annotations


class LineUpError(Exception):
    """Base class of every error raised by lineup-plugin."""


class ProtocolError(LineUpError):
    """A wire message could not be decoded or is not valid LineUp v1."""


class VersionError(ProtocolError):
    """An envelope declares a major protocol version this implementation does not speak."""

    def __init__(self, version: object) -> None:
        super().__init__(f"unsupported protocol version {version!r}: this side speaks v1 only")
        self.version = version


class CallStateError(LineUpError):
    """A call was asked to make a transition its current state does not allow."""


class ToolError(LineUpError):
    """A tool definition or registration is wrong."""


class DuplicateToolError(ToolError):
    """Two plugins registered a tool of the same name."""


class ArgumentsError(ToolError):
    """A call's arguments do not satisfy the action's inputSchema.

    ``path`` is the JSON path of the offending field and ``expected`` what the schema wanted.
    """

    def __init__(self, message: str, *, path: str = "", expected: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.expected = expected


class RendererError(ToolError):
    """A plugin's App renderer cannot be registered: its file is missing, too large or not a module,
    or the tool is not an App tool of that plugin."""


class HandedOverError(LineUpError):
    """This process stopped serving while a call was live: the call goes on in the process that serves next."""


class OwnerUnreachable(LineUpError):
    """The process that serves the App could not be reached, or went away before a forwarded call ended:
    the forwarding process tries again (it may serve itself now)."""


class ConfigError(LineUpError):
    """A configuration setting has a bad value; the message names the setting."""


class StoreError(LineUpError):
    """The durable store cannot be opened or written."""


class StoreBusyError(StoreError):
    """Another process (another agent) already holds the store's database file."""


class MediaError(LineUpError):
    """A file was refused; ``code`` is the wire error code the sender is told (``file_too_large``...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class PushError(LineUpError):
    """A Web Push subscription was refused (the message says why), or the push keys cannot be kept."""


class PushServiceNotAllowed(PushError):
    """A Web Push subscription's endpoint is at a push service the ``push_services`` setting does not name."""


class TransportError(LineUpError):
    """A transport cannot connect, send or receive."""


class AuthError(TransportError):
    """Credentials were refused (ours by a server, or a client's by us)."""


class RelayError(TransportError):
    """The WuKongIM server answered with a failure reason code."""

    def __init__(self, message: str, *, reason_code: int | None = None) -> None:
        super().__init__(message)
        self.reason_code = reason_code


class RelayAuthError(RelayError, AuthError):
    """The WuKongIM server refused the agent's uid and token (a reason code, or repeated closes before CONNACK)."""


class RelayProtocolError(RelayError):
    """The WuKongIM server sent a frame we cannot accept: truncated, oversized, bad msgKey..."""


class RelayTimeoutError(RelayError):
    """A CONNACK, SENDACK or PONG the WuKongIM protocol promises did not arrive in time."""

"""The argument policy of every public call, checked before any I/O (docs/clients.md,
"Arguments"): a wrong type is ``ArgumentTypeError`` (a ``TypeError``, and an
``InvalidArgumentError`` like every refused argument); a value out of the module's range is
``InvalidArgumentError`` (a ``ValueError``). ``bool`` is not an integer; a user id is ``str`` or
``bytes``, 1 to ``MAX_USER_BYTES`` bytes (the module's ``seckill.max-user-bytes`` default)."""

from __future__ import annotations

from typing import Any, Optional

from .errors import ArgumentTypeError, InvalidArgumentError

#: Largest stock, quantity, limit or time: Redis integers are signed 64-bit.
MAX_UNITS = 2**63 - 1
#: The longest user id, in bytes: the module's ``seckill.max-user-bytes`` default.
MAX_USER_BYTES = 512


def integer(what: str, value: Any, low: int, high: int = MAX_UNITS) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{what} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidArgumentError(f"{what} must be an integer between {low} and {high}, got {value}")
    return value


def optional_integer(what: str, value: Any, low: int, high: int = MAX_UNITS) -> Optional[int]:
    return None if value is None else integer(what, value, low, high)


def user_id(value: Any) -> bytes:
    if not isinstance(value, (str, bytes)):
        raise ArgumentTypeError(f"a user id must be a str or bytes, not {type(value).__name__}")
    raw = value.encode() if isinstance(value, str) else value
    if not 1 <= len(raw) <= MAX_USER_BYTES:
        raise InvalidArgumentError(f"a user id must be 1 to {MAX_USER_BYTES} bytes, got {len(raw)}")
    return raw


#: The longest attempt id, in bytes: the module's limit.
MAX_ATTEMPT_ID_BYTES = 64


def check_attempt_id(value: Any) -> Optional[str]:
    """An attempt id given to send a call again (None: a new call)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ArgumentTypeError(f"an attempt id must be a str, not {type(value).__name__}")
    if not 1 <= len(value.encode()) <= MAX_ATTEMPT_ID_BYTES:
        raise InvalidArgumentError(f"an attempt id must be 1 to {MAX_ATTEMPT_ID_BYTES} bytes, got {len(value.encode())}")
    return value

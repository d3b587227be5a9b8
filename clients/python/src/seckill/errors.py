"""The client's errors, typed by what a caller does about them."""

import redis


class SeckillError(Exception):
    """Base of every error this package raises of its own."""


class NoSaleError(SeckillError):
    """No sale of this name: its manifest (or one of its partitions) is missing."""


class SaleExistsError(SeckillError):
    """``create`` found a sale of this name already."""


class InvalidArgumentError(SeckillError, ValueError):
    """The server (or the client, before sending) refused an argument."""


class BadManifestError(SeckillError):
    """The manifest exists but cannot be read as a partitioned sale."""


class ContendedError(SeckillError):
    """A purchase kept borrowing stock for its partition that other buyers took first."""


_ARGUMENT_MARKERS = (
    " must ",
    "unknown option",
    "needs a value",
    "syntax error",
    "go together",
    "wrong number of arguments",
)


def translate(error: redis.exceptions.ResponseError) -> Exception:
    """The typed error for a server error reply, or the reply itself."""
    message = str(error)
    if message.startswith("NOSALE"):
        return NoSaleError(message)
    if message.startswith("ERR a sale already exists") or message.startswith("a sale already exists"):
        return SaleExistsError(message)
    if any(marker in message for marker in _ARGUMENT_MARKERS):
        return InvalidArgumentError(message)
    return error

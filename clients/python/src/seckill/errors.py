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


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong type (a ``bool`` for an int, ``None`` for a user id, ...): a
    ``TypeError``, and an ``InvalidArgumentError`` like every refused argument."""


class BadManifestError(SeckillError):
    """The manifest exists but cannot be read as a partitioned sale."""


class WrongTypeError(SeckillError):
    """The key holds something else than what the call works on (a string, a list, a one-key
    sale where a partitioned sale's manifest was expected, ...): Redis's ``WRONGTYPE``."""


class ContendedError(SeckillError):
    """A purchase kept borrowing stock for its partition that other buyers took first."""


_ARGUMENT_MARKERS = (
    " must ",
    "unknown option",
    "needs a value",
    "syntax error",
    "go together",
    "wrong number of arguments",
    "already used",
    "already lent",
    "already absorbed",
)


def translate(error: redis.exceptions.ResponseError) -> Exception:
    """The typed error for a server error reply, or the reply itself."""
    message = str(error)
    if message.startswith("NOSALE"):
        return NoSaleError(message)
    if message.startswith("WRONGTYPE"):
        return WrongTypeError(message)
    message = message[4:] if message.startswith("ERR ") else message
    if message.startswith("a sale already exists"):
        return SaleExistsError(message)
    if message.startswith("the sale has no holds"):
        return NoHoldsError(message)
    if message.startswith("the sale has no waiting room"):
        return NoQueueError(message)
    if message.startswith("unknown command") and ("seckill." in message.lower() or "lock." in message.lower()):
        return ModuleMissingError(
            "the server has no seckill module: start it with --loadmodule .../libseckill.so"
        )
    if any(marker in message for marker in _ARGUMENT_MARKERS):
        return InvalidArgumentError(message)
    return error


class OutcomeUnknownError(SeckillError):
    """A purchase or a cancel got no definite answer before the retry deadline: it may or may
    not have happened. Sending it again with ``attempt_id`` is safe (it changes nothing if it
    did happen); ``bought`` tells what the buyer owns now."""

    def __init__(self, attempt_id: str, last_error: BaseException):
        super().__init__(
            f"no answer for attempt {attempt_id} before the deadline (last: {last_error}); "
            "send it again with the same id, or ask bought"
        )
        self.attempt_id = attempt_id
        self.last_error = last_error


class NotReplicatedError(OutcomeUnknownError):
    """The master applied the write (``reply`` is its answer: a purchase's units left, a
    cancel's units returned, ...) but no replica acknowledged it within the acknowledgement
    timeout (``ack_timeout_ms``), so a failover now could take it back. Tell the buyer
    "confirming", not "bought". Sending it again with ``attempt_id`` answers the same reply and
    waits again; ``bought`` tells what the buyer owns. ``attempt_id`` is None for a write
    without one (a confirm, a restock, a sale made)."""

    def __init__(self, attempt_id: "str | None", reply: object, timeout_ms: int):
        waited = TimeoutError(f"no replica acknowledged the write within {timeout_ms} ms")
        SeckillError.__init__(
            self,
            f"applied by the master (reply {reply!r}) but not acknowledged by a replica within "
            f"{timeout_ms} ms" + (f"; send attempt {attempt_id} again, or ask bought" if attempt_id else ""),
        )
        self.attempt_id = attempt_id  # type: ignore[assignment]
        self.reply = reply
        self.last_error = waited


class UnavailableError(SeckillError):
    """A purchase or a cancel none of whose sends reached a server before the retry deadline
    (no connection could be made, or its node was known down all along): it did not happen.
    Tell the buyer "not bought, try again"; ``last_error`` says what failed. Not an
    ``OutcomeUnknownError``: there is nothing to ask ``bought`` about."""

    def __init__(self, attempt_id: str, last_error: BaseException):
        super().__init__(
            f"attempt {attempt_id} was never sent before the deadline (last: {last_error}); "
            "it did not happen: try again"
        )
        self.attempt_id = attempt_id
        self.last_error = last_error


class ModuleMissingError(SeckillError):
    """The server has no seckill module loaded: ``redis-server --loadmodule .../libseckill.so``."""


class NoHoldsError(SeckillError):
    """CONFIRM on a sale made without holds, where nothing is ever held."""


class NoQueueError(SeckillError):
    """``join``, ``position`` or ``admit`` on a sale made without a waiting room (QUEUE)."""


class ModuleTooOldError(SeckillError):
    """The server's seckill module is older than this package needs (``MIN_MODULE_VERSION``);
    ``found`` is its ``INFO seckill`` version (major * 10 000 + minor * 100 + patch)."""

    def __init__(self, found: int):
        from .protocol import MIN_MODULE_VERSION

        super().__init__(
            f"the server's seckill module is version {found}, this client needs "
            f"{MIN_MODULE_VERSION} or later: load a newer libseckill.so"
        )
        self.found = found


class LockTimeout(SeckillError):
    """``hold`` was not granted the lock within ``wait_ms``; ``reason`` says why (another holder
    kept it, no replica acknowledged the grant, or the server did not answer). Nothing is
    left held."""

    def __init__(self, name: str, reason: str):
        super().__init__(f"lock {name!r} not granted: {reason}")
        self.name = name
        self.reason = reason


class LockLost(SeckillError):
    """The guard's lease is lost, or may be: the server gave the lock up or to another holder
    (``LOCK.EXTEND`` answered 0), or no renewal succeeded before the lease's local deadline.
    Stop before the next side effect; a fenced write of this holder's would be refused."""

    def __init__(self, name: str, reason: str):
        super().__init__(f"lock {name!r} lost: {reason}")
        self.name = name
        self.reason = reason

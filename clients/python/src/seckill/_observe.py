"""What each call of a sale handle or a lock did, for the application's metrics
(``seckill.metrics``, which needs ``prometheus_client``; nothing here does). Every public call
of ``FlashSale``, sync and async, and each hold and release of a lock, is counted once under
its operation and outcome and timed, and each resend of a call's command counts as a retry of
its operation. The names are the Rust crate's (feature ``metrics``), checked against
``clients/metrics.txt``. With no recorder installed a call costs one global read more."""

from __future__ import annotations

import functools
import inspect
import time
from contextvars import ContextVar
from typing import Any, Callable, Optional, Protocol, TypeVar, cast

import redis

from ._health import NotSentError
from .errors import LockTimeout, NotReplicatedError, OutcomeUnknownError, UnavailableError
from .protocol import ENDED, NOT_ADMITTED, NOT_STARTED, OVER_LIMIT, SOLD_OUT

CALLS = "seckill_client_calls_total"
DURATION = "seckill_client_call_duration_seconds"
RETRIES = "seckill_client_retries_total"

#: The outcome of a call that answered and is not a purchase.
OK = "ok"
#: A purchase the sold-out cache refused with nothing sent.
LOCAL_REFUSAL = "local_refusal"
#: A lock not granted within its wait (``LockTimeout``).
NOT_GRANTED = "not_granted"
#: A lock's release that found its lease gone (expired, or taken by another holder since).
LOST = "lost"

_PURCHASE_REFUSALS = {
    SOLD_OUT: "sold_out",
    OVER_LIMIT: "over_limit",
    NOT_STARTED: "not_started",
    ENDED: "ended",
    NOT_ADMITTED: "not_admitted",
}


def purchase_outcome(code: int) -> str:
    """A purchase's answer (SECKILL.TRY's integer), as its outcome label."""
    return "bought" if code >= 0 else _PURCHASE_REFUSALS.get(code, "error")


def error_outcome(error: BaseException) -> str:
    """An error, as its outcome label: what the caller does about it (tell the buyer
    "confirming", "try again", or look into it). A call cancelled on its way (a task
    cancelled, an interrupt) did not learn its outcome: "unknown"."""
    if isinstance(error, LockTimeout):
        return NOT_GRANTED
    if isinstance(error, NotReplicatedError):
        return "not_replicated"
    if isinstance(error, OutcomeUnknownError) or not isinstance(error, Exception):
        return "unknown"
    if isinstance(error, (UnavailableError, NotSentError, redis.exceptions.ConnectionError,
                          redis.exceptions.TimeoutError)):
        return "unavailable"
    return "error"


class Recorder(Protocol):
    """Where the calls are recorded (``seckill.metrics.ClientMetrics``)."""

    def call(self, operation: str, outcome: str, seconds: float) -> None: ...

    def retry(self, operation: str) -> None: ...


_recorder: Optional[Recorder] = None


def install(recorder: Optional[Recorder]) -> None:
    """Records every call from now on in ``recorder`` (None: in nothing)."""
    global _recorder
    _recorder = recorder


class _Call:
    """One call being made in this thread or task, recorded when it ends (a ``with`` block):
    its operation, and its outcome once known (a local refusal's before the reply)."""

    __slots__ = ("operation", "outcome", "_recorder", "_token", "_started")

    def __init__(self, operation: str, recorder: Recorder) -> None:
        self.operation = operation
        self.outcome: Optional[str] = None
        self._recorder = recorder
        self._token: Any = None
        self._started = 0.0

    def answered(self, reply: Any, outcome_of: Callable[[Any], str]) -> Any:
        """The call's ``reply``, its outcome taken from it unless one is known already."""
        if self.outcome is None:
            self.outcome = outcome_of(reply)
        return reply

    def __enter__(self) -> "_Call":
        self._token = _current.set(self)
        self._started = time.perf_counter()
        return self

    def __exit__(self, kind: Any, error: Optional[BaseException], traceback: Any) -> None:
        _current.reset(self._token)
        outcome = error_outcome(error) if error is not None else self.outcome or OK
        self._recorder.call(self.operation, outcome, time.perf_counter() - self._started)


_current: ContextVar[Optional[_Call]] = ContextVar("seckill_call", default=None)


def refused_locally() -> None:
    """The current purchase is answered by the sold-out cache."""
    call = _current.get()
    if call is not None:
        call.outcome = LOCAL_REFUSAL


def retried() -> None:
    """The current call sends its command again."""
    call, recorder = _current.get(), _recorder
    if call is not None and recorder is not None:
        recorder.retry(call.operation)


F = TypeVar("F", bound=Callable[..., Any])


def _ok(_: Any) -> str:
    return OK


def observed(operation: str, outcome_of: Callable[[Any], str] = _ok) -> Callable[[F], F]:
    """Counts and times each call of the decorated method (sync or async) as ``operation``,
    its outcome ``outcome_of(reply)`` or its error's. A call made inside another (a method
    calling another) counts once, as the outer one."""

    def decorate(method: F) -> F:
        def begin() -> Optional[_Call]:
            recorder = _recorder
            if recorder is None or _current.get() is not None:
                return None
            return _Call(operation, recorder)

        if inspect.iscoroutinefunction(method):
            @functools.wraps(method)
            async def observe_async(*args: Any, **kwargs: Any) -> Any:
                call = begin()
                if call is None:
                    return await method(*args, **kwargs)
                with call:
                    return call.answered(await method(*args, **kwargs), outcome_of)

            return cast(F, observe_async)

        @functools.wraps(method)
        def observe(*args: Any, **kwargs: Any) -> Any:
            call = begin()
            if call is None:
                return method(*args, **kwargs)
            with call:
                return call.answered(method(*args, **kwargs), outcome_of)

        return cast(F, observe)

    return decorate


def release_outcome(released: Any) -> str:
    """A lock's release's outcome: ``ok`` when its holder still held the lock, else ``lost``."""
    return OK if released else LOST


def acked_outcome(reply: Any) -> str:
    """``try_buy_acked``'s outcome: its ``(code, acked)``'s code's."""
    return purchase_outcome(reply[0])

"""``seckill.Lock`` on asyncio: the same settings, grant, lease and loss signal (the code of
``seckill._lock``), driven on the event loop; the watchdog is a task, ``guard.lost`` an
``asyncio.Event``, and ``guard.run(coro)`` cancels ``coro`` the moment the lease is lost.

    lock = Lock(redis.asyncio.Redis(), "lock:stock", ttl_ms=30_000)
    async with lock.hold(wait_ms=5_000) as guard:
        await guard.run(refill(guard.fence))     # LockLost if the lease goes first
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Any, Awaitable, Generator, Optional, Type, TypeVar

import redis

from .. import _lock, _observe
from .._lock import GuardState, LockBase
from ..errors import LockLost
from . import run

__all__ = ["Lock", "LockGuard"]

T = TypeVar("T")


class Lock(LockBase):
    """``seckill.Lock`` on ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster``. Share one
    between the tasks of one event loop."""

    _asyncio = True

    def hold(self, wait_ms: int = 5_000) -> "Holding":
        """``async with lock.hold(wait_ms=...) as guard`` (or ``guard = await lock.hold()``):
        see ``seckill.Lock.hold``. The arguments are checked here, before anything is sent."""
        return Holding(self, _lock.check_wait(wait_ms))

    @_observe.observed("lock_hold")
    async def _grant(self, wait_ms: int) -> "LockGuard":
        token = _lock.new_token()
        operation = _lock.hold(self.settings, self.replicas, token, wait_ms)
        fence, sent = await run(operation, self.client)
        return LockGuard(self, token, fence, sent)


class Holding:
    """What ``Lock.hold`` returns: awaited, the guard; used with ``async with``, the guard,
    released on the way out."""

    def __init__(self, lock: Lock, wait_ms: int) -> None:
        self._lock = lock
        self._wait_ms = wait_ms
        self._guard: Optional[LockGuard] = None

    def __await__(self) -> Generator[Any, None, "LockGuard"]:
        return self._lock._grant(self._wait_ms).__await__()

    async def __aenter__(self) -> "LockGuard":
        self._guard = await self._lock._grant(self._wait_ms)
        return self._guard

    async def __aexit__(
        self,
        kind: Optional[Type[BaseException]],
        error: Optional[BaseException],
        trace: Optional[TracebackType],
    ) -> None:
        if self._guard is not None:
            await self._guard.release()


class LockGuard(GuardState):
    """``seckill.LockGuard`` on asyncio: ``fence``, ``token``, ``lost`` (an ``asyncio.Event``),
    ``check()``, ``await release()``, and ``await run(coro)``."""

    def __init__(self, lock: Lock, token: str, fence: int, sent: float) -> None:
        super().__init__(lock.settings, lock.replicas, token, fence, sent, asyncio.Event())
        self._lock = lock
        self._watchdog = asyncio.ensure_future(run(_lock.watch(self), lock.client))

    async def run(self, awaitable: Awaitable[T]) -> T:
        """Awaits ``awaitable`` and returns its result, unless the lease is lost first: then
        it is cancelled (and awaited) and ``LockLost`` is raised. The routine does not poll."""
        self.check()
        work = asyncio.ensure_future(awaitable)
        loss = asyncio.ensure_future(self.lost.wait())
        try:
            await asyncio.wait((work, loss), return_when=asyncio.FIRST_COMPLETED)
        finally:
            loss.cancel()
            if not work.done():
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work
        if work.cancelled() and self.lost.is_set():
            raise LockLost(self.name, self.lost_reason or "lost")
        return work.result()  # its own error too, or its own cancellation

    async def release(self) -> bool:
        """See ``seckill.LockGuard.release``."""
        if self.released:
            return False
        self.released = True
        self._watchdog.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._watchdog
        try:
            return await self._release()
        except redis.exceptions.RedisError:
            return False

    @_observe.observed("lock_release", _observe.release_outcome)
    async def _release(self) -> bool:
        return bool(await run(_lock.release(self.settings, self.token), self._lock.client))

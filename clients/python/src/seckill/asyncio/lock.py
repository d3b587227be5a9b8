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
import time
from types import TracebackType
from typing import Any, Awaitable, Dict, Generator, List, Optional, Type, TypeVar

import redis
import redis.asyncio

from .. import _lock
from .._effects import Sleep
from .._lock import DEFAULT_REPLICA_TIMEOUT_MS, DEFAULT_TTL_MS, GuardState, LockSettings, NodeCall, ReplicaCount
from ..errors import LockLost, translate
from ..lock import own_connection
from . import _refresh_topology, drive

__all__ = ["Lock", "LockGuard"]

T = TypeVar("T")


class NodeConnections:
    """``seckill.lock.NodeConnections`` on asyncio connections."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._idle: Dict[str, List[Any]] = {}

    async def _connection_for(self, key: str) -> Any:
        client: Any = self.client
        if isinstance(client, redis.asyncio.RedisCluster):
            await client.initialize()
            node: Any = client.get_node_from_key(key)
            address, kind, kwargs = node.name, node.connection_class, node.connection_kwargs
        else:
            pool = client.connection_pool
            address, kind, kwargs = "", pool.connection_class, pool.connection_kwargs
        idle = self._idle.setdefault(address, [])
        return address, (idle.pop() if idle else own_connection(kind, kwargs))

    async def perform(self, effect: Any) -> Any:
        if isinstance(effect, Sleep):
            await asyncio.sleep(effect.seconds)
            return None
        assert isinstance(effect, NodeCall)
        address, connection = await self._connection_for(effect.key)
        try:
            replies = await _exchange(connection, effect)
        except BaseException as error:
            # Cancelled half way too: the connection may hold an unread reply.
            await connection.disconnect(nowait=True)
            if isinstance(error, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
                await _refresh_topology(self.client)
            elif isinstance(error, redis.exceptions.AskError):  # MOVED too: the slot moved
                await _refresh_topology(self.client)
            elif isinstance(error, redis.exceptions.ResponseError):
                raise translate(error) from error
            raise
        self._idle.setdefault(address, []).append(connection)
        return replies

    async def close(self) -> None:
        connections = [c for idle in self._idle.values() for c in idle]
        self._idle.clear()
        for connection in connections:
            await connection.disconnect()


async def _exchange(connection: Any, effect: NodeCall) -> List[Any]:
    deadline = time.monotonic() + effect.timeout_s
    await connection.send_packed_command(connection.pack_commands(effect.commands))
    replies = []
    for _ in effect.commands:
        left = max(deadline - time.monotonic(), 0.0)
        # Not read_response(timeout=): it answers a timeout with None, which is also a nil reply.
        try:
            replies.append(await asyncio.wait_for(connection.read_response(), left))
        except asyncio.TimeoutError as error:
            raise redis.exceptions.TimeoutError(f"no answer within {effect.timeout_s:.3f} s") from error
    return replies


class Lock:
    """``seckill.Lock`` on ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster``. Share one
    between the tasks of one event loop."""

    def __init__(
        self,
        client: Any,
        name: str,
        ttl_ms: int = DEFAULT_TTL_MS,
        *,
        renew_ms: Optional[int] = None,
        max_hold_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        replica_timeout_ms: int = DEFAULT_REPLICA_TIMEOUT_MS,
        margin_ms: Optional[int] = None,
    ) -> None:
        self.settings = LockSettings.build(name, ttl_ms, renew_ms, max_hold_ms, replicas, replica_timeout_ms, margin_ms)
        self.client = client
        self.connections = NodeConnections(client)
        self.replicas = ReplicaCount(self.settings.replicas)

    @property
    def name(self) -> str:
        return self.settings.name

    def hold(self, wait_ms: int = 5_000) -> "Holding":
        """``async with lock.hold(wait_ms=...) as guard`` (or ``guard = await lock.hold()``):
        see ``seckill.Lock.hold``. The arguments are checked here, before anything is sent."""
        return Holding(self, _lock.check_wait(wait_ms))

    async def _grant(self, wait_ms: int) -> "LockGuard":
        token = _lock.new_token()
        operation = _lock.hold(self.settings, self.replicas, token, wait_ms)
        fence, sent = await drive(operation, self.connections.perform)
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
        self._watchdog = asyncio.ensure_future(drive(_lock.watch(self), lock.connections.perform))

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
            return bool(await drive(_lock.release(self.settings, self.token), self._lock.connections.perform))
        except redis.exceptions.RedisError:
            return False

"""``seckill._node`` on asyncio: the package's own connections per master, for the calls that
must not be resent behind its back and for a command with the ``WAIT`` after it."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Optional, Tuple, cast

import redis
import redis.asyncio

from .._health import NodeHealth
from .._node import NODE_FAILURES, NodeCall, _is_ask, lost_node, moves_topology, not_sent, own_connection
from ..errors import translate

__all__ = ["NodeConnections", "nodes_of"]


class NodeConnections:
    """``seckill._node.NodeConnections`` for a ``redis.asyncio`` client; share it between the
    tasks of one event loop."""

    #: Calls in flight per node, at most (a lock's grant, which may wait long, not counted):
    #: a thousand tasks share this many connections, instead of opening one each at once.
    MAX_CALLS_PER_NODE = 32

    def __init__(self, client: Any) -> None:
        self.client = client
        self._idle: Dict[str, List[Any]] = {}
        self._slots: Dict[str, asyncio.Semaphore] = {}
        self._refreshing = False
        self.health = NodeHealth()

    async def _target(self, key: str, address: Optional[Tuple[str, int]]) -> Tuple[str, Any, Dict[str, Any]]:
        client: Any = self.client
        if isinstance(client, redis.asyncio.RedisCluster):
            await client.initialize()
            node: Any
            if address is None:
                try:
                    node = client.get_node_from_key(key)
                except AttributeError as error:
                    await self.refresh_topology()
                    raise lost_node(error) from error
            else:
                node = client.get_node(host=address[0], port=address[1])
                if node is None:
                    await self.refresh_topology()
                    raise redis.exceptions.TryAgainError(f"ASK to {address}, a node not in the slot map yet")
            return node.name, node.connection_class, node.connection_kwargs
        pool = client.connection_pool
        return "", pool.connection_class, pool.connection_kwargs

    async def refresh_topology(self) -> None:
        """After a failed call: the cluster's slots asked again, by one task at a time (redis-py
        5's initialize() breaks when two run at once: "dictionary changed size")."""
        if not isinstance(self.client, redis.asyncio.RedisCluster) or self._refreshing:
            return
        self._refreshing = True
        try:
            await self.client.nodes_manager.initialize()
        except Exception:  # noqa: BLE001 - a best-effort refresh; the retry waits and asks again
            pass  # no node answers yet (RedisClusterException is no RedisError)
        finally:
            self._refreshing = False

    async def perform(self, effect: NodeCall) -> List[Any]:
        try:
            return await self._call(effect, None)
        except redis.exceptions.AskError as ask:
            if not _is_ask(ask):
                raise
            asking = NodeCall(effect.key, (("ASKING",),) + effect.commands, effect.timeout_s, effect.may_wait)
            return (await self._call(asking, (ask.host, ask.port)))[1:]

    def node_of(self, key: str) -> Optional[str]:
        """The name of the node that serves ``key`` in the slot map (None: not known now)."""
        if not isinstance(self.client, redis.asyncio.RedisCluster):
            return ""
        try:
            return str(cast(Any, self.client).get_node_from_key(key).name)
        except (AttributeError, KeyError, redis.exceptions.RedisError):
            return None

    def all_up(self, keys: List[str]) -> bool:
        """Whether no node serving ``keys`` is known down."""
        return not any(self.health.is_down(self.node_of(key) or "") for key in keys)

    async def _call(self, effect: NodeCall, address: Optional[Tuple[str, int]]) -> List[Any]:
        name, kind, kwargs = await self._target(effect.key, address)
        self.health.check(name)
        if effect.may_wait:
            return await self._on_connection(effect, name, kind, kwargs)
        slots = self._slots.setdefault(name, asyncio.Semaphore(self.MAX_CALLS_PER_NODE))
        async with slots:
            return await self._on_connection(effect, name, kind, kwargs)

    async def _on_connection(self, effect: NodeCall, name: str, kind: Any, kwargs: Dict[str, Any]) -> List[Any]:
        idle = self._idle.setdefault(name, [])
        connection = idle.pop() if idle else own_connection(kind, kwargs)
        try:
            replies = await _exchange(connection, effect.commands, effect.timeout_s)
        except BaseException as error:
            # Cancelled half way too: the connection may hold an unread reply.
            await connection.disconnect(nowait=True)
            if isinstance(error, NODE_FAILURES) or not isinstance(error, Exception):
                self.health.failed(name)
            else:
                self.health.answered(name)
            if moves_topology(error):
                await self.refresh_topology()
            elif isinstance(error, redis.exceptions.ResponseError) and not _is_ask(error):
                raise translate(error) from error
            raise
        self.health.answered(name)
        self._idle.setdefault(name, []).append(connection)
        return replies


async def _exchange(connection: Any, commands: Tuple[Tuple[Any, ...], ...], timeout: Optional[float]) -> List[Any]:
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    try:
        # A new connection's handshake waits on the node too: bounded by the call's timeout.
        await asyncio.wait_for(connection.connect(), timeout)
    except (*NODE_FAILURES, asyncio.TimeoutError) as error:
        raise not_sent(error) from error
    await connection.send_packed_command(connection.pack_commands(commands))
    replies = []
    for _ in commands:
        if deadline is None:
            replies.append(await connection.read_response())  # the socket timeout bounds it
            continue
        left = max(deadline - loop.time(), 0.0)
        # The wait is wait_for's: read_response's own timeout (set past it so it never fires)
        # answers with None, which is also a nil reply.
        try:
            replies.append(await asyncio.wait_for(connection.read_response(timeout=left + 60), left))
        except asyncio.TimeoutError as error:
            raise redis.exceptions.TimeoutError(f"no answer within {timeout:.3f} s") from error
    return replies


def nodes_of(client: Any) -> NodeConnections:
    """The package's own connections for ``client`` (kept on the client object)."""
    found = getattr(client, "_seckill_nodes", None)
    if found is None:
        found = NodeConnections(client)
        client._seckill_nodes = found
    return cast(NodeConnections, found)

"""``seckill._node`` on asyncio: the package's own connections per master, for the calls that
must not be resent behind its back and for a command with the ``WAIT`` after it."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Optional, Tuple, cast

import redis
import redis.asyncio

from .._durability import Keep, Replicas, keep_steps
from .._health import NodeHealth
from .._node import (NODE_FAILURES, REPLICA_MISSES, OneServerReplica, replica_timeout, UNKEPT_REFRESH_S, Every, NodeCall, _is_ask,
                     lists_replica, lost_node, moves_topology, not_sent, own_connection)
from ..errors import translate

__all__ = ["NodeConnections", "nodes_of"]


class NodeConnections:
    """``seckill._node.NodeConnections`` for a ``redis.asyncio`` client; share it between the
    tasks of one event loop."""

    #: Calls in flight per node, at most (a lock's grant, which may wait long, not counted):
    #: a thousand tasks share this many connections, instead of opening one each at once.
    MAX_CALLS_PER_NODE = 32
    #: Writes to keep (``NodeCall.keep``) sent together on one connection, at most, and then
    #: one WAIT for all of them: the group acknowledgement.
    MAX_BATCH = 64
    #: Batches of one node in flight at once, at most, each on its own connection (a WAIT
    #: blocks its connection in the server: the next batch goes on another).
    MAX_BATCHES_PER_NODE = 4

    def __init__(self, client: Any) -> None:
        self.client = client
        self._idle: Dict[str, List[Any]] = {}
        self._slots: Dict[str, asyncio.Semaphore] = {}
        self._refreshing = False
        self.health = NodeHealth()
        self.replicas = Replicas()
        self._unkept = Every(UNKEPT_REFRESH_S)
        self._groups: Dict[Tuple[str, Keep], "_Group"] = {}
        #: How many WAITs (or WAITAOFs) were sent: for tests and benchmarks.
        self.waits = 0
        #: A one-server master's replica (``_replica``).
        self._one_server_replica = OneServerReplica()

    async def _target(self, key: str, address: Optional[Tuple[str, int]]) -> Tuple[str, Any, Dict[str, Any]]:
        client: Any = self.client
        if isinstance(client, redis.asyncio.RedisCluster):
            await _mapped(client)
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
        if effect.replica:
            try:
                target = await self._replica(effect.key)
                if target is not None:
                    return await self._exchange_on(*target, effect.commands, replica_timeout(effect),
                                                   isinstance(self.client, redis.asyncio.RedisCluster))
            except REPLICA_MISSES:
                pass  # the master answers
        try:
            return await self._call(effect, None)
        except redis.exceptions.AskError as ask:
            if not _is_ask(ask):
                raise
            asking = NodeCall(effect.key, (("ASKING",),) + effect.commands, effect.timeout_s, effect.may_wait)
            return (await self._call(asking, (ask.host, ask.port)))[1:]

    async def _exchange_on(self, name: str, kind: Any, kwargs: Dict[str, Any],
                           commands: Tuple[Tuple[Any, ...], ...], timeout_s: Optional[float],
                           readonly: bool) -> List[Any]:
        """``commands`` on one of the package's connections to ``name`` (a replica: no write,
        nothing to keep), READONLY first on a new one when ``readonly``."""
        self.health.check(name)
        idle = self._idle.setdefault(name, [])
        connection = idle.pop() if idle else own_connection(kind, kwargs)
        fresh = readonly and not connection.is_connected
        slots = self._slots.setdefault(name, asyncio.Semaphore(self.MAX_CALLS_PER_NODE))
        try:
            async with slots:
                replies = await _exchange(connection, ((("READONLY",),) if fresh else ()) + commands, timeout_s)
        except BaseException as error:
            await connection.disconnect(nowait=True)
            if isinstance(error, NODE_FAILURES) or not isinstance(error, Exception):
                self.health.failed(name)
            if isinstance(error, redis.exceptions.MovedError):
                await self.refresh_topology()
            if isinstance(error, redis.exceptions.ResponseError) and not isinstance(error, REPLICA_MISSES):
                raise translate(error) from error
            raise
        self.health.answered(name)
        self._idle.setdefault(name, []).append(connection)
        return replies[1:] if fresh else replies

    async def _replica(self, key: str) -> Optional[Tuple[str, Any, Dict[str, Any]]]:
        """``seckill._node.NodeConnections._replica`` on asyncio."""
        client: Any = self.client
        if isinstance(client, redis.asyncio.RedisCluster):
            try:
                await _mapped(client)
                node = client.get_node_from_key(key, replica=True)
            except (AttributeError, KeyError, redis.exceptions.RedisError):
                return None
            if node is None or node.server_type != "replica":
                return None
            return node.name, node.connection_class, node.connection_kwargs
        pool = client.connection_pool
        if self._one_server_replica.due():
            try:
                info = await client.info("replication")
            except redis.exceptions.RedisError:
                info = None
            self._one_server_replica.learn(info, pool.connection_kwargs)
        return self._one_server_replica.target(pool.connection_class)

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
        if effect.keep is not None and address is None and len(effect.commands) == 1:
            return await self._grouped(effect, name, kind, kwargs)
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
            if effect.keep is not None:
                kept = await self._keep(name, effect.key, effect.keep, connection, [replies[-1]], effect.timeout_s)
                replies.append(kept)
        except BaseException as error:
            # Cancelled half way too: the connection may hold an unread reply.
            await connection.disconnect(nowait=True)
            self.replicas.forget(name)
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


    def listed(self, key: str) -> Optional[bool]:
        """Whether the cluster's map lists a replica for ``key``'s slot (None: one server)."""
        if not isinstance(self.client, redis.asyncio.RedisCluster):
            return None
        return lists_replica(self.client, key)

    async def _keep(self, name: str, key: str, keep: Keep, connection: Any, writes: List[Any],
                    timeout_s: Optional[float]) -> Optional[bool]:
        """After ``writes`` (their replies) on ``connection``: what keeps them, by
        ``keep_steps`` (None, or whether kept)."""
        steps = keep_steps(self.replicas, name, self.listed(key), keep, writes, timeout_s)
        answer = None
        try:
            while True:
                command, timeout = steps.send(answer)
                if command[0] != "INFO":  # a WAIT or a WAITAOF
                    self.waits += 1
                (answer,) = await _exchange(connection, (command,), timeout)
        except StopIteration as done:
            kept: Optional[bool] = done.value
        if kept is False and self._unkept.due():
            asyncio.get_running_loop().create_task(self.refresh_topology())
        return kept

    async def _grouped(self, effect: NodeCall, name: str, kind: Any, kwargs: Dict[str, Any]) -> List[Any]:
        """A write to keep, sent in the node's next batch (see ``_flush``)."""
        assert effect.keep is not None
        loop = asyncio.get_running_loop()
        group = self._groups.get((name, effect.keep))
        if group is None:
            group = self._groups[(name, effect.keep)] = _Group()
        future: "asyncio.Future[List[Any]]" = loop.create_future()
        group.queue.append((effect, future))
        if group.flushers < self.MAX_BATCHES_PER_NODE:
            group.flushers += 1
            task = loop.create_task(self._flush(group, name, effect.keep, kind, kwargs))
            group.tasks.add(task)
            task.add_done_callback(group.tasks.discard)
        return await future

    async def _flush(self, group: "_Group", name: str, keep: Keep, kind: Any, kwargs: Dict[str, Any]) -> None:
        """Sends the group's queued writes, MAX_BATCH at a time, each batch pipelined on one
        connection and followed by one WAIT; runs while writes keep coming. A task of its own,
        so that no caller's cancellation strands the others' answers."""
        try:
            while group.queue:
                batch = [(e, f) for e, f in group.queue[: self.MAX_BATCH] if not f.done()]
                del group.queue[: self.MAX_BATCH]
                if batch:
                    slots = self._slots.setdefault(name, asyncio.Semaphore(self.MAX_CALLS_PER_NODE))
                    async with slots:
                        await self._batch(batch, name, keep, kind, kwargs)
        finally:
            group.flushers -= 1

    async def _batch(self, batch: List[Tuple[NodeCall, "asyncio.Future[List[Any]]"]], name: str, keep: Keep,
                     kind: Any, kwargs: Dict[str, Any]) -> None:
        idle = self._idle.setdefault(name, [])
        connection = idle.pop() if idle else own_connection(kind, kwargs)
        replies: List[Any] = []
        try:
            try:
                await connection.connect()
            except NODE_FAILURES as error:
                raise not_sent(error) from error
            commands = tuple(effect.commands[0] for effect, _ in batch)
            await connection.send_packed_command(connection.pack_commands(commands))
            for effect, future in batch:
                try:
                    replies.append(await connection.read_response())
                except redis.exceptions.ResponseError as error:
                    # An error reply (MOVED, ASK, a refusal): that write's alone.
                    replies.append(error)
            writes = [reply for reply in replies if not isinstance(reply, Exception)]
            kept = await self._keep(name, batch[0][0].key, keep, connection, writes, None)
        except BaseException as error:
            await connection.disconnect(nowait=True)
            self.replicas.forget(name)
            if isinstance(error, NODE_FAILURES) or not isinstance(error, Exception):
                self.health.failed(name)
            if moves_topology(error):
                asyncio.get_running_loop().create_task(self.refresh_topology())
            for index, (_, future) in enumerate(batch):
                if future.done():
                    continue
                reply = replies[index] if index < len(replies) else None
                if index < len(replies) and not (isinstance(reply, Exception) or keep.changed(reply)):
                    future.set_result([reply, None])  # a refusal: nothing to keep
                else:
                    future.set_exception(error if isinstance(error, Exception) else asyncio.CancelledError())
            if not isinstance(error, Exception):
                raise
            return
        self.health.answered(name)
        self._idle.setdefault(name, []).append(connection)
        for (_, future), reply in zip(batch, replies):
            if future.done():
                continue
            if isinstance(reply, Exception):
                if moves_topology(reply):
                    asyncio.get_running_loop().create_task(self.refresh_topology())
                future.set_exception(reply if _is_ask(reply) or not isinstance(
                    reply, redis.exceptions.ResponseError) else translate(reply))
            else:
                future.set_result([reply, kept if keep.changed(reply) else None])


class _Group:
    """The writes to keep waiting for a batch on one node, and the tasks sending them."""

    def __init__(self) -> None:
        self.queue: List[Tuple[NodeCall, "asyncio.Future[List[Any]]"]] = []
        self.flushers = 0
        self.tasks: "set[asyncio.Task[None]]" = set()


async def _mapped(client: Any) -> None:
    """The cluster client's slot map, learned by the client once. Past that, the package
    relearns it itself (``refresh_topology``) and never waits for the client's own relearning:
    redis-py 5's, once a command of its own lost a master, asks the first master listed for its
    commands (COMMAND) and fails while that is the lost one, so every call waited for the
    failover (buyers of the other masters waited 14 to 20 s)."""
    if not client.nodes_manager.slots_cache:
        await client.initialize()


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

"""The package's own connections, per master: where a command that must not be sent twice by
anyone but the package goes (a purchase, a cancel, a lock's grant and renewals), and where a
command and the ``WAIT`` after it share one connection.

redis-py's clients resend a command whose answer was lost, on another connection, by
themselves (``Retry``); for a purchase that is harmless only because its attempt id makes the
repeat a no-op, and it still breaks ``WAIT``, which counts the writes of its own connection
(a resent purchase changed nothing there, so ``WAIT`` answers at once with every replica).
Here nothing is resent behind the package's back: a lost answer is the package's to retry,
under the same attempt id (or lock token), within its own deadline.

The connections are made with the application client's settings (address, credentials,
protocol, TLS), to the master that serves the key in the client's slot map; MOVED relearns
the map, ASK is followed once with ``ASKING``."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, cast

import redis

from ._durability import Keep, Replicas, keep_steps
from ._health import NodeHealth, NotSentError
from .errors import translate

__all__ = [
    "CLUSTER_CLIENT_SLIPS", "LOST_CONNECTION", "NodeCall", "NodeConnections", "READ_ONLY", "lost_node", "moves_topology", "nodes_of",
    "READ_SENDS", "OneServerReplica", "REPLICA_MISSES", "replica_timeout", "own_connection", "read_backoff_s", "replica_of_info", "resend_read", "slipped",
]


@dataclass(frozen=True)
class NodeCall:
    """``commands`` pipelined on one of the package's connections to the master of ``key``;
    the result: their replies, in order (an error reply raised as the package's type). Each
    answer is awaited ``timeout_s`` at most (None: the client's socket timeout). ``may_wait``:
    the call may wait in the server (a lock's grant in its queue). ``keep``: the last
    command is a write to keep (see ``_durability``); one more result follows the replies:
    None when there was nothing to wait for (the write changed nothing, or its master has no
    replica to wait for), else whether the write is kept. ``replica``: reads that a replica
    of the key's master may answer (``read_from_replicas``); the master does when it has none
    known, or the replica cannot answer (see ``REPLICA_MISSES``)."""

    key: str
    commands: Tuple[Tuple[Any, ...], ...]
    timeout_s: Optional[float] = None
    may_wait: bool = False
    keep: Optional[Keep] = None
    replica: bool = False


#: What a read sent to a replica fails with when the master should answer it instead: the
#: replica is down, loading or cut from its master (MASTERDOWN), no longer serves the slot
#: (MOVED, ASK), or the cluster is changing (TRYAGAIN, CLUSTERDOWN).
REPLICA_MISSES = tuple(
    getattr(redis.exceptions, name)
    for name in ("ConnectionError", "TimeoutError", "MovedError", "AskError", "MasterDownError", "TryAgainError",
                 "ClusterDownError")
    if hasattr(redis.exceptions, name)
)

#: How long a one-server master's replica (``INFO replication``) is known before it is asked
#: again: a replica attached or gone is followed within this.
REPLICA_LOOK_S = 5.0

#: The longest wait for a replica's answer to a read without a timeout of its own: past it
#: the replica is taken as down (skipped until a probe finds it back) and the master answers.
REPLICA_TIMEOUT_S = 1.0


def replica_timeout(effect: NodeCall) -> float:
    return REPLICA_TIMEOUT_S if effect.timeout_s is None else effect.timeout_s


def replica_of_info(info: Any, kwargs: Dict[str, Any]) -> Optional[Tuple[str, Dict[str, Any]]]:
    """A one-server master's first online replica, from its ``INFO replication``: its name
    (``host:port``) and the connection settings for it (the master's, at its address). None
    without one, or for a master reached over a Unix socket."""
    if "host" not in kwargs or not isinstance(info, dict):
        return None
    for field, value in info.items():
        if str(field).startswith("slave") and isinstance(value, dict) and value.get("state") == "online":
            host, port = str(value["ip"]), int(value["port"])
            return f"{host}:{port}", {**kwargs, "host": host, "port": port}
    return None


class OneServerReplica:
    """A one-server master's replica, as its ``INFO replication`` last showed it (see
    ``replica_of_info``), looked at again every REPLICA_LOOK_S; the same for the sync and the
    asyncio connections."""

    def __init__(self) -> None:
        self._looked_at = float("-inf")
        self._found: Optional[Tuple[str, Dict[str, Any]]] = None

    def due(self) -> bool:
        return time.monotonic() - self._looked_at >= REPLICA_LOOK_S

    def learn(self, info: Any, kwargs: Dict[str, Any]) -> None:
        """What ``INFO replication`` answered (None: it failed) on a master reached with
        ``kwargs``."""
        self._found = replica_of_info(info, kwargs)
        self._looked_at = time.monotonic()

    def target(self, kind: Any) -> Optional[Tuple[str, Any, Dict[str, Any]]]:
        """The replica's name and how to connect to it (with connections of ``kind``)."""
        return None if self._found is None else (self._found[0], kind, self._found[1])


#: Commands that only read: sent again at once when the cluster client failed on its own.
READ_ONLY = frozenset(
    {"SECKILL.INFO", "SECKILL.BOUGHT", "SECKILL.BUYERS", "SECKILL.TRANSFERS", "HGET", "HGETALL", "INFO", "ROLE"}
)


#: What redis-py's cluster clients raise when they lose track of a node or a connection (see
#: ``lost_node``; ``slipped`` tells the ValueError apart).
CLUSTER_CLIENT_SLIPS = (AttributeError, ValueError)


def slipped(error: Exception) -> bool:
    """Whether ``error``, caught as one of CLUSTER_CLIENT_SLIPS, is the cluster client's slip."""
    return isinstance(error, AttributeError) or "closed file" in str(error)


#: A connection lost or timed out under a call: the call may or may not have run.
LOST_CONNECTION = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


#: How many times a read is sent at most through the application's cluster client.
READ_SENDS = 7


def resend_read(error: Exception, args: Tuple[Any, ...], attempt: int) -> bool:
    """Whether a command the application's cluster client failed with ``error`` (a slip or a
    lost connection, on its ``attempt``-th send from 0) is sent again: a read (``READ_ONLY``),
    up to ``READ_SENDS`` sends. A read after a failover may reach the dead master first: the
    cluster client learns the slots again and raises, and a later send reaches the promoted
    replica (seen: an order service's SECKILL.INFO refused by the killed master after its
    buyers had all been answered by the new one). A write is never sent again here: only the
    retry policy may, under an attempt id."""
    if isinstance(error, CLUSTER_CLIENT_SLIPS) and not slipped(error):
        return False
    return str(args[0]).upper() in READ_ONLY and attempt < READ_SENDS - 1


def read_backoff_s(attempt: int) -> float:
    """The wait after a read's ``attempt``-th failed send: 10 ms doubling to 0.32 s, 0.6 s in
    all, for the other nodes to learn of a promotion (gossip) when the cluster client asks
    one of them for the slots."""
    return min(0.01 * (1 << attempt), 0.32)


def lost_node(error: Exception) -> redis.exceptions.ConnectionError:
    """redis-py's cluster clients sometimes fail on a node they lost track of while the
    topology changes: an AttributeError on None (8.2, asyncio: an ASK to a node not in their
    cache, a failure recorded for a connection never made), or a ValueError "I/O operation on
    closed file" (5.x, sync, threads: one thread read from a connection another disconnected
    when a master was killed; seen once in 4 runs of the SIGKILL availability test). For the
    caller it is a lost connection: the call may or may not have run, and a retry under its
    id is safe."""
    return redis.exceptions.ConnectionError(f"the cluster client lost track of a node: {error}")


#: The socket timeouts of the package's own connections when the application's client sets
#: none (redis-py 5's default; redis-py 8's is this): a frozen node costs a call this long, then
#: the call is retried within its ``RetryPolicy`` or fails, never waits without end.
DEFAULT_SOCKET_TIMEOUT_S = 5.0


def own_connection(kind: Any, kwargs: Dict[str, Any]) -> Any:
    """A connection made as the client's are (its socket timeout bounds the handshake and any
    call without a ``timeout_s`` of its own; ``DEFAULT_SOCKET_TIMEOUT_S`` when it has none), but
    with no retries of its own: redis-py's default retries a refused connect with backoff
    (seconds), and the package decides itself when to try a node again (``_health``)."""
    settings = {**kwargs, "retry": None, "retry_on_error": [], "retry_on_timeout": False}
    for timeout in ("socket_timeout", "socket_connect_timeout"):
        if settings.get(timeout) is None:
            settings[timeout] = DEFAULT_SOCKET_TIMEOUT_S
    return kind(**settings)


def _is_ask(error: BaseException) -> bool:
    return isinstance(error, redis.exceptions.AskError) and not isinstance(error, redis.exceptions.MovedError)


#: What a down node's calls fail with (a refused, dropped or timed-out connection).
NODE_FAILURES = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


def moves_topology(error: BaseException) -> bool:
    """Whether ``error`` may mean that the slot map changed, so that it is worth relearning: a
    MOVED, or a node that refused or dropped a connection (it may be gone for good). Not a
    timeout: a frozen node says nothing of the map, and relearning it might ask that node."""
    if isinstance(error, redis.exceptions.MovedError):
        return True
    cause = error.__cause__ if isinstance(error, NotSentError) else error
    return isinstance(error, redis.exceptions.ConnectionError) and not isinstance(
        cause, (redis.exceptions.TimeoutError, TimeoutError)
    )


def not_sent(error: BaseException) -> NotSentError:
    """A failure to connect (or to finish the handshake): the command was not written."""
    return NotSentError(f"no connection could be made ({error}); not sent")


class NodeConnections:
    """The sync clients' own connections (one set per application client: ``nodes_of``).
    Idle ones are kept for the next call; any failed one is closed."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._idle: Dict[str, List[Any]] = {}
        self._mutex = threading.Lock()
        self._topology = threading.Lock()
        self.health = NodeHealth()
        self.replicas = Replicas()
        self._unkept = Every(UNKEPT_REFRESH_S)
        #: A one-server master's replica (``_replica``).
        self._one_server_replica = OneServerReplica()

    def _pool(self, key: str, address: Optional[Tuple[str, int]]) -> Tuple[str, Any]:
        if isinstance(self.client, redis.RedisCluster):
            cluster = cast(Any, self.client)
            if address is None:
                try:
                    node = cluster.get_node_from_key(key)
                except AttributeError as error:
                    self.refresh_topology()
                    raise lost_node(error) from error
            else:
                node = cluster.get_node(host=address[0], port=address[1])
                if node is None:  # a node the map does not know yet
                    self.refresh_topology()
                    raise redis.exceptions.TryAgainError(f"ASK to {address}, a node not in the slot map yet")
            # A node the slot map learned while a refresh failed has no connection yet
            # (redis-py 5 then raised AttributeError on ``node.redis_connection``): made here.
            return node.name, cluster.get_redis_connection(node).connection_pool
        return "", self.client.connection_pool

    def refresh_topology(self) -> None:
        """After a failed call: the cluster's slots asked again, by one thread at a time."""
        if not isinstance(self.client, redis.RedisCluster) or not self._topology.acquire(blocking=False):
            return
        try:
            self.client.nodes_manager.initialize()
        except Exception:  # noqa: BLE001 - a best-effort refresh; the retry waits and asks again
            # No node answers yet (RedisClusterException, which is no RedisError), or redis-py
            # 5's nodes manager, not thread-safe, slipped while another thread changed it
            # (RuntimeError "dictionary changed size during iteration", seen with 40 threads
            # through a killed master).
            pass
        finally:
            self._topology.release()

    def perform(self, effect: NodeCall) -> List[Any]:
        if effect.replica:
            try:
                replies = self._call_replica(effect)
                if replies is not None:
                    return replies
            except REPLICA_MISSES:
                pass  # the master answers
        try:
            return self._call(effect, None)
        except redis.exceptions.AskError as ask:
            if not _is_ask(ask):
                raise
            # The key is being migrated and is already on its new owner: ask there, once.
            asking = NodeCall(effect.key, (("ASKING",),) + effect.commands, effect.timeout_s, effect.may_wait)
            return self._call(asking, (ask.host, ask.port))[1:]

    def _call_replica(self, effect: NodeCall) -> Optional[List[Any]]:
        """``effect`` on a replica of its key's master; None when none is known. A replica of a
        cluster is sent READONLY first on each new connection."""
        target = self._replica(effect.key)
        if target is None:
            return None
        name, kind, kwargs = target
        readonly = isinstance(self.client, redis.RedisCluster)
        return self._exchange_on(name, kind, kwargs, effect.commands, replica_timeout(effect), readonly)

    def _exchange_on(self, name: str, kind: Any, kwargs: Dict[str, Any], commands: Tuple[Tuple[Any, ...], ...],
                     timeout_s: Optional[float], readonly: bool) -> List[Any]:
        """``commands`` on one of the package's connections to ``name`` (a replica: no write,
        nothing to keep), READONLY first on a new one when ``readonly``."""
        self.health.check(name)
        with self._mutex:
            idle = self._idle.setdefault(name, [])
            connection = idle.pop() if idle else own_connection(kind, kwargs)
        fresh = readonly and connection._sock is None
        try:
            replies = _exchange(connection, ((("READONLY",),) if fresh else ()) + commands, timeout_s)
        except BaseException as error:
            connection.disconnect()
            if isinstance(error, NODE_FAILURES) or not isinstance(error, Exception):
                self.health.failed(name)
            if isinstance(error, redis.exceptions.MovedError):
                self.refresh_topology()
            if isinstance(error, redis.exceptions.ResponseError) and not isinstance(error, REPLICA_MISSES):
                raise translate(error) from error
            raise
        self.health.answered(name)
        with self._mutex:
            self._idle[name].append(connection)
        return replies[1:] if fresh else replies

    def _replica(self, key: str) -> Optional[Tuple[str, Any, Dict[str, Any]]]:
        """A replica of ``key``'s master: its name and how to connect to it (None: none known).
        A cluster's from the client's slot map; one server's from its ``INFO replication``,
        looked at every REPLICA_LOOK_S."""
        if isinstance(self.client, redis.RedisCluster):
            cluster = cast(Any, self.client)
            try:
                node = cluster.get_node_from_key(key, replica=True)
            except (AttributeError, KeyError, redis.exceptions.RedisError):
                return None
            if node is None or node.server_type != "replica":
                return None
            pool = cluster.get_redis_connection(node).connection_pool
            return node.name, pool.connection_class, pool.connection_kwargs
        pool = self.client.connection_pool
        if self._one_server_replica.due():
            try:
                info = self.client.info("replication")
            except redis.exceptions.RedisError:
                info = None
            self._one_server_replica.learn(info, pool.connection_kwargs)
        return self._one_server_replica.target(pool.connection_class)

    def node_of(self, key: str) -> Optional[str]:
        """The name of the node that serves ``key`` in the slot map (None: not known now)."""
        if not isinstance(self.client, redis.RedisCluster):
            return ""
        try:
            return str(cast(Any, self.client).get_node_from_key(key).name)
        except (AttributeError, redis.exceptions.RedisError):
            return None

    def all_up(self, keys: List[str]) -> bool:
        """Whether no node serving ``keys`` is known down."""
        return not any(self.health.is_down(self.node_of(key) or "") for key in keys)

    def _call(self, effect: NodeCall, address: Optional[Tuple[str, int]]) -> List[Any]:
        name, pool = self._pool(effect.key, address)
        self.health.check(name)
        with self._mutex:
            idle = self._idle.setdefault(name, [])
            connection = idle.pop() if idle else own_connection(pool.connection_class, pool.connection_kwargs)
        try:
            replies = _exchange(connection, effect.commands, effect.timeout_s)
            if effect.keep is not None:
                replies.append(self._keep(name, effect, connection, replies[-1]))
        except BaseException as error:
            connection.disconnect()
            self.replicas.forget(name)
            if isinstance(error, NODE_FAILURES) or not isinstance(error, Exception):
                self.health.failed(name)
            else:
                self.health.answered(name)
            if moves_topology(error):
                self.refresh_topology()
            elif isinstance(error, redis.exceptions.ResponseError) and not _is_ask(error):
                raise translate(error) from error
            raise
        self.health.answered(name)
        with self._mutex:
            self._idle[name].append(connection)
        return replies


    def listed(self, key: str) -> Optional[bool]:
        """Whether the cluster's map lists a replica for ``key``'s slot (None: one server)."""
        if not isinstance(self.client, redis.RedisCluster):
            return None
        return lists_replica(self.client, key)

    def _keep(self, name: str, effect: NodeCall, connection: Any, reply: Any) -> Optional[bool]:
        """After the write of ``effect`` answered ``reply`` on ``connection``: the extra
        result of an acknowledged call (see ``NodeCall``), by ``keep_steps``."""
        assert effect.keep is not None
        steps = keep_steps(self.replicas, name, self.listed(effect.key), effect.keep, [reply], effect.timeout_s)
        answer = None
        try:
            while True:
                command, timeout = steps.send(answer)
                (answer,) = _exchange(connection, (command,), timeout)
        except StopIteration as done:
            kept: Optional[bool] = done.value
        if kept is False and self._unkept.due():
            self.refresh_topology()  # the replica may be gone for good: the map says so
        return kept


#: A write no replica acknowledged has the cluster's map read again, at most this often.
UNKEPT_REFRESH_S = 1.0


class Every:
    """A gate that opens once per ``period_s`` at most."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self._last = float("-inf")

    def due(self) -> bool:
        now = time.monotonic()
        if now - self._last < self.period_s:
            return False
        self._last = now
        return True


def lists_replica(cluster: Any, key: str) -> bool:
    """Whether a redis-py cluster client's map lists a replica for ``key``'s slot."""
    try:
        return len(cluster.nodes_manager.slots_cache.get(cluster.keyslot(key)) or ()) > 1
    except (AttributeError, KeyError, redis.exceptions.RedisError):
        return True  # the map is being relearned: wait, the safe side


def _exchange(connection: Any, commands: Tuple[Tuple[Any, ...], ...], timeout: Optional[float]) -> List[Any]:
    """The replies, each awaited until ``timeout`` from the send at most (None: each read
    bounded by the connection's socket timeout). ``NotSentError`` if no connection could be
    made: nothing was written."""
    try:
        _connect_within(connection, timeout)
    except NODE_FAILURES as error:
        raise not_sent(error) from error
    connection.send_packed_command(connection.pack_commands(commands))
    deadline = None if timeout is None else time.monotonic() + timeout
    replies = []
    for _ in commands:
        if deadline is not None and not connection.can_read(timeout=max(deadline - time.monotonic(), 0.0)):
            raise redis.exceptions.TimeoutError(f"no answer within {timeout:.3f} s")
        replies.append(connection.read_response())
    return replies


def _connect_within(connection: Any, timeout: Optional[float]) -> None:
    """Connects (if not connected yet) with the handshake bounded by ``timeout`` too: a frozen
    node accepts the TCP connection (its kernel does) and never answers HELLO."""
    if timeout is None or connection._sock is not None:
        connection.connect()
        return
    kept = connection.socket_timeout, connection.socket_connect_timeout
    connection.socket_timeout = connection.socket_connect_timeout = timeout
    try:
        connection.connect()
    finally:
        connection.socket_timeout, connection.socket_connect_timeout = kept
        if connection._sock is not None:
            connection._sock.settimeout(kept[0])


_registry = threading.Lock()


def nodes_of(client: Any) -> NodeConnections:
    """The package's own connections for ``client``, made at its first use (kept on the client
    object, so they live and go with it)."""
    found = getattr(client, "_seckill_nodes", None)
    if found is None:
        with _registry:
            found = getattr(client, "_seckill_nodes", None)
            if found is None:
                found = NodeConnections(client)
                client._seckill_nodes = found
    return cast(NodeConnections, found)

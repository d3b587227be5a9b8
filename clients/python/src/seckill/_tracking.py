"""The sold-out cache (``local_cache=True``): a sale the server showed sold out is refused in
this process, without a round trip, for as long as Redis would tell us it changed.

How a mark is made and kept (docs/clients.md, "The sold-out cache"):

- One tracking connection per node (per master in a cluster) and per application client,
  speaking RESP3 with ``CLIENT TRACKING ON``: the keys it reads are remembered by the server,
  which pushes ``invalidate [key]`` on that same connection at their next change. The module
  signals a sale key when a command or its hold timer changes it, never on a refusal.
- After the server answered SOLD_OUT, the sale's keys are read (``SECKILL.INFO``) on those
  connections; the mark is set when every key shows no units left (a partitioned sale: and no
  units in flight between partitions) and no invalidation or lost connection touched any of
  them between its read and the decision. Replies and pushes of one connection arrive in the
  server's order, and one thread handles them all and decides, so a change after a read is
  either seen before the decision (no mark) or clears the mark when its push is read.
- A push for a key clears the marks covering it (a flush, all the node's); a lost tracking
  connection clears every mark it covered, and so does a node that stops being a master
  (``ROLE`` asked every second while marks are held). Nothing is re-read until the server
  refuses again.
- Only refusals are cached: a purchase always goes to the server, so the cache cannot sell
  anything; a change reaches the buyers of this process a push's delivery time late.

The connections are served by one thread per application client (sync and asyncio alike:
buyers only read the marks, a dict lookup, and hand reads over without waiting)."""

from __future__ import annotations

import collections
import functools
import inspect
import select
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, FrozenSet, List, Optional, Set, Tuple, cast

import redis

from ._node import own_connection
from ._resp import ErrorReply, Incomplete, Push, encode, parse
from .info import PartitionInfo, SaleInfo, as_text, fields_of

__all__ = ["Route", "STALLED_READING_S", "SoldOutCache", "cache_of", "route"]

#: How often a node covering marks is asked whether it is still a master.
ROLE_CHECK_S = 1.0
#: What a reading found (``SoldOutCache.learn``).
MARKED, UNMARKED, MOVED = "marked", "unmarked", "moved"
#: A tracking connection whose reply is this late is dropped, with its marks.
REPLY_TIMEOUT_S = 1.0
#: How long a refused buyer waits for a reading, at most: past it, the nodes the reading still
#: waits for are taken as down (``_health``) and the buyer goes; the reading goes on.
STALLED_READING_S = 0.25


@dataclass(frozen=True)
class Route:
    """Where ``key`` is read: the node's name (its address; "" for a single server) and how to
    make a (sync redis-py) connection to it."""

    key: str
    node: str
    connect: Callable[[], Any]


@dataclass(frozen=True)
class Mark:
    """A sale shown sold out. ``until``: the sale's END (wall-clock seconds), after which the
    server answers ENDED rather than sold out; None without an END."""

    until: Optional[float]

    def holds(self) -> bool:
        return self.until is None or time.time() < self.until


@dataclass
class _Reading:
    """The reads for one mark, answered one by one."""

    sale: str
    routes: List[Route]
    whole_sale: bool
    #: key -> its INFO, the sale's END there (unix ms, 0: none), its generation when answered.
    answers: Dict[str, Tuple[PartitionInfo, int, int]] = field(default_factory=dict)
    failed: bool = False
    #: A read was answered MOVED or ASK: the application client's slot map is behind.
    moved: bool = False
    done: "Future[str]" = field(default_factory=Future)


class _Tracked:
    """One tracking connection, its unread bytes and the handlers of its replies, in order."""

    def __init__(self, name: str, connection: Any) -> None:
        self.name = name
        self.connection = connection
        self.sock: socket.socket = connection._sock
        self.buffer = bytearray()
        self.handlers: Deque[Callable[[Any], None]] = collections.deque()
        self.keys: Set[str] = set()
        self.checked = time.monotonic()
        self.waiting_since = self.checked

    def send(self, args: Tuple[Any, ...], handler: Callable[[Any], None]) -> None:
        self.sock.sendall(encode(args))
        if not self.handlers:
            self.waiting_since = time.monotonic()
        self.handlers.append(handler)

    def late(self) -> bool:
        """A reply overdue: a node this slow keeps no marks and makes no buyer wait."""
        return bool(self.handlers) and time.monotonic() - self.waiting_since > REPLY_TIMEOUT_S

    def has_buffered(self) -> bool:
        pending = getattr(self.sock, "pending", None)  # TLS: bytes decrypted but unread
        return bool(pending and pending())


class SoldOutCache:
    """The marks of one application client and the thread that keeps them (``cache_of``)."""

    def __init__(self) -> None:
        #: sale id -> its mark. Read by buyers without a lock (one dict lookup).
        self.marks: Dict[str, Mark] = {}
        #: Test hook: called in the cache's thread before each read is sent (a planted delay).
        self.before_read: Optional[Callable[[str], None]] = None
        self._lock = threading.Lock()
        self._requests: Deque[_Reading] = collections.deque()
        self._reading: Dict[str, _Reading] = {}
        self._nodes: Dict[str, _Tracked] = {}
        # key -> invalidations and losses seen: a read's answer counts only if it has not moved.
        self._generation: Dict[str, int] = collections.defaultdict(int)
        self._sales_of: Dict[str, Set[str]] = collections.defaultdict(set)
        self._invalidations: Dict[str, int] = collections.defaultdict(int)
        self._thread: Optional[threading.Thread] = None
        self._wake_r, self._wake_w = socket.socketpair()

    # -- what buyers call -----------------------------------------------------------------

    def refuses(self, sale: str) -> bool:
        """Whether ``sale`` is marked sold out now."""
        mark = self.marks.get(sale)
        return mark is not None and mark.holds()

    def invalidations(self, sale: str) -> int:
        """Invalidations received for ``sale``'s keys."""
        return self._invalidations[sale]

    def learn(self, sale: str, routes: Callable[[], List[Route]], whole_sale: bool) -> "Future[str]":
        """The server refused ``sale`` as sold out: reads its keys (where ``routes()`` says) in
        the cache's thread and marks it if they show it so. The future tells, once the reads
        are answered, MARKED, UNMARKED, or MOVED (a key was not where ``routes`` said). One
        reading per sale at a time: a second call gets the first's future (and ``routes`` is
        called only for a reading that starts; its errors are the caller's)."""
        with self._lock:
            reading = self._reading.get(sale)
            if reading is not None:
                return reading.done
        where = routes()
        with self._lock:
            reading = self._reading.get(sale)
            if reading is not None:
                return reading.done
            reading = self._reading[sale] = _Reading(sale, where, whole_sale)
            self._requests.append(reading)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="seckill-tracking", daemon=True)
                self._thread.start()
        self._wake_w.send(b"x")
        return reading.done

    def unanswered(self, sale: str) -> List[str]:
        """The nodes whose answers the reading of ``sale`` in progress still waits for."""
        with self._lock:
            reading = self._reading.get(sale)
            if reading is None:
                return []
            return sorted({route.node for route in reading.routes if route.key not in reading.answers})

    def connections(self) -> int:
        """Tracking connections open now (for tests)."""
        return len(self._nodes)

    # -- the cache's thread ----------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            with self._lock:
                requests = list(self._requests)
                self._requests.clear()
                if not requests and not self._nodes:
                    self._thread = None
                    return
            for request in requests:
                try:
                    self._start(request)
                except Exception:  # noqa: BLE001 - a reading that cannot start makes no mark
                    self._finish(request, failed=True)
            sockets: List[Any] = [self._wake_r] + [node.sock for node in self._nodes.values()]
            ready = [node.sock for node in self._nodes.values() if node.has_buffered()]
            if not ready:
                ready = select.select(sockets, [], [], ROLE_CHECK_S)[0]
            if self._wake_r in ready:
                self._wake_r.recv(4096)
            for node in list(self._nodes.values()):
                if node.sock in ready:
                    self._receive(node)
            self._check_roles()

    def _node(self, route: Route) -> _Tracked:
        node = self._nodes.get(route.node)
        if node is None:
            connection = route.connect()
            try:
                connection.connect()
                connection.send_command("CLIENT", "TRACKING", "ON")
                if as_text(connection.read_response()) != "OK":
                    raise redis.exceptions.ConnectionError("CLIENT TRACKING ON refused")
            except BaseException:
                connection.disconnect()
                raise
            node = self._nodes[route.node] = _Tracked(route.node, connection)
        return node

    def _start(self, request: _Reading) -> None:
        for route in request.routes:
            try:
                node = self._node(route)
            except Exception:  # noqa: BLE001 - no mark; the next refusal asks again
                self._finish(request, failed=True)
                return
            if self.before_read is not None:
                self.before_read(route.key)
            node.keys.add(route.key)
            with self._lock:
                self._sales_of[route.key].add(request.sale)
            try:
                node.send(("SECKILL.INFO", route.key), functools.partial(self._answered, request, route.key))
            except OSError:
                self._lose(node)  # fails the reads already sent, through their handlers
                self._finish(request, failed=True)  # and this one, if it was the first
                return

    def _answered(self, request: _Reading, key: str, reply: Any) -> None:
        try:
            if not isinstance(reply, (dict, list)):
                raise redis.exceptions.DataError(f"SECKILL.INFO answered {reply!r}")
            end = int(fields_of(reply).get("end") or 0)
            request.answers[key] = (PartitionInfo.from_reply(reply), end, self._generation[key])
        except redis.exceptions.DataError:
            request.failed = True
            request.moved |= isinstance(reply, ErrorReply) and reply.message.startswith(("MOVED", "ASK"))
        if request.failed or len(request.answers) == len(request.routes):
            self._finish(request, request.failed)

    def _finish(self, request: _Reading, failed: bool) -> None:
        with self._lock:
            if self._reading.get(request.sale) is not request:
                return  # finished already (failed half way)
            del self._reading[request.sale]
            marked = not failed and self._shows_sold_out(request)
            if marked:
                ends = [end for _, end, _ in request.answers.values() if end > 0]
                self.marks[request.sale] = Mark(min(ends) / 1000 if ends else None)
        request.done.set_result(MOVED if request.moved else MARKED if marked else UNMARKED)

    def _shows_sold_out(self, request: _Reading) -> bool:
        answers = request.answers
        if any(self._generation[key] != seen for key, (_, _, seen) in answers.items()):
            return False  # a key changed (or its connection went) after it was read
        total = SaleInfo.total([info for info, _, _ in answers.values()])
        if not request.whole_sale:
            return total.remaining == 0
        # A partitioned sale: no units on their way between partitions either.
        return total.sold_out and total.pending_out == 0

    def _receive(self, node: _Tracked) -> None:
        try:
            data = node.sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._lose(node)
            return
        node.buffer += data
        position = 0
        while True:
            try:
                frame, position = parse(node.buffer, position)
            except Incomplete:
                break
            except ValueError:
                self._lose(node)
                return
            if isinstance(frame, Push):
                self._pushed(node, frame)
            elif node.handlers:
                node.handlers.popleft()(frame)
                node.waiting_since = time.monotonic()
            if self._nodes.get(node.name) is not node:
                return  # lost on the way (a ROLE that showed a replica)
        del node.buffer[:position]

    def _pushed(self, node: _Tracked, push: Push) -> None:
        if not push.items or as_text(push.items[0]) != "invalidate":
            return
        keys = push.items[1] if len(push.items) > 1 else None
        # A null list: the server flushed its tracking table (FLUSHALL, a full table).
        self._invalidate(node.keys if keys is None else [as_text(k) for k in keys], count=True)

    def _invalidate(self, keys: Any, count: bool) -> None:
        with self._lock:
            for key in list(keys):
                self._generation[key] += 1
                for sale in self._sales_of.get(key, ()):
                    if count:
                        self._invalidations[sale] += 1
                    self.marks.pop(sale, None)

    def _lose(self, node: _Tracked) -> None:
        """The connection failed or its node is no master: every mark it covered goes, before
        it stops counting as a connection (``connections``): whoever sees it gone sees them gone."""
        try:
            node.connection.disconnect()
        except Exception:  # noqa: BLE001 - it is gone either way
            pass
        self._invalidate(node.keys, count=False)
        self._nodes.pop(node.name, None)
        handlers, node.handlers = node.handlers, collections.deque()
        for handler in handlers:
            handler(ErrorReply("the tracking connection was lost"))

    def _check_roles(self) -> None:
        now = time.monotonic()
        for node in list(self._nodes.values()):
            if node.late():
                self._lose(node)
                continue
            if now - node.checked < ROLE_CHECK_S:
                continue
            node.checked = now
            if not any(self._sales_of.get(key, set()) & self.marks.keys() for key in node.keys):
                continue

            def checked(reply: Any, node: _Tracked = node) -> None:
                if not isinstance(reply, list) or not reply or as_text(reply[0]) != "master":
                    self._lose(node)

            try:
                node.send(("ROLE",), checked)
            except OSError:
                self._lose(node)


# -- the application client's side ------------------------------------------------------------

_registry = threading.Lock()


def cache_of(client: Any) -> SoldOutCache:
    """The sold-out cache of ``client`` (kept on the client object, like its node connections)."""
    found = getattr(client, "_seckill_sold_out", None)
    if found is None:
        with _registry:
            found = getattr(client, "_seckill_sold_out", None)
            if found is None:
                found = SoldOutCache()
                client._seckill_sold_out = found
    return cast(SoldOutCache, found)


def _sync_kind(kind: Any) -> Any:
    """The sync connection class matching an asyncio one (the cache's thread is not a loop)."""
    import redis.asyncio.connection as aio

    if isinstance(kind, type) and issubclass(kind, aio.SSLConnection):
        return redis.SSLConnection
    if kind is aio.UnixDomainSocketConnection:
        return redis.UnixDomainSocketConnection
    if isinstance(kind, type) and issubclass(kind, aio.AbstractConnection):
        return redis.Connection
    return kind


@functools.lru_cache(maxsize=None)
def _parameters(kind: Any) -> FrozenSet[str]:
    """Every keyword a connection class's constructors take."""
    names: Set[str] = set()
    for klass in inspect.getmro(kind):
        init = klass.__dict__.get("__init__")
        if init is not None:
            names |= set(inspect.signature(init).parameters)
    return frozenset(names)


def _accepted(kind: Any, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    names = _parameters(kind)
    return {k: v for k, v in kwargs.items() if k in names}


def route(client: Any, key: str) -> Route:
    """Where the cache reads ``key`` for ``client`` (sync or asyncio, one server or a cluster):
    the master its slot map names, with the client's settings, in RESP3."""
    import redis.asyncio

    if isinstance(client, (redis.RedisCluster, redis.asyncio.RedisCluster)):
        node = cast(Any, client).get_node_from_key(key)
        if isinstance(client, redis.RedisCluster):
            pool = client.get_redis_connection(node).connection_pool
            kind, kwargs, name = pool.connection_class, pool.connection_kwargs, node.name
        else:
            kind, kwargs, name = node.connection_class, node.connection_kwargs, node.name
    else:
        pool = client.connection_pool
        kind, kwargs, name = pool.connection_class, pool.connection_kwargs, ""
    sync_kind = _sync_kind(kind)
    settings = _accepted(sync_kind, {**kwargs, "protocol": 3})
    if sync_kind is not kind:  # an asyncio client's parser and retry are coroutine-based
        for setting in ("parser_class", "retry", "redis_connect_func", "event_dispatcher"):
            settings.pop(setting, None)
    return Route(key, name, lambda: own_connection(sync_kind, settings))

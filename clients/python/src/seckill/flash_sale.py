"""What a one-key ``Sale`` and a ``PartitionedSale`` both do, sync: the ``FlashSale`` methods,
written once over each kind's operations (``seckill.asyncio.FlashSale`` is the async twin, with
the same names and replies)."""

from __future__ import annotations

import threading
from concurrent.futures import Future, wait
from typing import Any, Callable, Iterator, List, Optional, Tuple

import redis

from ._args import check_attempt_id, integer, optional_integer, user_id
from ._durability import ack_timeout_of, durability_of, keep_for
from ._observe import acked_outcome, observed, purchase_outcome, refused_locally
from ._effects import Operation, check_client, run
from ._health import NodeHealth
from ._node import nodes_of
from ._tracking import MOVED, STALLED_READING_S, SoldOutCache, cache_of, route
from ._turns import BuyerTurns
from . import _rooms, _waiting
from ._rooms import DEFAULT_UPDATE_MS
from ._waiting import DEFAULT_RESYNC_MS, Place
from .info import Buyer, ClientStats, SaleEvent, SaleInfo, User
from .protocol import SOLD_OUT
from .retry import RetryPolicy


class SaleOps:
    """What both kinds of sale keep, and the operations each defines (see ``_effects``)."""

    client: Any
    retry: RetryPolicy

    #: The sale's name in the sold-out cache, and the keys whose reads make its mark.
    _cache_id: str
    _cache_keys: List[str]
    _whole_sale: bool

    @staticmethod
    def _check(user: Any, qty: Any = 1, replicas: Any = 0, timeout_ms: Any = 0) -> None:
        """A call's arguments by the package's policy (``_args``), before anything is sent:
        ``qty`` None is "all" (``cancel``)."""
        user_id(user)
        optional_integer("qty", qty, 1)
        integer("replicas", replicas, 0)
        integer("timeout_ms", timeout_ms, 0)

    def __init__(self, client: Any, retry: RetryPolicy, local_cache: bool = False, *,
                 durability: str = "replica", ack_timeout_ms: Optional[int] = None,
                 read_from_replicas: bool = False) -> None:
        self.client = client
        #: How try_buy and cancel retry a call whose answer was lost (each carries a fresh
        #: attempt id, so a retry never buys or cancels twice).
        self.retry = retry
        #: What a write the buyer is told of survives (see ``_durability``): "replica" (the
        #: default), "master" or "aof".
        self.durability = durability_of(durability)
        #: How long a write waits for its acknowledgement (default: the retry deadline / 10,
        #: between 100 ms and 1 s; 1 s more for "aof") before it is ``NotReplicatedError``.
        self.ack_timeout_ms = ack_timeout_of(ack_timeout_ms, retry.deadline_s, self.durability)
        self._keep = keep_for(self.durability, self.ack_timeout_ms)
        if not isinstance(read_from_replicas, bool):
            raise TypeError(f"read_from_replicas must be a bool, not {type(read_from_replicas).__name__}")
        #: Whether ``position`` and ``place`` read from a replica of the key's master (the
        #: master when it has none, or it does not answer): see docs/waiting-room.md.
        self.read_from_replicas = read_from_replicas
        self._stats = ClientStats()
        self._stats_lock = threading.Lock()
        #: The client's sold-out cache, with ``local_cache=True`` (see ``_tracking``).
        self._sold_out: Optional[SoldOutCache] = cache_of(client) if local_cache else None

    @property
    def stats(self) -> ClientStats:
        """What this handle did, for tuning and benchmarks."""
        with self._stats_lock:
            stats = ClientStats(**vars(self._stats))
        if self._sold_out is not None:
            stats.invalidations = self._sold_out.invalidations(self._cache_id)
        return stats

    def _refused_locally(self) -> bool:
        """Whether the sold-out cache answers this purchase: SOLD_OUT, nothing sent."""
        if self._sold_out is None or not self._sold_out.refuses(self._cache_id):
            return False
        self._count("local_refusals")
        refused_locally()
        return True

    def _learn(self, code: int) -> "Optional[Future[str]]":
        """After the server's answer to a purchase: a SOLD_OUT has the cache read the sale
        (the caller waits for the reads, STALLED_READING_S at most, so that the buyers after it
        find the mark)."""
        if code != SOLD_OUT or self._sold_out is None:
            return None
        try:
            return self._sold_out.learn(
                self._cache_id, lambda: [route(self.client, key) for key in self._cache_keys], self._whole_sale)
        except (AttributeError, KeyError, redis.exceptions.RedisError):
            return None  # the cluster client's slot map is being relearned: the next refusal asks

    def _stalled(self, health: NodeHealth) -> None:
        """A reading still unanswered after STALLED_READING_S: the nodes it waits for are taken
        as down (in the client's ``health``), so that the next refusals neither read nor wait
        while they are."""
        assert self._sold_out is not None
        for node in self._sold_out.unanswered(self._cache_id):
            health.failed(node)

    def _count(self, name: str, by: int = 1) -> None:
        with self._stats_lock:
            setattr(self._stats, name, getattr(self._stats, name) + by)

    def _buy_op(self, user: User, qty: int, wait: Optional[Tuple[int, int]],
                attempt_id: Optional[str] = None) -> Operation[Tuple[int, int]]:
        raise NotImplementedError

    def _cancel_op(self, user: User, qty: Optional[int]) -> Operation[int]:
        raise NotImplementedError

    def _bought_op(self, user: User) -> Operation[int]:
        raise NotImplementedError

    def _join_op(self, user: User) -> Operation[int]:
        raise NotImplementedError

    def _position_op(self, user: User) -> Operation[Optional[int]]:
        raise NotImplementedError

    def _admit_op(self, n: int) -> Operation[int]:
        raise NotImplementedError

    def _room_key(self, user: User) -> str:
        """The key whose waiting room ``user`` waits in."""
        raise NotImplementedError

    def _on_resync(self, user: User) -> Optional[Callable[[], Operation[None]]]:
        """What the room's reader runs after it asked the server (see ``_rooms.OnResync``)."""
        return None

    def _leave_op(self, user: User) -> Operation[bool]:
        return (yield from _waiting.leave(self._room_key(user), user))

    def _place_op(self, user: User) -> Operation[Optional[Place]]:
        return (yield from _waiting.place(self._room_key(user), user, self.read_from_replicas))

    def _confirm_op(self, user: User) -> Operation[bool]:
        raise NotImplementedError

    def _restock_op(self, units: int) -> Operation[None]:
        raise NotImplementedError

    def _info_op(self) -> Operation[SaleInfo]:
        raise NotImplementedError

    def _buyers_op(self) -> Operation[List[Buyer]]:
        raise NotImplementedError

    def _create_group_op(self, group: str) -> Operation[None]:
        raise NotImplementedError

    def _read_group_op(self, group: str, consumer: str, count: int) -> Operation[List[SaleEvent]]:
        raise NotImplementedError

    def _ack_op(self, group: str, event: SaleEvent) -> Operation[bool]:
        raise NotImplementedError


class FlashSale(SaleOps):
    """A flash sale, one key or partitioned, on a sync redis-py client (``redis.Redis`` or
    ``redis.RedisCluster``). Safe to share between threads: redis-py pools its connections."""

    _new_lock = staticmethod(threading.Lock)

    def __init__(self, client: Any, retry: RetryPolicy, local_cache: bool = False, *,
                 durability: str = "replica", ack_timeout_ms: Optional[int] = None,
                 read_from_replicas: bool = False) -> None:
        check_client(client, asyncio=False)
        super().__init__(client, retry, local_cache, durability=durability, ack_timeout_ms=ack_timeout_ms,
                   read_from_replicas=read_from_replicas)
        self._turns = BuyerTurns()

    def _run(self, operation: Operation[Any]) -> Any:
        return run(operation, self.client)

    def _mark_if_sold_out(self, code: int) -> None:
        """After the server's answer: waits for the sold-out cache's reads (``_learn``); a
        key they found moved has the slot map relearned and the reads made once more."""
        if code != SOLD_OUT or self._sold_out is None or not nodes_of(self.client).all_up(self._cache_keys):
            return  # a sale with a key on a down node is read by no one: nothing to wait for
        for _ in range(2):
            reading = self._learn(code)
            if reading is None:
                return
            wait([reading], timeout=STALLED_READING_S)
            if not reading.done():
                self._stalled(nodes_of(self.client).health)
                return
            if reading.result() != MOVED:
                return
            nodes_of(self.client).refresh_topology()

    @observed("try_buy", purchase_outcome)
    def try_buy(self, user: User, qty: int = 1, *, attempt_id: Optional[str] = None) -> int:
        """Buys ``qty`` units for ``user``; replies as SECKILL.TRY: the units left (>= 0), or
        SOLD_OUT, OVER_LIMIT, NOT_STARTED, ENDED. A partitioned sale borrows units from its
        other partitions when the buyer's runs dry, so it sells out completely.

        The purchase carries a fresh attempt id: a call whose answer is lost (timeout, dropped
        connection, failover) is sent again with it until a definite answer, within
        ``self.retry``; it is never bought twice. Past the deadline: OutcomeUnknownError. A
        buyer's calls take turns in this process (the module knows a buyer's last attempt).

        With the handle's ``durability`` ("replica" by default) the answer comes once a replica
        acknowledged the purchase; NotReplicatedError (an OutcomeUnknownError) if none did
        within ``ack_timeout_ms``. ``attempt_id``: send a purchase again under the id of an
        earlier one whose outcome is unknown (its ``attempt_id``): it answers the same and is
        never made twice.

        With ``local_cache=True``, a sale this process saw sold out is refused here, with
        nothing sent, until Redis tells of a change (docs/clients.md, "The sold-out cache")."""
        self._check(user, qty=qty)
        check_attempt_id(attempt_id)
        if self._refused_locally():
            return SOLD_OUT
        with self._turns.take(user):
            code, _ = self._run(self._buy_op(user, qty, None, attempt_id))
        self._mark_if_sold_out(code)
        return int(code)

    @observed("try_buy", acked_outcome)
    def try_buy_acked(self, user: User, qty: int = 1, replicas: int = 1, timeout_ms: int = 1_000) -> Tuple[int, int]:
        """``try_buy`` with ``WAIT replicas timeout_ms`` pipelined on one connection to the
        key's master: ``(code, acked)``, acked being how many replicas had the purchase before
        the timeout (0 for one that had to be sent again). A purchase acknowledged by a replica
        survives the failover to it (see docs/durability.md). The sold-out cache answers it as
        ``try_buy``: ``(SOLD_OUT, 0)``."""
        self._check(user, qty=qty, replicas=replicas, timeout_ms=timeout_ms)
        if self._refused_locally():
            return SOLD_OUT, 0
        with self._turns.take(user):
            code, acked = self._run(self._buy_op(user, qty, (replicas, timeout_ms)))
        self._mark_if_sold_out(code)
        return int(code), int(acked)

    @observed("confirm")
    def confirm(self, user: User) -> bool:
        """Makes the user's held units final: False if nothing was held; NoHoldsError on a
        sale made without HOLD."""
        self._check(user)
        return bool(self._run(self._confirm_op(user)))

    @observed("cancel")
    def cancel(self, user: User, qty: Optional[int] = None) -> int:
        """Returns ``qty`` of the user's units (all with None); replies the units returned.
        Retried under an attempt id as ``try_buy`` is: never returned twice."""
        self._check(user, qty=qty)
        with self._turns.take(user):
            return int(self._run(self._cancel_op(user, qty)))

    @observed("restock")
    def restock(self, units: int) -> None:
        """Adds ``units`` (split evenly over the partitions of a partitioned sale)."""
        self._run(self._restock_op(units))

    @observed("join")
    def join(self, user: User) -> int:
        """Puts ``user`` in the sale's waiting room (a sale made with ``queue``) and replies as
        SECKILL.JOIN: its position (>= 1) while it waits, 0 once admitted, SOLD_OUT once the
        sale is sold out; before START, the cohort's size. NoQueueError without a room."""
        self._check(user)
        return int(self._run(self._join_op(user)))

    @observed("position")
    def position(self, user: User) -> Optional[int]:
        """Where ``user`` stands, as ``join`` replies, without joining; None if it never joined."""
        self._check(user)
        place: Optional[int] = self._run(self._position_op(user))
        return place

    def wait_for_turn(self, user: User, *, resync_ms: int = DEFAULT_RESYNC_MS,
                      update_ms: int = DEFAULT_UPDATE_MS) -> Iterator[Place]:
        """Joins ``user`` to the waiting room and yields its ``Place`` (an int, as ``join``
        replies it, with ``eta_ms`` and ``drawn``) each time its number changes, ending with 0
        (its turn: buy within the window) or SOLD_OUT. Before START the number is how many
        wait (``drawn`` False). Built on the sale's event stream (a sale made with
        ``events=True``; InvalidArgumentError otherwise), read by one thread per client and
        sale key on the package's own connection, shared by every waiter of the process: a
        waiter costs memory, not a read or a connection (see docs/waiting-room.md). With
        PRESENCE the reader joins its waiters again at a third of it. Stopping the iteration
        before the turn (``close()``, a closed page) leaves the room: the place goes to the
        next. Its turn, a sell-out and the server's answers come at once; a move of its number
        (everyone moves up at each admission) at most every ``update_ms`` (default 3 000: a
        waiting page then costs a wake every few seconds, not one per admission). The server
        is asked where everyone stands after ``resync_ms`` without an entry (and before START
        every ``resync_ms``: the cohort grows with no entry to say so). Arguments are checked here, before
        the first place is asked for."""
        self._check(user)
        integer("resync_ms", resync_ms, 1)
        integer("update_ms", update_ms, 1)
        return _rooms.wait_for_turn(self.client, self._room_key(user), user, resync_ms, update_ms,
                                    self._on_resync(user))

    @observed("leave")
    def leave(self, user: User) -> bool:
        """Takes ``user`` out of the waiting room (SECKILL.LEAVE): its place, or the unit
        promised to it once admitted, goes to the next. True if it was in the room."""
        self._check(user)
        return bool(self._run(self._leave_op(user)))

    @observed("place")
    def place(self, user: User) -> Optional[Place]:
        """Where ``user`` stands, with its ETA (SECKILL.POSITION ... WITHETA): None when it is
        not in the room (never joined, left, lapsed or dropped)."""
        self._check(user)
        found: Optional[Place] = self._run(self._place_op(user))
        return found

    @observed("admit")
    def admit(self, n: int) -> int:
        """Admits up to ``n`` users from the head of the waiting room (SECKILL.ADMIT); replies
        how many were (never more than the units left can serve). A partitioned sale splits
        ``n`` over its partitions' rooms, going round them from call to call."""
        integer("n", n, 1)
        return int(self._run(self._admit_op(n)))

    @observed("bought")
    def bought(self, user: User) -> int:
        """Units ``user`` owns (held or final)."""
        self._check(user)
        return int(self._run(self._bought_op(user)))

    @observed("info")
    def info(self) -> SaleInfo:
        """The sale's totals (a partitioned sale's partitions read one after the other)."""
        info: SaleInfo = self._run(self._info_op())
        return info

    def buyers(self) -> Iterator[Buyer]:
        """Every buyer (a SECKILL.BUYERS scan of every key)."""
        found: List[Buyer] = self._run(self._buyers_op())
        return iter(found)

    def create_group(self, group: str) -> None:
        """Creates the consumer group on the sale's event streams; an existing one is kept."""
        self._run(self._create_group_op(group))

    def read_group(self, group: str, consumer: str, count: int = 100) -> List[SaleEvent]:
        """Up to ``count`` new events per stream for ``consumer`` of ``group``."""
        events: List[SaleEvent] = self._run(self._read_group_op(group, consumer, count))
        return events

    def ack(self, group: str, event: SaleEvent) -> bool:
        """Acknowledges an event read by ``read_group``."""
        return bool(self._run(self._ack_op(group, event)))

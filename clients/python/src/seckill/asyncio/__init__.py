"""The asyncio API: the same classes, names and replies as the sync one, on
``redis.asyncio.Redis`` and ``redis.asyncio.RedisCluster``. Each operation is the sync API's own
code (see ``seckill._effects``) driven on the event loop: a retry's backoff and the borrowers'
one-at-a-time rule are asyncio waits, so no call blocks the loop.

    from seckill import SaleSpec
    from seckill.asyncio import Sale

    sale = await Sale.create(redis.asyncio.Redis(), "sale:wine", SaleSpec(stock=100, partitions=1))
    code = await sale.try_buy("user:42")
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Awaitable, Callable, Generator, List, Optional, Tuple

import redis
import redis.asyncio

from .. import _key
from .._durability import keep_of
from .._observe import acked_outcome, observed, purchase_outcome
from .._effects import Acquire, Call, Effect, Operation, Release, Sleep, check_client
from .._node import CLUSTER_CLIENT_SLIPS, LOST_CONNECTION, NodeCall, READ_SENDS, lost_node, read_backoff_s, resend_read, slipped
from .._tracking import MOVED, STALLED_READING_S
from ._node import nodes_of
from .._turns import AsyncBuyerTurns
from .._rooms import DEFAULT_UPDATE_MS
from .._waiting import DEFAULT_RESYNC_MS, Place
from . import _rooms
from .._args import check_attempt_id, integer
from ..errors import translate
from ..flash_sale import SaleOps
from ..info import Buyer, PartitionInfo, SaleEvent, SaleInfo, User
from ..partitioned import DEFAULT_SEAL_MS, PartitionedOps
from ..protocol import SOLD_OUT
from ..retry import RetryPolicy
from ..sale import OneKeyOps
from ..spec import SaleSpec

__all__ = ["FlashSale", "Lock", "LockGuard", "PartitionedSale", "Sale", "run"]


async def _call(client: Any, *args: Any) -> Any:
    """``seckill._effects.call`` on the event loop."""
    for attempt in range(READ_SENDS):
        try:
            return await client.execute_command(*args)
        except redis.exceptions.ResponseError as error:
            raise translate(error) from error
        except (*CLUSTER_CLIENT_SLIPS, *LOST_CONNECTION) as error:
            if not isinstance(client, redis.asyncio.RedisCluster) or not resend_read(error, args, attempt):
                if isinstance(error, CLUSTER_CLIENT_SLIPS) and slipped(error):
                    raise lost_node(error) from error
                raise
            await nodes_of(client).refresh_topology()
            await asyncio.sleep(read_backoff_s(attempt))
    raise AssertionError("unreachable")


async def _perform(client: Any, effect: Effect) -> Any:
    if isinstance(effect, Call):
        return await _call(client, *effect.args)
    if isinstance(effect, Sleep):
        await asyncio.sleep(effect.seconds)
        return None
    if isinstance(effect, NodeCall):
        return await nodes_of(client).perform(effect)
    if isinstance(effect, Acquire):
        if not effect.blocking and effect.lock.locked():
            return False
        await effect.lock.acquire()
        return True
    if isinstance(effect, Release):
        effect.lock.release()
        return None
    raise TypeError(f"unknown effect {effect!r}")


async def run(operation: Operation[Any], client: Any) -> Any:
    """Runs ``operation`` to its end on the asyncio ``client``. A cancelled task's
    CancelledError is thrown into the operation, so its locks are released on the way out."""
    check_client(client, asyncio=True)
    return await drive(operation, lambda effect: _perform(client, effect))


async def drive(operation: Generator[Any, Any, Any], perform_one: Callable[[Any], Awaitable[Any]]) -> Any:
    """``seckill._effects.drive`` on the event loop: each effect awaited."""
    reply: Any = None
    failure: Optional[BaseException] = None
    while True:
        try:
            effect = operation.send(reply) if failure is None else operation.throw(failure)
        except StopIteration as done:
            return done.value
        reply, failure = None, None
        try:
            reply = await perform_one(effect)
        except BaseException as error:  # noqa: BLE001 - thrown into the operation
            failure = error


class FlashSale(SaleOps):
    """``seckill.FlashSale``, async: a flash sale, one key or partitioned, on a
    ``redis.asyncio`` client. Share one handle between the tasks of one event loop."""

    _new_lock = staticmethod(asyncio.Lock)

    def __init__(self, client: Any, retry: RetryPolicy, local_cache: bool = False, *,
                 durability: str = "replica", ack_timeout_ms: Optional[int] = None,
                 read_from_replicas: bool = False) -> None:
        check_client(client, asyncio=True)
        super().__init__(client, retry, local_cache, durability=durability, ack_timeout_ms=ack_timeout_ms,
                   read_from_replicas=read_from_replicas)
        self._turns = AsyncBuyerTurns()

    async def _run(self, operation: Operation[Any]) -> Any:
        return await run(operation, self.client)

    async def _mark_if_sold_out(self, code: int) -> None:
        """``seckill.FlashSale._mark_if_sold_out`` on the event loop (the reads are the cache
        thread's)."""
        if code != SOLD_OUT or self._sold_out is None or not nodes_of(self.client).all_up(self._cache_keys):
            return  # a sale with a key on a down node is read by no one: nothing to wait for
        for _ in range(2):
            reading = self._learn(code)
            if reading is None:
                return
            await asyncio.wait([asyncio.wrap_future(reading)], timeout=STALLED_READING_S)
            if not reading.done():
                self._stalled(nodes_of(self.client).health)
                return
            if reading.result() != MOVED:
                return
            await nodes_of(self.client).refresh_topology()

    @observed("try_buy", purchase_outcome)
    async def try_buy(self, user: User, qty: int = 1, *, attempt_id: Optional[str] = None) -> int:
        """See ``seckill.FlashSale.try_buy``."""
        self._check(user, qty=qty)
        check_attempt_id(attempt_id)
        if self._refused_locally():
            return SOLD_OUT
        async with self._turns.take(user):
            code, _ = await self._run(self._buy_op(user, qty, None, attempt_id))
        await self._mark_if_sold_out(code)
        return int(code)

    @observed("try_buy", acked_outcome)
    async def try_buy_acked(self, user: User, qty: int = 1, replicas: int = 1,
                            timeout_ms: int = 1_000) -> Tuple[int, int]:
        """See ``seckill.FlashSale.try_buy_acked``."""
        self._check(user, qty=qty, replicas=replicas, timeout_ms=timeout_ms)
        if self._refused_locally():
            return SOLD_OUT, 0
        async with self._turns.take(user):
            code, acked = await self._run(self._buy_op(user, qty, (replicas, timeout_ms)))
        await self._mark_if_sold_out(code)
        return int(code), int(acked)

    @observed("confirm")
    async def confirm(self, user: User) -> bool:
        """See ``seckill.FlashSale.confirm``."""
        self._check(user)
        return bool(await self._run(self._confirm_op(user)))

    @observed("cancel")
    async def cancel(self, user: User, qty: Optional[int] = None) -> int:
        """See ``seckill.FlashSale.cancel``."""
        self._check(user, qty=qty)
        async with self._turns.take(user):
            return int(await self._run(self._cancel_op(user, qty)))

    @observed("restock")
    async def restock(self, units: int) -> None:
        """See ``seckill.FlashSale.restock``."""
        await self._run(self._restock_op(units))

    @observed("join")
    async def join(self, user: User) -> int:
        """See ``seckill.FlashSale.join``."""
        self._check(user)
        return int(await self._run(self._join_op(user)))

    @observed("position")
    async def position(self, user: User) -> Optional[int]:
        """See ``seckill.FlashSale.position``."""
        self._check(user)
        place: Optional[int] = await self._run(self._position_op(user))
        return place

    def wait_for_turn(self, user: User, *, resync_ms: int = DEFAULT_RESYNC_MS,
                      update_ms: int = DEFAULT_UPDATE_MS) -> AsyncIterator[Place]:
        """See ``seckill.FlashSale.wait_for_turn``: an async iterator here (``async for``), one
        reader task per client and sale key shared by every waiter of the event loop."""
        self._check(user)
        integer("resync_ms", resync_ms, 1)
        integer("update_ms", update_ms, 1)
        return _rooms.wait_for_turn(self.client, self._room_key(user), user, resync_ms, update_ms,
                                    self._on_resync(user))

    @observed("leave")
    async def leave(self, user: User) -> bool:
        """See ``seckill.FlashSale.leave``."""
        self._check(user)
        return bool(await self._run(self._leave_op(user)))

    @observed("place")
    async def place(self, user: User) -> Optional[Place]:
        """See ``seckill.FlashSale.place``."""
        self._check(user)
        found: Optional[Place] = await self._run(self._place_op(user))
        return found

    @observed("admit")
    async def admit(self, n: int) -> int:
        """See ``seckill.FlashSale.admit``."""
        integer("n", n, 1)
        return int(await self._run(self._admit_op(n)))

    @observed("bought")
    async def bought(self, user: User) -> int:
        """See ``seckill.FlashSale.bought``."""
        self._check(user)
        return int(await self._run(self._bought_op(user)))

    @observed("info")
    async def info(self) -> SaleInfo:
        """See ``seckill.FlashSale.info``."""
        info: SaleInfo = await self._run(self._info_op())
        return info

    async def buyers(self) -> List[Buyer]:
        """See ``seckill.FlashSale.buyers`` (a list here)."""
        found: List[Buyer] = await self._run(self._buyers_op())
        return found

    async def create_group(self, group: str) -> None:
        """See ``seckill.FlashSale.create_group``."""
        await self._run(self._create_group_op(group))

    async def read_group(self, group: str, consumer: str, count: int = 100) -> List[SaleEvent]:
        """See ``seckill.FlashSale.read_group``."""
        events: List[SaleEvent] = await self._run(self._read_group_op(group, consumer, count))
        return events

    async def ack(self, group: str, event: SaleEvent) -> bool:
        """See ``seckill.FlashSale.ack``."""
        return bool(await self._run(self._ack_op(group, event)))


class Sale(OneKeyOps, FlashSale):
    """``seckill.Sale``, async."""

    @classmethod
    async def create(cls, client: Any, key: str, spec: SaleSpec, *, retry: RetryPolicy = RetryPolicy(),
                     local_cache: bool = False, replace: bool = False, durability: str = "replica",
                     ack_timeout_ms: Optional[int] = None,
                 read_from_replicas: bool = False) -> "Sale":
        """See ``seckill.Sale.create``."""
        keep = keep_of(durability, ack_timeout_ms, retry.deadline_s)
        await run(cls._create_op(key, spec, replace, keep), client)
        return cls(client, key, retry, local_cache=local_cache, durability=durability, ack_timeout_ms=ack_timeout_ms,
                   read_from_replicas=read_from_replicas)

    @classmethod
    async def open(cls, client: Any, key: str, *, retry: RetryPolicy = RetryPolicy(),
                   local_cache: bool = False, durability: str = "replica",
                   ack_timeout_ms: Optional[int] = None,
                 read_from_replicas: bool = False) -> "Sale":
        """See ``seckill.Sale.open``."""
        sale = cls(client, key, retry, local_cache=local_cache, durability=durability, ack_timeout_ms=ack_timeout_ms,
                   read_from_replicas=read_from_replicas)
        await run(cls._open_op(key), client)
        await run(_key.require_durability(key, sale._keep), client)
        return sale

    async def delete(self) -> None:
        """See ``seckill.Sale.delete``."""
        await self._run(self._delete_op())


class PartitionedSale(PartitionedOps, FlashSale):
    """``seckill.PartitionedSale``, async."""

    @classmethod
    async def create(cls, client: Any, name: str, spec: SaleSpec, *, seal_ms: int = DEFAULT_SEAL_MS,
                     retry: RetryPolicy = RetryPolicy(), local_cache: bool = False,
                     replace: bool = False, durability: str = "replica",
                     ack_timeout_ms: Optional[int] = None,
                 read_from_replicas: bool = False) -> "PartitionedSale":
        """See ``seckill.PartitionedSale.create``."""
        keep = keep_of(durability, ack_timeout_ms, retry.deadline_s)
        await run(cls._create_op(name, spec, replace, keep), client)
        return cls(client, name, spec, seal_ms, retry, local_cache=local_cache, durability=durability,
                   ack_timeout_ms=ack_timeout_ms,
                   read_from_replicas=read_from_replicas)

    @classmethod
    async def open(cls, client: Any, name: str, *, seal_ms: int = DEFAULT_SEAL_MS,
                   retry: RetryPolicy = RetryPolicy(), local_cache: bool = False, durability: str = "replica",
                   ack_timeout_ms: Optional[int] = None,
                 read_from_replicas: bool = False) -> "PartitionedSale":
        """See ``seckill.PartitionedSale.open``."""
        spec = await run(cls._open_op(name), client)
        sale = cls(client, name, spec, seal_ms, retry, local_cache=local_cache, durability=durability,
                   ack_timeout_ms=ack_timeout_ms,
                   read_from_replicas=read_from_replicas)
        await run(_key.require_durability(sale.keys[0], sale._keep), client)
        return sale

    @staticmethod
    async def delete(client: Any, name: str) -> None:
        """See ``seckill.PartitionedSale.delete``."""
        await run(PartitionedOps._delete_op(name), client)

    async def recover(self) -> int:
        """See ``seckill.PartitionedSale.recover``."""
        return int(await self._run(self._recover_op()))

    async def partition_infos(self) -> List[PartitionInfo]:
        """See ``seckill.PartitionedSale.partition_infos``."""
        infos: List[PartitionInfo] = await self._run(self._partition_infos_op())
        return infos


# Last: the lock's module uses this one's driver.
from .lock import Lock, LockGuard  # noqa: E402

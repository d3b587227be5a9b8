"""A one-key sale: one ``SECKILL.INIT`` key, the way most users start. The same interface as a
partitioned sale (``FlashSale``), without partitions to route to or borrow from."""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from . import _key
from ._durability import Keep, keep_of
from ._effects import Call, Operation, run
from .errors import InvalidArgumentError, NoSaleError
from .flash_sale import FlashSale, SaleOps
from .info import Buyer, SaleEvent, SaleInfo, User
from .partitioned import check_units
from .protocol import DRAINED, SOLD_OUT
from .retry import Retrier, RetryPolicy
from .spec import SaleSpec


class OneKeyOps(SaleOps):
    """A one-key sale's state and operations, shared by the sync ``Sale`` and
    ``seckill.asyncio.Sale``."""

    def __init__(self, client: Any, key: str, retry: RetryPolicy = RetryPolicy(), *, local_cache: bool = False,
                 durability: str = "replica", ack_timeout_ms: Optional[int] = None,
                 read_from_replicas: bool = False) -> None:
        _key.check_key(key)
        super().__init__(client, retry, local_cache, durability=durability, ack_timeout_ms=ack_timeout_ms,
                   read_from_replicas=read_from_replicas)
        self.key = key
        self._cache_id, self._cache_keys, self._whole_sale = f"key:{key}", [key], False

    @staticmethod
    def _create_op(key: str, spec: SaleSpec, replace: bool = False, keep: Optional[Keep] = None) -> Operation[None]:
        _key.check_key(key)
        if not isinstance(replace, bool):
            raise TypeError(f"replace must be a bool, not {type(replace).__name__}")
        if spec.partitions not in (0, 1):
            raise InvalidArgumentError(
                "a one-key sale has one partition (PartitionedSale spreads a sale over more)"
            )
        spec.check()
        args = spec.init_args(key, spec.stock)
        if spec.events:
            stream = _key.events_stream_of(key)
            if stream is None:
                raise InvalidArgumentError(
                    f"{key!r} has braces but no hash tag: no stream name shares its slot for sure"
                )
            args += ["EVENTS", stream]
            if spec.events_maxlen is not None:
                args += ["MAXLEN", spec.events_maxlen]
        yield from _key.require_module()
        yield from _key.require_durability(key, keep)
        if replace:
            # The old sale's events go with it; INIT ... REPLACE resets the key in one step.
            stream = _key.events_stream_of(key)
            if stream is not None:
                yield Call(("DEL", stream))
            args += ["REPLACE"]
        yield from _key.kept_write(tuple(args), keep)

    @staticmethod
    def _open_op(key: str) -> Operation[None]:
        _key.check_key(key)
        yield from _key.require_module()
        yield from _key.info(key)

    def _delete_op(self) -> Operation[None]:
        try:
            stream = yield from _key.event_stream(self.key)
        except NoSaleError:
            return
        if stream is not None:
            yield Call(("DEL", stream))
        yield Call(("DEL", self.key))

    def _buy_op(self, user: User, qty: int, wait: Optional[Tuple[int, int]],
                attempt_id: Optional[str] = None) -> Operation[Tuple[int, int]]:
        self._count("tries")
        attempt_id = attempt_id or _key.new_attempt_id()
        retrier = Retrier(self.retry, attempt_id)
        if wait is None:
            code, acked = (yield from _key.try_buy(retrier, self.key, user, qty, attempt_id, self._keep)), 0
        else:
            code, acked = yield from _key.try_and_wait(retrier, self.key, user, qty, attempt_id, wait)
        # A Sale on one partition of a partitioned sale: that key alone has no units.
        return (SOLD_OUT if code == DRAINED else code), acked

    def _cancel_op(self, user: User, qty: Optional[int]) -> Operation[int]:
        return (yield from _key.cancel(self.retry, self.key, user, qty, self._keep))

    def _bought_op(self, user: User) -> Operation[int]:
        return (yield from _key.bought(self.key, user))

    def _join_op(self, user: User) -> Operation[int]:
        return (yield from _key.join(self.key, user))

    def _position_op(self, user: User) -> Operation[Optional[int]]:
        return (yield from _key.position(self.key, user, self.read_from_replicas))

    def _admit_op(self, n: int) -> Operation[int]:
        return (yield from _key.admit(self.key, n))

    def _room_key(self, user: User) -> str:
        return self.key

    def _confirm_op(self, user: User) -> Operation[bool]:
        return (yield from _key.confirm(self.key, user, self._keep))

    def _restock_op(self, units: int) -> Operation[None]:
        check_units(units)
        yield from _key.restock(self.key, units, self._keep)

    def _info_op(self) -> Operation[SaleInfo]:
        return SaleInfo.total([(yield from _key.info(self.key))])

    def _buyers_op(self) -> Operation[List[Buyer]]:
        return (yield from _key.buyers(self.key, 0))

    def _create_group_op(self, group: str) -> Operation[None]:
        stream = yield from _key.event_stream(self.key)
        if stream is not None:
            yield from _key.create_group(stream, group)

    def _read_group_op(self, group: str, consumer: str, count: int) -> Operation[List[SaleEvent]]:
        stream = yield from _key.event_stream(self.key)
        if stream is None:
            return []
        return (yield from _key.read_group(0, stream, group, consumer, count))

    def _ack_op(self, group: str, event: SaleEvent) -> Operation[bool]:
        return (yield from _key.ack(group, event))


class Sale(OneKeyOps, FlashSale):
    """A sale on one key (made by ``SECKILL.INIT``, here or anywhere else), on a sync redis-py
    client. ``Sale(client, key)`` sends nothing; ``Sale.open`` checks the key and the module
    first. ``local_cache=True``: purchases of a sale this process saw sold out are refused
    here until Redis pushes a change (see ``FlashSale.try_buy``). Safe to share between
    threads."""

    @classmethod
    def create(cls, client: Any, key: str, spec: SaleSpec, *, retry: RetryPolicy = RetryPolicy(),
               local_cache: bool = False, replace: bool = False, durability: str = "replica",
               ack_timeout_ms: Optional[int] = None,
                 read_from_replicas: bool = False) -> "Sale":
        """Makes the sale at ``key`` (``SECKILL.INIT``, one command) from ``spec``, whose
        ``partitions`` must be 1; with ``events``, its stream is ``key:events`` in the key's
        hash slot (the key's hash tag, or ``{key}:events``). Every argument and the module are
        checked before anything is written; SaleExistsError if a sale is there already, unless
        ``replace``: then that sale is reset to ``spec`` (no buyers; its event stream deleted).
        The sale is made as durably as the handle's writes (NotReplicatedError if no replica
        acknowledged it in time)."""
        keep = keep_of(durability, ack_timeout_ms, retry.deadline_s)
        run(cls._create_op(key, spec, replace, keep), client)
        return cls(client, key, retry, local_cache=local_cache, durability=durability, ack_timeout_ms=ack_timeout_ms,
                   read_from_replicas=read_from_replicas)

    @classmethod
    def open(cls, client: Any, key: str, *, retry: RetryPolicy = RetryPolicy(), local_cache: bool = False,
             durability: str = "replica", ack_timeout_ms: Optional[int] = None,
                 read_from_replicas: bool = False) -> "Sale":
        """A handle once the server has shown a sale at ``key`` (NoSaleError if not) and a
        module this package works with (ModuleMissingError, ModuleTooOldError), and, for
        ``durability="aof"``, WAITAOF (InvalidArgumentError without it)."""
        sale = cls(client, key, retry, local_cache=local_cache, durability=durability, ack_timeout_ms=ack_timeout_ms,
                   read_from_replicas=read_from_replicas)
        run(cls._open_op(key), client)
        run(_key.require_durability(key, sale._keep), client)
        return sale

    def delete(self) -> None:
        """Deletes the sale key and its event stream."""
        self._run(self._delete_op())

"""How a sale is set up: what ``create`` checks, and what a partitioned sale's manifest
records."""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import gcd
from typing import Any, List, Optional, Tuple

from ._args import MAX_UNITS, integer
from .errors import ArgumentTypeError, InvalidArgumentError
from .protocol import MAX_PARTITIONS

#: A ``PartitionedSale``'s partitions when its spec leaves them at 0.
DEFAULT_PARTITIONS = 16


@dataclass(frozen=True)
class SaleSpec:
    """How a sale is set up: a one-key ``Sale`` or a ``PartitionedSale``, whose manifest records
    it. ``partitions`` 0 (the default) is the kind's own: 1 for a ``Sale``,
    ``DEFAULT_PARTITIONS`` (16) for a ``PartitionedSale``."""

    stock: int
    partitions: int = 0
    limit: int = 1
    hold_ms: Optional[int] = None
    start_ms: Optional[int] = None
    end_ms: Optional[int] = None
    events: bool = False
    events_maxlen: Optional[int] = None
    #: A waiting room in front of the stock (a partitioned sale: one per partition, the rate
    #: split by stock share): see docs/waiting-room.md.
    queue: bool = False
    #: ``(users, per_ms)``: the room admits ``users`` every ``per_ms``; None: by ``admit`` only.
    admit_rate: Optional[Tuple[int, int]] = None
    #: How long an admitted user may buy (None: the module's 60 000 ms).
    window_ms: Optional[int] = None
    #: A waiting user keeps its place by joining again within this long (``wait_for_turn``
    #: does, at a third of it); absent longer, it is dropped in its turn. None: kept until its
    #: turn.
    presence_ms: Optional[int] = None

    def check(self) -> None:
        """Raises TypeError or InvalidArgumentError (a ValueError) for any setting the module
        would refuse, before anything is written."""

        integer("partitions", self.partitions, 0, MAX_PARTITIONS)
        integer("stock", self.stock, 0)
        integer("limit", self.limit, 1)
        for what in ("hold_ms", "start_ms", "end_ms", "events_maxlen"):
            value = getattr(self, what)
            if value is not None:
                integer(what, value, 1)
        if not isinstance(self.events, bool):
            raise ArgumentTypeError(f"events must be a bool, not {type(self.events).__name__}")
        if self.start_ms is not None and self.end_ms is not None and self.start_ms >= self.end_ms:
            raise InvalidArgumentError("end_ms must be after start_ms")
        if self.events_maxlen is not None and not self.events:
            raise InvalidArgumentError("events_maxlen trims the event streams: set events too")
        if not isinstance(self.queue, bool):
            raise ArgumentTypeError(f"queue must be a bool, not {type(self.queue).__name__}")
        if self.window_ms is not None:
            integer("window_ms", self.window_ms, 1)
        if self.presence_ms is not None:
            integer("presence_ms", self.presence_ms, 1)
        if self.admit_rate is not None:
            if not isinstance(self.admit_rate, tuple) or len(self.admit_rate) != 2:
                raise ArgumentTypeError("admit_rate must be a (users, per_ms) tuple")
            integer("admit_rate users", self.admit_rate[0], 1)
            integer("admit_rate per_ms", self.admit_rate[1], 1)
        if (self.admit_rate is not None or self.window_ms is not None or self.presence_ms is not None) \
                and not self.queue:
            raise InvalidArgumentError("admit_rate, window_ms and presence_ms set the waiting room: set queue too")

    def partitioned(self) -> "SaleSpec":
        """This spec for a ``PartitionedSale``: ``partitions`` 0 made DEFAULT_PARTITIONS."""
        return self if self.partitions else replace(self, partitions=DEFAULT_PARTITIONS)

    def share(self, units: int, index: int) -> int:
        """Partition ``index``'s share of ``units``: an even split, the first ones one more."""
        return units // self.partitions + (1 if index < units % self.partitions else 0)

    def room_rate(self, index: int) -> Optional[Tuple[int, int]]:
        """Partition ``index``'s share of ``admit_rate``, by its share of the stock (a partition
        with no unit counts as one): exact, as a reduced fraction of users per ms, so the
        partitions together admit the whole rate."""
        if self.admit_rate is None:
            return None
        users, per_ms = self.admit_rate
        weight = max(self.share(self.stock, index), 1)
        total = max(self.stock, self.partitions)
        users, per_ms = users * weight, per_ms * total
        common = gcd(users, per_ms)
        users, per_ms = users // common, per_ms // common
        while users > MAX_UNITS or per_ms > MAX_UNITS:  # halved alike: the ratio kept closely
            users, per_ms = max(users >> 1, 1), max(per_ms >> 1, 1)
        return users, per_ms

    def partition_args(self, key: str, index: int) -> List[Any]:
        """``init_args`` for partition ``index``: its share of the stock and of the rate."""
        spec = replace(self, admit_rate=self.room_rate(index))
        return spec.init_args(key, self.share(self.stock, index))

    def init_args(self, key: str, stock: int) -> List[Any]:
        """``SECKILL.INIT key stock LIMIT .. [HOLD ..] [START ..] [END ..]``: what every sale
        key is made with; the caller adds EVENTS and a partition's options."""
        args: List[Any] = ["SECKILL.INIT", key, stock, "LIMIT", self.limit]
        for option, value in (("HOLD", self.hold_ms), ("START", self.start_ms), ("END", self.end_ms)):
            if value is not None:
                args += [option, value]
        if self.queue:
            args.append("QUEUE")
            if self.admit_rate is not None:
                args += ["ADMIT", self.admit_rate[0], "PER", self.admit_rate[1]]
            if self.window_ms is not None:
                args += ["WINDOW", self.window_ms]
            if self.presence_ms is not None:
                args += ["PRESENCE", self.presence_ms]
        return args

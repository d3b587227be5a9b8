"""What the sale commands reply, as the package gives it: parsed alike from RESP2's flat
arrays and RESP3's maps (redis-py 8 speaks RESP3 by default)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Tuple, Union

import redis

User = Union[str, bytes]


def as_bytes(value: User) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def as_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def fields_of(reply: Any) -> Dict[str, Any]:
    """A field reply (SECKILL.INFO, HGETALL): a RESP3 map or RESP2's flat array."""
    if isinstance(reply, dict):
        return {as_text(k): v for k, v in reply.items()}
    reply = reply or []
    return {as_text(reply[i]): reply[i + 1] for i in range(0, len(reply) - 1, 2)}


def buyer_rows(rows: Any) -> Iterator[Tuple[Any, Any, Any]]:
    """(user, qty, state) from BUYERS' flat rows, or the RESP3 maps of module 0.7 and earlier."""
    if rows and isinstance(rows[0], dict):
        for row in rows:
            row = {as_text(k): v for k, v in row.items()}
            yield row["user"], row["qty"], row["state"]
        return
    for i in range(0, len(rows) - 2, 3):
        yield rows[i], rows[i + 1], rows[i + 2]


@dataclass
class PartitionInfo:
    """One partition's SECKILL.INFO (the fields a partitioned sale adds up)."""

    stock: int
    remaining: int
    sold: int
    held: int
    buyers: int
    restocked: int
    refunded: int
    lent: int
    absorbed: int
    pending_out: int
    sealed: bool
    partition: int
    partitions: int
    #: Admitted users who have not bought (a sale with a waiting room; 0 without): each is
    #: promised a unit of ``remaining``, which the key does not lend.
    admitted: int = 0
    #: Users waiting in the room (0 without one).
    waiting: int = 0

    @property
    def units(self) -> Tuple[int, ...]:
        """Every counter a unit's move changes (not ``sealed``, which moves none): two reads
        with the same ``units`` saw no unit come or go between them."""
        return (self.stock, self.remaining, self.sold, self.held, self.buyers, self.restocked,
                self.refunded, self.lent, self.absorbed, self.pending_out)

    @classmethod
    def from_reply(cls, reply: Any) -> "PartitionInfo":
        fields = fields_of(reply)
        # Null on a one-key sale.
        if fields.get("partition") is None:
            fields["partition"] = 0
        fields.setdefault("admitted", 0)
        fields.setdefault("waiting", 0)
        names = [f for f in cls.__dataclass_fields__]
        try:
            values: Dict[str, Any] = {n: int(fields[n]) for n in names}
        except (KeyError, TypeError, ValueError) as error:
            raise redis.exceptions.DataError(
                f"SECKILL.INFO lacks a field (is this a partition of a module 0.5+ server?): {error}"
            ) from error
        values["sealed"] = values["sealed"] == 1
        return cls(**values)

    @property
    def lendable(self) -> int:
        """Units the key may lend: the ones left that no admitted user was promised."""
        return max(self.remaining - self.admitted, 0)

    def balanced(self) -> bool:
        """The partition's own identity, which the module keeps at every instant."""
        return (
            self.remaining + self.held + self.sold + self.lent
            == self.stock + self.restocked + self.absorbed
        )


@dataclass
class SaleInfo:
    """The sale's totals: sums over the partitions."""

    stock: int
    remaining: int
    sold: int
    held: int
    buyers: int
    restocked: int
    refunded: int
    lent: int
    absorbed: int
    in_flight: int
    pending_out: int
    sealed: int
    sold_out: bool
    partitions: List[PartitionInfo]
    #: Users waiting in the rooms (0 without a waiting room).
    waiting: int = 0

    @classmethod
    def total(cls, partitions: List[PartitionInfo]) -> "SaleInfo":
        def total(name: str) -> int:
            return sum(getattr(p, name) for p in partitions)

        lent, absorbed, remaining = total("lent"), total("absorbed"), total("remaining")
        in_flight = max(lent - absorbed, 0)
        return cls(
            stock=total("stock"),
            remaining=remaining,
            sold=total("sold"),
            held=total("held"),
            buyers=total("buyers"),
            restocked=total("restocked"),
            refunded=total("refunded"),
            lent=lent,
            absorbed=absorbed,
            in_flight=in_flight,
            pending_out=total("pending_out"),
            sealed=sum(1 for p in partitions if p.sealed),
            sold_out=remaining == 0 and in_flight == 0,
            partitions=partitions,
            waiting=total("waiting"),
        )

    def balanced(self) -> bool:
        """The sale's identity, when the partitions were read at one instant."""
        return (
            all(p.balanced() for p in self.partitions)
            and self.absorbed <= self.lent
            and self.lent - self.absorbed <= self.pending_out
            and self.remaining + self.held + self.sold + self.in_flight
            == self.stock + self.restocked
        )


@dataclass(frozen=True)
class Buyer:
    user: bytes
    qty: int
    #: Some units await confirmation (a sale with HOLD).
    held: bool
    partition: int


@dataclass(frozen=True)
class SaleEvent:
    """One entry of a partition's event stream."""

    partition: int
    stream: str
    id: str
    fields: Dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> str:
        """A field (``event``, ``user``, ``qty``, ``order``, ``remaining``, ...), "" if absent."""
        return self.fields.get(name, "")


@dataclass
class ClientStats:
    """What this handle did, for tuning and benchmarks."""

    tries: int = 0
    #: Tries whose partition was drained, so that they looked for stock elsewhere.
    borrowing_tries: int = 0
    transfers: int = 0
    units_moved: int = 0
    seals: int = 0
    recovered: int = 0
    #: Purchases the sold-out cache refused with nothing sent (``local_cache=True``).
    local_refusals: int = 0
    #: Invalidations Redis pushed for the sale's keys to the sold-out cache.
    invalidations: int = 0
    #: Purchases refused as sold out while a partition could not be read (its node down).
    unreachable_refusals: int = 0


def events_of(partition: int, stream: str, reply: Any) -> List[SaleEvent]:
    """XREADGROUP's reply on one stream: RESP2's ``[[stream, entries]]`` or RESP3's map."""
    if isinstance(reply, dict):
        reply = list(reply.items())
    events: List[SaleEvent] = []
    for _, entries in reply or []:
        if isinstance(entries, list) and entries and isinstance(entries[0], list):
            entries = entries[0]
        for entry_id, fields in entries:
            if not isinstance(fields, dict):
                fields = fields_of(fields)
            events.append(
                SaleEvent(partition, stream, as_text(entry_id), {as_text(k): as_text(v) for k, v in fields.items()})
            )
    return events

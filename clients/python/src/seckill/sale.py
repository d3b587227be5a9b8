"""A partitioned sale: P ordinary seckill sale keys, each in its own hash slot, plus a manifest
hash. Every command goes to one key, so the redis-py client (``redis.RedisCluster``, which
follows MOVED and ASK, or a plain ``redis.Redis``) routes it.

The same design, names and reply codes as the Rust crate ``seckill-client``.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Union

import redis

from .errors import (
    BadManifestError,
    ContendedError,
    InvalidArgumentError,
    ModuleMissingError,
    NoSaleError,
    SaleExistsError,
    translate,
)
from .protocol import DRAINED, MAX_PARTITIONS, SOLD_OUT
from .retry import Retrier, RetryPolicy, is_retryable

#: How long a partition that found no stock anywhere stays sealed (unless stock comes back).
DEFAULT_SEAL_MS = 1_000
_MAX_BORROWS = 1_000
_MANIFEST_VERSION = "1"
#: How long a ``create`` holds a sale's name before its manifest is done (plus 1 ms per
#: partition): the name of a creator that died half way is free again after it.
CREATE_CLAIM_MS = 5_000
#: HSETNX name partitions P, and an expiry on the claim in the same step.
_CLAIM_SCRIPT = (
    "if redis.call('HSETNX', KEYS[1], 'partitions', ARGV[1]) == 1 then "
    "redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end return 0"
)
_MAX_UNITS = 2**63 - 1

User = Union[str, bytes]


def _bytes(value: User) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def partition_of(user: User, partitions: int) -> int:
    """The partition a user always buys in: FNV-1a (64-bit) of the user id's bytes (UTF-8 for a
    str), modulo the number of partitions; the Rust crate computes the same."""
    h = 0xCBF29CE484222325
    for byte in _bytes(user):
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h % max(partitions, 1)


def _partition_key(name: str, index) -> str:
    return "{%s/%s}" % (name, index)


def _check_name(name: str) -> None:
    if not name or "{" in name or "}" in name:
        raise InvalidArgumentError(f"sale name {name!r} must be non-empty and without braces")


def _call(client, *args):
    try:
        return client.execute_command(*args)
    except redis.exceptions.ResponseError as error:
        raise translate(error) from error


def _require_module(client, name: str) -> None:
    """ModuleMissingError unless the server runs the module: a read of the sale's own key
    (routed where the sale will live) that a module answers and a bare server calls an
    unknown command. Nothing is written."""
    try:
        _call(client, "SECKILL.INFO", name)
    except (NoSaleError, redis.exceptions.ResponseError):
        pass  # NOSALE, or WRONGTYPE on an existing manifest: the module answered


def _buyer_rows(rows):
    """(user, qty, state) from BUYERS' flat RESP2 rows or its RESP3 maps."""
    if rows and isinstance(rows[0], dict):
        for row in rows:
            row = {_text(k): v for k, v in row.items()}
            yield row["user"], row["qty"], row["state"]
        return
    for i in range(0, len(rows) - 2, 3):
        yield rows[i], rows[i + 1], rows[i + 2]


@dataclass(frozen=True)
class SaleSpec:
    """How a partitioned sale is set up; the manifest records it."""

    stock: int
    partitions: int = 16
    limit: int = 1
    hold_ms: Optional[int] = None
    start_ms: Optional[int] = None
    end_ms: Optional[int] = None
    events: bool = False
    events_maxlen: Optional[int] = None

    def check(self) -> None:
        """Raises TypeError or InvalidArgumentError (a ValueError) for any setting the module
        would refuse, before anything is written."""

        def integer(what: str, value, low: int, high: int = _MAX_UNITS) -> None:
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{what} must be an int, not {type(value).__name__}")
            if not low <= value <= high:
                raise InvalidArgumentError(f"{what} must be an integer between {low} and {high}")

        integer("partitions", self.partitions, 1, MAX_PARTITIONS)
        integer("stock", self.stock, 0)
        integer("limit", self.limit, 1)
        for what in ("hold_ms", "start_ms", "end_ms", "events_maxlen"):
            value = getattr(self, what)
            if value is not None:
                integer(what, value, 1)
        if not isinstance(self.events, bool):
            raise TypeError(f"events must be a bool, not {type(self.events).__name__}")
        if self.start_ms is not None and self.end_ms is not None and self.start_ms >= self.end_ms:
            raise InvalidArgumentError("end_ms must be after start_ms")
        if self.events_maxlen is not None and not self.events:
            raise InvalidArgumentError("events_maxlen trims the event streams: set events too")

    def share(self, units: int, index: int) -> int:
        """Partition ``index``'s share of ``units``: an even split, the first ones one more."""
        return units // self.partitions + (1 if index < units % self.partitions else 0)


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

    @classmethod
    def from_reply(cls, reply) -> "PartitionInfo":
        if isinstance(reply, dict):
            fields = {_text(k): v for k, v in reply.items()}
        else:
            fields = {_text(reply[i]): reply[i + 1] for i in range(0, len(reply) - 1, 2)}
        names = [f for f in cls.__dataclass_fields__]
        try:
            values = {n: int(fields[n]) for n in names}
        except (KeyError, TypeError, ValueError) as error:
            raise redis.exceptions.DataError(
                f"SECKILL.INFO lacks a field (is this a partition of a module 0.5+ server?): {error}"
            ) from error
        values["sealed"] = values["sealed"] == 1
        return cls(**values)

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


class PartitionedSale:
    """One sale over ``partitions`` sale keys. Safe to share between threads: redis-py's
    clients pool their connections."""

    def __init__(self, client, name: str, spec: SaleSpec, seal_ms: int = DEFAULT_SEAL_MS,
                 retry: RetryPolicy = RetryPolicy()):
        _check_name(name)
        self.client = client
        #: How try_buy and cancel retry a call whose answer was lost (each carries a fresh
        #: attempt id, so a retry never buys or cancels twice).
        self.retry = retry
        self.name = name
        self.spec = spec
        self.seal_ms = max(int(seal_ms), 1)
        self.keys = [_partition_key(name, i) for i in range(spec.partitions)]
        initial_batch = max(spec.stock // spec.partitions // 16, 1)
        self._batches = [initial_batch] * spec.partitions
        self._borrowing = [threading.Lock() for _ in range(spec.partitions)]
        self._mover = os.urandom(8).hex()
        self._next_transfer = 0
        self._lock = threading.Lock()
        self._topology_lock = threading.Lock()
        self._stats = ClientStats()

    # -- creating and opening -------------------------------------------------------------

    @classmethod
    def create(cls, client, name: str, spec: SaleSpec, seal_ms: int = DEFAULT_SEAL_MS,
               retry: RetryPolicy = RetryPolicy()):
        """Creates the sale ``name``: its partitions ``{name/0}`` .. ``{name/P-1}`` (each
        with its share of the stock, and its stream ``{name/i}:events`` with ``events``),
        then the manifest hash ``name``. Every setting is checked (TypeError,
        InvalidArgumentError), and the module's presence too (ModuleMissingError), before
        anything is written. Raises SaleExistsError if that manifest exists. The name is
        claimed with an expiry that the finished manifest drops: a create that fails half way
        gives the name back at once, one whose process died within CREATE_CLAIM_MS."""
        _check_name(name)
        spec.check()
        _require_module(client, name)
        # The claim: whoever sets the manifest's first field owns the name, for a while.
        claim_ms = CREATE_CLAIM_MS + spec.partitions
        if not int(_call(client, "EVAL", _CLAIM_SCRIPT, 1, name, spec.partitions, claim_ms)):
            raise SaleExistsError(name)
        sale = cls(client, name, spec, seal_ms, retry)
        try:
            sale._write_partitions_and_manifest()
        except BaseException:
            try:
                _call(client, "DEL", name)  # should this fail too, the claim's expiry does
            except Exception:  # noqa: BLE001 - the first failure is the one to report
                pass
            raise
        return sale

    def _write_partitions_and_manifest(self) -> None:
        """The partitions, then the manifest with its ``ready`` mark in one HSET, claim dropped."""
        client, name, spec = self.client, self.name, self.spec
        for index, key in enumerate(self.keys):
            args = ["SECKILL.INIT", key, spec.share(spec.stock, index), "LIMIT", spec.limit]
            for option, value in (("HOLD", spec.hold_ms), ("START", spec.start_ms), ("END", spec.end_ms)):
                if value is not None:
                    args += [option, value]
            if spec.events:
                args += ["EVENTS", f"{key}:events"]
                if spec.events_maxlen is not None:
                    args += ["MAXLEN", spec.events_maxlen]
            # REPLACE: the claim is ours, so a partition already there is a leftover.
            args += ["PARTITION", index, "PARTITIONS", spec.partitions, "MANIFEST", name, "REPLACE"]
            _call(client, *args)
        optional = lambda value: value or 0  # noqa: E731
        _call(
            client,
            "HSET",
            name,
            "version", _MANIFEST_VERSION,
            "stock", spec.stock,
            "limit", spec.limit,
            "hold", optional(spec.hold_ms),
            "start", optional(spec.start_ms),
            "end", optional(spec.end_ms),
            "events", int(spec.events),
            "maxlen", optional(spec.events_maxlen),
            "naming", _partition_key(name, "<i>"),
            # Written last: a sale opens only once every partition exists.
            "ready", 1,
        )
        _call(client, "PERSIST", name)

    @classmethod
    def open(cls, client, name: str, seal_ms: int = DEFAULT_SEAL_MS, retry: RetryPolicy = RetryPolicy()):
        """Opens the sale ``name`` from its manifest."""
        _check_name(name)
        raw = _call(client, "HGETALL", name)
        if isinstance(raw, list):
            raw = {raw[i]: raw[i + 1] for i in range(0, len(raw) - 1, 2)}
        fields = {_text(k): _text(v) for k, v in (raw or {}).items()}
        if not fields:
            raise NoSaleError(name)
        if "ready" not in fields:
            raise BadManifestError(f"{name}: its creation did not finish; delete it and create it again")
        if fields.get("version") != _MANIFEST_VERSION:
            raise BadManifestError(f"{name}: unknown manifest version")
        if fields.get("naming") != _partition_key(name, "<i>"):
            raise BadManifestError(f"{name}: unknown partition naming")
        try:
            number = {k: int(fields[k]) for k in ("partitions", "stock", "limit", "hold", "start", "end", "events", "maxlen")}
        except (KeyError, ValueError) as error:
            raise BadManifestError(f"{name}: bad {error}") from error
        if not 1 <= number["partitions"] <= MAX_PARTITIONS:
            raise BadManifestError(f"{name}: bad partitions")
        spec = SaleSpec(
            stock=number["stock"],
            partitions=number["partitions"],
            limit=number["limit"],
            hold_ms=number["hold"] or None,
            start_ms=number["start"] or None,
            end_ms=number["end"] or None,
            events=number["events"] == 1,
            events_maxlen=number["maxlen"] or None,
        )
        return cls(client, name, spec, seal_ms, retry)

    @staticmethod
    def delete(client, name: str) -> None:
        """Deletes the sale: partitions, streams, then the manifest (also a half-created one's)."""
        _check_name(name)
        partitions = _call(client, "HGET", name, "partitions")
        for index in range(min(int(partitions or 0), MAX_PARTITIONS)):
            key = _partition_key(name, index)
            _call(client, "DEL", key)
            _call(client, "DEL", f"{key}:events")
        _call(client, "DEL", name)

    # -- buying ---------------------------------------------------------------------------

    def partition_of(self, user: User) -> int:
        return partition_of(user, self.spec.partitions)

    def _key_of(self, user: User) -> str:
        return self.keys[self.partition_of(user)]

    @property
    def stats(self) -> ClientStats:
        with self._lock:
            return ClientStats(**vars(self._stats))

    def _count(self, name: str, by: int = 1) -> None:
        with self._lock:
            setattr(self._stats, name, getattr(self._stats, name) + by)

    def try_buy(self, user: User, qty: int = 1) -> int:
        """Buys ``qty`` units for ``user`` in the user's partition; replies as SECKILL.TRY:
        the units left in that partition (>= 0), or SOLD_OUT, OVER_LIMIT, NOT_STARTED,
        ENDED. A drained partition borrows units from the others and tries again; when none
        has any, it is sealed and later buyers there are refused in one round trip.

        The purchase carries a fresh attempt id: a call whose answer is lost (timeout, dropped
        connection, failover) is sent again with it until a definite answer, within
        ``self.retry``; it is never bought twice. Past the deadline: OutcomeUnknownError."""
        attempt_id = os.urandom(16).hex()

        def attempt(key):
            return int(_call(self.client, "SECKILL.TRY", key, user, qty, "ID", attempt_id)), None

        return self._buy(user, qty, attempt_id, attempt)[0]

    def try_buy_acked(self, user: User, qty: int = 1, replicas: int = 1, timeout_ms: int = 1_000):
        """``try_buy``, each TRY pipelined with ``WAIT replicas timeout_ms`` on one connection to
        the partition's master; replies ``(code, acked)``: acked is how many replicas had the
        purchase before the timeout. A purchase acknowledged by a replica survives the failover
        to it (see docs/durability.md). A purchase that had to be sent again counts as
        acknowledged by none: its write may have been made on a connection (or a master) gone
        since, whose acknowledgements nobody can count any more."""
        attempt_id = os.urandom(16).hex()
        code, acked, retried = self._buy(
            user, qty, attempt_id,
            lambda key: self._try_and_wait(key, user, qty, attempt_id, replicas, timeout_ms),
        )
        return code, (0 if retried else acked)

    def _buy(self, user: User, qty: int, attempt_id: str, attempt):
        """The purchase loop: ``attempt(key)`` replies ``(code, extra)``, sent again under
        ``attempt_id`` while its answer is lost; a drained partition borrows and attempts
        again. Replies the last ``(code, extra, retried)``, SOLD_OUT as the code when no
        partition had the units."""
        partition = self.partition_of(user)
        self._count("tries")
        retrier = Retrier(self.retry, attempt_id)
        borrows = 0
        while True:
            code, extra = retrier.call(lambda: attempt(self.keys[partition]))
            if code != DRAINED:
                return code, extra, retrier.retries > 0
            if borrows == 0:
                self._count("borrowing_tries")
            borrows += 1
            if borrows > _MAX_BORROWS:
                raise ContendedError(f"borrowed stock {_MAX_BORROWS} times for {user!r}")
            # Borrowing moves stock by idempotent transfers and buys nothing: a failover under
            # it is waited out and the purchase tried again under the same id.
            try:
                borrowed = self._borrow(partition, qty)
            except Exception as error:  # noqa: BLE001 - sorted right below
                if not is_retryable(error):
                    raise
                retrier.pause(error)
                continue
            if not borrowed:
                return SOLD_OUT, extra, retrier.retries > 0

    def _try_and_wait(self, key: str, user: User, qty: int, attempt_id: str, replicas: int, timeout_ms: int):
        # WAIT counts the writes of its own connection: one pipeline, one connection, to the
        # node that serves the key (redis-py's cluster client would send WAIT everywhere).
        for _ in range(5):
            if isinstance(self.client, redis.RedisCluster):
                target = self.client.get_node_from_key(key).redis_connection
            else:
                target = self.client
            pipe = target.pipeline(transaction=False)
            pipe.execute_command("SECKILL.TRY", key, user, qty, "ID", attempt_id)
            pipe.execute_command("WAIT", replicas, timeout_ms)
            try:
                code, acked = pipe.execute()
                return int(code), int(acked)
            except redis.exceptions.MovedError:
                # The key's slot moved: learn the new owners and send it there.
                self.client.nodes_manager.initialize()
            except redis.exceptions.AskError:
                # The key is being migrated right now: it lands on its new owner in a moment.
                time.sleep(0.01)
            except redis.exceptions.ResponseError as error:
                raise translate(error) from error
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                self._refresh_topology()
                raise
            except ValueError as error:
                # redis-py closed this node's connection under us (another thread refreshed
                # the topology): a lost connection like any other, so the purchase is retried.
                if "closed file" not in str(error):
                    raise
                raise redis.exceptions.ConnectionError(str(error)) from error
        raise redis.exceptions.ClusterError(f"{key} kept moving")

    def _refresh_topology(self) -> None:
        """After a node failed: ask the cluster for its slots again (a master killed, its
        replica promoted), one thread at a time; the others' retries use the new map."""
        if not isinstance(self.client, redis.RedisCluster):
            return
        if not self._topology_lock.acquire(blocking=False):
            return
        try:
            self.client.nodes_manager.initialize()
        except redis.exceptions.RedisError:
            pass  # no node answers yet: the retry waits and asks again
        finally:
            self._topology_lock.release()

    def _borrow(self, partition: int, qty: int) -> bool:
        """Looks for ``qty`` units for ``partition`` in the others: True when it may have them
        now, False when no partition had any at one instant."""
        lock = self._borrowing[partition]
        waited = not lock.acquire(blocking=False)
        if waited:
            lock.acquire()
        try:
            if waited:
                # Another buyer of this partition just borrowed, or sealed it: look first.
                info = self._partition_info(partition)
                if info.remaining >= qty or info.sealed:
                    return info.remaining >= qty
            for _ in range(64):
                first = self.partition_infos()
                if first[partition].remaining >= qty:
                    return True
                donors = [(info.remaining, i) for i, info in enumerate(first) if i != partition and info.remaining > 0]
                if donors:
                    available, donor = max(donors)
                    want = max(qty, self._batches[partition])
                    # At most half of what the donor has, so two drained partitions do not pass
                    # the same units back and forth; but enough for this purchase if it can.
                    units = max(min(want, (available + 1) // 2), min(qty, available))
                    if self._transfer(donor, partition, units) > 0:
                        cap = max(self.spec.stock // self.spec.partitions, 1)
                        self._batches[partition] = min(self._batches[partition] * 2, cap)
                        return True
                    continue
                if any(info.pending_out > 0 for info in first):
                    self.recover()
                    continue
                # Nothing anywhere as these sequential reads show; a second pass that reads every
                # partition the same proves they all were so at one instant between the passes.
                if self.partition_infos() != first:
                    continue
                if first[partition].remaining > 0:
                    return False
                if int(_call(self.client, "SECKILL.SEAL", self.keys[partition], self.seal_ms)) == 1:
                    self._count("seals")
                    return False
            return True
        finally:
            lock.release()

    def _transfer(self, source: int, target: int, units: int) -> int:
        with self._lock:
            transfer_id = f"{self._mover}-{self._next_transfer}"
            self._next_transfer += 1
        source_key, target_key = self.keys[source], self.keys[target]
        lent = int(_call(self.client, "SECKILL.LEND", source_key, transfer_id, units, "TO", target_key))
        self._finish(source_key, transfer_id, lent, target_key)
        if lent > 0:
            self._count("transfers")
            self._count("units_moved", lent)
        return lent

    def _finish(self, source_key: str, transfer_id, units: int, target_key: str) -> None:
        if units > 0:
            _call(self.client, "SECKILL.ABSORB", target_key, transfer_id, units, "FROM", source_key)
        _call(self.client, "SECKILL.SETTLE", source_key, transfer_id)

    def recover(self) -> int:
        """Finishes every transfer between this sale's partitions that a mover started and did
        not finish; replies how many. Safe at any time, also while movers work: every step is
        idempotent. ``try_buy`` runs it when it finds units in flight and none elsewhere."""
        finished = 0
        for key in self.keys:
            pending = _call(self.client, "SECKILL.TRANSFERS", key) or []
            for i in range(0, len(pending) - 3, 4):
                transfer_id, units, target = pending[i], int(pending[i + 1]), _text(pending[i + 2])
                # Only transfers between this sale's own partitions are this client's to end.
                if target not in self.keys:
                    continue
                self._finish(key, transfer_id, units, target)
                finished += 1
        self._count("recovered", finished)
        return finished

    # -- orders ---------------------------------------------------------------------------

    def bought(self, user: User) -> int:
        """Units ``user`` owns (held or final)."""
        return int(_call(self.client, "SECKILL.BOUGHT", self._key_of(user), user))

    def confirm(self, user: User) -> bool:
        """Makes the user's held units final: False if nothing was held."""
        return int(_call(self.client, "SECKILL.CONFIRM", self._key_of(user), user)) == 1

    def cancel(self, user: User, qty: Optional[int] = None) -> int:
        """Returns ``qty`` of the user's units (all with None); replies the units returned.
        Retried under an attempt id as ``try_buy`` is: never returned twice."""
        attempt_id = os.urandom(16).hex()
        args = ["SECKILL.CANCEL", self._key_of(user), user] + ([qty] if qty is not None else [])
        args += ["ID", attempt_id]
        return int(Retrier(self.retry, attempt_id).call(lambda: _call(self.client, *args)))

    def restock(self, units: int) -> None:
        """Adds ``units``, split evenly over the partitions."""
        if units < 1:
            raise InvalidArgumentError("units must be an integer between 1 and 9223372036854775807")
        for index, key in enumerate(self.keys):
            share = self.spec.share(units, index)
            if share:
                _call(self.client, "SECKILL.RESTOCK", key, share)

    # -- reading --------------------------------------------------------------------------

    def _partition_info(self, index: int) -> PartitionInfo:
        return PartitionInfo.from_reply(_call(self.client, "SECKILL.INFO", self.keys[index]))

    def partition_infos(self) -> List[PartitionInfo]:
        """Each partition's SECKILL.INFO, partition 0 first."""
        return [self._partition_info(i) for i in range(len(self.keys))]

    def info(self) -> SaleInfo:
        """Totals over the partitions (read one after the other; units in flight apart)."""
        return SaleInfo.total(self.partition_infos())

    def buyers(self) -> Iterator[Buyer]:
        """Every buyer of every partition (a merged SECKILL.BUYERS scan)."""
        for partition, key in enumerate(self.keys):
            cursor = "0"
            while True:
                next_cursor, rows = _call(self.client, "SECKILL.BUYERS", key, cursor, "COUNT", 1000)
                for user, qty, state in _buyer_rows(rows):
                    yield Buyer(_bytes(user), int(qty), _text(state) == "held", partition)
                cursor = _text(next_cursor)
                if cursor == "0":
                    break

    # -- events ---------------------------------------------------------------------------

    @property
    def event_streams(self) -> List[str]:
        """The event streams, partition 0 first (empty without events)."""
        return [f"{key}:events" for key in self.keys] if self.spec.events else []

    def create_group(self, group: str) -> None:
        """Creates the consumer group on every partition's stream; an existing one is kept."""
        for stream in self.event_streams:
            try:
                self.client.xgroup_create(stream, group, id="0", mkstream=True)
            except redis.exceptions.ResponseError as error:
                if "BUSYGROUP" not in str(error):
                    raise

    def read_group(self, group: str, consumer: str, count: int = 100) -> List[SaleEvent]:
        """Up to ``count`` new events per partition for ``consumer`` of ``group``."""
        events: List[SaleEvent] = []
        for partition, stream in enumerate(self.event_streams):
            reply = self.client.xreadgroup(group, consumer, {stream: ">"}, count=count)
            if isinstance(reply, dict):
                reply = list(reply.items())
            for _, entries in reply or []:
                if isinstance(entries, list) and entries and isinstance(entries[0], list):
                    entries = entries[0]
                for entry_id, fields in entries:
                    events.append(
                        SaleEvent(partition, stream, _text(entry_id), {_text(k): _text(v) for k, v in fields.items()})
                    )
        return events

    def ack(self, group: str, event: SaleEvent) -> bool:
        """Acknowledges an event read by ``read_group``."""
        return int(self.client.xack(event.stream, group, event.id)) == 1


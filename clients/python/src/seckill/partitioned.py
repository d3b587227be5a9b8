"""A partitioned sale: P ordinary seckill sale keys, each in its own hash slot, plus a manifest
hash. Every command goes to one key, so the redis-py client (``redis.RedisCluster``, which
follows MOVED and ASK, or a plain ``redis.Redis``) routes it.

The same design, names and reply codes as the Rust crate ``seckill-client``.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, List, Optional, Tuple

import redis

from . import _key
from ._effects import Acquire, Call, Operation, Release, Sleep, run
from ._durability import Keep, keep_of, returned_units
from ._node import NodeCall
from .errors import (BadManifestError, ContendedError, InvalidArgumentError, NoQueueError, NoSaleError,
                     NotReplicatedError, SaleExistsError, WrongTypeError)
from .flash_sale import FlashSale, SaleOps
from .info import Buyer, PartitionInfo, SaleEvent, SaleInfo, User, as_bytes, as_text, fields_of
from .protocol import DRAINED, MAX_PARTITIONS, SOLD_OUT
from .retry import Retrier, RetryPolicy, is_retryable
from ._args import integer
from .spec import SaleSpec

#: How long a partition that found no stock anywhere stays sealed (unless stock comes back).
DEFAULT_SEAL_MS = 1_000
_MAX_BORROWS = 1_000
#: How long a borrow waits for one partition's read: a partition that does not answer in time
#: is skipped (it cannot lend) and its node marked down, so that one frozen master does not
#: stall the buyers of the others. 50 ms is hundreds of times a healthy read on a LAN.
SCAN_READ_TIMEOUT_S = 0.05
_MANIFEST_VERSION = "1"
#: How long a ``create`` holds a sale's name before its manifest is done (plus 1 ms per
#: partition): the name of a creator that died half way is free again after it.
CREATE_CLAIM_MS = 5_000
#: HSETNX name partitions P, and an expiry on the claim in the same step.
_CLAIM_SCRIPT = (
    "if redis.call('HSETNX', KEYS[1], 'partitions', ARGV[1]) == 1 then "
    "redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end return 0"
)


def _on_master(command: Tuple[Any, ...]) -> Operation[Any]:
    """``command`` (its key second) on the package's connection to its key's master: a borrow's
    steps never wait for the application's cluster client to relearn the slots (see
    ``seckill.asyncio._node._mapped``), and a master known down fails them at once."""
    (reply,) = yield NodeCall(str(command[1]), (command,))
    return reply


def partition_of(user: User, partitions: int) -> int:
    """The partition a user always buys in: FNV-1a (64-bit) of the user id's bytes (UTF-8 for a
    str), modulo the number of partitions; the Rust crate computes the same."""
    h = 0xCBF29CE484222325
    for byte in as_bytes(user):
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h % max(partitions, 1)


def _partition_key(name: str, index: Any) -> str:
    return "{%s/%s}" % (name, index)


def _check_name(name: str) -> None:
    if not isinstance(name, str):
        raise TypeError(f"the sale name must be a str, not {type(name).__name__}")
    if not name or "{" in name or "}" in name:
        raise InvalidArgumentError(f"sale name {name!r} must be non-empty and without braces")


def check_units(units: int) -> None:
    """RESTOCK's units, checked before anything is sent."""
    integer("units", units, 1)


class PartitionedOps(SaleOps):
    """A partitioned sale's state and operations, shared by the sync ``PartitionedSale`` and
    ``seckill.asyncio.PartitionedSale``."""

    #: The lock type of the borrowers' one-at-a-time rule: the flavour's (thread or task).
    _new_lock: Any

    def __init__(self, client: Any, name: str, spec: SaleSpec, seal_ms: int = DEFAULT_SEAL_MS,
                 retry: RetryPolicy = RetryPolicy(), *, local_cache: bool = False, durability: str = "replica",
                 ack_timeout_ms: Optional[int] = None,
                 read_from_replicas: bool = False) -> None:
        _check_name(name)
        super().__init__(client, retry, local_cache, durability=durability, ack_timeout_ms=ack_timeout_ms,
                   read_from_replicas=read_from_replicas)
        self.name = name
        spec = spec.partitioned()
        self.spec = spec
        self.seal_ms = max(int(seal_ms), 1)
        self.keys = [_partition_key(name, i) for i in range(spec.partitions)]
        # The sold-out mark is the whole sale's: a mark per partition would refuse a buyer
        # whose partition is empty while a cancel elsewhere brought a unit back.
        self._cache_id, self._cache_keys, self._whole_sale = f"sale:{name}", self.keys, True
        initial_batch = max(spec.stock // spec.partitions // 16, 1)
        self._batches = [initial_batch] * spec.partitions
        # One borrower per partition at a time in this process: when many buyers find their
        # partition drained at once, one borrows and the others buy what it brought.
        self._borrowing = [self._new_lock() for _ in range(spec.partitions)]
        #: When the last scan for each partition that found no stock it could reach began.
        self._unreachable_refusal = [float("-inf")] * spec.partitions
        self._mover = os.urandom(8).hex()
        self._next_transfer = 0
        #: The partition the next ``admit`` starts with.
        self._next_admit = 0

    def partition_of(self, user: User) -> int:
        return partition_of(user, self.spec.partitions)

    def _key_of(self, user: User) -> str:
        return self.keys[self.partition_of(user)]

    @property
    def event_streams(self) -> List[str]:
        """The event streams, partition 0 first (empty without events)."""
        return [f"{key}:events" for key in self.keys] if self.spec.events else []

    # -- creating, opening, deleting ------------------------------------------------------

    @staticmethod
    def _create_op(name: str, spec: SaleSpec, replace: bool = False, keep: Optional[Keep] = None) -> Operation[None]:
        """The claim, the partitions (each kept as ``keep`` says), then the manifest with its
        ``ready`` mark in one HSET; a failure gives the name back. ``replace``: the sale of that
        name is deleted first."""
        _check_name(name)
        if not isinstance(replace, bool):
            raise TypeError(f"replace must be a bool, not {type(replace).__name__}")
        spec.check()
        spec = spec.partitioned()
        yield from _key.require_module()
        yield from _key.require_durability(_partition_key(name, 0), keep)
        if replace:
            yield from PartitionedOps._delete_op(name)
        # The claim: whoever sets the manifest's first field owns the name, for a while.
        claim_ms = CREATE_CLAIM_MS + spec.partitions
        if not int((yield Call(("EVAL", _CLAIM_SCRIPT, 1, name, spec.partitions, claim_ms)))):
            raise SaleExistsError(name)
        try:
            for index in range(spec.partitions):
                key = _partition_key(name, index)
                args = spec.partition_args(key, index)
                if spec.events:
                    args += ["EVENTS", f"{key}:events"]
                    if spec.events_maxlen is not None:
                        args += ["MAXLEN", spec.events_maxlen]
                # REPLACE: the claim is ours, so a partition already there is a leftover.
                args += ["PARTITION", index, "PARTITIONS", spec.partitions, "MANIFEST", name, "REPLACE"]
                yield from _key.kept_write(tuple(args), keep)
            yield Call((
                "HSET", name,
                "version", _MANIFEST_VERSION,
                "stock", spec.stock,
                "limit", spec.limit,
                "hold", spec.hold_ms or 0,
                "start", spec.start_ms or 0,
                "end", spec.end_ms or 0,
                "events", int(spec.events),
                "maxlen", spec.events_maxlen or 0,
                "naming", _partition_key(name, "<i>"),
                # The waiting room (absent from manifests written before it: no room).
                "queue", int(spec.queue),
                "admit", spec.admit_rate[0] if spec.admit_rate else 0,
                "per", spec.admit_rate[1] if spec.admit_rate else 0,
                "window", spec.window_ms or 0,
                "presence", spec.presence_ms or 0,
                # Written last: a sale opens only once every partition exists.
                "ready", 1,
            ))
            yield Call(("PERSIST", name))
        except BaseException:
            try:
                yield Call(("DEL", name))  # should this fail too, the claim's expiry does
            except Exception:  # noqa: BLE001 - the first failure is the one to report
                pass
            raise

    @staticmethod
    def _open_op(name: str) -> Operation[SaleSpec]:
        _check_name(name)
        try:
            reply = yield Call(("HGETALL", name))
        except WrongTypeError as error:
            raise BadManifestError(f"{name}: not a partitioned sale's manifest ({error})") from error
        fields = {k: as_text(v) for k, v in fields_of(reply).items()}
        if not fields:
            raise NoSaleError(name)
        yield from _key.require_module()
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
        try:
            room = {k: int(fields.get(k, 0)) for k in ("queue", "admit", "per", "window", "presence")}
        except ValueError as error:
            raise BadManifestError(f"{name}: bad {error}") from error
        return SaleSpec(
            queue=room["queue"] == 1,
            admit_rate=(room["admit"], room["per"]) if room["admit"] and room["per"] else None,
            window_ms=room["window"] or None,
            presence_ms=room["presence"] or None,
            stock=number["stock"],
            partitions=number["partitions"],
            limit=number["limit"],
            hold_ms=number["hold"] or None,
            start_ms=number["start"] or None,
            end_ms=number["end"] or None,
            events=number["events"] == 1,
            events_maxlen=number["maxlen"] or None,
        )

    @staticmethod
    def _delete_op(name: str) -> Operation[None]:
        _check_name(name)
        partitions = yield Call(("HGET", name, "partitions"))
        for index in range(min(int(partitions or 0), MAX_PARTITIONS)):
            key = _partition_key(name, index)
            yield Call(("DEL", key))
            yield Call(("DEL", f"{key}:events"))
        yield Call(("DEL", name))

    # -- buying ---------------------------------------------------------------------------

    def _buy_op(self, user: User, qty: int, wait: Optional[Tuple[int, int]],
                attempt_id: Optional[str] = None) -> Operation[Tuple[int, int]]:
        """The purchase loop: TRY (pipelined with WAIT when ``wait`` says so) under one attempt
        id while its answer is lost; a drained partition borrows and tries again. Replies the
        last ``(code, acked)``, SOLD_OUT when no partition had the units."""
        partition = self.partition_of(user)
        key = self.keys[partition]
        self._count("tries")
        attempt_id = attempt_id or _key.new_attempt_id()
        retrier = Retrier(self.retry, attempt_id)
        borrows = 0
        while True:
            if wait is None:
                code, acked = (yield from _key.try_buy(retrier, key, user, qty, attempt_id, self._keep)), 0
            else:
                code, acked = yield from _key.try_and_wait(retrier, key, user, qty, attempt_id, wait)
            if code != DRAINED:
                return code, acked
            if borrows == 0:
                self._count("borrowing_tries")
            borrows += 1
            if borrows > _MAX_BORROWS:
                raise ContendedError(f"borrowed stock {_MAX_BORROWS} times for {user!r}")
            # Borrowing moves stock by idempotent transfers and buys nothing: a failover under
            # it is waited out and the purchase tried again under the same id.
            try:
                borrowed = yield from self._borrow_op(partition, qty)
            except Exception as error:  # noqa: BLE001 - sorted right below
                if not is_retryable(error):
                    raise
                yield Sleep(retrier.backoff(error, of_the_call=False))
                continue
            if not borrowed:
                return SOLD_OUT, acked

    def _borrow_op(self, partition: int, qty: int) -> Operation[bool]:
        """Looks for ``qty`` units for ``partition`` in the others: True when it may have them
        now, False when no partition had any at one instant."""
        lock = self._borrowing[partition]
        asked = time.monotonic()
        waited = not (yield Acquire(lock, blocking=False))
        if waited:
            yield Acquire(lock, blocking=True)
        try:
            if waited:
                # A scan begun after this buyer asked found nothing it could reach: its answer
                # is this buyer's too (a scan of its own would read the same down nodes).
                if self._unreachable_refusal[partition] >= asked:
                    self._count("unreachable_refusals")
                    return False
                # Another buyer of this partition just borrowed, or sealed it: look first.
                info = PartitionInfo.from_reply((yield from _on_master(("SECKILL.INFO", self.keys[partition]))))
                if info.remaining >= qty or info.sealed:
                    return info.remaining >= qty
            for _ in range(64):
                scanned = time.monotonic()
                first = yield from self._scan_op()
                mine = first[partition]
                if mine is not None and mine.remaining >= qty:
                    return True
                donors = [(info.lendable, i) for i, info in enumerate(first)
                          if i != partition and info is not None and info.lendable > 0]
                if donors:
                    available, donor = max(donors)
                    want = max(qty, self._batches[partition])
                    # At most half of what the donor has, so two drained partitions do not pass
                    # the same units back and forth; but enough for this purchase if it can.
                    units = max(min(want, (available + 1) // 2), min(qty, available))
                    if (yield from self._transfer_op(donor, partition, units)) > 0:
                        cap = max(self.spec.stock // self.spec.partitions, 1)
                        self._batches[partition] = min(self._batches[partition] * 2, cap)
                        return True
                    continue
                if any(info is not None and info.pending_out > 0 for info in first):
                    # Only the transfers toward a partition just read: one toward a partition
                    # that could not be read would wait on its node (it stays pending, and
                    # its units count as that partition's, below).
                    read = [key for key, info in zip(self.keys, first) if info is not None]
                    if (yield from self._recover_op(read, read)) or len(read) == len(self.keys):
                        continue
                if any(i != partition and info is not None and info.remaining > 0 for i, info in enumerate(first)):
                    # Units are left only where waiting rooms promised them to admitted users:
                    # nothing to lend now, and not sold out (a lapsed window frees its unit).
                    return False
                if any(info is None for info in first):
                    # A partition could not be read (its node is down): it cannot lend either.
                    # Refused as sold out, which sells nothing, and sealed like a sale found
                    # empty: for seal_ms its buyers cost one round trip, and a unit that comes
                    # back elsewhere reaches them after it, as with any seal.
                    self._count("unreachable_refusals")
                    self._unreachable_refusal[partition] = scanned
                    yield from _on_master(("SECKILL.SEAL", self.keys[partition], self.seal_ms))
                    return False
                # Nothing anywhere as these sequential reads show; a second pass that reads every
                # partition's units the same proves they all were so at one instant between the
                # passes (a seal lapsing meanwhile moves no unit).
                second = yield from self._scan_op()
                if [i and i.units for i in second] != [i and i.units for i in first]:
                    continue
                if mine is not None and mine.remaining > 0:
                    return False
                if int((yield from _on_master(("SECKILL.SEAL", self.keys[partition], self.seal_ms)))) == 1:
                    self._count("seals")
                    return False
            return True
        finally:
            yield Release(lock)

    def _transfer_op(self, source: int, target: int, units: int) -> Operation[int]:
        with self._stats_lock:
            transfer_id = f"{self._mover}-{self._next_transfer}"
            self._next_transfer += 1
        source_key, target_key = self.keys[source], self.keys[target]
        try:
            lent = yield from self._kept_lend_op(source_key, transfer_id, units, target_key)
        except NotReplicatedError as error:
            # For the purchase that borrows: a step that failed, retried within its deadline.
            raise redis.exceptions.TimeoutError(f"loan {transfer_id}: {error}") from error
        yield from self._finish_op(source_key, transfer_id, lent, target_key)
        if lent > 0:
            self._count("transfers")
            self._count("units_moved", lent)
        return lent

    @staticmethod
    def _finish_op(source_key: str, transfer_id: Any, units: int, target_key: str) -> Operation[None]:
        """ABSORB (when units moved) then SETTLE: the steps after LEND, each idempotent."""
        if units > 0:
            yield from _on_master(("SECKILL.ABSORB", target_key, transfer_id, units, "FROM", source_key))
        yield from _on_master(("SECKILL.SETTLE", source_key, transfer_id))

    def _kept_lend_op(self, source_key: str, transfer_id: Any, units: int, target_key: str) -> Operation[int]:
        """``SECKILL.LEND`` as a kept write: the units lent, NotReplicatedError when no replica
        acknowledged it in time. The units lent must not come back to the source while the
        target has them: a LEND a failover of the source's master could take back is not
        absorbed (its transfer stays pending; the next borrow or recover finishes it). Sent
        again for a transfer another mover started, it moves nothing and propagates a marker
        the WAIT counts."""
        keep = None if self._keep is None else self._keep.for_change(returned_units)
        lend = ("SECKILL.LEND", source_key, transfer_id, units, "TO", target_key)
        return int((yield from _key.kept_write(lend, keep)))

    def _recover_op(self, keys: Optional[List[str]] = None, targets: Optional[List[str]] = None) -> Operation[int]:
        """Ends the transfers pending on ``keys`` (every partition's by default) toward
        ``targets`` (this sale's partitions by default): how many it ended."""
        finished = 0
        for key in self.keys if keys is None else keys:
            pending = (yield from _on_master(("SECKILL.TRANSFERS", key, "WITHASKED"))) or []
            for i in range(0, len(pending) - 4, 5):
                transfer_id, units, target = pending[i], int(pending[i + 1]), as_text(pending[i + 2])
                asked = int(pending[i + 4])
                # Only transfers between this sale's own partitions are this client's to end.
                if target not in (self.keys if targets is None else targets):
                    continue
                if units > 0:
                    try:
                        yield from self._kept_lend_op(key, transfer_id, max(asked, units), target)
                    except NotReplicatedError:
                        continue  # no replica has the LEND yet: left pending
                yield from self._finish_op(key, transfer_id, units, target)
                finished += 1
        self._count("recovered", finished)
        return finished

    def _scan_op(self) -> Operation[List[Optional[PartitionInfo]]]:
        """Every partition's SECKILL.INFO for a borrow, each read on the package's connection to
        its master within ``SCAN_READ_TIMEOUT_S``; None for one whose node is down or did not
        answer in time (it is marked down: the next scans skip it at no cost)."""
        infos: List[Optional[PartitionInfo]] = []
        for key in self.keys:
            try:
                (reply,) = yield NodeCall(key, (("SECKILL.INFO", key),), SCAN_READ_TIMEOUT_S)
            except Exception as error:  # noqa: BLE001 - sorted right below
                if not is_retryable(error):
                    raise
                infos.append(None)
                continue
            infos.append(PartitionInfo.from_reply(reply))
        return infos

    def _partition_infos_op(self) -> Operation[List[PartitionInfo]]:
        infos = []
        for key in self.keys:
            infos.append((yield from _key.info(key)))
        return infos

    # -- orders, reading, events ----------------------------------------------------------

    def _cancel_op(self, user: User, qty: Optional[int]) -> Operation[int]:
        return (yield from _key.cancel(self.retry, self._key_of(user), user, qty, self._keep))

    def _bought_op(self, user: User) -> Operation[int]:
        return (yield from _key.bought(self._key_of(user), user))

    def _join_op(self, user: User) -> Operation[int]:
        return (yield from _key.join(self._key_of(user), user))

    def _position_op(self, user: User) -> Operation[Optional[int]]:
        return (yield from _key.position(self._key_of(user), user, self.read_from_replicas))

    def _admit_op(self, n: int) -> Operation[int]:
        """``n`` split evenly over the partitions' rooms, the first of them one more, starting
        where the last call ended (so ``admit(1)`` calls go round them all)."""
        if not self.spec.queue:
            raise NoQueueError(f"{self.name}: made without a waiting room")
        with self._stats_lock:
            first = self._next_admit
            self._next_admit = (first + n) % self.spec.partitions
        admitted = 0
        for turn in range(self.spec.partitions):
            share = self.spec.share(n, turn)
            if share:
                index = (first + turn) % self.spec.partitions
                admitted += yield from _key.admit(self.keys[index], share)
        return admitted

    def _room_key(self, user: User) -> str:
        return self._key_of(user)

    def _on_resync(self, user: User) -> Optional[Callable[[], Operation[None]]]:
        """While users still wait in a partition found drained, stock is borrowed for it as
        ``try_buy`` would: its room admits nobody without units, and a page that only waits
        sends no TRY to borrow for it."""
        partition = self.partition_of(user)

        def borrow() -> Operation[None]:
            info = yield from _key.info(self.keys[partition])
            if info.remaining == 0 and not info.sealed:
                yield from self._borrow_op(partition, 1)

        return borrow

    def _confirm_op(self, user: User) -> Operation[bool]:
        return (yield from _key.confirm(self._key_of(user), user, self._keep))

    def _restock_op(self, units: int) -> Operation[None]:
        check_units(units)
        for index, key in enumerate(self.keys):
            share = self.spec.share(units, index)
            if share:
                yield from _key.restock(key, share, self._keep)

    def _info_op(self) -> Operation[SaleInfo]:
        return SaleInfo.total((yield from self._partition_infos_op()))

    def _buyers_op(self) -> Operation[List[Buyer]]:
        # A user buys in one partition only, so nobody appears twice.
        found: List[Buyer] = []
        for partition, key in enumerate(self.keys):
            found += yield from _key.buyers(key, partition)
        return found

    def _create_group_op(self, group: str) -> Operation[None]:
        for stream in self.event_streams:
            yield from _key.create_group(stream, group)

    def _read_group_op(self, group: str, consumer: str, count: int) -> Operation[List[SaleEvent]]:
        # Streams of different slots cannot be read in one call: XREADGROUP on each in turn.
        events: List[SaleEvent] = []
        for partition, stream in enumerate(self.event_streams):
            events += yield from _key.read_group(partition, stream, group, consumer, count)
        return events

    def _ack_op(self, group: str, event: SaleEvent) -> Operation[bool]:
        return (yield from _key.ack(group, event))


class PartitionedSale(PartitionedOps, FlashSale):
    """One sale over ``partitions`` sale keys, on a sync redis-py client. Safe to share between
    threads."""

    @classmethod
    def create(cls, client: Any, name: str, spec: SaleSpec, *, seal_ms: int = DEFAULT_SEAL_MS,
               retry: RetryPolicy = RetryPolicy(), local_cache: bool = False,
               replace: bool = False, durability: str = "replica",
               ack_timeout_ms: Optional[int] = None,
                 read_from_replicas: bool = False) -> "PartitionedSale":
        """Creates the sale ``name``: its partitions ``{name/0}`` .. ``{name/P-1}`` (each
        with its share of the stock, and its stream ``{name/i}:events`` with ``events``),
        then the manifest hash ``name``. Every setting is checked (TypeError,
        InvalidArgumentError), and the module's presence and version too (ModuleMissingError,
        ModuleTooOldError), before anything is written. Raises SaleExistsError if that
        manifest exists. The name is claimed with an expiry that the finished manifest drops:
        a create that fails half way gives the name back at once, one whose process died
        within CREATE_CLAIM_MS. ``local_cache``: see ``Sale``. ``replace``: a sale of that name
        is deleted first (partitions, streams, manifest), then this one is made. ``durability``
        and ``ack_timeout_ms``: see ``Sale``; each partition is made as durably."""
        keep = keep_of(durability, ack_timeout_ms, retry.deadline_s)
        run(cls._create_op(name, spec, replace, keep), client)
        return cls(client, name, spec, seal_ms, retry, local_cache=local_cache, durability=durability,
                   ack_timeout_ms=ack_timeout_ms,
                   read_from_replicas=read_from_replicas)

    @classmethod
    def open(cls, client: Any, name: str, *, seal_ms: int = DEFAULT_SEAL_MS,
             retry: RetryPolicy = RetryPolicy(), local_cache: bool = False, durability: str = "replica",
             ack_timeout_ms: Optional[int] = None,
                 read_from_replicas: bool = False) -> "PartitionedSale":
        """Opens the sale ``name`` from its manifest; checks the module's version too.
        ``local_cache``, ``durability``, ``ack_timeout_ms``: see ``Sale``."""
        sale = cls(client, name, run(cls._open_op(name), client), seal_ms, retry, local_cache=local_cache,
                   durability=durability, ack_timeout_ms=ack_timeout_ms,
                   read_from_replicas=read_from_replicas)
        run(_key.require_durability(sale.keys[0], sale._keep), client)
        return sale

    @staticmethod
    def delete(client: Any, name: str) -> None:
        """Deletes the sale: partitions, streams, then the manifest (also a half-created one's)."""
        run(PartitionedOps._delete_op(name), client)

    def recover(self) -> int:
        """Finishes every transfer between this sale's partitions that a mover started and did
        not finish; replies how many. Safe at any time, also while movers work: every step is
        idempotent. ``try_buy`` runs it when it finds units in flight and none elsewhere. With
        durability, a transfer is absorbed only once a replica of its source has the LEND (sent
        again under its id, which moves nothing): one no replica acknowledged stays pending."""
        return int(self._run(self._recover_op()))

    def partition_infos(self) -> List[PartitionInfo]:
        """Each partition's SECKILL.INFO, partition 0 first."""
        infos: List[PartitionInfo] = self._run(self._partition_infos_op())
        return infos


"""The commands on one sale key, written once (as operations, see ``_effects``) for both kinds
of sale, a one-key ``Sale`` and each partition of a ``PartitionedSale``, sync and async."""

from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

from ._durability import Keep, confirmed, returned_units
from ._effects import Call, Operation
from ._node import NodeCall
from .errors import InvalidArgumentError, ModuleMissingError, ModuleTooOldError, NotReplicatedError
from .info import Buyer, PartitionInfo, SaleEvent, User, as_bytes, as_text, buyer_rows, events_of, fields_of
from .protocol import MIN_MODULE_VERSION
from .retry import Retrier, RetryPolicy, retried_effect


def new_attempt_id() -> str:
    """A purchase's or a cancel's attempt id: 32 random hex digits."""
    return os.urandom(16).hex()


def kept_write(
    command: Tuple[Any, ...], keep: Optional[Keep], retrier: Optional[Retrier] = None, attempt_id: Optional[str] = None
) -> Operation[Any]:
    """``command``, a write, on the package's connection to its key's master (``command[1]``),
    and with ``keep`` the wait for what keeps it (see ``_durability``): its reply, or
    ``NotReplicatedError`` with it. Under ``retrier`` a lost answer is sent again (a command
    with an attempt id, which a repeat does not make twice)."""
    call = NodeCall(str(command[1]), (command,), keep=keep)
    replies = yield from (retried_effect(retrier, call) if retrier is not None else _once(call))
    if keep is not None and replies[-1] is False:
        raise NotReplicatedError(attempt_id, replies[0], keep.timeout_ms)
    return replies[0]


def _once(call: NodeCall) -> Operation[Any]:
    return (yield call)


def try_buy(retrier: Retrier, key: str, user: User, qty: int, attempt_id: str, keep: Optional[Keep]) -> Operation[int]:
    """``SECKILL.TRY key user qty ID attempt`` under ``retrier``, kept as ``keep`` says: the
    command's code."""
    code = yield from kept_write(("SECKILL.TRY", key, user, qty, "ID", attempt_id), keep, retrier, attempt_id)
    return int(code)


def try_and_wait(
    retrier: Retrier, key: str, user: User, qty: int, attempt_id: str, wait: Tuple[int, int]
) -> Operation[Tuple[int, int]]:
    """``try_buy`` pipelined with ``WAIT replicas timeout_ms`` on one connection: ``(code,
    acked)``. A purchase that had to be sent again counts as acknowledged by none: its write
    may have been made on a connection (or a master) gone since."""
    replicas, timeout_ms = wait
    try_cmd = ("SECKILL.TRY", key, user, qty, "ID", attempt_id)
    code, acked = yield from retried_effect(retrier, NodeCall(key, (try_cmd, ("WAIT", replicas, timeout_ms))))
    return int(code), (0 if retrier.retries else int(acked))


def cancel(policy: RetryPolicy, key: str, user: User, qty: Optional[int], keep: Optional[Keep]) -> Operation[int]:
    """``SECKILL.CANCEL key user [qty] ID attempt``, retried under ``policy``, kept as ``keep``
    says when units went back."""
    attempt_id = new_attempt_id()
    args: Tuple[Any, ...] = ("SECKILL.CANCEL", key, user) + ((qty,) if qty is not None else ()) + ("ID", attempt_id)
    keep = None if keep is None else keep.for_change(returned_units)
    returned = yield from kept_write(args, keep, Retrier(policy, attempt_id), attempt_id)
    return int(returned)


def bought(key: str, user: User) -> Operation[int]:
    return int((yield Call(("SECKILL.BOUGHT", key, user))))


def join(key: str, user: User) -> Operation[int]:
    """``SECKILL.JOIN``: sent again as it is (joining again changes nothing)."""
    return int((yield Call(("SECKILL.JOIN", key, user))))


def position(key: str, user: User, replica: bool = False) -> Operation[Optional[int]]:
    """``SECKILL.POSITION``; on a replica of the key's master with ``replica`` (see
    ``NodeCall``)."""
    if replica:
        (reply,) = yield NodeCall(key, (("SECKILL.POSITION", key, user),), replica=True)
    else:
        reply = yield Call(("SECKILL.POSITION", key, user))
    return None if reply is None else int(reply)


def admit(key: str, n: int) -> Operation[int]:
    return int((yield Call(("SECKILL.ADMIT", key, n))))


def confirm(key: str, user: User, keep: Optional[Keep]) -> Operation[bool]:
    """``SECKILL.CONFIRM``, kept as ``keep`` says when a hold became final. Sent once: a
    confirm sent again after a lost answer would answer 0 for the hold the first made final."""
    keep = None if keep is None else keep.for_change(confirmed)
    return int((yield from kept_write(("SECKILL.CONFIRM", key, user), keep))) == 1


def restock(key: str, units: int, keep: Optional[Keep]) -> Operation[None]:
    yield from kept_write(("SECKILL.RESTOCK", key, units), keep)


def info(key: str) -> Operation[PartitionInfo]:
    return PartitionInfo.from_reply((yield Call(("SECKILL.INFO", key))))


def event_stream(key: str) -> Operation[Optional[str]]:
    """The sale's event stream as SECKILL.INFO names it (None: made without EVENTS)."""
    stream = fields_of((yield Call(("SECKILL.INFO", key)))).get("events")
    return None if stream is None else as_text(stream)


def buyers(key: str, partition: int) -> Operation[List[Buyer]]:
    """Every buyer of ``key`` (a SECKILL.BUYERS scan)."""
    found: List[Buyer] = []
    cursor = "0"
    while True:
        next_cursor, rows = yield Call(("SECKILL.BUYERS", key, cursor, "COUNT", 1000))
        for user, qty, state in buyer_rows(rows):
            found.append(Buyer(as_bytes(user), int(qty), as_text(state) == "held", partition))
        cursor = as_text(next_cursor)
        if cursor == "0":
            return found


def create_group(stream: str, group: str) -> Operation[None]:
    """The consumer group ``group`` on ``stream`` (from the start); an existing one is kept."""
    try:
        yield Call(("XGROUP", "CREATE", stream, group, "0", "MKSTREAM"))
    except Exception as error:  # noqa: BLE001 - only BUSYGROUP is expected
        if "BUSYGROUP" not in str(error):
            raise


def read_group(partition: int, stream: str, group: str, consumer: str, count: int) -> Operation[List[SaleEvent]]:
    reply = yield Call(("XREADGROUP", "GROUP", group, consumer, "COUNT", count, "STREAMS", stream, ">"))
    return events_of(partition, stream, reply)


def ack(group: str, event: SaleEvent) -> Operation[bool]:
    return int((yield Call(("XACK", event.stream, group, event.id)))) == 1


def module_version(info_reply: Any) -> Optional[int]:
    """``seckill_version`` from one node's parsed ``INFO seckill`` (None: no module)."""
    if isinstance(info_reply, (bytes, str)):
        for line in as_text(info_reply).splitlines():
            if line.startswith("seckill_version:"):
                return int(line.split(":", 1)[1])
        return None
    version = (info_reply or {}).get("seckill_version")
    return None if version is None else int(version)


def require_module() -> Operation[None]:
    """ModuleMissingError unless the server has the module loaded, ModuleTooOldError unless it
    is at least MIN_MODULE_VERSION (``INFO seckill``'s ``seckill_version``); nothing written.
    A cluster client asks every node, and the oldest answer counts."""
    reply = yield Call(("INFO", "seckill"))
    per_node = (
        list(reply.values())
        if isinstance(reply, dict) and reply and all(isinstance(v, dict) for v in reply.values())
        else [reply]
    )
    versions = [module_version(node) for node in per_node]
    if not versions or any(v is None for v in versions):
        raise ModuleMissingError(
            "the server has no seckill module: start it with --loadmodule .../libseckill.so"
        )
    oldest = min(v for v in versions if v is not None)
    if oldest < MIN_MODULE_VERSION:
        raise ModuleTooOldError(oldest)


def require_durability(key: str, keep: Optional[Keep]) -> Operation[None]:
    """For ``durability="aof"``: InvalidArgumentError unless ``key``'s master has WAITAOF
    (Redis 7.2+, Valkey 8+) and an AOF to wait for; nothing written."""
    if keep is None or not keep.aof:
        return
    try:
        yield NodeCall(key, (("WAITAOF", 1, 0, 1),))
    except Exception as error:  # noqa: BLE001 - a refusal is the answer
        if "unknown command" in str(error).lower():
            raise InvalidArgumentError(
                "durability='aof' needs WAITAOF (Redis 7.2+, Valkey 8+): this server has none"
            ) from error
        if "appendonly" in str(error).lower():
            raise InvalidArgumentError(f"durability='aof' needs appendonly yes on the master: {error}") from error
        raise


def events_stream_of(key: str) -> Optional[str]:
    """The stream ``create`` gives a one-key sale made with events: in the key's hash slot (the
    module writes it in the same command), so it keeps the key's hash tag or makes the key one.
    None for a key with braces but no hash tag, whose slot no other name shares for sure."""
    opening = key.find("{")
    if opening >= 0:
        closing = key.find("}", opening + 1)
        if closing > opening + 1:
            return f"{key}:events"
    if "{" in key or "}" in key:
        return None
    return "{%s}:events" % key


def check_key(key: str) -> None:
    if not isinstance(key, str):
        raise TypeError(f"the sale key must be a str, not {type(key).__name__}")
    if not key:
        raise InvalidArgumentError("the sale key must be non-empty")

"""When a write is told as done: durability. A handle's ``durability`` says what a buyer's
"bought" (a purchase, a cancel's units back, a confirm, a restock, a sale made) survives:

- ``"replica"`` (the default): the master applied it and one replica acknowledged it (``WAIT 1
  t`` on the write's connection), so a failover to that replica keeps it;
- ``"master"``: the master applied it (nothing waited for: lost if the master dies before its
  replica has it);
- ``"aof"``: the master's AOF and one replica's have it on disk (``WAITAOF 1 1 t``; Redis 7.2+
  and Valkey 8+).

A write no replica acknowledged within the acknowledgement timeout is ``NotReplicatedError``.
A master with no replica to wait for (see ``Replicas``) is answered as ``"master"`` is: nobody
can take a write away from it through a failover."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Generator, List, Optional, Tuple

from ._args import integer
from .errors import ArgumentTypeError, InvalidArgumentError
from .info import as_text

__all__ = ["DURABILITIES", "Keep", "Replicas", "ack_timeout_of", "default_ack_timeout_ms", "durability_of", "keep_for",
           "keep_of", "keep_steps"]

#: The settings of ``durability=``.
DURABILITIES = ("replica", "master", "aof")

#: The acknowledgement timeout without one given: a tenth of the retry deadline, within these
#: bounds (the default 40 s deadline: 1 s).
MIN_ACK_TIMEOUT_MS = 100
MAX_ACK_TIMEOUT_MS = 1_000


def durability_of(value: Any) -> str:
    """``value`` checked as a durability setting."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"durability must be a str, not {type(value).__name__}")
    if value not in DURABILITIES:
        raise InvalidArgumentError(f"durability must be one of {', '.join(map(repr, DURABILITIES))}, got {value!r}")
    return value


#: What "aof" waits for on top: ``appendfsync everysec`` fsyncs once a second.
AOF_FSYNC_MS = 1_000


def default_ack_timeout_ms(deadline_s: float, durability: str = "replica") -> int:
    """The acknowledgement timeout derived from a retry policy's ``deadline_s``: a tenth of it,
    between 100 ms and 1 s; for "aof" one fsync period more."""
    timeout = int(min(max(deadline_s * 100, MIN_ACK_TIMEOUT_MS), MAX_ACK_TIMEOUT_MS))
    return timeout + (AOF_FSYNC_MS if durability == "aof" else 0)


def ack_timeout_of(value: Any, deadline_s: float, durability: str = "replica") -> int:
    """``ack_timeout_ms=`` checked (None: derived from the retry deadline)."""
    if value is None:
        return default_ack_timeout_ms(deadline_s, durability)
    return integer("ack_timeout_ms", value, 1)


def wrote(reply: Any) -> bool:
    """Whether a write's reply says it changed the sale (so that a failover could take it
    back): a purchase's units left (>= 0), OK. (A cancel's and a confirm's: ``returned_units``,
    ``confirmed``.)"""
    if isinstance(reply, int):
        return reply >= 0
    return reply is not None


def returned_units(reply: Any) -> bool:
    """A cancel's reply: whether any unit went back."""
    return isinstance(reply, int) and reply > 0


def confirmed(reply: Any) -> bool:
    """A confirm's reply: whether a hold became final."""
    return isinstance(reply, int) and reply == 1


@dataclass(frozen=True)
class Keep:
    """What a write waits for before its answer (see the module's notes). ``changed`` tells
    from the write's reply whether there is anything to keep (a refusal changed nothing)."""

    aof: bool
    timeout_ms: int
    changed: Callable[[Any], bool] = wrote

    def command(self, replica: bool) -> Optional[Tuple[Any, ...]]:
        """The command that waits, on the write's connection (None: nothing to wait for)."""
        if self.aof:
            return ("WAITAOF", 1, 1 if replica else 0, self.timeout_ms)
        return ("WAIT", 1, self.timeout_ms) if replica else None

    def kept(self, reply: Any, replica: bool) -> bool:
        """Whether the reply of ``command(replica)`` says the write is kept."""
        if self.aof:
            local, replicas = (int(n) for n in reply)
            return local >= 1 and replicas >= (1 if replica else 0)
        return int(reply) >= 1

    def for_change(self, changed: Callable[[Any], bool]) -> "Keep":
        return Keep(self.aof, self.timeout_ms, changed)

    def read_timeout(self, timeout_s: Optional[float]) -> float:
        """How long the answer of ``command`` is awaited: its own timeout, plus the call's
        (or ACK_GRACE_S) for the round trip and a busy server, before the call counts as lost."""
        return self.timeout_ms / 1000 + (timeout_s if timeout_s is not None else ACK_GRACE_S)


#: How much longer than its own timeout a WAIT's answer is awaited (the round trip, a busy
#: server) before the call counts as lost.
ACK_GRACE_S = 1.0


def keep_for(durability: str, timeout_ms: int) -> Optional[Keep]:
    """What a handle of ``durability`` waits for (None: nothing, ``"master"``)."""
    if durability == "master":
        return None
    return Keep(aof=durability == "aof", timeout_ms=timeout_ms)


def keep_of(durability: Any, ack_timeout_ms: Any, deadline_s: float) -> Optional[Keep]:
    """The settings ``durability=`` and ``ack_timeout_ms=`` checked: what a write waits for."""
    durability = durability_of(durability)
    return keep_for(durability, ack_timeout_of(ack_timeout_ms, deadline_s, durability))


#: How often a master with no replica known is asked again whether one attached.
RECHECK_S = 1.0


@dataclass
class _Node:
    #: The replication history (``master_replid``) in which a replica was seen; None: none.
    seen_in: Optional[str] = None
    #: Whether a replica was connected at the last look.
    connected: bool = False
    checked_at: float = float("-inf")
    #: A connection to it was lost since: look again at the next write.
    stale: bool = False


class Replicas:
    """Which masters have a replica to wait for, as one application client knows it.

    One server (or Sentinel's master): a replica seen connected (``INFO replication``) is
    waited for from then on, even while its link is down (a master cut from its replica is
    when the answer matters), until the server's replication history changes (a restart, a
    promotion: ``master_replid``). A master with none seen is asked again every ``RECHECK_S``.

    A cluster: a master whose slots the cluster's map lists a replica for, or whose replica was
    connected at the last look, is waited for; one whose replicas the cluster marks failed (the
    map, read with ``CLUSTER SLOTS``, lists none) and none connected is not: no failover can
    promote a replica the cluster marks failed without the cluster seeing it again first."""

    def __init__(self) -> None:
        self._nodes: Dict[str, _Node] = {}

    def needs_look(self, name: str, listed: Optional[bool]) -> bool:
        """Whether ``name``'s replicas should be looked at now (``listed``: whether the
        cluster's map lists one; None for one server)."""
        node = self._nodes.get(name)
        if node is None or node.stale:
            return True
        if listed is None and node.seen_in is not None:
            return False
        if listed:
            return False
        return time.monotonic() - node.checked_at >= RECHECK_S

    def learn(self, name: str, info: Any) -> None:
        """What ``INFO replication`` on ``name`` says."""
        fields = _fields(info)
        node = self._nodes.setdefault(name, _Node())
        node.checked_at, node.stale = time.monotonic(), False
        replid = fields.get("master_replid", "")
        # A node that is no master (a writable replica answered the write: a master turned
        # replica since, ``replica-read-only no``) is waited for: its WAIT is refused, and the
        # write is sent again until a master answers it (``retry.turned_replica``), never
        # told kept.
        node.connected = fields.get("role") != "master" or any(
            key.startswith("slave") and key[5:].isdigit() for key in fields
        )
        if node.seen_in is not None and node.seen_in != replid:
            node.seen_in = None  # another history: what was seen of the last one is gone
        if node.connected:
            node.seen_in = replid

    def forget(self, name: str) -> None:
        """After a lost connection to ``name``: look again at its next write (it may have
        restarted, or be another server's since a failover)."""
        node = self._nodes.get(name)
        if node is not None:
            node.stale = True

    def known(self, name: str, listed: Optional[bool]) -> bool:
        """Whether a write on ``name`` waits for a replica."""
        node = self._nodes.get(name)
        if listed is not None:
            return listed or (node is not None and node.connected)
        return node is not None and node.seen_in is not None


#: One step of ``keep_steps``: a command to send on the writes' connection and how long its
#: answer is awaited.
Step = Tuple[Tuple[Any, ...], Optional[float]]


def keep_steps(replicas: Replicas, name: str, listed: Optional[bool], keep: Keep, writes: List[Any],
               timeout_s: Optional[float]) -> Generator[Step, Any, Optional[bool]]:
    """What keeps ``writes`` (their replies) made on one connection to ``name``, as the commands
    to send on that connection one after the other (each yielded with its read timeout, its
    answer sent back): the sync and the asyncio connections drive it alike. The result: None
    when none changed anything or no replica is there to wait for, else whether one WAIT (or
    WAITAOF) says they are all kept (one answer covers every earlier write of the connection).
    An unkept write has ``name`` looked at again at the next write (the same history keeps
    waiting for its replica)."""
    if not any(keep.changed(reply) for reply in writes):
        return None
    if replicas.needs_look(name, listed):
        replicas.learn(name, (yield ("INFO", "replication"), timeout_s))
    replica = replicas.known(name, listed)
    command = keep.command(replica)
    if command is None:
        return None
    kept = keep.kept((yield command, keep.read_timeout(timeout_s)), replica)
    if not kept:
        replicas.forget(name)
    return kept


def _fields(info: Any) -> Dict[str, str]:
    """``INFO``'s reply as fields, parsed (redis-py's dict) or raw text."""
    if isinstance(info, dict):
        return {as_text(k): as_text(v) if isinstance(v, (bytes, str)) else "1" for k, v in info.items()}
    fields = {}
    for line in as_text(info).splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields

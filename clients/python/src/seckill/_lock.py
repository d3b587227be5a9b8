"""Locks, the parts the sync and the asyncio ``Lock`` share: the settings and their checks, the
lease (a pure state machine on a monotonic clock: when to renew, when the lease is lost), and
the grant, renewal and release written once as generators of ``NodeCall`` effects.

A ``NodeCall`` (``seckill._node``) runs its commands pipelined on one of the package's own
connections to the master that serves the key, and gives up after ``timeout_s``: the lock never
waits on the application's client's retries or socket timeout, and a ``WAIT`` counts the
writes of the connection that made them."""

from __future__ import annotations

import math
import os
import random
import time
from dataclasses import dataclass
from typing import Any, Optional, Tuple, Union

from ._args import integer
from ._effects import Sleep, check_client
from ._node import NodeCall
from .errors import InvalidArgumentError, LockLost, LockTimeout
from .info import as_text
from .retry import is_retryable

#: A lease the server grants and the client renews.
DEFAULT_TTL_MS = 30_000
#: How long a grant or a renewal waits for a replica to acknowledge it, at most.
DEFAULT_REPLICA_TIMEOUT_MS = 1_000
#: The read timeout beyond a call's own wait: a server that answers nothing this long is gone.
_GRACE_S = 1.0




def _whole(value: Any, what: str, minimum: int) -> int:
    return integer(what, value, minimum)


def check_wait(wait_ms: Any) -> int:
    """``wait_ms`` of ``hold``: 0 tries once, more waits in the server's FIFO queue."""
    return _whole(wait_ms, "wait_ms", 0)


@dataclass(frozen=True)
class LockSettings:
    """A lock's settings, each checked before anything is sent.

    - ``ttl_ms``: the lease; the watchdog renews it every ``renew_ms`` (default ``ttl_ms / 3``)
      while the guard is held, so a holder stuck in a slow call keeps the lock as long as its
      process lives, and a dead holder's lock is free ``ttl_ms`` after its last renewal.
    - ``max_hold_ms``: no renewal past this much time after the grant (None: no cap).
    - ``replicas``: how many replicas must acknowledge a grant or a renewal (``WAIT``); None:
      one when the master has any, else none; 0 turns it off.
    - ``margin_ms``: how much earlier than ``ttl_ms`` after a renewal's send the guard calls
      the lease lost, for the difference in rate between this machine's clock and the server's
      (default ``ttl_ms / 100 + 2``, Redlock's drift allowance).
    """

    name: str
    ttl_ms: int
    renew_ms: int
    max_hold_ms: Optional[int]
    replicas: Optional[int]
    replica_timeout_ms: int
    margin_ms: int

    @classmethod
    def build(
        cls,
        name: Any,
        ttl_ms: Any,
        renew_ms: Any = None,
        max_hold_ms: Any = None,
        replicas: Any = None,
        replica_timeout_ms: Any = DEFAULT_REPLICA_TIMEOUT_MS,
        margin_ms: Any = None,
    ) -> "LockSettings":
        if isinstance(name, bytes):
            name = name.decode()
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"a lock's name must be a non-empty string, got {name!r}")
        ttl = _whole(ttl_ms, "ttl_ms", 3)
        margin = ttl // 100 + 2 if margin_ms is None else _whole(margin_ms, "margin_ms", 0)
        if margin >= ttl:
            raise InvalidArgumentError(f"margin_ms ({margin}) must be less than ttl_ms ({ttl})")
        renew = max(ttl // 3, 1) if renew_ms is None else _whole(renew_ms, "renew_ms", 1)
        if renew >= ttl - margin:
            raise InvalidArgumentError(
                f"renew_ms ({renew}) must be less than ttl_ms - margin_ms ({ttl - margin}): "
                "the lease would run out before its renewal"
            )
        return cls(
            name=name,
            ttl_ms=ttl,
            renew_ms=renew,
            max_hold_ms=None if max_hold_ms is None else _whole(max_hold_ms, "max_hold_ms", 1),
            replicas=None if replicas is None else _whole(replicas, "replicas", 0),
            replica_timeout_ms=_whole(replica_timeout_ms, "replica_timeout_ms", 1),
            margin_ms=margin,
        )


class LockBase:
    """What the sync and the asyncio ``Lock`` share: the settings, checked here before anything
    is sent (``InvalidArgumentError``), the client, and the replica count."""

    #: Whether the class is seckill.asyncio's (its client must be a redis.asyncio one).
    _asyncio = False

    def __init__(
        self,
        client: Any,
        name: str,
        ttl_ms: int = DEFAULT_TTL_MS,
        *,
        renew_ms: Optional[int] = None,
        max_hold_ms: Optional[int] = None,
        replicas: Optional[int] = None,
        replica_timeout_ms: int = DEFAULT_REPLICA_TIMEOUT_MS,
        margin_ms: Optional[int] = None,
    ) -> None:
        check_client(client, self._asyncio)
        self.settings = LockSettings.build(name, ttl_ms, renew_ms, max_hold_ms, replicas, replica_timeout_ms, margin_ms)
        self.client = client
        self.replicas = ReplicaCount(self.settings.replicas)

    @property
    def name(self) -> str:
        return self.settings.name


def new_token() -> str:
    """A guard's token: 32 random hex digits, never reused."""
    return os.urandom(16).hex()


class Lease:
    """What the holder knows of its lease, on a monotonic clock in seconds (``now`` passed in).

    The lease is known held until ``deadline``: the send time of the last renewal the server
    (and the replicas asked for) acknowledged, plus ``ttl_ms - margin_ms``. The server expires
    it no earlier than ``ttl_ms`` after it ran that command, which is after its send; so past
    the deadline the holder stops trusting it, no later than the server could hand it on."""

    def __init__(self, settings: LockSettings, granted_sent: float) -> None:
        self.settings = settings
        self.granted_at = granted_sent
        self.deadline = granted_sent
        self.next_renewal = granted_sent
        self.renewed(granted_sent, settings.ttl_ms)

    def renewed(self, sent: float, ttl_ms: int) -> None:
        """A grant or a renewal sent at ``sent`` for ``ttl_ms`` was acknowledged."""
        self.deadline = max(self.deadline, sent + (ttl_ms - self.settings.margin_ms) / 1000)
        self.next_renewal = sent + self.settings.renew_ms / 1000

    def failed(self, now: float) -> None:
        """A renewal got no definite answer: try again soon, within the deadline."""
        self.next_renewal = now + min(0.05, self.settings.renew_ms / 4000)

    def expired(self, now: float) -> bool:
        return now >= self.deadline

    def renewal_ttl(self, now: float) -> Optional[int]:
        """The TTL the next renewal asks for: the lease, cut short at ``max_hold_ms`` after the
        grant; None when the cap is reached (the lease then runs out)."""
        ttl = self.settings.ttl_ms
        if self.settings.max_hold_ms is not None:
            left = self.granted_at + self.settings.max_hold_ms / 1000 - now
            ttl = min(ttl, math.floor(left * 1000))
            if ttl <= self.settings.margin_ms:
                return None
        return ttl

    def delay(self, now: float) -> float:
        """Seconds until the watchdog has something to do: a renewal, or the deadline."""
        wake = self.deadline if self.renewal_ttl(now) is None else min(self.next_renewal, self.deadline)
        return max(0.0, wake - now)


def _int(reply: Any) -> int:
    return int(reply)


def _replicas_of(role: Any) -> int:
    """The connected replicas in a ``ROLE`` reply of a master (0 for anything else)."""
    if as_text(role[0]) != "master":
        return 0
    return len(role[2])


#: How often a lock reads its master's replicas again at the most (``ROLE``), with no failure
#: to prompt it: a replica attached since is asked from the next grant or renewal on.
RECOUNT_EVERY_S = 2.0


class ReplicaCount:
    """How many replicas a lock asks to acknowledge: fixed, or (``None`` in the settings) one
    when the master has any, read with ``ROLE``, and read again after a write went
    unacknowledged (the replica may be gone for good), a lost connection or a MOVED (a
    failover: the next master has replicas of its own), and once ``RECOUNT_EVERY_S`` has
    passed (a replica attached since)."""

    def __init__(self, wanted: Optional[int]) -> None:
        self.wanted = wanted
        self._detected: Optional[int] = None
        self._read_at = 0.0

    def count(self, key: str) -> Any:
        if self.wanted is not None:
            return self.wanted
        if self._detected is None or time.monotonic() - self._read_at >= RECOUNT_EVERY_S:
            (role,) = yield NodeCall(key, (("ROLE",),), _GRACE_S)
            self._detected, self._read_at = min(_replicas_of(role), 1), time.monotonic()
        return self._detected

    def forget(self) -> None:
        self._detected = None


def _with_wait(command: Tuple[Any, ...], replicas: int, timeout_ms: int) -> Tuple[Tuple[Any, ...], ...]:
    if replicas == 0:
        return (command,)
    return (command, ("WAIT", replicas, timeout_ms))


def grant(settings: LockSettings, replicas: ReplicaCount, token: str, wait_ms: int) -> Any:
    """The lock for ``token``, waiting up to ``wait_ms`` in the server's FIFO queue; the result:
    ``(fence, send time of the granting call)``. A lost answer is asked again with the same
    token (a grant to it answers the same fence) and waits only what is left of ``wait_ms``; a
    grant no replica acknowledged in time is released and asked for again. ``LockTimeout``
    when not granted in time; then nothing is left held."""
    name = settings.name
    deadline = time.monotonic() + wait_ms / 1000
    backoff = 0.01
    reason = f"held by another holder for all of wait_ms={wait_ms}"
    while True:
        try:
            wanted = yield from replicas.count(name)
            left_ms = math.ceil((deadline - time.monotonic()) * 1000)
            acquire: Tuple[Any, ...] = ("LOCK.ACQUIRE", name, token, settings.ttl_ms)
            if left_ms > 0:
                acquire += ("WAIT", left_ms)
            commands = _with_wait(acquire, wanted, settings.replica_timeout_ms)
            sent = time.monotonic()
            timeout = max(left_ms, 0) / 1000 + settings.replica_timeout_ms / 1000 + _GRACE_S
            replies = yield NodeCall(name, commands, timeout, may_wait=True)
        except Exception as error:  # noqa: BLE001 - sorted right below
            if not is_retryable(error):
                raise
            replicas.forget()
            reason = f"no answer from the server ({error})"
            if time.monotonic() >= deadline:
                yield from _release_quietly(settings, token)
                raise LockTimeout(settings.name, reason) from error
            yield Sleep(min(backoff * (0.5 + random.random() / 2), max(deadline - time.monotonic(), 0)))
            backoff = min(backoff * 2, 0.5)
            continue
        fence = replies[0]
        if fence is not None and (wanted == 0 or _int(replies[1]) >= wanted):
            return _int(fence), sent
        if fence is not None:
            # Granted, but a failover now could lose the grant: hand it back, ask again.
            yield from _release_quietly(settings, token)
            replicas.forget()
            reason = (
                f"no replica acknowledged the grant within replica_timeout_ms="
                f"{settings.replica_timeout_ms} (wanted {wanted})"
            )
        if time.monotonic() >= deadline:
            raise LockTimeout(settings.name, reason)


def _release_quietly(settings: LockSettings, token: str) -> Any:
    try:
        yield NodeCall(settings.name, (("LOCK.RELEASE", settings.name, token),), _GRACE_S)
    except Exception:  # noqa: BLE001 - the lease runs out by itself anyway
        pass


#: ``renew``'s answers besides a send time.
LOST = "lost"
UNACKNOWLEDGED = "unacknowledged"


def renew(settings: LockSettings, replicas: ReplicaCount, token: str, ttl_ms: int, timeout_s: float) -> Any:
    """One ``LOCK.EXTEND`` (with ``WAIT`` when replicas are wanted): the send time when the
    server and the replicas asked for acknowledged it, ``LOST`` when the server says the token
    no longer holds the lock, ``UNACKNOWLEDGED`` when no replica had it in time (the lease is
    not counted longer: a promoted replica would not have it; the replicas are counted again,
    as a promotion may have left the master with none)."""
    name = settings.name
    wanted = yield from replicas.count(name)
    sent = time.monotonic()
    try:
        replies = yield NodeCall(
            name, _with_wait(("LOCK.EXTEND", name, token, ttl_ms), wanted, settings.replica_timeout_ms), timeout_s
        )
    except Exception:
        replicas.forget()
        raise
    if _int(replies[0]) == 0:
        return LOST
    if wanted and _int(replies[1]) < wanted:
        replicas.forget()
        return UNACKNOWLEDGED
    return sent


def release(settings: LockSettings, token: str) -> Any:
    """``LOCK.RELEASE``: whether the token held the lock (it now goes to the next waiter)."""
    (released,) = yield NodeCall(settings.name, (("LOCK.RELEASE", settings.name, token),), _GRACE_S)
    return _int(released) == 1


def hold(settings: LockSettings, replicas: ReplicaCount, token: str, wait_ms: int) -> Any:
    """``grant``, then, when the answer came late (the server kept the call waiting in its
    queue), one renewal at once: the lease is counted from a call's send, and the grant's may
    be long past."""
    fence, sent = yield from grant(settings, replicas, token, wait_ms)
    if time.monotonic() - sent < settings.renew_ms / 1000:
        return fence, sent
    try:
        renewed = yield from renew(settings, replicas, token, settings.ttl_ms, settings.ttl_ms / 1000)
    except Exception as error:  # noqa: BLE001 - sorted right below
        if not is_retryable(error):
            raise
        renewed = None  # the watchdog tries again right away
    if renewed == LOST:
        raise LockTimeout(settings.name, "the grant ran out before its answer arrived")
    return fence, (renewed if isinstance(renewed, float) else sent)


class GuardState:
    """A guard's state, shared by the sync and the asyncio guards: its token and fence, the
    lease, and the loss signal (``lost``: a ``threading.Event`` or an ``asyncio.Event``, set
    once and never cleared)."""

    def __init__(
        self, settings: LockSettings, replicas: ReplicaCount, token: str, fence: int, sent: float, lost: Any
    ) -> None:
        self.settings = settings
        self.name = settings.name
        self.token = token
        self.fence = fence
        self.lost = lost
        self.lost_reason: Optional[str] = None
        self.lease = Lease(settings, sent)
        self.replicas = replicas
        self.released = False

    def lose(self, reason: str) -> None:
        if not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()

    def check(self) -> None:
        """Raises ``LockLost`` unless the lease is still known held: call it before each side
        effect. It reads the clock itself, so a process that was frozen past its deadline
        knows at once on waking, before its watchdog has run."""
        if self.released:
            raise LockLost(self.name, "the guard was released")
        if self.lease.expired(time.monotonic()):
            self.lose(PAST_DEADLINE)
        if self.lost.is_set():
            raise LockLost(self.name, self.lost_reason or "lost")


PAST_DEADLINE = "no renewal was acknowledged before the lease's local deadline (ttl_ms - margin_ms after the last)"


def next_step(guard: GuardState, now: float) -> Union[float, Tuple[int, float], None]:
    """What the watchdog does next for ``guard``: wait this many seconds (a float), renew now
    (``(ttl_ms, timeout_s)``: the answer awaited no later than the deadline), or nothing ever
    again (None: the guard was released, or the deadline passed with no renewal acknowledged
    and ``lost`` is set)."""
    if guard.released:
        # Released: nothing to renew. Checked here too, not only by cancelling the asyncio
        # watchdog: asyncio.wait_for can swallow a cancellation that meets a reply (Python
        # 3.11), and the watchdog then renewed a released lease forever.
        return None
    lease = guard.lease
    if lease.expired(now):
        guard.lose(PAST_DEADLINE)
        return None
    delay = lease.delay(now)
    if delay > 0:
        return delay
    ttl = lease.renewal_ttl(now)
    assert ttl is not None  # delay() waits for the deadline when there is no renewal
    return ttl, lease.deadline - now


def record(guard: GuardState, ttl_ms: int, outcome: Any) -> bool:
    """Takes a renewal's outcome (a send time, ``LOST``, ``UNACKNOWLEDGED`` or the error it
    raised) into the lease; whether the watchdog goes on."""
    if isinstance(outcome, BaseException):
        if not is_retryable(outcome):
            guard.lose(f"LOCK.EXTEND failed: {outcome}")
            return False
        guard.lease.failed(time.monotonic())
        return True
    if outcome == LOST:
        guard.lose("LOCK.EXTEND answered 0: the lease expired or went to another holder")
        return False
    if outcome == UNACKNOWLEDGED:
        guard.lease.failed(time.monotonic())
        return True
    guard.lease.renewed(outcome, ttl_ms)
    return True


def renewal(guard: GuardState, ttl_ms: int, timeout_s: float) -> Any:
    """One renewal of ``guard``'s lease: its outcome, or the error it raised, for ``record``."""
    try:
        return (yield from renew(guard.settings, guard.replicas, guard.token, ttl_ms, timeout_s))
    except Exception as error:  # noqa: BLE001 - record sorts it
        return error


def watch(guard: GuardState) -> Any:
    """The watchdog as one operation (the asyncio guard's task): renews the lease every
    ``renew_ms`` until the guard is released (the task is cancelled), and sets ``lost`` the
    moment the server says the lease is gone or the deadline passes with no renewal
    acknowledged."""
    while True:
        step = next_step(guard, time.monotonic())
        if step is None:
            return
        if isinstance(step, float):
            yield Sleep(step)
            continue
        ttl, timeout = step
        outcome = yield from renewal(guard, ttl, timeout)
        if not record(guard, ttl, outcome):
            return

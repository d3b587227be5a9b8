"""A lock on the module's ``LOCK.*`` commands: fenced, renewed by a watchdog while held, and
the holder told the moment it lost it.

    from seckill import Lock, LockLost

    lock = Lock(client, "lock:stock", ttl_ms=30_000)
    with lock.hold(wait_ms=5_000) as guard:
        rows = slow_http_call()          # the watchdog keeps the lease meanwhile
        guard.check()                    # LockLost if the lease is gone: stop here
        db.execute("UPDATE stock SET qty = :q, fence = :f WHERE id = 1 AND fence < :f",
                   {"q": rows, "f": guard.fence})

Waiting is the server's (``LOCK.ACQUIRE ... WAIT``, FIFO, handed over at release or expiry);
the lease and the loss signal are ``seckill._lock``'s, shared with ``seckill.asyncio``."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, List, Optional, Tuple, Type

import redis

from . import _lock, _observe
from ._effects import run
from ._lock import GuardState, LockBase

__all__ = ["Lock", "LockGuard"]


class Lock(LockBase):
    """A lock named ``name`` on ``client`` (``redis.Redis`` or ``redis.RedisCluster``); see
    ``seckill._lock.LockSettings`` for the settings. Checks every argument before it sends
    anything (``InvalidArgumentError``). One ``Lock`` may be shared by threads: each ``hold``
    is a guard of its own, with its own token."""

    def run(self, operation: Any) -> Any:
        """A lock operation of ``seckill._lock``, on the package's own connections."""
        return run(operation, self.client)

    @_observe.observed("lock_hold")
    def hold(self, wait_ms: int = 5_000) -> "LockGuard":
        """The lock, granted within ``wait_ms`` (0: try once), as a guard (a context manager
        that releases it); ``LockTimeout`` when not granted in time."""
        wait = _lock.check_wait(wait_ms)
        token = _lock.new_token()
        fence, sent = self.run(_lock.hold(self.settings, self.replicas, token, wait))
        return LockGuard(self, token, fence, sent)


class Watchdog:
    """The sync guards' watchdog: one thread per process that wakes at each guard's next
    renewal or deadline, and a small pool of threads that make the renewals (each on the
    lock's own connections), so a renewal blocked on one server never delays another guard's,
    nor the moment a lease is called lost. A guard costs nothing until its first renewal is
    due (``renew_ms`` after the grant): short holds start no thread at all.

    Each guard has one live entry in the schedule (``_generation``); older entries are
    skipped when they come up, so a released guard simply drops out."""

    _RENEWERS = 16

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._due: List[Tuple[float, int, int, "LockGuard"]] = []
        self._order = itertools.count()
        self._thread: Optional[threading.Thread] = None
        self._renewers: Optional[ThreadPoolExecutor] = None

    def schedule(self, guard: "LockGuard", at: float) -> None:
        with self._ready:
            guard._generation += 1
            heapq.heappush(self._due, (at, next(self._order), guard._generation, guard))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="seckill-lock-watchdog", daemon=True)
                self._thread.start()
                self._renewers = ThreadPoolExecutor(self._RENEWERS, thread_name_prefix="seckill-lock-renew")
            if self._due[0][3] is guard:
                self._ready.notify()

    def watched(self) -> int:
        """Guards with a live entry: neither released nor lost."""
        with self._ready:
            return len({id(g) for _, _, gen, g in self._due if gen == g._generation and g.watched()})

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._due:
                    self._ready.wait()
                at, _, generation, guard = self._due[0]
                wait = at - time.monotonic()
                if generation == guard._generation and wait > 0:
                    self._ready.wait(wait)
                    continue
                heapq.heappop(self._due)
                if generation != guard._generation:
                    continue
            self._visit(guard)

    def _visit(self, guard: "LockGuard") -> None:
        if not guard.watched():
            return
        now = time.monotonic()
        if guard._renewing:
            # A renewal is in flight (perhaps blocked): only the deadline can come first.
            if guard.lease.expired(now):
                guard.lose(_lock.PAST_DEADLINE)
            else:
                self.schedule(guard, guard.lease.deadline)
            return
        step = _lock.next_step(guard, now)
        if step is None:
            return
        if isinstance(step, float):
            self.schedule(guard, now + step)
            return
        guard._renewing = True
        self.schedule(guard, guard.lease.deadline)
        assert self._renewers is not None
        self._renewers.submit(self._renew, guard, *step)

    def _renew(self, guard: "LockGuard", ttl_ms: int, timeout_s: float) -> None:
        try:
            outcome = guard._lock.run(_lock.renewal(guard, ttl_ms, timeout_s))
        finally:
            guard._renewing = False
        if guard.watched() and _lock.record(guard, ttl_ms, outcome):
            self.schedule(guard, time.monotonic())


WATCHDOG = Watchdog()


class LockGuard(GuardState):
    """A granted lock: ``fence`` (send it with every write the lock protects), ``token``,
    ``lost`` (a ``threading.Event``, set the moment the lease is known lost) and ``check()``.
    The process's ``Watchdog`` renews the lease until ``release()``."""

    def __init__(self, lock: Lock, token: str, fence: int, sent: float) -> None:
        super().__init__(lock.settings, lock.replicas, token, fence, sent, threading.Event())
        self._lock = lock
        self._release_mutex = threading.Lock()
        self._generation = 0
        self._renewing = False
        WATCHDOG.schedule(self, self.lease.next_renewal)

    def watched(self) -> bool:
        return not self.released and not self.lost.is_set()

    def release(self) -> bool:
        """Stops the watchdog and releases the lock (it goes to the next waiter at once);
        whether this guard still held it. Idempotent; never raises for a server that is gone
        (the lease then runs out by itself)."""
        with self._release_mutex:
            if self.released:
                return False
            self.released = True  # the watchdog drops it (a renewal in flight is ignored)
        try:
            return self._release()
        except redis.exceptions.RedisError:
            return False

    @_observe.observed("lock_release", _observe.release_outcome)
    def _release(self) -> bool:
        return bool(self._lock.run(_lock.release(self.settings, self.token)))

    def __enter__(self) -> "LockGuard":
        return self

    def __exit__(
        self,
        kind: Optional[Type[BaseException]],
        error: Optional[BaseException],
        trace: Optional[TracebackType],
    ) -> None:
        self.release()

"""The sync driver of ``_waiting``: one reader thread per client and sale key, on the
package's own connections (``_node``), shared by every ``wait_for_turn`` of the process. A
waiter costs a ``Waiter`` and a wait on its own event, not a connection or a read.

Both drivers (this one and ``seckill.asyncio._rooms``) follow one loop, in two steps:
``read_step`` reads the stream (blocking until the next ask or join may be due), moves the
places and wakes the waiters whose turn came; ``settle_step`` asks the server when the entries
cannot say (and after an error, once the node answers again), joins every waiter again with
PRESENCE at a third of it, and wakes everyone when the server answered or, at most every
``update_ms``, when places moved. A reader stops once its last waiter has gone."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from . import _waiting
from ._effects import Operation, drive, perform, run
from ._waiting import Follower, Place, Waiter
from .info import User

#: After a failed read, the reader waits this long (doubling up to ``MAX_BACKOFF_S``).
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0

#: Waiters are woken for a move of their place (everyone moves up at each admission) at most
#: this often by default (``update_ms``); their turn, a sell-out or the server's answer wakes
#: them at once. A waiting page then costs a wake every few seconds, not one per admission.
DEFAULT_UPDATE_MS = 3_000

#: An operation the reader runs after each resync while waiters remain (a partitioned sale
#: borrows units for a drained partition's room); None: nothing.
OnResync = Optional[Callable[[], Operation[None]]]


class Schedule:
    """When the reader must ask the server, and join its waiters again: pure, both drivers'."""

    def __init__(self, resync_ms: int, update_ms: int, presence_ms: Optional[int]) -> None:
        self.resync_ms = resync_ms
        self.update_ms = update_ms
        self.rejoin_s = None if presence_ms is None else presence_ms / 3000
        now = time.monotonic()
        self.last_rejoin = self.last_ask = self.last_notice = self.last_entry = now

    def block_ms(self) -> int:
        """How long the next read may block: until the next ask or rejoin may be due."""
        now = time.monotonic()
        due = self.last_ask + self.resync_ms / 1000
        if self.rejoin_s is not None:
            due = min(due, self.last_rejoin + self.rejoin_s)
        return max(1, int((due - now) * 1000))

    def ask_due(self, events: int, drawn: bool) -> bool:
        """Whether the server is to be asked after a read of ``events`` entries: after
        ``resync_ms`` without an entry (entries trimmed away are caught up, and a pace's ETA
        moves), and before START every ``resync_ms`` (the cohort grows with no entry to say
        so). While entries flow they tell every move."""
        now = time.monotonic()
        if events:
            self.last_entry = now
        if now < self.last_ask + self.resync_ms / 1000:
            return False
        if drawn and now < self.last_entry + self.resync_ms / 1000:
            return False
        self.last_ask = now
        return True

    def tighten(self, resync_ms: int, update_ms: int) -> None:
        """A waiter that asks for more: the reader serves the most demanding."""
        self.resync_ms = min(self.resync_ms, resync_ms)
        self.update_ms = min(self.update_ms, update_ms)

    def notice_due(self) -> bool:
        if time.monotonic() < self.last_notice + self.update_ms / 1000:
            return False
        self.last_notice = time.monotonic()
        return True

    def rejoin_due(self) -> bool:
        if self.rejoin_s is None or time.monotonic() < self.last_rejoin + self.rejoin_s:
            return False
        self.last_rejoin = time.monotonic()
        return True


def read_step(follower: Follower, schedule: Schedule, failed: bool) -> Operation[Tuple[List[Waiter], bool]]:
    """A reader's read: the waiters whose turn came (woken at once, before anyone is asked
    about: a draw's resync of ten thousand places must not hold up the first tick's turns),
    and whether the server is to be asked (after a failed read, everyone is)."""
    events = yield from _waiting.read(follower, schedule.block_ms())
    turned, must_ask = follower.read(events)
    due = schedule.ask_due(len(events), follower.drawn)
    return turned, failed or due or must_ask or follower.wants_ask


def settle_step(follower: Follower, schedule: Schedule, asking: bool, on_resync: OnResync) -> Operation[bool]:
    """After a read: the server asked (when ``asking``), PRESENCE's joins; whether every waiter
    is to be woken (the server answered, or places moved and a notice is due)."""
    if asking:
        yield from _waiting.ask(follower, follower.asking())
        if on_resync is not None and follower.asking():
            yield from on_resync()
    if schedule.rejoin_due():
        yield from _waiting.rejoin(follower, follower.asking())
    everyone = asking or (follower.moved and schedule.notice_due())
    if everyone:
        follower.moved = False
    return everyone


def drive_locked(operation: Operation[Any], client: Any, lock: Any) -> Any:
    """``_effects.run`` with ``lock`` held while the operation runs and released while its
    effects (the calls) do: the waiters' threads read the state the operation changes."""
    return drive(operation, lambda effect: perform(client, effect), held=lock)


class Reader:
    """One client's reader of one sale key's room, on a thread of its own."""

    def __init__(self, client: Any, key: str, resync_ms: int, update_ms: int, on_resync: OnResync) -> None:
        self.client = client
        self.key = key
        self.on_resync = on_resync
        self.follower = run(_waiting.open_follower(key), client)
        self.schedule = Schedule(resync_ms, update_ms, self.follower.presence_ms)
        self.cond = threading.Condition()
        self.stopped = False
        self._thread = threading.Thread(target=self._loop, name=f"seckill-room-{key}", daemon=True)

    def _loop(self) -> None:
        failed, backoff = False, FIRST_BACKOFF_S
        while True:
            with _registry, self.cond:
                if not self.follower.waiters:
                    self.stopped = True
                    _readers_of(self.client).pop(self.key, None)
                    return
            try:
                turned, asking = drive_locked(read_step(self.follower, self.schedule, failed), self.client,
                                              self.cond)
                with self.cond:
                    for waiter in turned:
                        waiter.wake.set()
                everyone = drive_locked(settle_step(self.follower, self.schedule, asking, self.on_resync),
                                        self.client, self.cond)
                failed, backoff = False, FIRST_BACKOFF_S
            except Exception:  # noqa: BLE001 - a node down or failing over: the waiters wait on
                failed, everyone = True, False
                time.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
            if everyone:
                with self.cond:
                    for waiter in self.follower.waiters.values():
                        waiter.wake.set()


_registry = threading.Lock()


def _readers_of(client: Any) -> Dict[str, Reader]:
    found: Optional[Dict[str, Reader]] = getattr(client, "_seckill_rooms", None)
    if found is None:
        found = {}
        client._seckill_rooms = found
    return found


def reader_for(client: Any, key: str, user: User, resync_ms: int, update_ms: int,
               on_resync: OnResync) -> Tuple[Reader, Waiter]:
    """The client's reader of ``key`` (started if none runs), with ``user`` added to it."""
    made: Optional[Reader] = None
    while True:
        with _registry:
            readers = _readers_of(client)
            reader = readers.get(key)
            if reader is None and made is not None:
                readers[key] = reader = made
                with reader.cond:
                    waiter = _added(reader.follower, user)
                reader._thread.start()
                return reader, waiter
            if reader is not None:
                with reader.cond:
                    reader.schedule.tighten(resync_ms, update_ms)
                    return reader, _added(reader.follower, user)
        made = Reader(client, key, resync_ms, update_ms, on_resync)


def _added(follower: Follower, user: User) -> Waiter:
    waiter = follower.add(user)
    if waiter.wake is None:
        waiter.wake = threading.Event()
    return waiter


#: A waiter looks at its reader again at least this often, whatever it was told.
WAKE_S = 1.0


def wait_for_turn(client: Any, key: str, user: User, resync_ms: int, update_ms: int,
                  on_resync: OnResync) -> Iterator[Place]:
    """The places of ``user``, each time its number changes, ending with 0 or SOLD_OUT; leaves
    the room when the consumer stops first."""
    reader, waiter = reader_for(client, key, user, resync_ms, update_ms, on_resync)
    follower = reader.follower
    done = False
    try:
        drive_locked(_waiting.join(follower, waiter), client, reader.cond)
        shown: Optional[int] = None
        while True:
            with reader.cond:
                place = follower.current(waiter)
            while shown is not None and int(place) == shown:
                waiter.wake.wait(WAKE_S)
                waiter.wake.clear()
                with reader.cond:
                    place = follower.current(waiter)
            shown = int(place)
            done = place <= 0
            yield place
            if done:
                return
    finally:
        with reader.cond:
            last = follower.remove(waiter)
        if last and not done:
            try:
                run(_waiting.leave(key, user), client)
            except Exception:  # noqa: BLE001 - best effort: with PRESENCE an absent page is dropped
                pass

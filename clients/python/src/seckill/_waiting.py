"""Waiting for a turn in a sale's waiting room: one reader of the room's event stream per
process (per client and sale key), shared by every waiter, instead of one stream read per
waiting page. Written once (pure state, and operations as in ``_effects``) for the sync driver
(``_rooms``: a thread) and the asyncio one (``seckill.asyncio._rooms``: a task).

Every admission (and every drop of an absent user) takes the head of the line, so the reader
counts them, ``departures``, and a waiter's place is ``base - departures``; a ``leave`` entry
names the place it left, and moves up the waiters behind it. The entry that admits a waiter is
its turn, told at once; nothing else claims a turn (a place never goes below 1 without it). The
server is asked (``SECKILL.POSITION ... WITHETA`` in one MULTI with the stream's last ID, for all
the reader's waiters at once) when the entries cannot say: the cohort's draw at START, a sale
that may have sold out, a waiter dropped or not in the room, and a quiet stream (``resync_ms``
without an entry). Each answer comes with the stream's last ID at that instant: the departures
after it are the ones that move the waiter on."""

from __future__ import annotations

import bisect
import heapq
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import redis

from ._effects import Operation
from ._node import NodeCall
from .errors import InvalidArgumentError, translate
from .info import SaleEvent, User, as_bytes, as_text, fields_of

#: How long one read of the stream blocks before the server is asked (a quiet stream).
DEFAULT_RESYNC_MS = 5_000
#: Entries read at most per read.
READ_COUNT = 1_000
#: Waiters asked about in one MULTI, at most.
ASK_BATCH = 500
#: Departures remembered, so that a waiter told its place as of an older entry moves on by the
#: departures after that entry.
HISTORY = 10_000
#: A blocked read's answer is awaited this much longer than it blocks.
READ_GRACE_S = 5.0


class Place(int):
    """Where a user stands, as ``SECKILL.JOIN`` replies it: >= 1 waiting, 0 its turn, -1 sold
    out (an ``int``: ``place == 0`` and ``f"{place}"`` work as before). ``eta_ms``: about how
    long until its turn (0 its turn; -1 sold out or nothing known yet); ``drawn``: False before
    START, when no order exists yet and the number is how many wait (the cohort), not a place."""

    eta_ms: int
    drawn: bool

    def __new__(cls, position: int, eta_ms: int = -1, drawn: bool = True) -> "Place":
        place = super().__new__(cls, position)
        place.eta_ms = eta_ms
        place.drawn = drawn
        return place

    def __repr__(self) -> str:
        return f"Place({int(self)}, eta_ms={self.eta_ms}, drawn={self.drawn})"


def entry_id(text: str) -> Tuple[int, int]:
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


@dataclass
class Waiter:
    """One waiting user of a reader. ``place`` is what it was last told."""

    user: bytes
    place: Place = field(default_factory=lambda: Place(1, -1, False))
    #: ``place`` = ``base - departures`` while it waits with drawn places (None: not known).
    base: Optional[int] = None
    #: When ``place`` (its ETA) was told (monotonic s): the ETA counts down from there.
    eta_at: float = 0.0
    #: A told place waiting for the reader to reach the entry it was told as of.
    pending: Optional[Tuple[int, int, Tuple[int, int]]] = None
    #: The server must be asked where it stands.
    ask: bool = False
    #: The pages (``wait_for_turn`` calls) waiting for this user.
    pages: int = 0
    #: What wakes its pages (a ``threading.Event`` or an ``asyncio.Event``: the driver's).
    wake: Any = None

    @property
    def done(self) -> bool:
        return self.place <= 0


def place_of(reply: Any) -> Optional[Tuple[int, int]]:
    """``[position, eta_ms]`` (WITHETA) as a pair; None for nil (not in the room)."""
    if reply is None:
        return None
    if isinstance(reply, redis.exceptions.ResponseError):
        raise translate(reply)
    position, eta = reply
    return int(position), int(eta)


class Follower:
    """The reader's state for one sale key: its waiters and what the stream told."""

    def __init__(self, key: str, stream: str, last_id: str, presence_ms: Optional[int], drawn: bool) -> None:
        self.key = key
        self.stream = stream
        self.last_id = last_id
        self.presence_ms = presence_ms
        #: Whether the places are drawn (no START, or START passed): before, a JOIN or a
        #: POSITION answers how many wait, the cohort.
        self.drawn = drawn
        self.waiters: Dict[bytes, Waiter] = {}
        self.departures = 0
        #: The places told as of an entry not read yet, soonest first: (entry, user).
        self._pending: List[Tuple[Tuple[int, int], bytes]] = []
        #: Some waiter must be asked where it stands (its ``ask``).
        self.wants_ask = False
        #: The entries read last, and the departures counted up to each (at most HISTORY;
        #: trimmed by halves, so a lookup bisects a list).
        self._history_ids: List[Tuple[int, int]] = []
        self._history_departures: List[int] = []
        self._forgotten = False
        #: Waiters whose place moved since they were last woken.
        self.moved = False

    def add(self, user: User) -> Waiter:
        """A waiter for ``user`` (the same one for two pages of one user)."""
        waiter = self.waiters.setdefault(as_bytes(user), Waiter(as_bytes(user)))
        waiter.pages += 1
        return waiter

    def remove(self, waiter: Waiter) -> bool:
        """Whether that was the user's last page."""
        waiter.pages -= 1
        if waiter.pages == 0 and self.waiters.get(waiter.user) is waiter:
            del self.waiters[waiter.user]
        return waiter.pages == 0

    def _departures_at(self, at: Tuple[int, int]) -> Optional[int]:
        """Departures counted up to the entry ``at`` (None: older than the history)."""
        if at >= entry_id(self.last_id):
            return self.departures
        index = bisect.bisect_right(self._history_ids, at)
        if index == 0:
            return None if self._forgotten else 0
        return self._history_departures[index - 1]

    def _remember(self, at: Tuple[int, int]) -> None:
        self._history_ids.append(at)
        self._history_departures.append(self.departures)
        if len(self._history_ids) > 2 * HISTORY:
            del self._history_ids[:HISTORY]
            del self._history_departures[:HISTORY]
            self._forgotten = True

    def rewound(self, as_of: str) -> None:
        """The stream's last entry is older than the last one read: a promoted replica that
        had not all of them. Reading goes on from there (the entries after it are new)."""
        if entry_id(as_of) < entry_id(self.last_id):
            self.last_id = as_of
            self._history_ids.clear()
            self._history_departures.clear()

    def told(self, waiter: Waiter, answer: Optional[Tuple[int, int]], as_of: str) -> None:
        """The server's ``[position, eta_ms]`` for ``waiter``, as of the stream's entry
        ``as_of``: None, not in the room (asked again, as a JOIN, by the caller). Before START
        a waiting user's number is how many wait."""
        if answer is None:
            waiter.ask = self.wants_ask = True
            return
        position, eta_ms = answer
        waiter.ask, waiter.base, waiter.pending = False, None, None
        waiter.eta_at = time.monotonic()
        waiter.place = Place(position, eta_ms, self.drawn or position <= 0)
        if position <= 0 or not self.drawn:
            return
        at = entry_id(as_of)
        if at > entry_id(self.last_id):
            waiter.pending = (position, eta_ms, at)
            heapq.heappush(self._pending, (at, waiter.user))
            return
        counted = self._departures_at(at)
        if counted is None:
            waiter.ask = self.wants_ask = True
            return
        waiter.base = position + counted

    def read(self, events: List[SaleEvent]) -> Tuple[List[Waiter], bool]:
        """Moves the places by ``events``: the waiters whose turn came, and whether the server
        must be asked (a draw, a possible sell-out, a waiter dropped)."""
        turned: List[Waiter] = []
        ask = False
        for event in events:
            self._resolve_pending(entry_id(event.id))
            self.last_id = event.id
            kind = event.get("event")
            if kind in ("admit", "drop"):
                self.drawn = True
                self.departures += 1
                self.moved = True
                waiter = self.waiters.get(as_bytes(event.get("user")))
                if waiter is not None and not waiter.done:
                    if kind == "admit":
                        waiter.place, waiter.base = Place(0, 0), None
                        turned.append(waiter)
                    else:
                        waiter.ask = ask = self.wants_ask = True
            elif kind == "leave":
                self._left(int(event.get("qty") or 0))
            elif kind == "draw":
                self.drawn = ask = True
            elif event.get("remaining") == "0":
                ask = True  # nothing left: sold out, unless a hold comes back
            self._remember(entry_id(event.id))
        self._resolve_pending(entry_id(self.last_id))
        return turned, ask

    def _left(self, position: int) -> None:
        """A user left from ``position``: everyone behind it moves up."""
        if position <= 0:
            return
        for waiter in self.waiters.values():
            if waiter.base is not None and waiter.base - self.departures > position:
                waiter.base -= 1
                self.moved = True

    def _resolve_pending(self, reached: Tuple[int, int]) -> None:
        while self._pending and self._pending[0][0] < reached:
            at, user = heapq.heappop(self._pending)
            waiter = self.waiters.get(user)
            if waiter is not None and waiter.pending is not None and waiter.pending[2] == at:
                position = waiter.pending[0]
                waiter.pending = None
                waiter.base = position + self.departures

    def current(self, waiter: Waiter) -> Place:
        """The waiter's place now (never its turn without the entry that admits it)."""
        if waiter.done or waiter.base is None:
            return self._counted_down(waiter, waiter.place)
        position = waiter.base - self.departures
        if position < 1:
            waiter.ask = self.wants_ask = True
            position = 1
        return self._counted_down(waiter, Place(position, waiter.place.eta_ms, True))

    @staticmethod
    def _counted_down(waiter: Waiter, place: Place) -> Place:
        if place.eta_ms <= 0:
            return place
        elapsed = int((time.monotonic() - waiter.eta_at) * 1000)
        return Place(int(place), max(place.eta_ms - elapsed, 0), place.drawn)

    def asking(self) -> List[Waiter]:
        """Every waiter still waiting: the ones the server is asked about in a resync."""
        return [w for w in self.waiters.values() if not w.done]


# --- operations (see ``_effects``) ---------------------------------------------------------


def open_follower(key: str) -> Operation[Follower]:
    """The room's stream, its presence setting and its last entry: a reader starts there."""
    fields = fields_of((yield NodeCall(key, (("SECKILL.INFO", key),)))[0])
    stream = fields.get("events")
    if stream is None:
        raise InvalidArgumentError(
            f"{key}: waiting for a turn reads the sale's event stream; make the sale with events=True"
        )
    presence, start = fields.get("queue_presence"), fields.get("start")
    stream = as_text(stream)
    last, time_reply = yield NodeCall(key, (("XREVRANGE", stream, "+", "-", "COUNT", 1), ("TIME",)))
    last_id = as_text(last[0][0]) if last else "0-0"
    # INFO's queue_presence: the ms, or 0 (or nil) for none.
    return Follower(key, stream, last_id, int(presence) or None if presence is not None else None,
                    _started(start, time_reply))


def _started(start: Any, time_reply: Any) -> bool:
    """Whether the places are drawn: no START (INFO's ``start``), or the server's TIME past
    it (the master's timer draws them then, or within its ms)."""
    seconds, micros = time_reply
    return start is None or int(seconds) * 1000 + int(micros) // 1000 >= int(start)


def _snapshot(replies: List[Any]) -> Tuple[List[Any], str]:
    """A MULTI's EXEC: the replies of the commands but the last, and the stream's last ID
    (the last command's XREVRANGE)."""
    exec_reply = replies[-1]
    if exec_reply is None:
        raise redis.exceptions.ConnectionError("MULTI aborted")
    *answers, last = exec_reply
    return answers, as_text(last[0][0]) if last else "0-0"


def join(follower: Follower, waiter: Waiter) -> Operation[None]:
    """JOIN ... WITHETA and the stream's last ID, at one instant."""
    key, user = follower.key, waiter.user
    commands = (("MULTI",), ("SECKILL.JOIN", key, user, "WITHETA"),
                ("XREVRANGE", follower.stream, "+", "-", "COUNT", 1), ("EXEC",))
    replies = yield NodeCall(key, commands)
    (answer,), as_of = _snapshot(replies)
    follower.rewound(as_of)
    follower.told(waiter, place_of(answer), as_of)


def ask(follower: Follower, waiters: List[Waiter]) -> Operation[None]:
    """POSITION ... WITHETA for ``waiters`` and the stream's last ID, in one MULTI per batch;
    a waiter not in the room (dropped, or the room reopened after a sell-out) joins again."""
    key = follower.key
    follower.wants_ask = False
    for start in range(0, len(waiters), ASK_BATCH):
        batch = waiters[start:start + ASK_BATCH]
        commands = (("MULTI",),) + tuple(("SECKILL.POSITION", key, w.user, "WITHETA") for w in batch) + (
            ("XREVRANGE", follower.stream, "+", "-", "COUNT", 1), ("EXEC",))
        answers, as_of = _snapshot((yield NodeCall(key, commands)))
        follower.rewound(as_of)
        for waiter, answer in zip(batch, answers):
            follower.told(waiter, place_of(answer), as_of)
    for waiter in waiters:
        if waiter.ask and not waiter.done:
            yield from join(follower, waiter)


def rejoin(follower: Follower, waiters: List[Waiter]) -> Operation[None]:
    """With PRESENCE: every waiter joins again (one pipeline per batch), keeping its place."""
    key = follower.key
    for start in range(0, len(waiters), ASK_BATCH):
        batch = waiters[start:start + ASK_BATCH]
        yield NodeCall(key, tuple(("SECKILL.JOIN", key, w.user) for w in batch))


def read(follower: Follower, block_ms: int) -> Operation[List[SaleEvent]]:
    """One blocking read of the stream, after the last entry read."""
    command = ("XREAD", "COUNT", READ_COUNT, "BLOCK", block_ms, "STREAMS", follower.stream, follower.last_id)
    (reply,) = yield NodeCall(follower.key, (command,), timeout_s=block_ms / 1000 + READ_GRACE_S, may_wait=True)
    return raw_events(follower.stream, reply)


def raw_events(stream: str, reply: Any) -> List[SaleEvent]:
    """XREAD's raw reply on one stream (no redis-py callback ran on it): RESP2's ``[[stream,
    entries]]`` or RESP3's ``{stream: entries}``, each entry ``[id, [field, value, ...]]``."""
    if reply is None:
        return []
    pairs = list(reply.items()) if isinstance(reply, dict) else reply
    events: List[SaleEvent] = []
    for _, entries in pairs:
        for entry_id_, flat in entries:
            fields = fields_of(flat) if not isinstance(flat, dict) else flat
            events.append(SaleEvent(0, stream, as_text(entry_id_),
                                    {as_text(k): as_text(v) for k, v in fields.items()}))
    return events


def leave(key: str, user: User) -> Operation[bool]:
    """``SECKILL.LEAVE``: sent again as it is (leaving again changes nothing)."""
    (reply,) = yield NodeCall(key, (("SECKILL.LEAVE", key, user),))
    return int(reply) == 1


def place(key: str, user: User, replica: bool = False) -> Operation[Optional[Place]]:
    """``SECKILL.POSITION ... WITHETA`` with whether the places are drawn (START passed, by
    the server's clock): None when ``user`` is not in the room. On a replica of the key's
    master with ``replica`` (its clock then)."""
    answer, info, time_reply = yield NodeCall(
        key, (("SECKILL.POSITION", key, user, "WITHETA"), ("SECKILL.INFO", key), ("TIME",)), replica=replica)
    found = place_of(answer)
    if found is None:
        return None
    position, eta = found
    return Place(position, eta, _started(fields_of(info).get("start"), time_reply) or position <= 0)

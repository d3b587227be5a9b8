"""Waiting for a turn in a sale's waiting room, on the sale's event stream: one blocking read
per change of the room instead of one poll per waiting buyer. Written once (as operations, see
``_effects``) for the sync and the asyncio ``wait_for_turn``.

Every admission takes the head of the line, so each ``admit`` entry that names someone else
moves a waiting user one place up; the entry that names the user is its turn. The server is
asked (``SECKILL.POSITION``) only when the entries cannot say: the first admissions seen (they
may be START's, which draws the cohort's order), a sale that may have sold out (an entry with
no unit left), and a quiet stream (``resync_ms`` without an entry, in case entries were trimmed
away)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from . import _key
from ._effects import Call, Operation
from .errors import InvalidArgumentError
from .info import SaleEvent, User, as_bytes, as_text, events_of

#: How long one read of the stream blocks before the server is asked (a quiet stream).
DEFAULT_RESYNC_MS = 5_000
#: Entries read at most per read.
_READ_COUNT = 1_000


@dataclass
class TurnWatch:
    """One user's place, kept from the sale's event stream. ``place`` is what SECKILL.JOIN
    replies: >= 1 waiting (before START: the cohort's size), 0 admitted, -1 sold out."""

    user: bytes
    stream: str
    #: The last entry read; the next read starts after it.
    last_id: str
    place: int
    #: Whether the place was read after the first admissions (START's shuffle may precede them).
    synced: bool = False

    @property
    def done(self) -> bool:
        return self.place <= 0

    def read(self, events: List[SaleEvent]) -> bool:
        """Moves the place by ``events``; True when only the server can say where the user is."""
        if not events:
            return True
        admissions, ask = 0, False
        for event in events:
            self.last_id = event.id
            if event.get("event") == "admit":
                if as_bytes(event.get("user")) == self.user:
                    self.place = 0
                    return False
                admissions += 1
            elif event.get("remaining") == "0":
                ask = True
        if admissions:
            if not self.synced or self.place - admissions < 1:
                return True
            self.place -= admissions
        return ask

    def asked(self, place: Optional[int]) -> None:
        """The server's answer; None (not in the room: a room reopened after selling out) is
        turned into a JOIN by the caller."""
        if place is not None:
            self.place = place
            self.synced = True


def start(key: str, user: User) -> Operation[TurnWatch]:
    """The stream's last entry, then JOIN: every admission after the join is read."""
    stream = yield from _key.event_stream(key)
    if stream is None:
        raise InvalidArgumentError(
            f"{key}: waiting for a turn reads the sale's event stream; make the sale with events=True"
        )
    last = yield Call(("XREVRANGE", stream, "+", "-", "COUNT", 1))
    last_id = as_text(last[0][0]) if last else "0-0"
    place = yield from _key.join(key, user)
    return TurnWatch(as_bytes(user), stream, last_id, place)


def step(key: str, watch: TurnWatch, resync_ms: int) -> Operation[bool]:
    """One blocking read of the stream (at most ``resync_ms``), then the server when it must;
    True when it was asked."""
    reply = yield Call(("XREAD", "COUNT", _READ_COUNT, "BLOCK", resync_ms, "STREAMS", watch.stream, watch.last_id))
    if not watch.read(events_of(0, watch.stream, reply)):
        return False
    yield from ask(key, watch)
    return True


def ask(key: str, watch: TurnWatch) -> Operation[None]:
    """The user's place from the server: POSITION, or JOIN again for a user no longer in the
    room (a room reopened after selling out)."""
    place = yield from _key.position(key, watch.user)
    if place is None:
        place = yield from _key.join(key, watch.user)
    watch.asked(place)

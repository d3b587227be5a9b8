"""``seckill._rooms`` on asyncio: one reader task per client and sale key, shared by every
``wait_for_turn`` of the event loop. The state is changed between awaits only, so the waiters
read it without a lock; each waits on its own event (see ``Reader._wake_all``)."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Dict, Optional, Tuple

from .. import _waiting
from .._rooms import FIRST_BACKOFF_S, MAX_BACKOFF_S, OnResync, Schedule, read_step, settle_step
from .._waiting import Place, Waiter
from ..info import User

__all__ = ["wait_for_turn"]


class Reader:
    """One client's reader of one sale key's room, on a task of its own."""

    def __init__(self, client: Any, key: str, follower: _waiting.Follower, resync_ms: int, update_ms: int,
                 on_resync: OnResync) -> None:
        self.client = client
        self.key = key
        self.on_resync = on_resync
        self.follower = follower
        self.schedule = Schedule(resync_ms, update_ms, follower.presence_ms)
        self.task: Optional["asyncio.Task[None]"] = None

    async def loop(self) -> None:
        from . import run

        failed, backoff = False, FIRST_BACKOFF_S
        while self.follower.waiters:
            try:
                turned, asking = await run(read_step(self.follower, self.schedule, failed), self.client)
                for waiter in turned:
                    waiter.wake.set()
                everyone = await run(settle_step(self.follower, self.schedule, asking, self.on_resync),
                                     self.client)
                failed, backoff = False, FIRST_BACKOFF_S
            except Exception:  # noqa: BLE001 - a node down or failing over: the waiters wait on
                failed, everyone = True, False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
            if everyone:
                await self._wake_all()
        _readers_of(self.client).pop(self.key, None)


    async def _wake_all(self) -> None:
        """Wakes every waiter, WAKE_BATCH at a time with the loop let run between: waking ten
        thousand pages at once held the loop 350 ms (a turn told that much late)."""
        for count, waiter in enumerate(list(self.follower.waiters.values()), 1):
            waiter.wake.set()
            if count % WAKE_BATCH == 0:
                await asyncio.sleep(0)


#: Waiters woken per turn of the event loop when everyone is.
WAKE_BATCH = 256


def _readers_of(client: Any) -> Dict[str, Reader]:
    found: Optional[Dict[str, Reader]] = getattr(client, "_seckill_async_rooms", None)
    if found is None:
        found = {}
        client._seckill_async_rooms = found
    return found


def _added(follower: _waiting.Follower, user: User) -> Waiter:
    waiter = follower.add(user)
    if waiter.wake is None:
        waiter.wake = asyncio.Event()
    return waiter


_opening: Dict[Tuple[int, str], "asyncio.Future[Reader]"] = {}


async def reader_for(client: Any, key: str, user: User, resync_ms: int, update_ms: int,
                     on_resync: OnResync) -> Tuple[Reader, Waiter]:
    """The client's reader of ``key`` (started if none runs), with ``user`` added to it."""
    from . import run

    while True:
        reader = _readers_of(client).get(key)
        if reader is not None and reader.task is not None and not reader.task.done():
            reader.schedule.tighten(resync_ms, update_ms)
            return reader, _added(reader.follower, user)
        opening = _opening.get((id(client), key))
        if opening is not None:
            await asyncio.shield(opening)
            continue
        future: "asyncio.Future[Reader]" = asyncio.get_running_loop().create_future()
        _opening[(id(client), key)] = future
        try:
            follower = await run(_waiting.open_follower(key), client)
            reader = Reader(client, key, follower, resync_ms, update_ms, on_resync)
            waiter = _added(follower, user)
            _readers_of(client)[key] = reader
            reader.task = asyncio.get_running_loop().create_task(reader.loop(), name=f"seckill-room-{key}")
            future.set_result(reader)
            return reader, waiter
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # retrieved: the waiters that shared it retry on their own
            raise
        finally:
            del _opening[(id(client), key)]


async def wait_for_turn(client: Any, key: str, user: User, resync_ms: int, update_ms: int,
                        on_resync: OnResync) -> AsyncIterator[Place]:
    """``seckill._rooms.wait_for_turn`` on the event loop: ``async for``."""
    from . import run

    reader, waiter = await reader_for(client, key, user, resync_ms, update_ms, on_resync)
    follower = reader.follower
    done = False
    try:
        await run(_waiting.join(follower, waiter), client)
        shown: Optional[int] = None
        while True:
            place = follower.current(waiter)
            while shown is not None and int(place) == shown:
                # No timeout needed: on one event loop no wake is lost between the look and the
                # wait, and the reader wakes everyone at least at each resync (a timer per wait
                # would cost more than the wait itself).
                await waiter.wake.wait()
                waiter.wake.clear()
                place = follower.current(waiter)
            shown = int(place)
            done = place <= 0
            yield place
            if done:
                return
    finally:
        last = follower.remove(waiter)
        if last and not done:
            try:
                await asyncio.shield(run(_waiting.leave(key, user), client))
            except Exception:  # noqa: BLE001 - best effort: with PRESENCE an absent page is dropped
                pass

"""One attempt per buyer at a time, in this process. The module recognizes a retry by the
buyer's *last* attempt id (docs/commands.md, "Retries"): were two purchases of one buyer in
flight at once (a double tap, two tabs), the retry of the first, after the second was made,
would count as a new purchase. So a buyer's calls take turns here; different buyers never wait
for each other. The Rust crate's ``turns.rs`` does the same."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import AsyncIterator, Dict, Iterator, List, Tuple, Union

from .info import User, as_bytes


class BuyerTurns:
    """For threads."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        # user -> (its lock, how many calls run or wait); an entry lives while one does.
        self._turns: Dict[bytes, Tuple[threading.Lock, List[int]]] = {}

    @contextlib.contextmanager
    def take(self, user: User) -> Iterator[None]:
        key = as_bytes(user)
        with self._guard:
            lock, users = self._turns.setdefault(key, (threading.Lock(), [0]))
            users[0] += 1
        try:
            with lock:
                yield
        finally:
            with self._guard:
                users[0] -= 1
                if users[0] == 0:
                    del self._turns[key]

    def __len__(self) -> int:
        return len(self._turns)


class AsyncBuyerTurns:
    """For asyncio tasks (of one event loop)."""

    def __init__(self) -> None:
        self._turns: Dict[bytes, Tuple[asyncio.Lock, List[int]]] = {}

    @contextlib.asynccontextmanager
    async def take(self, user: User) -> AsyncIterator[None]:
        key = as_bytes(user)
        lock, users = self._turns.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._turns[key]

    def __len__(self) -> int:
        return len(self._turns)


Turns = Union[BuyerTurns, AsyncBuyerTurns]

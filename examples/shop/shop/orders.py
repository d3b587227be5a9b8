"""The shop's orders in SQLite (WAL, so every worker process reads and writes the one file).

An order is written ``pending`` once the buyer holds a unit, before any payment, and only then
taken to ``paid`` (after the server confirmed the hold), ``declined`` (the payment failed: the
unit went back) or ``expired`` (the hold lapsed first: a charge taken is refunded). A buyer has
at most one pending and at most one paid order (the sale's LIMIT is 1): two unique indexes make
a second one an error, not a second payment.

On PostgreSQL: the same table, ``BEGIN``/``SELECT ... FOR UPDATE`` in ``open_for``, and the
partial unique indexes as written (PostgreSQL has them too)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable, List, Optional, TypeVar

PENDING, PAID, DECLINED, EXPIRED = "pending", "paid", "declined", "expired"

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    id TEXT PRIMARY KEY,
    buyer TEXT NOT NULL,
    state TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    note TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX IF NOT EXISTS one_pending ON orders(buyer) WHERE state = 'pending';
CREATE UNIQUE INDEX IF NOT EXISTS one_paid ON orders(buyer) WHERE state = 'paid';
CREATE INDEX IF NOT EXISTS by_buyer ON orders(buyer, created);
"""


@dataclass(frozen=True)
class Order:
    id: str
    buyer: str
    state: str
    created: float
    updated: float
    note: str


class OrderBook:
    """The orders table; its methods are coroutines (SQLite runs on a worker thread, one
    connection per thread)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.local = threading.local()
        with self._db() as db:
            db.executescript(SCHEMA)

    def _db(self) -> sqlite3.Connection:
        db: Optional[sqlite3.Connection] = getattr(self.local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            self.local.db = db
        return db

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.to_thread(lambda: work(self._db()))

    async def open_for(self, buyer: str) -> Order:
        """The buyer's pending order, written now if it has none."""

        def work(db: sqlite3.Connection) -> Order:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT * FROM orders WHERE buyer = ? AND state = ?", (buyer, PENDING)).fetchone()
                now = time.time()
                if row is None:
                    row = (uuid.uuid4().hex, buyer, PENDING, now, now, "")
                    db.execute("INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?)", row)
                else:  # a hold taken again: the settler leaves it alone for another while
                    db.execute("UPDATE orders SET updated = ? WHERE id = ?", (now, row[0]))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return Order(*row)

        return await self._run(work)

    async def latest(self, buyer: str) -> Optional[Order]:
        """The buyer's paid order if it has one, else its newest."""

        def work(db: sqlite3.Connection) -> Optional[Order]:
            row = db.execute(
                "SELECT * FROM orders WHERE buyer = ? ORDER BY state = 'paid' DESC, created DESC LIMIT 1",
                (buyer,)).fetchone()
            return Order(*row) if row else None

        return await self._run(work)

    async def get(self, order_id: str) -> Optional[Order]:
        def work(db: sqlite3.Connection) -> Optional[Order]:
            row = db.execute("SELECT * FROM orders WHERE id = ?", (order_id,)).fetchone()
            return Order(*row) if row else None

        return await self._run(work)

    async def settle(self, order_id: str, state: str, note: str = "") -> bool:
        """Takes a pending order to ``state``; False if it was no longer pending (settled by
        another request or worker first)."""

        def work(db: sqlite3.Connection) -> bool:
            cursor = db.execute("UPDATE orders SET state = ?, note = ?, updated = ? WHERE id = ? AND state = ?",
                                (state, note, time.time(), order_id, PENDING))
            return cursor.rowcount == 1

        return await self._run(work)

    async def pending_since(self, before: float) -> List[Order]:
        """Pending orders last written before ``before`` (epoch s): the ones nobody came back to."""

        def work(db: sqlite3.Connection) -> List[Order]:
            rows = db.execute("SELECT * FROM orders WHERE state = ? AND updated < ?", (PENDING, before)).fetchall()
            return [Order(*row) for row in rows]

        return await self._run(work)


def rows(path: str) -> List[Order]:
    """Every order of the database at ``path``, read once (the tests' checks)."""
    with sqlite3.connect(path, timeout=30) as db:
        return [Order(*row) for row in db.execute("SELECT * FROM orders ORDER BY created")]

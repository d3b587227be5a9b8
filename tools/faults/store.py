"""The store outside Redis that lock holders write to: one SQLite file, a counter and the
highest fence it accepted. A write with a fence not larger than that is refused, as a fenced
resource does (``checked=False`` plants the bug: every write accepted). Every accepted write is
logged with its fence, holder and time, for the checker."""

from __future__ import annotations

import sqlite3
import time
from typing import List, Tuple


class FencedStore:
    def __init__(self, path: str, checked: bool = True) -> None:
        self.checked = checked
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS fence (id INTEGER PRIMARY KEY CHECK (id = 1), last INTEGER)")
        self.db.execute("INSERT OR IGNORE INTO fence VALUES (1, 0)")
        self.db.execute("CREATE TABLE IF NOT EXISTS writes (n INTEGER PRIMARY KEY, fence INTEGER, holder TEXT, at REAL)")

    def write(self, fence: int, holder: str) -> bool:
        """Applies one write fenced by ``fence``; whether it was accepted."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            (last,) = self.db.execute("SELECT last FROM fence").fetchone()
            if self.checked and fence <= last:
                return False
            self.db.execute("UPDATE fence SET last = MAX(last, ?)", (fence,))
            self.db.execute("INSERT INTO writes (fence, holder, at) VALUES (?, ?, ?)", (fence, holder, time.time()))
            return True
        finally:
            self.db.execute("COMMIT")

    def accepted(self) -> List[Tuple[int, str, float]]:
        """Every accepted write in the order the store applied them: (fence, holder, at)."""
        return [(f, h, a) for f, h, a in self.db.execute("SELECT fence, holder, at FROM writes ORDER BY n")]

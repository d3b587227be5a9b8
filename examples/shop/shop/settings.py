"""The shop's settings, from the environment (``make shop`` and the tests set them)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional, Tuple


@dataclass(frozen=True)
class Settings:
    #: ``redis://host:port`` for one server, or ``cluster://host:port,host:port`` for a Redis
    #: Cluster (the sale is then a ``PartitionedSale``).
    redis: str = "redis://127.0.0.1:6379"
    #: The sale's key (one server) or name (a cluster).
    sale: str = "drop"
    #: The SQLite file of the orders (WAL: every worker process writes to it).
    db: str = "shop.db"
    #: The payment provider's base URL.
    payments: str = "http://127.0.0.1:8001"
    #: The exporter's live page, linked for operators (None: no link).
    exporter: Optional[str] = None
    #: The price of one unit, in cents.
    price_cents: int = 4_900
    #: How long a buyer's request may take at most (the library's retry deadline, the payment's).
    deadline_s: float = 20.0
    #: A pending order older than this is settled by the shop itself (the buyer went away).
    settle_after_s: float = 30.0

    @classmethod
    def from_env(cls) -> "Settings":
        env = os.environ
        return cls(
            redis=env.get("SHOP_REDIS", cls.redis),
            sale=env.get("SHOP_SALE", cls.sale),
            db=env.get("SHOP_DB", cls.db),
            payments=env.get("SHOP_PAYMENTS", cls.payments),
            exporter=env.get("SHOP_EXPORTER") or None,
            price_cents=int(env.get("SHOP_PRICE_CENTS", cls.price_cents)),
            deadline_s=float(env.get("SHOP_DEADLINE_S", cls.deadline_s)),
            settle_after_s=float(env.get("SHOP_SETTLE_AFTER_S", cls.settle_after_s)),
        )

    @property
    def cluster(self) -> bool:
        return self.redis.startswith("cluster://")

    def nodes(self) -> List[Tuple[str, int]]:
        """The cluster's start-up nodes."""
        found = []
        for node in self.redis[len("cluster://"):].split(","):
            host, port = node.rsplit(":", 1)
            found.append((host, int(port)))
        return found

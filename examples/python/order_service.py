"""An order service that never tells a buyer "bought" without an order row (the seckill package,
SQLite). Usage: python order_service.py [port | host:port,host:port,... for a cluster].

The unsafe way: buy (final at once), then take a lock and write the order row. When the lock or
the write fails (a master killed, a full disk), the unit is sold and no order says so. The safe
way, here: the sale is made with HOLD, so a purchase is a hold that the server gives back by
itself unless it is confirmed; the row is written first, the hold confirmed after:

    try_buy (a hold) -> lock, order row "pending" -> confirm -> row "paid", tell "bought"
                      `-- failed: cancel (or the hold expires) -> tell "try again"

A confirm whose answer is lost leaves the row "pending"; `settle` decides it from the server
(confirm again: 1 made it final now; 0 means no live hold, so units the user still owns are
final, and none means the hold expired). Exits non-zero if a final unit has no paid row, a paid
row no final unit, or a unit is neither sold nor back in stock."""

import sqlite3
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict

import redis
from redis.cluster import ClusterNode, RedisCluster

from seckill import OVER_LIMIT, SOLD_OUT, Lock, Sale, SaleSpec, SeckillError

BOUGHT, PENDING, TRY_AGAIN, SOLD_OUT_REPLY = "bought", "pending", "try again", "sold out"
#: What the calls that go through the application's client (confirm, bought, the lock's) raise
#: besides the package's typed errors: redis-py's, whose cluster client's "no node reachable"
#: (RedisClusterException) is no RedisError.
CLIENT_ERRORS = (SeckillError, redis.RedisError, redis.exceptions.RedisClusterException)


def connect(target: str) -> Any:
    """One server by port, or a cluster by its nodes (comma-separated host:port)."""
    if "," not in target and ":" not in target:
        return redis.Redis(host="127.0.0.1", port=int(target))
    nodes = [ClusterNode(host, int(port)) for host, port in (n.rsplit(":", 1) for n in target.split(","))]
    return RedisCluster(startup_nodes=nodes)


class OrderBook:
    """The shop's orders in SQLite: one row per user (LIMIT 1), one connection per thread."""

    def __init__(self, path: str) -> None:
        self.path, self.local = path, threading.local()
        self.db().execute("CREATE TABLE IF NOT EXISTS orders (user TEXT PRIMARY KEY, state TEXT)")
        self.db().execute("DELETE FROM orders")

    def db(self) -> sqlite3.Connection:
        if not hasattr(self.local, "db"):
            self.local.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self.local.db.execute("PRAGMA journal_mode=WAL")
        return self.local.db

    def write(self, user: str, state: str) -> None:
        self.db().execute("INSERT OR REPLACE INTO orders VALUES (?, ?)", (user, state))

    def in_state(self, state: str) -> set:
        return {u for (u,) in self.db().execute("SELECT user FROM orders WHERE state = ?", (state,))}


class OrderService:
    def __init__(self, client: Any, sale: Sale, orders: OrderBook, lock_wait_ms: int = 1_000) -> None:
        self.client, self.sale, self.orders, self.lock_wait_ms = client, sale, orders, lock_wait_ms
        #: Why each given-back hold was given back (an exception's name), for the report.
        self.failures: list = []

    def buy(self, user: str) -> str:
        """One buyer's request: BOUGHT only once the order row is paid."""
        try:
            code = self.sale.try_buy(user)
        except SeckillError:
            # Not told "bought": if the purchase did land, it is a hold that nobody confirms.
            return TRY_AGAIN
        if code == SOLD_OUT:
            return SOLD_OUT_REPLY
        if code == OVER_LIMIT:
            # A hold of an earlier, unanswered attempt: it expires, then the user may buy.
            return TRY_AGAIN
        try:
            # The lock stands for any order step that can fail (one writer per user's order).
            with Lock(self.client, f"order-lock:{user}").hold(wait_ms=self.lock_wait_ms):
                self.orders.write(user, PENDING)
        except (*CLIENT_ERRORS, sqlite3.Error) as error:  # LockTimeout among them
            self.failures.append(type(error).__name__)
            self.give_back(user)
            return TRY_AGAIN
        return self.settle(user)

    def give_back(self, user: str) -> None:
        try:
            self.sale.cancel(user)
        except SeckillError:  # cancel's failures are typed: it is retried under an attempt id
            pass  # The hold expires by itself.

    def settle(self, user: str) -> str:
        """Makes the user's row say what the server holds: BOUGHT (paid), TRY_AGAIN (the hold
        went back to stock) or PENDING (no answer now: settle it again later)."""
        try:
            final = self.sale.confirm(user) or self.sale.bought(user) > 0
        except CLIENT_ERRORS:  # confirm and bought go through the client as it is
            return PENDING
        self.orders.write(user, "paid" if final else "given back")
        return BOUGHT if final else TRY_AGAIN

    def settle_pending(self) -> None:
        """The reconciler: settles every pending row until none is left."""
        while pending := self.orders.in_state(PENDING):
            for user in pending:
                self.settle(user)


def shop(service: OrderService, users: int, threads: int, deadline_s: float = 60.0) -> Dict[str, str]:
    """``users`` buyers on ``threads`` threads, each asking until told anything but TRY_AGAIN."""

    def customer(user: str) -> str:
        give_up = time.monotonic() + deadline_s
        while (reply := service.buy(user)) == TRY_AGAIN and time.monotonic() < give_up:
            time.sleep(0.05)
        return reply

    names = [f"user-{i}" for i in range(users)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return dict(zip(names, pool.map(customer, names)))


def check(service: OrderService, stock: int, told: Dict[str, str]) -> str:
    """Every final unit has a paid row and every paid row a final unit; every unit is final or
    back in stock (once no hold is left); every buyer told BOUGHT has a paid row."""
    service.settle_pending()
    while (info := service.sale.info()).held:
        time.sleep(0.05)  # holds of unanswered attempts, given back when they expire
    final = {b.user.decode() for b in service.sale.buyers() if not b.held}
    paid = service.orders.in_state("paid")
    assert final == paid, (sorted(final - paid), sorted(paid - final))
    assert len(final) + info.remaining == stock, (len(final), info.remaining, stock)
    assert {u for u, reply in told.items() if reply == BOUGHT} <= paid
    given_back = len(service.orders.in_state("given back"))
    return f"{len(paid)} paid orders, every one a final unit; {given_back} given back; {info.remaining} in stock"


def main() -> None:
    client = connect(sys.argv[1] if len(sys.argv) > 1 else "6379")
    stock = 20
    sale = Sale.create(client, "{example:orders}", SaleSpec(stock=stock, hold_ms=5_000), replace=True)
    with tempfile.TemporaryDirectory() as folder:
        service = OrderService(client, sale, OrderBook(f"{folder}/orders.db"))
        told = shop(service, users=60, threads=12)
        print(f"order service: {check(service, stock, told)}")


if __name__ == "__main__":
    main()

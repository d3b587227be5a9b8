"""A fenced lock from asyncio through the package: 20 tasks refill one SQLite stock row under
seckill.asyncio.Lock, each write carrying its guard's fence, so the store itself refuses a
write from any holder older than the last one that wrote. The routine runs under
``guard.run``, which cancels it if the lease is lost. Then a late write with the first
holder's fence, as a holder that slept through its lease would send it, is refused.
Usage: python fenced_lock.py [port]. Exits non-zero if a refill was lost or a stale write
went through."""

import asyncio
import sqlite3
import sys

import redis.asyncio

from seckill.asyncio import Lock

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 6379

# The downstream check: a write lands only with a fence newer than the row's.
FENCED_UPDATE = "UPDATE stock SET qty = qty + 1, fence = :f WHERE id = 1 AND fence < :f"


async def main() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE stock (id INTEGER PRIMARY KEY, qty INTEGER, fence INTEGER)")
    db.execute("INSERT INTO stock VALUES (1, 0, 0)")
    client = redis.asyncio.Redis(host="127.0.0.1", port=PORT)
    lock = Lock(client, "example:lock:refill", ttl_ms=2_000)
    fences = []

    async def refill() -> None:
        async with lock.hold(wait_ms=10_000) as guard:

            async def write() -> int:
                await asyncio.sleep(0.001)  # the slow part: a call to a supplier, say
                guard.check()  # stop here if the lease is gone
                return db.execute(FENCED_UPDATE, {"f": guard.fence}).rowcount

            assert await guard.run(write()) == 1
            fences.append(guard.fence)

    await asyncio.gather(*(refill() for _ in range(20)))
    stale = db.execute(FENCED_UPDATE, {"f": fences[0]}).rowcount
    qty, fence = db.execute("SELECT qty, fence FROM stock").fetchone()
    assert qty == 20 and fence == max(fences) and fences == sorted(fences), (qty, fence)
    assert stale == 0, "a stale fence wrote"
    print(f"{qty} refills, fences increasing, a stale write refused")
    await client.aclose()


asyncio.run(main())

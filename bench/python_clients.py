"""The Python clients' row of `make bench`: purchases per second of fresh users through
seckill.asyncio.Sale (256 tasks, one redis.asyncio client) and through seckill.Sale (32
threads, one redis.Redis client), 3 rounds interleaved. Prints the two medians.
Usage: python python_clients.py port requests"""

import asyncio
import statistics
import sys
import threading
import time

import redis
import redis.asyncio

import seckill
import seckill.asyncio

PORT, REQUESTS = int(sys.argv[1]), int(sys.argv[2])
SPEC = seckill.SaleSpec(stock=10**12, partitions=1)


async def asyncio_round(round_: int) -> float:
    client = redis.asyncio.Redis(port=PORT)
    sale = await seckill.asyncio.Sale.create(client, f"bench:py:async:{round_}", SPEC)
    users = iter(range(REQUESTS))

    async def buyer() -> None:
        for n in users:
            await sale.try_buy(f"user:{n}")

    started = time.monotonic()
    await asyncio.gather(*(buyer() for _ in range(256)))
    elapsed = time.monotonic() - started
    await client.aclose()
    return REQUESTS / elapsed


def threads_round(round_: int) -> float:
    client = redis.Redis(port=PORT, max_connections=64)
    sale = seckill.Sale.create(client, f"bench:py:threads:{round_}", SPEC)
    users = iter(range(REQUESTS))
    lock = threading.Lock()

    def buyer() -> None:
        while True:
            with lock:
                n = next(users, None)
            if n is None:
                return
            sale.try_buy(f"user:{n}")

    threads = [threading.Thread(target=buyer) for _ in range(32)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return REQUESTS / (time.monotonic() - started)


asyncio_rates, thread_rates = [], []
for round_ in range(3):
    asyncio_rates.append(asyncio.run(asyncio_round(round_)))
    thread_rates.append(threads_round(round_))
print(f"{statistics.median(asyncio_rates):.0f} {statistics.median(thread_rates):.0f}")

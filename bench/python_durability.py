"""The Python rows of `make bench`'s "Durability" (examples/bench_durability/main.rs): purchases per
second of fresh users through seckill.asyncio.Sale, 256 tasks on one redis.asyncio client, with
the default durability ("replica") against durability="master", on a master with one replica;
3 rounds interleaved, the medians, with the WAITs sent per purchase; and the sync client's
latency added per purchase (one thread, one connection). Prints a markdown table.
Usage: python python_durability.py port"""

import asyncio
import statistics
import sys
import time

import redis
import redis.asyncio

import seckill
import seckill.asyncio

PORT = int(sys.argv[1])
REQUESTS, ROUNDS, SYNC_REQUESTS = 20_000, 3, 2_000
SPEC = seckill.SaleSpec(stock=10**12, partitions=1)


def waits() -> int:
    return int(redis.Redis(port=PORT).info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


async def asyncio_round(durability: str, round_: int) -> tuple:
    client = redis.asyncio.Redis(port=PORT)
    sale = await seckill.asyncio.Sale.create(client, f"bench:py:durability:{durability}:{round_}", SPEC,
                                             durability=durability, replace=True)
    users = iter(range(REQUESTS))

    async def buyer() -> None:
        for n in users:
            await sale.try_buy(f"user:{n}")

    before = waits()
    started = time.monotonic()
    await asyncio.gather(*(buyer() for _ in range(256)))
    elapsed = time.monotonic() - started
    sent = waits() - before
    await (client.aclose() if hasattr(client, "aclose") else client.close())
    return REQUESTS / elapsed, sent / REQUESTS


def sync_latency(durability: str) -> tuple:
    client = redis.Redis(port=PORT)
    sale = seckill.Sale.create(client, f"bench:py:durability:sync:{durability}", SPEC,
                               durability=durability, replace=True)
    took = []
    for n in range(SYNC_REQUESTS):
        started = time.monotonic()
        sale.try_buy(f"user:{n}")
        took.append((time.monotonic() - started) * 1e6)
    took.sort()
    return took[len(took) // 2], took[min(len(took) - 1, int(len(took) * 0.99))]


def main() -> None:
    rows = {"replica": [], "master": []}
    for round_ in range(ROUNDS):
        for durability in rows:
            rows[durability].append(asyncio.run(asyncio_round(durability, round_)))
    master = statistics.median(r[0] for r in rows["master"])
    print(f"Python asyncio, 256 tasks on one client, {REQUESTS} purchases per row, {ROUNDS} rounds "
          "interleaved, the median (goal: the default at >= 0.7x \"master\"):\n")
    print("| durability | purchases/s | vs \"master\" | WAITs/purchase |\n| --- | ---: | ---: | ---: |")
    for durability, measures in rows.items():
        per_s = statistics.median(r[0] for r in measures)
        per_purchase = statistics.median(r[1] for r in measures)
        print(f"| {durability} | {per_s:.0f} | {per_s / master:.2f}x | {per_purchase:.4f} |")
    print(f"\nPython sync, one thread, {SYNC_REQUESTS} purchases one after the other:\n")
    print("| durability | p50 us | p99 us |\n| --- | ---: | ---: |")
    for durability in ("master", "replica"):
        p50, p99 = sync_latency(durability)
        print(f"| {durability} | {p50:.0f} | {p99:.0f} |")


if __name__ == "__main__":
    main()

"""The sold-out cache's Python rows of `make bench`, on one server.

- Sold-out try_buy per second on one thread, without the cache (every try a round trip) and
  with it (local_cache=True), one-key and 16 partitions, 3 rounds interleaved; the server's
  SECKILL.TRY calls per 1 M sold-out tries with the cache (INFO commandstats), and its time
  per call without.
- Lag: a unit cancelled by another client, the time until a buyer spinning through the cache
  buys it (20 samples).

Prints one line of numbers: off/s on/s partitioned_on/s tries_per_million
partitioned_tries_per_million usec_per_try lag_p50_ms lag_max_ms.
Usage: python python_sold_out.py port tries_off tries_on"""

import statistics
import sys
import time

import redis

from seckill import SOLD_OUT, PartitionedSale, Sale, SaleSpec

PORT, TRIES_OFF, TRIES_ON = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
admin = redis.Redis(port=PORT)


def try_calls() -> int:
    stats = admin.info("commandstats").get("cmdstat_seckill.try")
    return int(stats["calls"]) if stats else 0


def rate(sale, tries: int) -> float:
    started = time.perf_counter()
    for _ in range(tries):
        sale.try_buy("late")
    return tries / (time.perf_counter() - started)


def main() -> None:
    client = redis.Redis(port=PORT)
    Sale.create(client, "bench:pycache:one", SaleSpec(stock=1, partitions=1))
    PartitionedSale.create(client, "bench:pycache:p", SaleSpec(stock=16, partitions=16))
    off = Sale(client, "bench:pycache:one")
    on = Sale(client, "bench:pycache:one", local_cache=True)
    partitioned = PartitionedSale.open(client, "bench:pycache:p", local_cache=True)
    assert on.try_buy("first") == 0
    assert sum(partitioned.try_buy(f"p{n}") >= 0 for n in range(40)) == 16
    for sale in (on, partitioned):  # the first refusal makes the mark
        assert sale.try_buy("late") == SOLD_OUT
    offs, ons, parts, per_million, part_per_million, usecs = [], [], [], [], [], []
    for _ in range(3):
        admin.config_resetstat()
        offs.append(rate(off, TRIES_OFF))
        usecs.append(float(admin.info("commandstats")["cmdstat_seckill.try"]["usec_per_call"]))
        before = try_calls()
        ons.append(rate(on, TRIES_ON))
        per_million.append((try_calls() - before) * 1_000_000 / TRIES_ON)
        before = try_calls()
        parts.append(rate(partitioned, TRIES_ON))
        part_per_million.append((try_calls() - before) * 1_000_000 / TRIES_ON)
    lags = []
    other = redis.Redis(port=PORT)
    owner = "first"
    for n in range(20):
        assert on.try_buy("late") == SOLD_OUT
        assert other.execute_command("SECKILL.CANCEL", "bench:pycache:one", owner) == 1
        changed = time.perf_counter()
        owner = f"lag{n}"
        while on.try_buy(owner) == SOLD_OUT:
            pass
        lags.append((time.perf_counter() - changed) * 1000)
    print(statistics.median(offs), statistics.median(ons), statistics.median(parts),
          max(per_million), max(part_per_million), statistics.median(usecs),
          statistics.median(lags), max(lags))


main()

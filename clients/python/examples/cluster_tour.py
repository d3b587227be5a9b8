"""A one-minute tour of a partitioned sale on the cluster `make cluster` starts:
    .venv/bin/python clients/python/examples/cluster_tour.py [host:port]
"""

import random
import sys
import threading
from collections import Counter

import redis

from seckill import SOLD_OUT, PartitionedSale, SaleSpec, partition_of

NAME = "sale:tour"


def main(cluster) -> dict:
    PartitionedSale.delete(cluster, NAME)  # a fresh tour each time
    sale = PartitionedSale.create(cluster, NAME, SaleSpec(stock=1_000, partitions=16, limit=2), replace=True)
    where = Counter(f"{n.host}:{n.port}" for n in map(cluster.get_node_from_key, sale.keys))
    print(f"created {NAME}: 1000 units in 16 partitions on {len(where)} masters {dict(where)}")

    # 1500 buyers who each want 2 (3x the stock), 70 % of them hashing to partitions 0 and 1.
    hot = [u for u in (f"user:{n}" for n in range(100_000)) if partition_of(u, 16) < 2][:1050]
    cold = [u for u in (f"user:{n}" for n in range(100_000)) if partition_of(u, 16) >= 2][:450]
    attempts = [u for u in hot + cold for _ in range(3)]
    random.Random(1).shuffle(attempts)  # hot and cold buyers arrive mixed
    replies = Counter()

    def buy(chunk):
        mine = Counter(sale.try_buy(u) >= 0 for u in chunk)
        replies.update(mine)

    threads = [threading.Thread(target=buy, args=(attempts[i::50],)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    info = sale.info()
    stats = sale.stats
    print(f"{len(attempts)} tries by 50 threads: {replies[True]} bought, sold {info.sold} of "
          f"{info.stock}, {info.remaining} left, {info.in_flight} in flight")
    print(f"stock followed demand: {stats.transfers} transfers moved {stats.units_moved} units "
          f"into the busy partitions; {stats.borrowing_tries} of {stats.tries} tries borrowed")
    print(f"sold out now: a late buyer gets {sale.try_buy('latecomer')} (SOLD_OUT is {SOLD_OUT})")
    print(f"look inside: redis-cli -c -p {cluster.get_default_node().port} SECKILL.INFO '{sale.keys[0]}'")
    return {"sold": info.sold, "stock": info.stock, "balanced": info.balanced()}


if __name__ == "__main__":
    host, _, port = (sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7000").partition(":")
    main(redis.RedisCluster(host=host, port=int(port)))

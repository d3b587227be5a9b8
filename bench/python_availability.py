"""The Python rows of `make bench`'s "Availability under a fault" (examples/bench_availability.rs
drives it): buyers of a partitioned sale whose partitions are on masters other than the
victim's, sync (4 threads) and asyncio (8 tasks), each on its own client in a process of its
own (as applications run: in one process the event loop waited for the GIL behind the sync
threads), timed call by call.

Protocol: prints "ready" once both flavours made their connections, waits for a line on stdin
(the driver froze the victim, or not), buys for SECONDS, then prints one line per flavour:
calls, share answered within 100 ms, p50, p99 and max in ms.
Usage: python python_availability.py port sale victim_port seconds seal_ms"""

import asyncio
import multiprocessing
import sys
import threading
import time
from typing import List

import redis
import redis.asyncio

import seckill.asyncio
from seckill import PartitionedSale

PORT, SALE, VICTIM, SECONDS, SEAL_MS = (int(sys.argv[1]), sys.argv[2], int(sys.argv[3]),
                                        float(sys.argv[4]), int(sys.argv[5]))


def summary(latencies: List[float]) -> str:
    ordered = sorted(latencies)
    within = sum(1 for t in ordered if t <= 0.1) / len(ordered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{len(ordered)} {within:.4f} {ordered[len(ordered) // 2] * 1000:.3f} {p99 * 1000:.3f} {ordered[-1] * 1000:.3f}"


def main() -> None:
    cluster = redis.RedisCluster(host="127.0.0.1", port=PORT)
    spec = PartitionedSale.open(cluster, SALE).spec
    users = [u for u in (f"py{n}" for n in range(20_000))
             if cluster.get_node_from_key(f"{{{SALE}/{seckill.partition_of(u, spec.partitions)}}}").port != VICTIM][:2000]
    processes = multiprocessing.get_context("fork")
    go, stop = processes.Event(), processes.Event()
    ready = processes.Barrier(4 + 1 + 1)
    sync_latencies: List[float] = []
    async_results: "multiprocessing.Queue[List[float]]" = processes.Queue()

    def sync_buyer(chunk: List[str]) -> None:
        sync_sale.try_buy(f"warm:{chunk[0]}")
        ready.wait()
        go.wait()
        n = 0
        while not stop.is_set():
            started = time.monotonic()
            try:
                sync_sale.try_buy(chunk[n % len(chunk)])
            except Exception:  # noqa: BLE001 - a failed call is timed like any other
                pass
            sync_latencies.append(time.monotonic() - started)
            n += 1

    def asyncio_buyers() -> None:
        async_latencies: List[float] = []

        async def run() -> None:
            client = redis.asyncio.RedisCluster(host="127.0.0.1", port=PORT)
            sale = seckill.asyncio.PartitionedSale(client, SALE, spec, SEAL_MS)
            await asyncio.gather(*(sale.try_buy(f"warm:a{n}") for n in range(8)))
            await asyncio.get_running_loop().run_in_executor(None, ready.wait)
            await asyncio.get_running_loop().run_in_executor(None, go.wait)

            async def buyer(chunk: List[str]) -> None:
                n = 0
                while not stop.is_set():
                    started = time.monotonic()
                    try:
                        await sale.try_buy(chunk[n % len(chunk)])
                    except Exception:  # noqa: BLE001 - a failed call is timed like any other
                        pass
                    async_latencies.append(time.monotonic() - started)
                    n += 1

            await asyncio.gather(*(buyer(users[i::8]) for i in range(8)))
            await client.aclose()

        asyncio.run(run())
        async_results.put(async_latencies)

    # The asyncio process is forked before this one makes the sync buyers' client.
    asyncio_process = processes.Process(target=asyncio_buyers)
    asyncio_process.start()
    sync_sale = PartitionedSale(redis.RedisCluster(host="127.0.0.1", port=PORT), SALE, spec, SEAL_MS)
    threads = [threading.Thread(target=sync_buyer, args=(users[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    ready.wait()
    print("ready", flush=True)
    sys.stdin.readline()
    go.set()
    time.sleep(SECONDS)
    stop.set()
    for thread in threads:
        thread.join()
    async_latencies = async_results.get()
    asyncio_process.join()
    print(summary(sync_latencies))
    print(summary(async_latencies), flush=True)


if __name__ == "__main__":
    main()

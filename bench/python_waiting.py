"""`make bench`'s "Waiting for a turn" (#50), run by examples/bench_waiting.rs: N waiters in one
asyncio process through a whole sale (stock N/5, START 3 s ahead, ADMIT N/200 PER 1000, WINDOW
60 s: 40 s of admissions), by `wait_for_turn` (one reader per process) and by a page that polls
`join` every second (the baseline): the process's CPU and the bytes Redis sent it while the
pages wait (from the last JOIN to the sell-out), each per waiter per minute of waiting; the
event loop's longest lag (the longest time between two looks at its selector: what a timer
or a socket due meanwhile waited); and the time from a user's admission (its `admit`
entry's ID: the server's clock, on the same machine) to the moment its page learned it, p50 and
p99. Prints a markdown table. Usage: python python_waiting.py port N [N ...]"""

import asyncio
import os
import statistics
import sys
import time
from typing import Any, Dict, List, Tuple

import redis
import redis.asyncio

import seckill
import seckill.asyncio
from seckill import SOLD_OUT, SaleSpec

PORT = int(sys.argv[1])
SIZES = [int(n) for n in sys.argv[2:]] or [1_000]
ROUNDS = int(os.environ.get("WAITING_ROUNDS", "3"))


def sent(admin: redis.Redis) -> int:
    return int(admin.info("stats")["total_net_output_bytes"])


def admitted_at(admin: redis.Redis, stream: str) -> Dict[str, float]:
    at: Dict[str, float] = {}
    for entry_id, fields in admin.xrange(stream):
        if fields.get(b"event") == b"admit":
            at[fields[b"user"].decode()] = int(entry_id.split(b"-")[0]) / 1000
    return at


async def one_sale(n: int, way: str) -> Tuple[float, float, float, float, float, float]:
    admin = redis.Redis(port=PORT)
    # The polling pages wait their turn for one of 256 connections (a plain pool of 64 fails
    # them with MaxConnectionsError; one each runs the server out of clients at 10 000).
    pool = redis.asyncio.BlockingConnectionPool(port=PORT, max_connections=256, timeout=None)
    client = (redis.asyncio.Redis(port=PORT, max_connections=64) if way == "wait_for_turn"
              else redis.asyncio.Redis(connection_pool=pool))
    seconds, micros = admin.time()
    start_ms = int(seconds) * 1000 + int(micros) // 1000 + 3_000
    spec = SaleSpec(stock=n // 5, start_ms=start_ms, queue=True, admit_rate=(max(n // 200, 1), 1_000),
                    window_ms=60_000, events=True)
    key = f"bench:wait:{way}:{n}"
    sale = await seckill.asyncio.Sale.create(client, key, spec, replace=True)
    noticed: Dict[str, float] = {}
    lag = [0.0]
    joined: List[float] = []
    waiting_s: List[float] = []

    def probe_lag() -> None:
        # The loop's selector wrapped: the time from one select's return to the next select is
        # one turn of the loop, all its callbacks. (A ticker task measured this by sleeping
        # 50 ms in a loop, but its own 20 wakes a second were counted in the CPU the waiting
        # is measured by.)
        selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
        select = selector.select
        returned = [0.0]

        def timed(timeout: Any = None) -> Any:
            if returned[0] and len(joined) == n:  # from the last JOIN on, as the CPU
                lag[0] = max(lag[0], time.monotonic() - returned[0])
            events = select(timeout)
            returned[0] = time.monotonic()
            return events

        selector.select = timed

    async def told(user: str, since: float, place: int) -> Tuple[float, bool]:
        """A page told ``place``: since when it waits (its first place), and whether its wait
        is over (its turn, then its purchase, or the sell-out)."""
        if not since:
            since = time.monotonic()
            joined.append(since)
        if place != 0 and place != SOLD_OUT:
            return since, False
        waiting_s.append(time.monotonic() - since)
        if place == 0:
            noticed[user] = time.time()
            await sale.try_buy(user)
        return since, True

    async def streamed(user: str) -> None:
        since = 0.0
        async for place in sale.wait_for_turn(user):
            since, over = await told(user, since, place)
            if over:
                return

    async def polling(user: str) -> None:
        since = 0.0
        while True:
            since, over = await told(user, since, await sale.join(user))
            if over:
                return
            await asyncio.sleep(1.0)

    async def measure() -> Tuple[int, float]:
        # From the last JOIN on: what waiting costs.
        while len(joined) < n:
            await asyncio.sleep(0.005)
        return sent(admin), time.process_time()

    page = streamed if way == "wait_for_turn" else polling
    started = time.monotonic()
    probe_lag()
    measuring = asyncio.get_running_loop().create_task(measure())
    await asyncio.gather(*(page(f"u{i}") for i in range(n)))
    cpu, bytes_ = time.process_time(), sent(admin)
    bytes_before, cpu_before = await measuring
    # Waiter-minutes from the last JOIN on: each page's wait, less what it waited before it.
    last_join = max(joined)
    waiter_minutes = sum(max(w - (last_join - j), 0.0) for w, j in zip(sorted(waiting_s), sorted(joined))) / 60
    waiter_minutes = max(waiter_minutes, 1e-9)
    at = admitted_at(admin, "{%s}:events" % key)
    delays = sorted((noticed[u] - at[u]) * 1000 for u in noticed if u in at)
    await client.aclose()
    p99 = delays[max(int(len(delays) * 0.99) - 1, 0)] if delays else 0.0
    return ((bytes_ - bytes_before) / waiter_minutes / 1000, (cpu - cpu_before) / waiter_minutes * 1000,
            lag[0] * 1000, statistics.median(delays) if delays else 0.0, p99, time.monotonic() - started)


def main() -> None:
    # Rounds interleaved (every size and way once per round), the median shown: one run's CPU
    # swung from 0.96 to 1.34 ms per waiter-minute on a shared machine.
    rows: Dict[Tuple[int, str], List[Tuple[float, ...]]] = {}
    for _ in range(ROUNDS):
        for n in SIZES:
            for way in ("wait_for_turn", "polling join each second"):
                rows.setdefault((n, way), []).append(asyncio.run(one_sale(n, way)))
    print(f"| waiters | way | KB per waiter-minute | CPU ms per waiter-minute (median of {ROUNDS}; min-max) "
          "| loop lag max ms | notice p50 ms | notice p99 ms | sale s |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (n, way), runs in rows.items():
        med = [statistics.median(run[i] for run in runs) for i in range(6)]
        cpus = [run[1] for run in runs]
        print(f"| {n} | {way} | {med[0]:.2f} | {med[1]:.2f} ({min(cpus):.2f}-{max(cpus):.2f}) | "
              + " | ".join(f"{v:.2f}" for v in med[2:5]) + f" | {med[5]:.1f} |", flush=True)


if __name__ == "__main__":
    main()

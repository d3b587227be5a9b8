"""The shop's benchmark (docs/shop.md, in `make bench`): writes bench/results/shop.md.

1. Buying through the shop (4 uvicorn workers, one server with the module): POST /buy by new
   buyers (a hold and a pending order row each) against GET /healthz (the same stack doing
   nothing) as the baseline, rounds interleaved; the share of a buy's time spent in Redis calls,
   the order database and the rest, from the shop's Server-Timing headers; the server's time per
   SECKILL.TRY (INFO commandstats).
2. Waiting pages: SHOP_BENCH_WAITERS (10 000) event streams open on the shop while the room
   admits them at a rate: how late each page learns of its turn after the admission (the stream
   entry's time), how many updates a page got per admission tick, and the Redis commands the
   waiting cost per waiter (no poll per waiter: one stream reader per worker).
Client, shop and server share the machine's cores: the figures are ratios and shares."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import httpx
import redis

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples/shop/tests"))

from conftest import running_shop, servers  # noqa: E402
from seckill import SaleSpec  # noqa: E402
from shop import launch  # noqa: E402

WORKERS = 4
ROUNDS = 3
ROUND_S = float(os.environ.get("SHOP_BENCH_ROUND_S", "5"))
CONCURRENCY = 16
WAITERS = int(os.environ.get("SHOP_BENCH_WAITERS", "10000"))
ADMIT_PER_TICK, TICK_MS = 500, 1_000
CLIENT_PROCESSES = 4
OUT = REPO / "bench/results/shop.md"


@contextmanager
def shop_on(port: int) -> Iterator[str]:
    """The shop's URL, on the server at ``port``: the parts the shop's tests start."""
    with running_shop(f"redis://127.0.0.1:{port}", workers=WORKERS, latency_ms="0") as shop:
        yield shop.url


def parse_timing(header: str) -> Dict[str, float]:
    parts = {}
    for item in header.split(","):
        name, _, duration = item.strip().partition(";dur=")
        parts[name] = float(duration)
    return parts


async def hammer(url: str, path: str, seconds: float) -> Tuple[int, Dict[str, float]]:
    """CONCURRENCY clients sending ``path`` for ``seconds``: requests done, summed timings."""
    done, spent = 0, {}
    stop_at = time.monotonic() + seconds

    async def client(n: int) -> None:
        # A client (a connection) each: one httpx pool shared by 64 tasks served 4x fewer.
        nonlocal done
        async with httpx.AsyncClient(base_url=url) as http:
            serial = 0
            while time.monotonic() < stop_at:
                serial += 1
                method = "POST" if path == "/buy" else "GET"
                reply = await http.request(method, path, headers={"Cookie": f"buyer=bench{n:04d}x{serial:08d}{time.time_ns()}"})
                assert reply.status_code in (200, 303), (reply.status_code, reply.headers.get("x-shop-step"))
                if path == "/buy":
                    assert reply.headers["x-shop-step"] == "pay", reply.headers
                done += 1
                for name, ms in parse_timing(reply.headers["server-timing"]).items():
                    spent[name] = spent.get(name, 0.0) + ms

    await asyncio.gather(*(client(n) for n in range(CONCURRENCY)))
    return done, spent


def commandstats(con: redis.Redis, command: str) -> Tuple[int, float]:
    stats = con.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0)), float(stats.get("usec", 0))


def buying(port: int) -> List[str]:
    con = redis.Redis(port=port)
    launch.create_sale(f"redis://127.0.0.1:{port}", "drop", SaleSpec(stock=10_000_000, limit=1, hold_ms=600_000))
    rates: Dict[str, List[float]] = {"/healthz": [], "/buy": []}
    spent: Dict[str, float] = {}
    buys = 0
    with shop_on(port) as url:
        asyncio.run(hammer(url, "/healthz", 1.0))  # warm-up
        calls0, usec0 = commandstats(con, "seckill.try")
        for _ in range(ROUNDS):
            for path in ("/healthz", "/buy"):
                done, timings = asyncio.run(hammer(url, path, ROUND_S))
                rates[path].append(done / ROUND_S)
                if path == "/buy":
                    buys += done
                    for name, ms in timings.items():
                        spent[name] = spent.get(name, 0.0) + ms
        calls1, usec1 = commandstats(con, "seckill.try")
    base, buy = statistics.median(rates["/healthz"]), statistics.median(rates["/buy"])
    total = spent["total"]
    share = {name: spent.get(name, 0.0) / total for name in ("redis", "db")}
    return [
        "## Buying through the shop",
        "",
        f"{WORKERS} uvicorn workers, {CONCURRENCY} concurrent clients, {ROUNDS} rounds of {ROUND_S:.0f} s interleaved "
        "(median shown). A buy: `SECKILL.TRY` (a hold; durability \"replica\" answers at once on a master without replicas) "
        "and a pending order row in SQLite. Goal (#49): under 10 % of a buy's time in Redis calls.",
        "",
        "| requests | per second | ratio |",
        "| --- | ---: | ---: |",
        f"| GET /healthz (the stack doing nothing) | {base:.0f} | 1.00x |",
        f"| POST /buy | {buy:.0f} | {buy / base:.2f}x |",
        "",
        f"Of a buy's time in the shop ({total / buys:.2f} ms on average): Redis calls {share['redis']:.1%}, "
        f"the order database {share['db']:.1%}, the rest (the framework, the event loop shared with the other requests) "
        f"{1 - share['redis'] - share['db']:.1%}. Server time per SECKILL.TRY: "
        f"{(usec1 - usec0) / max(calls1 - calls0, 1):.2f} us over {calls1 - calls0} calls (a server sharing 2 cores "
        "with the shop's workers and the load generator is preempted inside commands: the same TRY with an attempt id "
        "under redis-benchmark alone takes about 1.2 us).",
        "",
    ]


async def pages(url: str, buyers: List[str]) -> Tuple[Dict[str, float], Dict[str, int], int]:
    """One client process's waiting pages: when each was told its turn, how many updates each
    got, how many streams were opened again."""
    arrived: Dict[str, float] = {}
    updates: Dict[str, int] = {}
    reopened = [0]
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=httpx.Timeout(None, connect=60)) as http:

        async def page(buyer: str) -> None:
            # A stream cut or never opened is opened again, as EventSource does (one failed
            # page of ten thousand once ended its process's gather: the 2 500 others closed,
            # and the bench waited forever for them to be back in the room).
            while True:
                try:
                    async with http.stream("GET", "/queue/events", headers={"Cookie": f"buyer={buyer}"}) as stream:
                        async for line in stream.aiter_lines():
                            if line.startswith("data: "):
                                updates[buyer] = updates.get(buyer, 0) + 1
                                if json.loads(line[6:])["position"] <= 0:
                                    arrived[buyer] = time.time() * 1000
                                    return
                except httpx.TransportError:
                    reopened[0] += 1
                await asyncio.sleep(0.2)

        await asyncio.gather(*(page(b) for b in buyers))
    return arrived, updates, reopened[0]


def pages_process(url: str, buyers: List[str]) -> Tuple[Dict[str, float], Dict[str, int], int]:
    return asyncio.run(pages(url, buyers))


def tick(con: redis.Redis, waiters: int, chunks: List["Future[Any]"]) -> None:
    """Once every page waits, admits ADMIT_PER_TICK every TICK_MS (``SECKILL.ADMIT`` from here:
    the ticks start when everyone waits, however long opening the streams took). A client
    process that ended before (it failed) fails the bench instead of leaving it waiting."""
    while int(con.execute_command("SECKILL.INFO", "drop")["waiting"]) < waiters:
        for chunk in chunks:
            if chunk.done():
                chunk.result()
                raise RuntimeError("a client process's pages ended before their turns")
        time.sleep(0.2)
    con.config_resetstat()
    for _ in range(0, waiters, ADMIT_PER_TICK):
        con.execute_command("SECKILL.ADMIT", "drop", ADMIT_PER_TICK)
        time.sleep(TICK_MS / 1000)


def waiting(port: int) -> List[str]:
    con = redis.Redis(port=port, decode_responses=True, protocol=3)
    spec = SaleSpec(stock=WAITERS, limit=1, hold_ms=600_000, events=True, queue=True, window_ms=600_000)
    launch.create_sale(f"redis://127.0.0.1:{port}", "drop", spec)
    buyers = [f"waiter{n:06d}" for n in range(WAITERS)]
    arrived: Dict[str, float] = {}
    updates: Dict[str, int] = {}
    reopened = 0
    with shop_on(port) as url, ProcessPoolExecutor(CLIENT_PROCESSES) as pool:
        # The pages in several client processes: one event loop reading ten thousand streams
        # was itself late by seconds.
        chunks = [pool.submit(pages_process, url, buyers[i::CLIENT_PROCESSES]) for i in range(CLIENT_PROCESSES)]
        tick(con, WAITERS, chunks)
        for chunk in chunks:
            got_arrived, got_updates, got_reopened = chunk.result()
            arrived.update(got_arrived)
            updates.update(got_updates)
            reopened += got_reopened
        stats = {c: commandstats(con, c)[0] for c in ("seckill.position", "seckill.join", "xread", "exec")}
    stream = con.execute_command("SECKILL.INFO", "drop")["events"]
    admitted_at = {e["user"]: int(entry_id.split("-")[0]) for entry_id, e in con.xrange(stream)
                   if e.get("event") == "admit"}
    late = sorted(arrived[b] - admitted_at[b] for b in buyers if b in admitted_at and b in arrived)
    first = min(admitted_at.values())
    ticks = sorted((admitted_at[b] - first) / TICK_MS + 1 for b in buyers if b in admitted_at)
    told = sorted(updates.values())

    def pct(values: List[float], p: float) -> float:
        return values[min(len(values) - 1, int(len(values) * p))]

    return [
        "## Waiting pages",
        "",
        f"{WAITERS} waiting pages (event streams, from {CLIENT_PROCESSES} client processes) on {WORKERS} workers; once every page waits, {ADMIT_PER_TICK} are "
        f"admitted every {TICK_MS} ms (`SECKILL.ADMIT`). Goal (#49): a page learns of its turn within a tick, one "
        "update per admission tick at most (a move is pushed at most every 3 s: `wait_for_turn`'s update_ms), "
        "no poll per waiter.",
        "",
        "| | p50 | p99 | max |",
        "| --- | ---: | ---: | ---: |",
        f"| turn told after the admission, ms | {pct(late, 0.5):.0f} | {pct(late, 0.99):.0f} | {late[-1]:.0f} |",
        f"| admission ticks a page waited | {pct(ticks, 0.5):.0f} | {pct(ticks, 0.99):.0f} | {ticks[-1]:.0f} |",
        f"| updates a page got in all (its place, moves, its turn) | {pct(told, 0.5):.0f} | {pct(told, 0.99):.0f} | "
        f"{told[-1]:.0f} |",
        "",
        f"Pages told their turn: {len(late)} of {WAITERS}; streams cut or refused and opened again: {reopened}. Redis commands from the first admission on, per page: "
        f"SECKILL.JOIN {stats['seckill.join'] / WAITERS:.2f}, SECKILL.POSITION {stats['seckill.position'] / WAITERS:.3f}, "
        f"XREAD {stats['xread'] / WAITERS:.4f} ({stats['xread']} in all: one reader per worker), "
        f"MULTI/EXEC {stats['exec'] / WAITERS:.4f} ({stats['exec']} in all: a reader asks about its waiters in batches).",
        "",
    ]


def main() -> None:
    with servers._single_node(module=True) as port:
        lines = ["# The shop", "",
                 "Generated by `make bench` (bench/shop.py): the shop of docs/shop.md on one server with the module; "
                 "the load generator, the shop and the server share the machine's cores.", ""]
        lines += buying(port)
        lines += waiting(port)
    OUT.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

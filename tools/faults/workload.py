"""One client process of the run: asyncio buyers of the partitioned sale (``try_buy`` on a
handle of the default durability, a replica's acknowledgement, and on one of
``durability="master"`` in turn; every fifth purchase a hold on the sale made with HOLD, default
durability too, then confirmed, cancelled or left to expire) and lock holders writing to the fenced store, every
operation written to stdout as a history line. Every connection of the process leaves from its own
loopback address (``--source``), so that a partition can put these clients on one side.

Plants (``--plant``, for showing the checker fails): ``no-ids`` buys with a bare SECKILL.TRY
retried after a timeout, as a naive client does; ``unfenced-store`` makes the store accept any
fence. Run by ``faults.__main__``: ``python -m faults.workload --help``."""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
import uuid
from typing import Any, List, Optional, Tuple

import redis
import redis.asyncio
import redis.asyncio.connection

import seckill
import seckill.asyncio
from seckill import LockTimeout, NotReplicatedError, OutcomeUnknownError, RetryPolicy, UnavailableError

from .history import FAIL, INFO, OK, Op, write
from .store import FencedStore

#: A purchase's answer within this: the run's operations end while the run lasts.
DEADLINE_S = 4.0
#: Each buyer's pause between two purchases: about 40 a second per buyer, so that the sale
#: sells out in the middle of a run rather than in its first second.
PACE_S = 0.025
LOCK_TTL_MS = 1_000
#: Every HOLD_EVERY-th purchase of a buyer is a hold on the holds sale.
HOLD_EVERY = 5


def bind_source(address: str) -> None:
    """Every asyncio connection of this process (redis-py's and the package's own) leaves from
    ``address``."""
    original = redis.asyncio.connection.Connection._connection_arguments

    def bound(self: Any) -> Any:
        arguments = dict(original(self))
        arguments["local_addr"] = (address, 0)
        return arguments

    redis.asyncio.connection.Connection._connection_arguments = bound  # type: ignore[method-assign]


class Workload:
    def __init__(self, options: argparse.Namespace) -> None:
        self.o = options
        self.plants = set(filter(None, options.plant.split(",")))
        self.stop_at = time.time() + options.seconds
        self.store = FencedStore(options.store, checked="unfenced-store" not in self.plants)
        host, port = options.entry.split(":")
        self.client = redis.asyncio.RedisCluster(host=host, port=int(port), socket_timeout=0.5,
                                                 socket_connect_timeout=0.5)
        self.random = random.Random(options.seed)

    def record(self, op: Op) -> None:
        write(sys.stdout, op)

    async def run(self) -> None:
        retry = RetryPolicy(deadline_s=DEADLINE_S)
        self.sale = await seckill.asyncio.PartitionedSale.open(self.client, self.o.sale, retry=retry,
                                                               local_cache=self.o.cache)
        # The answer without a replica's acknowledgement, to show the window it leaves open.
        self.master_only = await seckill.asyncio.PartitionedSale.open(
            self.client, self.o.sale, retry=retry, local_cache=self.o.cache, durability="master")
        self.holds = await seckill.asyncio.PartitionedSale.open(self.client, self.o.holds, retry=retry)
        tasks = [self.buyer(n) for n in range(self.o.buyers)]
        tasks += [self.holder(n, library=(n % 2 == 0)) for n in range(self.o.holders)]
        await asyncio.gather(*tasks)
        await self.client.aclose()

    async def buyer(self, n: int) -> None:
        process = f"{self.o.name}-b{n}"
        count = 0
        while time.time() < self.stop_at:
            user = f"{process}-u{count}"
            count += 1
            if count % HOLD_EVERY == 0:
                await self.hold(process, user)
                await asyncio.sleep(PACE_S)
                continue
            master_only = "no-ids" not in self.plants and count % 2 == 0
            started = time.time()
            kind, value = await self.buy(self.master_only if master_only else self.sale, user)
            self.record(Op(process, "buy_master" if master_only else "buy", started, time.time(), kind,
                           {"user": user}, value))
            await asyncio.sleep(PACE_S)

    async def buy(self, sale: seckill.asyncio.PartitionedSale, user: str) -> Tuple[str, Any]:
        try:
            if "no-ids" in self.plants:
                reply = await self.bare_try(sale, user)
                return (OK if reply >= 0 else FAIL), reply
            reply = await sale.try_buy(user)
            return (OK if reply >= 0 else FAIL), reply
        except UnavailableError as error:
            return FAIL, f"unavailable: {error}"
        except NotReplicatedError as error:
            return INFO, {"not_replicated": error.reply}
        except (OutcomeUnknownError, redis.RedisError, OSError, asyncio.TimeoutError) as error:
            return INFO, f"{type(error).__name__}: {error}"

    async def hold(self, process: str, user: str) -> None:
        """A hold on the holds sale, then half the time a confirm, a quarter a cancel, and
        otherwise nothing: the hold expires on the server."""
        started = time.time()
        kind, value = await self.buy(self.holds, user)
        self.record(Op(process, "hold", started, time.time(), kind, {"user": user}, value))
        if kind != OK:
            return
        choice = self.random.random()
        if choice >= 0.75:
            return
        f = "confirm" if choice < 0.5 else "cancel"
        started = time.time()
        try:
            result: Any = await (self.holds.confirm(user) if f == "confirm" else self.holds.cancel(user))
            kind, value = OK, result
        except UnavailableError as error:
            kind, value = FAIL, f"unavailable: {error}"
        except NotReplicatedError as error:
            kind, value = INFO, {"not_replicated": error.reply}
        except (seckill.SeckillError, redis.RedisError, OSError, asyncio.TimeoutError) as error:
            # A confirm is sent once, through the application's client: whether a lost answer
            # applied is unknown.
            kind, value = INFO, f"{type(error).__name__}: {error}"
        self.record(Op(process, f, started, time.time(), kind, {"user": user}, value))

    async def bare_try(self, sale: seckill.asyncio.PartitionedSale, user: str) -> int:
        """SECKILL.TRY without an attempt id, sent again after a timeout: the planted bug."""
        key = sale.keys[sale.partition_of(user)]
        deadline = time.time() + DEADLINE_S
        while True:
            try:
                return int(await self.client.execute_command("SECKILL.TRY", key, user))
            except (redis.ConnectionError, redis.TimeoutError):
                if time.time() > deadline:
                    raise
                await asyncio.sleep(0.05)

    async def holder(self, n: int, library: bool) -> None:
        """Holds the lock in turn with everyone, writes to the store under its fence, and
        sometimes stalls past its TTL before its write (the stalled holder of the incident):
        the store refuses that write if another holder came in between."""
        process = f"{self.o.name}-{'l' if library else 'r'}{n}"
        lock = seckill.asyncio.Lock(self.client, self.o.lock, ttl_ms=LOCK_TTL_MS)
        while time.time() < self.stop_at:
            stall = self.random.random() < 0.1
            started = time.time()
            try:
                if library:
                    guard = await lock.hold(wait_ms=1_000)
                    fence, token = guard.fence, None
                else:
                    token = uuid.uuid4().hex
                    fence = await self.client.execute_command(
                        "LOCK.ACQUIRE", self.o.lock, token, LOCK_TTL_MS, "WAIT", 1_000)
                    guard = None
                    if fence is None:
                        raise LockTimeout(self.o.lock, "WAIT ran out")
            except LockTimeout as error:
                self.record(Op(process, "lock", started, time.time(), FAIL, {}, str(error)))
                continue
            except (redis.RedisError, OSError, seckill.SeckillError, asyncio.TimeoutError) as error:
                self.record(Op(process, "lock", started, time.time(), INFO, {}, f"{type(error).__name__}: {error}"))
                await asyncio.sleep(0.05)
                continue
            granted = time.time()
            if stall:
                await asyncio.sleep(LOCK_TTL_MS * 1.5 / 1000)
            writes: List[List[Any]] = []
            for _ in range(2):
                at = time.time()
                writes.append([self.store.write(int(fence), process), at])
                await asyncio.sleep(0.02)
            try:
                if guard is not None:
                    await guard.release()
                elif token is not None:
                    await self.client.execute_command("LOCK.RELEASE", self.o.lock, token)
            except (redis.RedisError, OSError, seckill.SeckillError, asyncio.TimeoutError):
                pass  # the lease ends by its TTL
            self.record(Op(process, "lock", started, time.time(), OK, {"stalled": stall},
                           {"fence": int(fence), "granted": granted, "writes": writes}))


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--entry", required=True)
    parser.add_argument("--sale", required=True)
    parser.add_argument("--holds", required=True)
    parser.add_argument("--lock", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--buyers", type=int, default=8)
    parser.add_argument("--holders", type=int, default=2)
    parser.add_argument("--cache", action="store_true")
    parser.add_argument("--plant", default="")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args(argv)
    bind_source(options.source)
    asyncio.run(Workload(options).run())


if __name__ == "__main__":
    main()

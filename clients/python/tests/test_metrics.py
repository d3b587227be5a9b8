"""The client metrics (``seckill.metrics``, on prometheus_client) against a real server: every
call of a sale handle, and each hold and release of a lock, sync and asyncio, counts once under
its operation and outcome and is timed once; a resent purchase counts its retries; the names
are the shared table's (``clients/metrics.txt``), which the Rust crate records under too."""

import asyncio
import pathlib
import socket
from collections import Counter
from typing import Dict, List, Tuple

import pytest
import redis
import redis.asyncio
from prometheus_client import CollectorRegistry, generate_latest

import seckill.asyncio
import seckill.metrics
from seckill import OVER_LIMIT, SOLD_OUT, Lock, LockTimeout, RetryPolicy, Sale, SaleSpec, SeckillError

from conftest import PROTOCOL

TABLE = pathlib.Path(__file__).resolve().parents[2] / "metrics.txt"


def _table() -> Dict[str, List[str]]:
    rows: Dict[str, List[str]] = {}
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            kind, name, *_ = line.split()
            rows.setdefault(kind, []).append(name)
    return rows


#: The calls ``_calls`` makes, by (operation, outcome).
EXPECTED = Counter({
    ("try_buy", "bought"): 3, ("try_buy", "over_limit"): 1, ("try_buy", "sold_out"): 1,
    ("try_buy", "local_refusal"): 2, ("try_buy", "error"): 1,
    ("confirm", "ok"): 1, ("confirm", "error"): 1, ("cancel", "ok"): 1, ("restock", "ok"): 1,
    ("bought", "ok"): 1, ("info", "ok"): 1, ("join", "error"): 1, ("position", "error"): 1,
    ("leave", "error"): 1, ("place", "error"): 1, ("admit", "error"): 1,
    ("lock_hold", "ok"): 2, ("lock_hold", "not_granted"): 1, ("lock_release", "ok"): 1,
    ("lock_release", "lost"): 1,
})


def _counts(registry: CollectorRegistry) -> Tuple[Counter, Counter, Counter]:
    """Calls counted, calls timed (the histogram's count) and retries, by their labels."""
    calls: Counter = Counter()
    timed: Counter = Counter()
    retries: Counter = Counter()
    for family in registry.collect():
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "seckill_client_calls_total":
                calls[(labels["operation"], labels["outcome"])] += int(sample.value)
            elif sample.name == "seckill_client_call_duration_seconds_count":
                timed[(labels["operation"], labels["outcome"])] += int(sample.value)
            elif sample.name == "seckill_client_retries_total":
                retries[labels["operation"]] += int(sample.value)
    return calls, timed, retries


def _check(registry: CollectorRegistry, also: Dict[Tuple[str, str], int] = {}) -> None:
    calls, timed, _ = _counts(registry)
    assert +calls == EXPECTED + Counter(also)
    assert +timed == EXPECTED + Counter(also)
    table = _table()
    assert sorted({operation for operation, _ in EXPECTED}) == sorted(table["operation"])
    assert {outcome for _, outcome in calls} <= set(table["outcome"])


def _sync_calls(sale: Sale, plain: Sale) -> None:
    assert sale.try_buy("a") >= 0
    assert sale.try_buy("a") == OVER_LIMIT
    assert sale.try_buy("b") >= 0 and sale.try_buy("c") >= 0
    assert [sale.try_buy(user) for user in "def"] == [SOLD_OUT] * 3
    with pytest.raises(SeckillError):
        sale.try_buy("")
    assert sale.confirm("a")
    assert sale.cancel("b") == 1
    sale.restock(1)
    assert sale.bought("a") == 1
    sale.info()
    # A sale without holds or a waiting room: the server's refusals are "error".
    for call in (lambda: plain.confirm("a"), lambda: plain.join("a"), lambda: plain.position("a"),
                 lambda: plain.leave("a"), lambda: plain.place("a"), lambda: plain.admit(1)):
        with pytest.raises(SeckillError):
            call()


def _sync_lock_calls(client: redis.Redis) -> None:
    lock = Lock(client, "m-lock", ttl_ms=10_000)
    with lock.hold(wait_ms=0):
        with pytest.raises(LockTimeout):
            lock.hold(wait_ms=0)
    guard = lock.hold(wait_ms=0)
    client.delete("m-lock")  # the lease gone under its holder
    assert guard.release() is False
    assert guard.release() is False  # released already: nothing sent, nothing counted


async def _async_lock_calls(client: redis.asyncio.Redis) -> None:
    lock = seckill.asyncio.Lock(client, "m-lock", ttl_ms=10_000)
    async with lock.hold(wait_ms=0):
        with pytest.raises(LockTimeout):
            await lock.hold(wait_ms=0)
    guard = await lock.hold(wait_ms=0)
    await client.delete("m-lock")
    assert await guard.release() is False
    assert await guard.release() is False


async def _async_calls(sale: seckill.asyncio.Sale, plain: seckill.asyncio.Sale) -> None:
    assert await sale.try_buy("a") >= 0
    assert await sale.try_buy("a") == OVER_LIMIT
    assert await sale.try_buy("b") >= 0 and await sale.try_buy("c") >= 0
    assert [await sale.try_buy(user) for user in "def"] == [SOLD_OUT] * 3
    with pytest.raises(SeckillError):
        await sale.try_buy("")
    assert await sale.confirm("a")
    assert await sale.cancel("b") == 1
    await sale.restock(1)
    assert await sale.bought("a") == 1
    await sale.info()
    for call in (plain.confirm("a"), plain.join("a"), plain.position("a"), plain.leave("a"),
                 plain.place("a"), plain.admit(1)):
        with pytest.raises(SeckillError):
            await call


SPEC = SaleSpec(stock=3, limit=1, hold_ms=60_000)


@pytest.fixture
def registry():
    registry = CollectorRegistry()
    seckill.metrics.enable(registry)
    yield registry
    seckill.metrics.disable()


def test_every_sync_call_counts_once_under_its_operation_and_outcome(server, registry):
    client = redis.Redis(port=server, protocol=PROTOCOL)
    sale = Sale.create(client, "m", SPEC, local_cache=True)
    plain = Sale.create(client, "m-plain", SaleSpec(stock=3))
    _sync_calls(sale, plain)
    _sync_lock_calls(client)
    _check(registry)
    assert sale.stats.local_refusals == 2
    text = generate_latest(registry).decode()
    assert 'seckill_client_calls_total{operation="try_buy",outcome="bought"} 3.0' in text


def test_every_async_call_counts_once_under_its_operation_and_outcome(server, registry):
    async def main() -> None:
        client = redis.asyncio.Redis(port=server, protocol=PROTOCOL)
        sale = await seckill.asyncio.Sale.create(client, "m", SPEC, local_cache=True)
        plain = await seckill.asyncio.Sale.create(client, "m-plain", SaleSpec(stock=3))
        await _async_calls(sale, plain)
        await _async_lock_calls(client)
        # A purchase given up by its caller (a timeout around it while the server is paused)
        # did not learn its outcome: "unknown".
        await client.execute_command("CLIENT", "PAUSE", 300)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(plain.try_buy("late"), 0.02)
        await client.aclose()

    asyncio.run(main())
    _check(registry, also={("try_buy", "unknown"): 1})


def test_a_purchase_resent_until_its_deadline_counts_its_retries(registry):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens there once the socket is closed
    sale = Sale(redis.Redis(port=port, protocol=PROTOCOL), "m", RetryPolicy(deadline_s=0.3))
    with pytest.raises(seckill.UnavailableError):
        sale.try_buy("a")
    calls, timed, retries = _counts(registry)
    assert +calls == +timed == Counter({("try_buy", "unavailable"): 1})
    assert retries["try_buy"] >= 1


def test_nothing_is_recorded_once_disabled_and_enable_is_idempotent(server):
    registry = CollectorRegistry()
    assert seckill.metrics.enable(registry) is seckill.metrics.enable(registry)
    seckill.metrics.disable()
    sale = Sale.create(redis.Redis(port=server, protocol=PROTOCOL), "m", SPEC)
    sale.try_buy("a")
    calls, _, _ = _counts(registry)
    assert +calls == Counter()

"""The waiting room through the package, sync and asyncio: a one-key sale made with ``queue``,
``join`` / ``position`` / ``admit``, ``try_buy``'s NOT_ADMITTED, typed errors for a sale
without a room and for settings refused before anything is written."""

import asyncio

import pytest
import redis
import redis.asyncio

import seckill
import seckill.asyncio
from conftest import PROTOCOL
from seckill import NOT_ADMITTED, SOLD_OUT, InvalidArgumentError, NoQueueError, SaleSpec


def test_join_admit_and_buy_through_the_sync_package(server):
    client = redis.Redis(port=server, protocol=PROTOCOL)
    sale = seckill.Sale.create(client, "room:sync", SaleSpec(stock=2, queue=True, window_ms=60_000), replace=True)
    assert [sale.join(u) for u in ("a", "b", "c")] == [1, 2, 3]
    assert sale.join("a") == 1, "joining again"
    assert sale.position("c") == 3 and sale.position("nobody") is None
    assert sale.try_buy("a") == NOT_ADMITTED
    assert sale.admit(5) == 2, "2 units: 2 admitted"
    assert sale.position("a") == 0 and sale.position("c") == 1
    assert sale.try_buy("a") == 1 and sale.try_buy("b") == 0
    assert sale.try_buy("c") == SOLD_OUT
    assert sale.join("c") == SOLD_OUT and sale.position("c") == SOLD_OUT
    info = client.execute_command("SECKILL.INFO", "room:sync")
    fields = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2]))
    assert fields[b"waiting"] == 0


def test_join_and_admit_through_the_asyncio_package(server):
    async def main() -> None:
        client = redis.asyncio.Redis(port=server, protocol=PROTOCOL)
        sale = await seckill.asyncio.Sale.create(
            client, "room:async", SaleSpec(stock=10, queue=True, admit_rate=(1, 60_000)), replace=True)
        places = await asyncio.gather(*(sale.join(f"u{n}") for n in range(20)))
        assert sorted(places) == list(range(1, 21))
        # The rate's first tick came with the first JOIN, when nobody waited yet: its next is
        # a minute away. ADMIT admits from the head of the line meanwhile.
        assert [await sale.position(f"u{n}") for n in range(20)].count(0) == 0
        assert await sale.admit(3) == 3
        first = [u for u in (f"u{n}" for n in range(20)) if await sale.position(u) == 0]
        assert len(first) == 3
        assert await sale.try_buy(first[0]) == 9
        await client.aclose()

    asyncio.run(main())


def test_a_sale_without_a_room_and_bad_room_settings_are_typed(server):
    client = redis.Redis(port=server, protocol=PROTOCOL)
    plain = seckill.Sale.create(client, "room:none", SaleSpec(stock=1), replace=True)
    for call in (lambda: plain.join("u"), lambda: plain.position("u"), lambda: plain.admit(1)):
        with pytest.raises(NoQueueError):
            call()
    keys = sorted(client.keys("*"))
    for spec in (SaleSpec(stock=1, window_ms=10), SaleSpec(stock=1, queue=True, admit_rate=(0, 10)),
                 SaleSpec(stock=1, queue=True, window_ms=0)):
        with pytest.raises(InvalidArgumentError):
            seckill.Sale.create(client, "room:bad", spec)
    with pytest.raises(TypeError):
        seckill.Sale.create(client, "room:bad", SaleSpec(stock=1, queue="yes"))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        plain.admit(0)
    assert sorted(client.keys("*")) == keys, "nothing written"


def _position_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats").get("cmdstat_seckill.position", {})
    return int(stats.get("calls", 0)) if isinstance(stats, dict) else 0


def test_wait_for_turn_follows_the_event_stream_not_the_server(server):
    """A waiter at place 6 sees 6, 5, ... 1, 0 as users ahead are admitted one by one, with
    no POSITION for six changes (the entries tell them all: a room without START has no draw);
    a waiter behind a sale that sells out sees SOLD_OUT."""
    import queue
    import threading

    client = redis.Redis(port=server, protocol=PROTOCOL)
    sale = seckill.Sale.create(client, "room:wait", SaleSpec(stock=10, queue=True, events=True), replace=True)
    for user in ("a", "b", "c", "d", "e"):
        sale.join(user)
    seen: "queue.Queue[int]" = queue.Queue()

    def wait() -> None:
        for place in sale.wait_for_turn("f", resync_ms=60_000, update_ms=10):
            seen.put(place)

    before = _position_calls(client)
    waiter = threading.Thread(target=wait)
    waiter.start()
    assert seen.get(timeout=10) == 6
    places = [6]
    for expected in (5, 4, 3, 2, 1, 0):
        assert sale.admit(1) == 1
        places.append(seen.get(timeout=10))
        assert places[-1] == expected, places
    waiter.join(timeout=10)
    assert not waiter.is_alive()
    assert _position_calls(client) - before == 0, "the entries told every change"

    sold = seckill.Sale.create(client, "room:wait-out", SaleSpec(stock=1, queue=True, events=True), replace=True)
    sold.join("first")
    out = sold.wait_for_turn("second", resync_ms=60_000)
    assert next(out) == 2
    assert sold.admit(1) == 1 and sold.try_buy("first") == 0
    rest = list(out)
    # It may see itself move to 1 (first admitted) before the sell-out.
    assert rest[-1] == SOLD_OUT and rest[:-1] in ([], [1]), repr(rest)

    plain = seckill.Sale.create(client, "room:no-events", SaleSpec(stock=1, queue=True), replace=True)
    with pytest.raises(InvalidArgumentError):
        next(plain.wait_for_turn("u"))
    with pytest.raises(InvalidArgumentError):
        sale.wait_for_turn("u", resync_ms=0)
    with pytest.raises(InvalidArgumentError):
        sale.wait_for_turn("u", update_ms=0)


def test_wait_for_turn_async_many_waiters_at_a_rate(server):
    """40 waiters on the asyncio package through the START shuffle and an admission rate: each
    sees its place go down and ends admitted; the server is asked about twice per waiter, not
    once per admission."""

    async def main() -> None:
        client = redis.asyncio.Redis(port=server, protocol=PROTOCOL, max_connections=64)
        sync_client = redis.Redis(port=server, protocol=PROTOCOL)
        start_ms = int(sync_client.time()[0]) * 1000 + 1_000
        spec = SaleSpec(stock=100, start_ms=start_ms, queue=True, admit_rate=(4, 50), events=True)
        sale = await seckill.asyncio.Sale.create(client, "room:wait-async", spec, replace=True)
        before = _position_calls(sync_client)

        async def wait(user: str) -> list:
            return [place async for place in sale.wait_for_turn(user, resync_ms=60_000, update_ms=10)]

        histories = await asyncio.gather(*(wait(f"u{n}") for n in range(40)))
        for places in histories:
            # Before START a page shows how many wait (not drawn); places only go down after.
            history = [int(p) for p in places if p.drawn]
            assert history[-1] == 0, places
            assert history == sorted(history, reverse=True), places
            assert len(set(history)) == len(history), places
        asked = _position_calls(sync_client) - before
        assert asked <= 2 * 40, asked
        assert max(len([p for p in h if p.drawn]) for h in histories) > 3, "some waiters saw their place go down"
        await client.aclose()

    asyncio.run(main())


def test_a_partitioned_sale_has_a_room_per_partition_at_its_share_of_the_rate(server):
    """4 partitions of 2 units, ADMIT 4 PER 100: each room admits 1 per 100 ms; the manifest
    keeps the room. 12 waiters in partition 0 and 4 in partition 1 (none in 2 and 3) wait for
    their turn and buy when admitted: 8 units sold, all to admitted users, partition 0 borrowing
    the units of 2 and 3 for its waiters; everyone else is told SOLD_OUT, nobody hangs; a bot's
    TRY never buys."""

    async def main() -> None:
        client = redis.asyncio.Redis(port=server, protocol=PROTOCOL, max_connections=64)
        spec = SaleSpec(stock=8, partitions=4, queue=True, admit_rate=(4, 100), window_ms=60_000, events=True)
        sale = await seckill.asyncio.PartitionedSale.create(client, "room:parts", spec, replace=True)
        rates = []
        for key in sale.keys:
            info = await client.execute_command("SECKILL.INFO", key)
            fields = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2]))
            rates.append((int(fields[b"queue_admit"]), int(fields[b"queue_per"])))
        assert rates == [(1, 100)] * 4
        reopened = await seckill.asyncio.PartitionedSale.open(client, "room:parts")
        assert reopened.spec == spec
        assert await sale.try_buy("bot") in (NOT_ADMITTED, SOLD_OUT)

        async def shopper(user: str) -> str:
            async for place in sale.wait_for_turn(user, resync_ms=2_000):
                if place == 0:
                    code = await sale.try_buy(user)
                    return "bought" if code >= 0 else f"refused {code}"
            return "sold out"

        names = (f"u{n}" for n in range(1_000))
        crowd = [u for u in names if sale.partition_of(u) == 0][:12]
        crowd += [u for u in (f"v{n}" for n in range(1_000)) if sale.partition_of(u) == 1][:4]
        outcomes = await asyncio.wait_for(asyncio.gather(*(shopper(u) for u in crowd)), 60)
        assert outcomes.count("bought") == 8, outcomes
        assert outcomes.count("sold out") == 8, outcomes
        # Partitions 0 and 1 had 4 units between them: the other 4 were lent by 2 and 3.
        infos = await sale.partition_infos()
        assert (infos[2].lent, infos[3].lent) == (2, 2), infos
        info = await sale.info()
        assert info.sold == 8 and info.remaining == 0
        assert await sale.bought("bot") == 0
        assert await sale.try_buy("bot") == SOLD_OUT
        await client.aclose()

    asyncio.run(main())


def test_admit_by_hand_goes_round_the_partitions(server):
    client = redis.Redis(port=server, protocol=PROTOCOL)
    sale = seckill.PartitionedSale.create(
        client, "room:parts-hand", SaleSpec(stock=40, partitions=4, queue=True), replace=True)
    users = [f"u{n}" for n in range(40)]
    for user in users:
        sale.join(user)
    per_partition = [sum(1 for u in users if sale.partition_of(u) == p) for p in range(4)]
    admitted = [sale.admit(1) for _ in range(8)]
    assert sum(admitted) == 8 - sum(1 for p in range(4) if per_partition[p] < 2)
    by_partition = [sum(1 for u in users if sale.partition_of(u) == p and sale.position(u) == 0) for p in range(4)]
    assert all(n == min(2, per_partition[p]) for p, n in enumerate(by_partition)), (by_partition, per_partition)
    plain = seckill.PartitionedSale.create(client, "room:parts-none", SaleSpec(stock=4, partitions=2), replace=True)
    with pytest.raises(NoQueueError):
        plain.admit(1)

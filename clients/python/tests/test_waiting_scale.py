"""The waiting room at a thousand waiters a process (#50): one reader of the room's stream per
process, shared by every waiter. Whoever is told it is its turn buys (a turn told after its
window closed would be refused -6), the stock sells out, and Redis sends the process a few
hundred KB, not the tens of MB of a stream read per waiter (measured before: 55-93 MB, 840 of
1 000 told their turn and then refused)."""

import asyncio
import threading
import time
from typing import Dict, List

import redis
import redis.asyncio

import seckill
import seckill.asyncio
from conftest import PROTOCOL
from seckill import NOT_ADMITTED, SOLD_OUT, SaleSpec

WAITERS = 1_000
STOCK = 200
#: Under this many bytes from Redis to the process for the whole sale: 5 KB per waiter.
BYTES_BOUND = 5_000_000


def _sent_bytes(client: redis.Redis) -> int:
    return int(client.info("stats")["total_net_output_bytes"])


def _spec(client: redis.Redis) -> SaleSpec:
    seconds, micros = client.time()
    start_ms = int(seconds) * 1000 + int(micros) // 1000 + 2_000
    return SaleSpec(stock=STOCK, start_ms=start_ms, queue=True, admit_rate=(50, 1_000), window_ms=4_000,
                    events=True)


def _check(outcomes: Dict[str, object], sent: int, client: redis.Redis, key: str) -> None:
    refused = {u: code for u, code in outcomes.items() if isinstance(code, int) and code < 0}
    bought = [u for u, code in outcomes.items() if isinstance(code, int) and code >= 0]
    sold_out = [u for u, code in outcomes.items() if code == "sold out"]
    assert refused == {}, f"{len(refused)} told their turn were refused: {list(refused.values())[:5]}"
    assert len(bought) == STOCK
    assert len(sold_out) == WAITERS - STOCK
    info = client.execute_command("SECKILL.INFO", key)
    fields = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2]))
    assert int(fields[b"remaining"]) == 0 and int(fields[b"sold"]) == STOCK
    print(f"{WAITERS} waiters: Redis sent {sent / 1e6:.2f} MB to the process")
    assert sent < BYTES_BOUND, sent


def test_a_thousand_asyncio_waiters_in_one_process_each_told_its_turn_buy(server):
    sync_client = redis.Redis(port=server, protocol=PROTOCOL)

    async def main() -> Dict[str, object]:
        client = redis.asyncio.Redis(port=server, protocol=PROTOCOL, max_connections=64)
        sale = await seckill.asyncio.Sale.create(client, "scale:async", _spec(sync_client), replace=True)
        outcomes: Dict[str, object] = {}

        async def shopper(user: str) -> None:
            async for place in sale.wait_for_turn(user):
                if place == 0:
                    outcomes[user] = await sale.try_buy(user)
                    return
                if place == SOLD_OUT:
                    outcomes[user] = "sold out"
                    return

        await asyncio.wait_for(asyncio.gather(*(shopper(f"u{n}") for n in range(WAITERS))), 120)
        await client.aclose()
        return outcomes

    before = _sent_bytes(sync_client)
    outcomes = asyncio.run(main())
    _check(outcomes, _sent_bytes(sync_client) - before, sync_client, "scale:async")


def test_a_thousand_sync_waiters_on_threads_each_told_its_turn_buy(server):
    client = redis.Redis(port=server, protocol=PROTOCOL)
    sale = seckill.Sale.create(client, "scale:sync", _spec(client), replace=True)
    outcomes: Dict[str, object] = {}
    lock = threading.Lock()

    def shopper(users: List[str]) -> None:
        # A thread per page, as a threaded server gives each open page.
        pages = [threading.Thread(target=page, args=(user,)) for user in users]
        for thread in pages:
            thread.start()
        for thread in pages:
            thread.join()

    def page(user: str) -> None:
        for place in sale.wait_for_turn(user):
            if place == 0:
                code = sale.try_buy(user)
                with lock:
                    outcomes[user] = code
                return
            if place == SOLD_OUT:
                with lock:
                    outcomes[user] = "sold out"
                return

    before = _sent_bytes(client)
    users = [f"u{n}" for n in range(WAITERS)]
    workers = [threading.Thread(target=shopper, args=(users[i::8],)) for i in range(8)]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + 120
    for worker in workers:
        worker.join(max(deadline - time.monotonic(), 0))
        assert not worker.is_alive(), "a waiter hangs"
    _check(outcomes, _sent_bytes(client) - before, client, "scale:sync")


def test_a_page_that_stops_before_its_turn_leaves_the_room(server):
    async def main() -> None:
        client = redis.asyncio.Redis(port=server, protocol=PROTOCOL)
        sale = await seckill.asyncio.Sale.create(
            client, "scale:leave", SaleSpec(stock=5, queue=True, events=True), replace=True)
        await sale.join("first")
        pages = sale.wait_for_turn("closer")
        place = await pages.__anext__()
        assert (int(place), place.drawn) == (2, True)
        await sale.join("last")
        assert await sale.position("last") == 3
        assert (await sale.info()).waiting == 3
        await pages.aclose()  # the browser closed the tab
        assert (await sale.info()).waiting == 2
        assert await sale.position("closer") is None
        assert await sale.position("last") == 2, "its place went on"
        found = await sale.place("last")
        assert found is not None and int(found) == 2 and found.eta_ms == -1
        assert await sale.leave("last") is True and await sale.leave("last") is False
        assert await sale.try_buy("last") == NOT_ADMITTED
        await client.aclose()

    asyncio.run(main())


def test_a_waiting_page_keeps_its_place_with_presence_and_an_absent_user_is_dropped(server):
    """PRESENCE 600 ms: the page waiting with ``wait_for_turn`` is joined again by its reader
    (at a third of it); a user who joined once and went away is dropped in its turn, and the
    admission goes to the page. The spec keeps the setting, through a partitioned manifest too."""
    async def main() -> None:
        client = redis.asyncio.Redis(port=server, protocol=PROTOCOL)
        spec = SaleSpec(stock=5, queue=True, events=True, presence_ms=600)
        sale = await seckill.asyncio.Sale.create(client, "scale:presence", spec, replace=True)
        sync_client = redis.Redis(port=server, protocol=PROTOCOL)

        def server_ms() -> int:
            seconds, micros = sync_client.time()
            return int(seconds) * 1000 + int(micros) // 1000

        await sale.join("gone")  # joins once, never again
        joined_ms = server_ms()
        pages = sale.wait_for_turn("present", update_ms=10)
        assert int(await pages.__anext__()) == 2
        while server_ms() <= joined_ms + 700:  # PRESENCE passed for "gone", many times over its third
            await asyncio.sleep(0.05)
        assert await sale.admit(1) == 1
        assert await sale.position("gone") is None, "dropped in its turn"
        place = await asyncio.wait_for(pages.__anext__(), 10)
        assert int(place) == 0, "the page kept its place and got the admission"
        await pages.aclose()
        parts = await seckill.asyncio.PartitionedSale.create(
            client, "scale:presence-parts", SaleSpec(stock=4, partitions=2, queue=True, presence_ms=900), replace=True)
        reopened = await seckill.asyncio.PartitionedSale.open(client, "scale:presence-parts")
        assert reopened.spec.presence_ms == 900 and parts.spec == reopened.spec
        await client.aclose()

    asyncio.run(main())

"""The shop under load through HTTP (no browser): buyers through the whole flow with the payment
provider failing 10 % of payments, through a master SIGKILLed mid-sale on the local cluster, and
through the shop's own processes killed and started again. After each run every paid order owns
a unit and every sold unit has a paid order, nobody paid twice or paid for nothing, and no buy or
pay request went past its deadline. ``make soak`` runs the cluster case with 2 000 buyers
(SHOP_BUYERS)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections import Counter
from typing import Any, Dict, List, Set

import httpx
import pytest
import redis

import seckill
from buyers import Crowd, Told, summary
from conftest import ShopParts, running_shop, servers
from seckill import SaleSpec
from shop import launch
from shop.orders import PAID, PENDING, rows

#: The shop's deadline for one request (the library's retry deadline, the payment's): longer
#: than a failover of the test cluster (node timeout 5 s).
DEADLINE_S = 20.0
#: A hold lives this long (a buyer paying through a failover may outlast it: its charge is then
#: refunded); the shop settles a pending order untouched for SETTLE_AFTER_S (after its hold).
HOLD_MS, SETTLE_AFTER_S = 8_000, 10.0
#: Buyers who close the page at the payment step.
ABANDON_RATE = 0.05
SHOP_ENV = {"SHOP_DEADLINE_S": str(DEADLINE_S), "SHOP_SETTLE_AFTER_S": str(SETTLE_AFTER_S)}


def spec(stock: int, admit_per_s: int) -> SaleSpec:
    return SaleSpec(stock=stock, limit=1, hold_ms=HOLD_MS, start_ms=int(time.time() * 1000) + 3_000, events=True,
                    queue=True, admit_rate=(admit_per_s, 1_000), window_ms=30_000, presence_ms=30_000)


def paid_rows(db: str) -> int:
    """The paid orders so far: none before the shop made its table (a busy machine starts it late)."""
    with sqlite3.connect(db, timeout=30) as con:
        made = con.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'orders'").fetchone()[0]
        if not made:
            return 0
        return int(con.execute("SELECT count(*) FROM orders WHERE state = ?", (PAID,)).fetchone()[0])


async def crowd_buys(url: str, buyers: int, during: Any = None) -> List[Told]:
    """``buyers`` buyers at once, and ``during`` (a coroutine: the fault) beside them."""
    # A request is a hang past 3 deadlines: a pay request takes at most one for the charge, one
    # for the confirm (or bought) and one for a refund.
    crowd = Crowd(url, request_timeout_s=3 * DEADLINE_S)
    try:
        fault = asyncio.ensure_future(during) if during is not None else None
        everyone = await asyncio.gather(*(crowd.buyer(ABANDON_RATE, seed) for seed in range(buyers)))
        if fault is not None:
            await fault
        return list(everyone)
    finally:
        await crowd.close()


def check_books(shop: ShopParts, sale: Any, everyone: List[Told]) -> Dict[str, int]:
    """The shop's promises, once every hold is settled; returns the buyers' outcomes."""
    counts = summary(everyone)
    hung = [h for t in everyone for h in t.hung]
    assert not hung, f"requests past their deadline: {hung[:5]} ({len(hung)})"
    unmapped = [s for t in everyone for s in t.steps if s.startswith("http ")]
    assert not unmapped, f"answers that are no page of the shop: {unmapped}"
    servers.wait_until(lambda: not [o for o in rows(shop.db) if o.state == PENDING] and sale.info().held == 0,
                       "every pending order settled and every hold gone", timeout=2 * SETTLE_AFTER_S + 30)
    orders = rows(shop.db)
    paid = {o.buyer: o.id for o in orders if o.state == PAID}
    owners = {b.user.decode(): b for b in sale.buyers()}
    assert all(not b.held and b.qty == 1 for b in owners.values()), "one final unit per buyer"
    assert set(owners) == set(paid), (
        f"units without a paid order: {set(owners) - set(paid)}; paid orders without a unit: {set(paid) - set(owners)}")
    info = sale.info()
    assert info.sold == len(paid)
    charges = httpx.get(shop.provider + "/charges").json()
    kept = [c for c in charges if c["status"] == "approved"]
    assert not [b for b, n in Counter(c["buyer"] for c in kept).items() if n > 1], "nobody pays twice"
    assert {c["id"] for c in kept} == set(paid.values()), "every payment kept is a paid order, and back"
    told_bought = {t.buyer: t.order_id for t in everyone if t.outcome == "ordered"}
    assert all(paid.get(b) == order for b, order in told_bought.items()), "told 'paid' means a paid order"
    counts["declined_at_provider"] = sum(1 for c in charges if c["status"] == "declined")
    counts["refunded"] = sum(1 for c in charges if c["status"] == "refunded")
    counts["settled_unpaid"] = sum(1 for o in orders if o.note == "not paid in time")
    return counts


@pytest.mark.parametrize("buyers,stock", [(int(os.environ.get("SHOP_BUYERS", "300")),
                                           int(os.environ.get("SHOP_STOCK", "100")))])
def test_buyers_through_a_killed_master_on_the_cluster_each_paid_order_owns_a_unit(cluster_nodes, buyers, stock):
    target = "cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in cluster_nodes[:3])
    launch.create_sale(target, "drop", spec(stock, admit_per_s=max(stock // 4, 16)))
    client = redis.RedisCluster(host="127.0.0.1", port=cluster_nodes[0].port)
    sale = seckill.PartitionedSale.open(client, "drop")
    killed: Dict[str, float] = {}
    with running_shop(target, workers=4, latency_ms="20-200", failure_rate=0.1, env=SHOP_ENV) as shop:

        async def kill_a_master() -> None:
            # Mid-sale: once a third of the stock is paid, the master of partition 0 dies.
            while paid_rows(shop.db) < stock // 3:
                await asyncio.sleep(0.1)
            master, _ = servers.master_and_replica(cluster_nodes, sale.keys[0])
            master.kill()
            killed["at"] = time.time()

        everyone = asyncio.run(crowd_buys(shop.url, buyers, kill_a_master()))
        counts = check_books(shop, sale, everyone)
        after = [o for o in rows(shop.db) if o.state == PAID and o.updated > killed["at"]]
        print(f"\n{buyers} buyers, {stock} units: {counts}; paid after the kill: {len(after)}")
        assert after, "the shop went on selling after the master died, without a restart"
        assert counts.get("ordered", 0) + counts.get("declined", 0) >= min(stock, buyers) * 0.5


def test_the_shop_killed_and_started_again_mid_sale_loses_and_doubles_no_order(server):
    buyers, stock = 150, 50
    target = f"redis://127.0.0.1:{server}"
    launch.create_sale(target, "drop", spec(stock, admit_per_s=20))
    sale = seckill.Sale.open(redis.Redis(port=server), "drop")
    with running_shop(target, workers=2, latency_ms="50-300", failure_rate=0.1, env=SHOP_ENV) as shop:

        async def restart_the_shop() -> None:
            while paid_rows(shop.db) < stock // 3:
                await asyncio.sleep(0.05)
            shop.kill_shop()  # SIGKILL: every request in flight is cut where it stands
            await asyncio.to_thread(shop.start_shop)

        everyone = asyncio.run(crowd_buys(shop.url, buyers, restart_the_shop()))
        counts = check_books(shop, sale, everyone)
        cut = sum(t.cut for t in everyone)
        print(f"\n{buyers} buyers, {stock} units: {counts}; requests cut by the restart: {cut}")
        assert cut > 0, "the restart cut requests in flight"


def test_a_hold_that_lapses_while_the_payment_runs_is_refunded_not_sold(server):
    # Every payment takes longer than a hold lives: each charge goes through after its unit went
    # back to stock, so the shop must refund it, and tell "expired", never "paid".
    target = f"redis://127.0.0.1:{server}"
    launch.create_sale(target, "drop", SaleSpec(stock=5, limit=1, hold_ms=300, events=True, queue=True,
                                                admit_rate=(10, 1_000)))
    sale = seckill.Sale.open(redis.Redis(port=server), "drop")
    with running_shop(target, workers=1, latency_ms="600", env={**SHOP_ENV, "SHOP_SETTLE_AFTER_S": "1"}) as shop:
        everyone = asyncio.run(crowd_buys(shop.url, 5))
        counts = check_books(shop, sale, everyone)
    assert counts == {"expired": 5, "declined_at_provider": 0, "refunded": 5, "settled_unpaid": 0}, counts


def test_buy_now_pressed_twice_leads_to_the_same_order(server):
    # The first "buy now" takes the admitted buyer out of the room with its hold; the second is
    # answered OVER_LIMIT by the server (the buyer holds its unit), and leads to the payment of
    # that one order, not to a "not your turn" page or a second order.
    target = f"redis://127.0.0.1:{server}"
    launch.create_sale(target, "drop", SaleSpec(stock=5, limit=1, hold_ms=60_000, events=True, queue=True))
    con = redis.Redis(port=server)
    with running_shop(target, workers=1, env=SHOP_ENV) as shop:
        cookie = {"Cookie": "buyer=twice-pressed-buyer"}
        assert httpx.post(shop.url + "/join", headers=cookie).headers["x-shop-step"] == "joined"
        assert con.execute_command("SECKILL.ADMIT", "drop", 1) == 1
        first, second = (httpx.post(shop.url + "/buy", headers=cookie) for _ in range(2))
        assert (first.headers["x-shop-step"], second.headers["x-shop-step"]) == ("pay", "pay")
        assert [o.state for o in rows(shop.db)] == [PENDING]
        paid = httpx.post(shop.url + "/pay", headers=cookie, data={"card": "4242424242424242"})
        assert paid.headers["x-shop-step"] == "ordered"
        assert [o.state for o in rows(shop.db)] == [PAID]

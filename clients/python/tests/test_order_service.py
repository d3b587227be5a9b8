"""examples/python/order_service.py through a killed master: the order step after a purchase
fails for some buyers (their lock or their sale key on the dead master), and still every unit
sold has a paid order row or is back in stock (docs/orders.md, "An order step that can fail")."""

import pathlib
import sys
import threading

from redis.cluster import RedisCluster

from conftest import PROTOCOL, master_and_replica, wait_until
from seckill import Sale, SaleSpec

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "examples" / "python"))
from order_service import BOUGHT, OrderBook, OrderService, check, shop  # noqa: E402

STOCK = 100


def test_every_unit_sold_has_an_order_row_or_is_back_in_stock_through_a_killed_master(own_cluster, tmp_path):
    client = RedisCluster(host="127.0.0.1", port=own_cluster[0].port, protocol=PROTOCOL)
    sale = Sale.create(client, "{orders}", SaleSpec(stock=STOCK, hold_ms=3_000), replace=True)
    service = OrderService(client, sale, OrderBook(str(tmp_path / "orders.db")))
    master, replica = master_and_replica(own_cluster, "{orders}")
    assert replica is not None
    told: dict = {}
    buyers = threading.Thread(target=lambda: told.update(shop(service, users=400, threads=40)))
    buyers.start()
    wait_until(lambda: len(service.orders.in_state("paid")) >= STOCK // 5, "a fifth of the stock paid")
    paid_at_kill = len(service.orders.in_state("paid"))
    master.kill()
    buyers.join()

    assert len(told) == 400, "every buyer was answered"
    report = check(service, STOCK, told)
    paid = len(service.orders.in_state("paid"))
    bought = sum(1 for reply in told.values() if reply == BOUGHT)
    print(f"{report}; paid at the kill {paid_at_kill}, told bought {bought}, failures {service.failures}")
    assert paid_at_kill < STOCK and paid > paid_at_kill, "the sale went on through the failover"
    client.close()

"""The shop's ``/metrics`` read by a real Prometheus (Debian's ``prometheus``) while buyers go
through the whole flow on a shop of two uvicorn workers: the pages Prometheus counts are the
pages the buyers were shown, and the purchases it counts are the shop's orders, though each
scrape reached one worker; and every panel of the applications' Grafana dashboard
(monitoring/grafana/seckill-clients-dashboard.json) has data."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import List

import httpx
import redis

import seckill
from conftest import REPO, running_shop, servers
from prometheus import scraping
from shop import launch
from shop.orders import rows
from test_load import SHOP_ENV, check_books, crowd_buys, spec


def dashboard_queries() -> List[str]:
    dashboard = json.loads((REPO / "monitoring/grafana/seckill-clients-dashboard.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_prometheus_counts_the_pages_buyers_were_shown_and_the_shops_purchases(server):
    buyers, stock = 40, 15
    target = f"redis://127.0.0.1:{server}"
    launch.create_sale(target, "drop", spec(stock, admit_per_s=20))
    sale = seckill.Sale.open(redis.Redis(port=server), "drop")
    with running_shop(target, workers=2, latency_ms="20-100", failure_rate=0.2, env=SHOP_ENV) as shop, \
            scraping(f"127.0.0.1:{shop.shop_port}") as prometheus:
        exposition = httpx.get(shop.url + "/metrics")
        assert exposition.status_code == 200 and exposition.headers["content-type"].startswith("text/plain")
        everyone = asyncio.run(crowd_buys(shop.url, buyers))
        counts = check_books(shop, sale, everyone)
        shown = dict(Counter(answer for told in everyone for answer in told.answers))
        assert len(shown) >= 3, f"buyers were shown a few kinds of pages: {shown}"

        def pages() -> dict:
            return prometheus.by('sum by (route, step) (shop_pages_total{route=~"POST /(buy|pay)"})', "route", "step")

        servers.wait_until(lambda: pages() == shown, f"Prometheus to count {shown}", timeout=30)
        # Every hold the shop took is an order row (a repeated "buy now" is answered from the
        # buyer's hold, OVER_LIMIT): as many purchases answered "bought".
        orders = len(rows(shop.db))
        bought = 'sum(seckill_client_calls_total{operation="try_buy",outcome="bought"})'
        servers.wait_until(lambda: prometheus.by(bought) == {(): orders}, f"Prometheus to count {orders} purchases",
                           timeout=30)
        timed = 'sum(seckill_client_call_duration_seconds_count{operation="try_buy"})'
        calls = 'sum(seckill_client_calls_total{operation="try_buy"})'
        assert prometheus.by(timed) == prometheus.by(calls)
        for query in dashboard_queries():
            # Rates need two scrapes of a counter in their window.
            servers.wait_until(lambda: prometheus.query(query), f"data for the dashboard's {query}", timeout=30)
        print(f"\n{buyers} buyers, {stock} units: {counts}; pages shown {shown}; {orders} purchases")

"""The shop's web app: FastAPI on ``seckill.asyncio``, served by uvicorn with several workers.

    SHOP_REDIS=redis://127.0.0.1:6379 SHOP_SALE=drop uvicorn shop.app:app --workers 4

Each worker process opens the sale once, shares one reader of its waiting room among every
waiting page it serves (``wait_for_turn``), and settles the orders that buyers abandoned. The
buyer is a random id in a cookie."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Optional, Tuple

import redis.asyncio as aredis
from fastapi import FastAPI, Form, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from redis.asyncio.cluster import ClusterNode

import seckill.asyncio as aseckill
from seckill import SOLD_OUT, RetryPolicy
from seckill.info import fields_of

from . import checkout as steps
from . import metrics, pages, timing
from .checkout import REDIS_TROUBLE, Checkout, Step, shown_as
from .orders import PAID, PENDING, OrderBook
from .payments import Payments
from .settings import Settings
from .timing import Timed

COOKIE = "buyer"
#: Connections per node of a worker's client, at most (one per request in flight).
MAX_CONNECTIONS = 2_000
#: How often each worker looks for abandoned orders.
SETTLE_EVERY_S = 5.0


@dataclass
class Shop:
    settings: Settings
    client: Any
    sale: Any
    orders: OrderBook
    payments: Payments
    checkout: Checkout
    start_ms: int
    window_ms: int


async def open_shop(settings: Settings) -> Shop:
    retry = RetryPolicy(deadline_s=settings.deadline_s)
    sale: Any
    if settings.cluster:
        # redis-py's cluster client refuses a call (MaxConnectionsError) rather than wait once a
        # node has max_connections (100 by default) in use: a worker serving a few hundred
        # requests at once needs more.
        client: Any = aredis.RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in settings.nodes()],
                                          max_connections=MAX_CONNECTIONS)
        sale = await aseckill.PartitionedSale.open(client, settings.sale, retry=retry)
        first_key = sale.keys[0]
    else:
        client = aredis.Redis.from_url(settings.redis, max_connections=MAX_CONNECTIONS)
        sale = await aseckill.Sale.open(client, settings.sale, retry=retry)
        first_key = settings.sale
    # The opening and the buying window, as the server has them (the countdown, the turn page).
    fields = fields_of(await client.execute_command("SECKILL.INFO", first_key))
    # Every part a request waits on is timed (the Server-Timing header).
    sale = Timed(sale, "redis")
    orders: Any = Timed(OrderBook(settings.db), "db")
    payments: Any = Timed(Payments(settings.payments, settings.deadline_s), "payment")
    return Shop(settings, client, sale, orders, payments, Checkout(sale, orders, payments, settings.price_cents),
                int(fields.get("start") or 0), int(fields.get("queue_window") or 0))


async def settle_forever(shop: Shop) -> None:
    while True:
        await asyncio.sleep(SETTLE_EVERY_S)
        with contextlib.suppress(Exception):  # a node down: the next round tries again
            await shop.checkout.settle_abandoned(shop.settings.settle_after_s)


def create_app(settings: Optional[Settings] = None) -> FastAPI:
    settings = settings or Settings.from_env()
    shops: Dict[str, Shop] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        metrics.enable()
        shop = shops["shop"] = await open_shop(settings)
        settler = asyncio.create_task(settle_forever(shop))
        yield
        settler.cancel()
        await shop.payments.close()
        await shop.client.aclose()

    app = FastAPI(title="seckill shop", lifespan=lifespan)
    app.mount("/static", StaticFiles(directory=Path(__file__).parent / "static"), name="static")

    @app.middleware("http")
    async def buyer_cookie(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        """Every visitor is a buyer: a random id in a cookie, given on the first request."""
        buyer = request.cookies.get(COOKIE)
        fresh = buyer is None or not 8 <= len(buyer) <= 64
        request.state.buyer = uuid.uuid4().hex if fresh else buyer
        began, parts = time.perf_counter(), timing.begin()
        response = await call_next(request)
        response.headers["Server-Timing"] = timing.header(parts, time.perf_counter() - began)
        step = response.headers.get("X-Shop-Step")
        route = request.scope.get("route")
        if step is not None and route is not None:
            # What the buyer was shown (an error page included), by the route's path: a
            # bounded set of labels whatever the URLs asked for.
            metrics.shown(f"{request.method} {route.path}", step)
        if fresh:
            response.set_cookie(COOKIE, request.state.buyer, httponly=True, samesite="lax")
        return response

    def html(step: str, body: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(body, status_code=status, headers={"X-Shop-Step": step})

    def go(path: str, step: str) -> RedirectResponse:
        return RedirectResponse(path, status_code=303, headers={"X-Shop-Step": step})

    def shown(step: Step) -> Response:
        """A checkout step as the buyer sees it."""
        if step.kind == steps.PAY:
            return go("/pay", step.kind)
        if step.kind == steps.ORDERED:
            return go("/order", step.kind)
        if step.kind == steps.SOLD_OUT_PAGE:
            return go("/sold-out", step.kind)
        if step.kind in (steps.NOT_STARTED_PAGE, steps.NO_ORDER):
            return go("/", step.kind)
        retry_later = '<a href="/order">Check your order</a>'
        known: Dict[str, Tuple[int, str, str, str]] = {
            steps.NOT_YOUR_TURN: (409, "Not your turn yet", "Your turn has not come, or its window closed.",
                                  '<a href="/queue">Back to the queue</a>'),
            steps.ENDED_PAGE: (410, "The sale has ended", "The sale is over.", '<a href="/">Back to the shop</a>'),
            steps.PAYMENT_DECLINED: (402, "Payment declined",
                                     "Your payment was declined and nothing was charged. The bottle went back to "
                                     "the sale for the next person.", '<a href="/">Back to the shop</a>'),
            steps.HOLD_EXPIRED: (410, "Your hold expired",
                                 "The bottle was held for you for a limited time, which ran out before the payment "
                                 "completed. Any charge was refunded.", '<a href="/">Back to the shop</a>'),
            steps.CONFIRMING: (503, "We are confirming your purchase",
                               "We could not yet confirm that your purchase is recorded safely. Reload in a moment: "
                               "you will never be charged twice.", retry_later),
            steps.UNAVAILABLE: (503, "The shop is busy", "Your purchase did not happen: please try again.",
                                '<a href="/queue">Back to the queue</a>'),
            steps.PAYMENT_UNKNOWN: (503, "We are confirming your payment",
                                    "The payment provider has not answered yet. Reload in a moment: you will never "
                                    "be charged twice.", retry_later),
        }
        status, title, text, link = known[step.kind]
        return html(step.kind, pages.message(step.kind, title, text, attempt_id=step.attempt_id, order=step.order,
                                             link=link), status)

    def problem(error: Exception) -> HTMLResponse:
        return html("problem", pages.message("problem", "Something went wrong",
                                             f"The shop could not answer ({type(error).__name__}); please retry."),
                    503)

    async def unavailable(_: Request, error: Exception) -> Response:
        """Redis out of reach (a node down, a failover) in any step the checkout does not
        decide: a page that says "retry", never a 500."""
        return problem(error)

    for trouble in REDIS_TROUBLE:
        app.add_exception_handler(trouble, unavailable)

    @app.get("/", response_class=HTMLResponse)
    async def product(request: Request) -> Response:
        shop = shops["shop"]
        info = await shop.sale.info()
        order = await shop.orders.latest(request.state.buyer)
        if info.sold_out and not (order and order.state == PAID):
            return html("sold_out", sold_out_page())
        return html("product", pages.product(remaining=info.remaining, stock=info.stock, price_cents=settings.price_cents,
                                             start_ms=shop.start_ms, now_ms=int(time.time() * 1000),
                                             order=order if order and order.state in (PAID, PENDING) else None,
                                             exporter=settings.exporter))

    def sold_out_page() -> str:
        return pages.message("sold_out", "Sold out", "Every bottle has been sold. Thank you for queueing.")

    @app.get("/sold-out", response_class=HTMLResponse)
    async def sold_out() -> Response:
        return html("sold_out", sold_out_page())

    @app.post("/join")
    async def join(request: Request) -> Response:
        place = await shops["shop"].sale.join(request.state.buyer)
        return go("/sold-out" if place == SOLD_OUT else "/queue", "joined")

    @app.get("/queue", response_class=HTMLResponse)
    async def queue() -> Response:
        return html("queue", pages.queue(window_ms=shops["shop"].window_ms, exporter=settings.exporter))

    @app.get("/queue/events")
    async def queue_events(request: Request) -> StreamingResponse:
        """The buyer's place, each time it changes, until its turn or the sell-out. A closed
        page cancels this stream, and ``wait_for_turn`` then leaves the room for the buyer."""
        buyer = request.state.buyer

        async def events() -> AsyncIterator[str]:
            try:
                async for place in shops["shop"].sale.wait_for_turn(buyer):
                    data = {"position": int(place), "eta_ms": place.eta_ms, "drawn": place.drawn}
                    yield f"event: place\ndata: {json.dumps(data)}\n\n"
            except REDIS_TROUBLE as error:
                yield f"event: problem\ndata: {json.dumps({'message': str(error)})}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.post("/buy")
    async def buy(request: Request) -> Response:
        return shown(await shops["shop"].checkout.buy(request.state.buyer))

    @app.get("/pay", response_class=HTMLResponse)
    async def pay_page(request: Request) -> Response:
        order = await shops["shop"].orders.latest(request.state.buyer)
        if order is None:
            return go("/", steps.NO_ORDER)
        if order.state != PENDING:
            return shown(shown_as(order))
        return html("pay", pages.pay(order, settings.price_cents))

    @app.post("/pay")
    async def pay(request: Request, card: str = Form("4242424242424242")) -> Response:
        return shown(await shops["shop"].checkout.pay(request.state.buyer, card))

    @app.get("/order", response_class=HTMLResponse)
    async def order_page(request: Request) -> Response:
        order = await shops["shop"].orders.latest(request.state.buyer)
        if order is None:
            return go("/", steps.NO_ORDER)
        if order.state == PAID:
            return html(steps.ORDERED, pages.ordered(order, settings.price_cents))
        if order.state == PENDING:
            return go("/pay", steps.PAY)
        return shown(shown_as(order))

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        return Response(metrics.exposition(), media_type=metrics.CONTENT_TYPE)

    @app.get("/healthz")
    async def healthz() -> Dict[str, str]:
        return {"status": "ok"}

    return app


app = create_app()

"""The shop's pages, rendered on the server (plain HTML, a little JavaScript from /static, no
CDN: the shop runs offline). Every page says which step it is (``data-step`` on its body, and
the ``X-Shop-Step`` header the routes add) so tests and monitoring read it without parsing."""

from __future__ import annotations

from html import escape
from typing import Optional

from .orders import Order

PRODUCT = "Limited bottle, 0.75 l"


def page(step: str, title: str, body: str, *, exporter: Optional[str] = None, script: str = "") -> str:
    operator = f'<a class="operator" href="{escape(exporter)}">operators: live sale page</a>' if exporter else ""
    scripts = f'<script src="/static/{script}"></script>' if script else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/static/shop.css"></head>
<body data-step="{escape(step)}" data-updates="0">
<header><a href="/">seckill shop</a></header>
<main>{body}</main>
<footer>{operator}</footer>
{scripts}
</body></html>"""


def price(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d} EUR"


def product(*, remaining: int, stock: int, price_cents: int, start_ms: int, now_ms: int, order: Optional[Order],
            exporter: Optional[str]) -> str:
    mine = f'<p class="mine">You have an order: <a href="/order">see it</a>.</p>' if order else ""
    opening = ""
    if start_ms > now_ms:
        opening = (f'<p class="countdown">The sale opens in <strong id="countdown" data-start-ms="{start_ms}" '
                   f'data-now-ms="{now_ms}"></strong></p>')
    body = f"""<h1>{PRODUCT}</h1>
<p class="price">{price(price_cents)}</p>
<p class="stock"><span id="remaining">{remaining}</span> of {stock} left</p>
{opening}{mine}
<form method="post" action="/join"><button id="join" type="submit">Join the queue</button></form>
<p class="fine">Everyone who joins before the opening gets a place drawn at random; later arrivals
queue behind them in arrival order.</p>"""
    return page("product", PRODUCT, body, exporter=exporter, script="countdown.js")


def queue(*, window_ms: int, exporter: Optional[str]) -> str:
    body = f"""<h1>You are in the queue</h1>
<section id="waiting">
  <p class="place" id="place">Finding your place...</p>
  <p class="eta" id="eta"></p>
  <p class="fine">Keep this page open: closing it gives your place to the next person.</p>
</section>
<section id="turn" hidden>
  <p class="place">It is your turn.</p>
  <p>Buy within <strong id="window" data-window-ms="{window_ms}"></strong>.</p>
  <form method="post" action="/buy"><button id="buy" type="submit">Buy now</button></form>
</section>
<p id="problem" class="problem" hidden></p>"""
    return page("queue", "In the queue", body, exporter=exporter, script="queue.js")


def pay(order: Order, price_cents: int) -> str:
    body = f"""<h1>Pay for your bottle</h1>
<p>It is held for you while you pay. Order <code id="order-id">{escape(order.id)}</code>,
{price(price_cents)}.</p>
<form method="post" action="/pay">
  <label>Card number <input id="card" name="card" value="4242424242424242" autocomplete="off"></label>
  <button id="pay" type="submit">Pay {price(price_cents)}</button>
</form>
<p class="fine">Test cards: 4242424242424242 is approved, 4000000000000002 declined.</p>"""
    return page("pay", "Payment", body)


def ordered(order: Order, price_cents: int) -> str:
    body = f"""<h1>Thank you: your order is paid</h1>
<p class="order">Order <code id="order-id">{escape(order.id)}</code>: 1 x {PRODUCT}, {price(price_cents)},
<strong id="order-state">paid</strong>.</p>"""
    return page("ordered", "Your order", body)


def message(step: str, title: str, text: str, *, attempt_id: Optional[str] = None, order: Optional[Order] = None,
            link: str = '<a href="/">Back to the shop</a>') -> str:
    """A page that tells the buyer what happened and what to do; the ids support asks for."""
    ids = ""
    if order is not None:
        ids += f'<p class="support">Order <code id="order-id">{escape(order.id)}</code></p>'
    if attempt_id is not None:
        ids += f'<p class="support">Attempt <code id="attempt-id">{escape(attempt_id)}</code> (quote it to support)</p>'
    return page(step, title, f"<h1>{escape(title)}</h1><p>{text}</p>{ids}<p>{link}</p>")

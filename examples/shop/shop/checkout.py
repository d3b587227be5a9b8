"""The order step of docs/orders.md, for a web shop: what a buyer's "buy" and "pay" do, and the
settling of orders nobody came back to. No HTTP here: the routes (``app.py``) turn each ``Step``
into a page.

    buy:  try_buy (a hold on a HOLD sale) -> order row "pending" -> the payment page
    pay:  charge (idempotent: the order id is its key)
            approved -> confirm -> row "paid"          (confirm False: bought > 0 means an
                                                        earlier confirm made it final; 0 means the
                                                        hold lapsed first -> refund, row "expired")
            declined -> cancel (the unit goes back) -> row "declined"

The row is written before the confirm and the confirm only after an approved charge, so a final
unit always has a paid charge and a row; a row goes to "paid" only once the server says the unit
is final, so a paid row always owns a unit. A request cut anywhere (a killed worker, a lost
answer, a failover) leaves a pending row, which the buyer's next request or the settler takes on
from where it stopped: the charge is looked up or sent again under the same key, never taken
twice."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

from redis.exceptions import RedisClusterException, RedisError

from seckill import (ENDED, NOT_ADMITTED, NOT_STARTED, OVER_LIMIT, SOLD_OUT, NotReplicatedError,
                     OutcomeUnknownError, SeckillError, UnavailableError)

from .orders import DECLINED, EXPIRED, PAID, PENDING, Order, OrderBook
from .payments import APPROVED, REFUNDED, Payments, PaymentUnknown

# What a buyer's request ends in: one page each (app.py).
PAY, ORDERED, SOLD_OUT_PAGE, NOT_YOUR_TURN, NOT_STARTED_PAGE, ENDED_PAGE = (
    "pay", "ordered", "sold_out", "not_your_turn", "not_started", "ended")
PAYMENT_DECLINED, HOLD_EXPIRED, CONFIRMING, UNAVAILABLE, PAYMENT_UNKNOWN, NO_ORDER = (
    "declined", "expired", "confirming", "unavailable", "payment_unknown", "no_order")

#: What the calls through the application's client (confirm, bought, cancel, join, info) raise
#: besides the package's typed errors: redis-py's, whose cluster client's "no node reachable"
#: (RedisClusterException) is no RedisError.
REDIS_TROUBLE = (SeckillError, RedisError, RedisClusterException)

#: The note of an order whose charge was refunded because its hold lapsed first.
LAPSED_REFUNDED = "the hold lapsed before the payment: refunded"

_REFUSALS = {SOLD_OUT: SOLD_OUT_PAGE, NOT_ADMITTED: NOT_YOUR_TURN, NOT_STARTED: NOT_STARTED_PAGE, ENDED: ENDED_PAGE}


@dataclass(frozen=True)
class Step:
    kind: str
    order: Optional[Order] = None
    #: The attempt id of a purchase whose outcome is not known: shown to the buyer for support.
    attempt_id: Optional[str] = None


def shown_as(order: Order) -> Step:
    """The page an order in its state is shown as."""
    kind = {PAID: ORDERED, DECLINED: PAYMENT_DECLINED, EXPIRED: HOLD_EXPIRED}.get(order.state, PAY)
    return Step(kind, order)


class Checkout:
    def __init__(self, sale: Any, orders: OrderBook, payments: Payments, price_cents: int) -> None:
        self.sale, self.orders, self.payments, self.price_cents = sale, orders, payments, price_cents

    async def buy(self, buyer: str) -> Step:
        """The buyer's "buy now": a hold and a pending order, or why not."""
        try:
            code = await self._try_buy_kept(buyer)
        except UnavailableError as error:
            return Step(UNAVAILABLE, attempt_id=error.attempt_id)
        except OutcomeUnknownError as error:
            return Step(CONFIRMING, attempt_id=error.attempt_id)
        if code >= 0:
            return Step(PAY, await self.orders.open_for(buyer))
        if code == OVER_LIMIT:
            # The buyer owns a unit already: paid, or a hold whose "bought" never reached it (a
            # lost answer, a restarted shop): its pending order, written now if it has none.
            latest = await self.orders.latest(buyer)
            if latest is not None and latest.state == PAID:
                return Step(ORDERED, latest)
            return Step(PAY, await self.orders.open_for(buyer))
        return Step(_REFUSALS.get(code, ENDED_PAGE))

    async def _try_buy_kept(self, buyer: str) -> int:
        """``try_buy``, sent once more under its attempt id if no replica acknowledged it in
        time (a failover under way): the repeat answers the same and waits again."""
        try:
            return int(await self.sale.try_buy(buyer))
        except NotReplicatedError as error:
            return int(await self.sale.try_buy(buyer, attempt_id=error.attempt_id))

    async def pay(self, buyer: str, card: str) -> Step:
        """The buyer's "pay" on its pending order."""
        order = await self.orders.latest(buyer)
        if order is None:
            return Step(NO_ORDER)
        if order.state != PENDING:
            return shown_as(order)
        try:
            status = await self.payments.charge(order.id, buyer, self.price_cents, card)
        except PaymentUnknown:
            return Step(PAYMENT_UNKNOWN, order)
        return await self._charged(order, status)

    async def _charged(self, order: Order, status: Optional[str]) -> Step:
        """Takes a pending order on from its charge's status (None: never charged)."""
        try:
            if status == APPROVED:
                if await self.sale.confirm(order.buyer) or await self.sale.bought(order.buyer) > 0:
                    await self.orders.settle(order.id, PAID)
                else:
                    await self.payments.refund(order.id)
                    await self.orders.settle(order.id, EXPIRED, LAPSED_REFUNDED)
            elif status is None:
                # Never charged, and the hold is past its time (the settler's case only): it went
                # back by itself.
                await self.orders.settle(order.id, EXPIRED, "not paid in time")
            elif status == REFUNDED:  # refunded by a request cut before it wrote the row
                await self.orders.settle(order.id, EXPIRED, LAPSED_REFUNDED)
            else:
                # Declined: the unit goes back now; if this cancel fails, the hold lapses by
                # itself.
                try:
                    await self.sale.cancel(order.buyer)
                except REDIS_TROUBLE:
                    pass
                await self.orders.settle(order.id, DECLINED, "the payment was declined")
        except (OutcomeUnknownError, UnavailableError, *REDIS_TROUBLE) as error:
            # confirm, bought and cancel go through the application's client: its errors too (a
            # node known down, a failover): the order stays pending, the next try goes on.
            return Step(CONFIRMING, order, attempt_id=getattr(error, "attempt_id", None))
        except PaymentUnknown:
            return Step(PAYMENT_UNKNOWN, order)
        settled = await self.orders.get(order.id)
        assert settled is not None
        return shown_as(settled)

    async def settle_abandoned(self, older_than_s: float) -> int:
        """Settles the pending orders untouched for ``older_than_s`` (longer than a hold
        lives): whatever their charge says. Safe in every worker at once: each step is
        idempotent and a row is settled once. Returns how many were looked at."""
        stale = await self.orders.pending_since(time.time() - older_than_s)
        for order in stale:
            try:
                await self._charged(order, await self.payments.status(order.id))
            except (PaymentUnknown, *REDIS_TROUBLE):
                continue  # the next round tries again
        return len(stale)

"""An order service fed by a sale's event stream (redis-py). Usage: python order_stream.py [port].

The shop only calls SECKILL.TRY. The order service reads the stream with XREADGROUP, opens an
order per `purchase`, takes the payment (here: every buyer pays except two who walk away) and
confirms it with SECKILL.CONFIRM; unpaid holds expire on the server and come back as `expire`
entries, and the shop sells those units again. At the end the service reconciles its orders
with SECKILL.BUYERS. Exits non-zero if anything disagrees."""

import sys
import threading
import time

import redis

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 6379
SALE = "{example:flash}"
STREAM = "{example:flash}:events"
GROUP = "orders"
STOCK = 5
NEVER_PAYS = {"user-1", "user-3"}


def connect():
    return redis.Redis(host="127.0.0.1", port=PORT, decode_responses=True)


def handle(con, orders, entry):
    event, user, order = entry["event"], entry["user"], entry["order"]
    if event == "purchase":
        orders[order] = {"user": user, "qty": int(entry["qty"]), "state": "awaiting payment"}
        if user not in NEVER_PAYS:
            # Payment taken: make the hold final. 0 would mean it had already expired.
            con.execute_command("SECKILL.CONFIRM", SALE, user)
    elif event == "confirm":
        orders[order]["state"] = "paid"
    elif event in ("expire", "cancel"):
        orders[order]["state"] = "cancelled"


def order_service(orders, stop):
    con = connect()
    while paid(orders) < STOCK and not stop.is_set():
        reply = con.xreadgroup(GROUP, "worker-1", {STREAM: ">"}, count=100, block=100)
        for _, entries in reply or []:
            for entry_id, entry in entries:
                handle(con, orders, entry)
                con.xack(STREAM, GROUP, entry_id)


def paid(orders):
    return sum(o["qty"] for o in orders.values() if o["state"] == "paid")


def main():
    con = connect()
    con.delete(SALE, STREAM)
    con.execute_command("SECKILL.INIT", SALE, STOCK, "HOLD", 300, "EVENTS", STREAM)
    con.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    orders, stop = {}, threading.Event()
    service = threading.Thread(target=order_service, args=(orders, stop))
    service.start()

    # The shop: every buyer tries until they get a hold; losers keep trying while unpaid
    # units come back.
    waiting = [f"user-{i}" for i in range(12)]
    deadline = time.time() + 20
    while service.is_alive() and time.time() < deadline:
        waiting = [u for u in waiting if con.execute_command("SECKILL.TRY", SALE, u) < 0]
        service.join(timeout=0.05)
    stop.set()
    service.join()

    # Reconciliation: the service's paid orders are exactly the sale's final buyers.
    final, cursor = {}, "0"
    while True:
        cursor, page = con.execute_command("SECKILL.BUYERS", SALE, cursor, "COUNT", 100)
        # RESP3 (redis-py 8's default) gives one map per buyer, RESP2 one flat array.
        if page and isinstance(page[0], dict):
            rows = [(row["user"], row["qty"], row["state"]) for row in page]
        else:
            rows = list(zip(page[::3], page[1::3], page[2::3]))
        for user, qty, state in rows:
            if state == "final":
                final[user] = int(qty)
        if cursor == "0":
            break
    paid_orders = {o["user"]: o["qty"] for o in orders.values() if o["state"] == "paid"}
    walked_away = sorted(o["user"] for o in orders.values() if o["state"] == "cancelled")
    assert sum(paid_orders.values()) == STOCK, "the service stopped before selling out"
    assert paid_orders == final, (paid_orders, final)
    assert set(walked_away) == NEVER_PAYS, walked_away
    print(
        f"order service: {len(orders)} orders, {len(paid_orders)} paid, "
        f"{len(walked_away)} expired unpaid, reconciled with SECKILL.BUYERS"
    )


if __name__ == "__main__":
    main()

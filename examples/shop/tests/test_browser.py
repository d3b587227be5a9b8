"""The shop as buyers meet it, in a real browser (Debian's chromium, headless, through
chromedriver): five buyers join before the opening and see the countdown, the number of people
in line, then their drawn places and ETAs; one closes its tab and its place goes to the next;
three are admitted in turn, buy, pay and see their order; the last sees the sell-out, and so
does a browser that comes late. Screenshots of every page go to target/screenshots/shop-*.png
(docs/shop.md shows them)."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List

import httpx
import redis
import seckill
from selenium.webdriver.common.by import By

from chromium import headless_chromium, text as shown_text
from conftest import SCREENSHOTS, running_shop, servers
from shop import launch
from seckill.info import fields_of
from shop.orders import PAID, rows

STOCK, BUYERS = 3, 5
#: One admission every this long: the places and ETAs visibly move between admissions.
ADMIT_EVERY_MS = 2_500


def browser() -> Any:
    return headless_chromium("900,700")


def step(driver: Any) -> str:
    # A script, not an element: the page may change between a look-up and a read.
    return str(driver.execute_script("return document.body ? document.body.dataset.step : ''"))


def text(driver: Any, element_id: str) -> str:
    return shown_text(driver, f"#{element_id}")


def shot(driver: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / f"shop-{name}.png"))


def buyer_id(driver: Any) -> str:
    return str(driver.get_cookie("buyer")["value"])


def test_five_browsers_queue_three_buy_one_leaves_and_the_late_one_sees_sold_out(server):
    con = redis.Redis(port=server, decode_responses=True)
    with ThreadPoolExecutor(BUYERS) as pool:
        drivers: List[Any] = list(pool.map(lambda _: browser(), range(BUYERS)))
    try:
        spec = launch.default_spec(STOCK, opens_in_s=0, admit_per_s=1)
        # Opens once every browser has joined (below); one admission every ADMIT_EVERY_MS.
        opening_ms = int(time.time() * 1000) + 15_000
        spec = type(spec)(**{**spec.__dict__, "start_ms": opening_ms, "admit_rate": (1, ADMIT_EVERY_MS)})
        launch.create_sale(f"redis://127.0.0.1:{server}", "drop", spec)
        with running_shop(f"redis://127.0.0.1:{server}", workers=2) as shop:
            # The product page counts down to the opening, on the server's clock.
            for driver in drivers:
                driver.get(shop.url + "/")
                assert step(driver) == "product"
            first = drivers[0]
            countdown = text(first, "countdown")
            assert re.fullmatch(r"0:\d\d", countdown), countdown
            servers.wait_until(lambda: text(first, "countdown") != countdown, "the countdown to move")
            assert text(first, "countdown") < countdown
            shot(first, "1-product")

            # Everyone joins before the opening: no place exists yet, only how many wait.
            for driver in drivers:
                driver.find_element(By.ID, "join").click()
            # The last to join is told the whole cohort at once; the others see their count
            # grow as their pages are updated (every resync before START).
            servers.wait_until(lambda: text(drivers[-1], "place") == f"{BUYERS} people in line",
                               "the last page to count everyone in line")
            for driver in drivers:
                servers.wait_until(lambda: re.fullmatch(r"[1-5] (person|people) in line", text(driver, "place")),
                                   "every waiting page to count the people in line")
            assert "Places are drawn at the opening, in about" in text(drivers[-1], "eta")
            shot(drivers[-1], "2-queue-before-opening")
            users = {buyer_id(d): d for d in drivers}
            assert len(users) == BUYERS, "each browser is its own buyer"

            # At the opening the places are drawn; each page shows its own and an ETA.
            servers.wait_until(lambda: all(step(d) == "turn" or text(d, "place").startswith("You are number")
                                           for d in drivers), "every page to show a drawn place", timeout=30)
            places = {u: con.execute_command("SECKILL.POSITION", "drop", u) for u in users}
            waiting = sorted((p, u) for u, p in places.items() if p and p > 0)
            for place, user in waiting:
                assert text(users[user], "place") in (f"You are number {place}", f"You are number {place + 1}")
                assert re.fullmatch(r"Your turn in about \d+ s", text(users[user], "eta")), text(users[user], "eta")
            shot(users[waiting[-1][1]], "3-queue-drawn")

            # The second in line closes its tab: it leaves, and the one behind it moves up.
            leaver_place, leaver = waiting[1]
            behind = waiting[2][1]
            behind_before = con.execute_command("SECKILL.POSITION", "drop", behind)
            shown_before = int(text(users[behind], "place").rsplit(" ", 1)[1])
            closed = users.pop(leaver)
            drivers.remove(closed)
            closed.quit()
            servers.wait_until(lambda: con.execute_command("SECKILL.POSITION", "drop", leaver) is None,
                               "the closed tab's buyer to leave the room")
            stream = fields_of(con.execute_command("SECKILL.INFO", "drop"))["events"]
            assert [e for _, e in con.xrange(stream) if e["event"] == "leave" and e["user"] == leaver]
            assert con.execute_command("SECKILL.POSITION", "drop", behind) < behind_before
            # ... and its page shows it, without a reload.
            servers.wait_until(lambda: step(users[behind]) == "turn"
                               or int(text(users[behind], "place").rsplit(" ", 1)[1]) < shown_before,
                               "the page behind the leaver to show its place move up")

            # Three are admitted in turn: each buys, pays and sees its paid order.
            bought: Dict[str, str] = {}
            sold_out_seen: List[str] = []
            deadline = time.monotonic() + 90
            while len(bought) + len(sold_out_seen) < len(users):
                assert time.monotonic() < deadline, f"bought {bought}, sold out {sold_out_seen}"
                for user, driver in users.items():
                    if user in bought or user in sold_out_seen:
                        continue
                    now = step(driver)
                    if now == "turn":
                        if not bought:
                            shot(driver, "4-your-turn")
                        driver.find_element(By.ID, "buy").click()
                        servers.wait_until(lambda: step(driver) == "pay", "the payment page")
                        if not bought:
                            shot(driver, "5-pay")
                        driver.find_element(By.ID, "pay").click()
                        servers.wait_until(lambda: step(driver) == "ordered", "the order page")
                        assert text(driver, "order-state") == "paid"
                        if not bought:
                            shot(driver, "6-order")
                        bought[user] = text(driver, "order-id")
                    elif now == "sold_out":
                        shot(driver, "7-sold-out")
                        sold_out_seen.append(user)
                time.sleep(0.1)
            assert len(bought) == STOCK and len(sold_out_seen) == BUYERS - 1 - STOCK

            # What the pages said is what the server, the orders and the provider hold.
            final = {b.user.decode() for b in seckill.Sale.open(con, "drop").buyers() if not b.held}
            assert final == set(bought)
            paid = {o.buyer: o.id for o in rows(shop.db) if o.state == PAID}
            assert paid == bought
            charges = httpx.get(shop.provider + "/charges").json()
            assert sorted(c["id"] for c in charges if c["status"] == "approved") == sorted(bought.values())

            # A browser that comes after the sell-out sees the sold-out page.
            late = browser()
            drivers.append(late)
            late.get(shop.url + "/")
            assert step(late) == "sold_out"
    finally:
        for driver in drivers:
            driver.quit()

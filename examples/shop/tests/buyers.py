"""Buyers through HTTP, no browser: each goes through the whole flow a page goes through (the
product page, join, the waiting page's event stream until its turn, buy, pay) and keeps what it
was told. Used by the load tests, ``make soak`` and the shop's benchmark."""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import httpx

GOOD_CARD = "4242424242424242"
#: Steps after which a buyer tries the same request again (nothing is bought or paid twice).
AGAIN = {"confirming", "payment_unknown", "unavailable", "problem"}


@dataclass
class Told:
    """What one buyer was told, in order, and how long its buy and pay requests took."""

    buyer: str
    steps: List[str] = field(default_factory=list)
    order_id: Optional[str] = None
    #: (request, seconds) of every buy and pay request.
    timings: List[tuple] = field(default_factory=list)
    #: ("POST /buy" or "POST /pay", the step it answered) of every buy and pay request answered.
    answers: List[Tuple[str, str]] = field(default_factory=list)
    #: Requests that got no answer within the client's timeout (the shop's deadline + grace).
    hung: List[str] = field(default_factory=list)
    #: Requests that failed to connect or were cut (a shop being restarted): sent again.
    cut: int = 0

    @property
    def outcome(self) -> str:
        return self.steps[-1] if self.steps else "nothing"


class Crowd:
    """Many buyers on one HTTP client (a Cookie header each, no cookie jar)."""

    def __init__(self, url: str, request_timeout_s: float, give_up_s: float = 180.0) -> None:
        self.url = url
        self.request_timeout_s = request_timeout_s
        self.give_up_s = give_up_s
        self.http = httpx.AsyncClient(base_url=url, follow_redirects=False,
                                      limits=httpx.Limits(max_connections=None, max_keepalive_connections=200),
                                      timeout=httpx.Timeout(request_timeout_s, connect=5.0))

    async def close(self) -> None:
        await self.http.aclose()

    async def _send(self, told: Told, method: str, path: str, **kwargs: object) -> Optional[httpx.Response]:
        """One request, sent again while the shop cannot be reached (it is being restarted);
        None once the buyer gave up. A request with no answer within the timeout is a hang."""
        headers = {"Cookie": f"buyer={told.buyer}"}
        give_up = time.monotonic() + self.give_up_s
        while time.monotonic() < give_up:
            began = time.monotonic()
            try:
                reply = await self.http.request(method, path, headers=headers, **kwargs)  # type: ignore[arg-type]
                if path in ("/buy", "/pay"):
                    told.timings.append((path, time.monotonic() - began))
                return reply
            except (httpx.ConnectTimeout, httpx.PoolTimeout):
                # Never sent (2 000 connecting at once overflow the listen queue): sent again,
                # as a browser does.
                told.cut += 1
                continue
            except httpx.TimeoutException:
                told.hung.append(f"{method} {path} after {time.monotonic() - began:.1f} s")
                return None
            except httpx.TransportError:
                told.cut += 1
                await asyncio.sleep(0.2)
        return None

    async def _wait_for_turn(self, told: Told) -> Optional[int]:
        """The waiting page's stream until the turn (0) or the sell-out (-1); reconnected when
        it is cut, as EventSource does."""
        give_up = time.monotonic() + self.give_up_s
        while time.monotonic() < give_up:
            try:
                async with self.http.stream("GET", "/queue/events", headers={"Cookie": f"buyer={told.buyer}"},
                                            timeout=httpx.Timeout(None, connect=5.0)) as stream:
                    event = ""
                    async for line in stream.aiter_lines():
                        if line.startswith("event: "):
                            event = line[7:]
                        elif line.startswith("data: ") and event == "place":
                            position = int(json.loads(line[6:])["position"])
                            if position <= 0:
                                return position
                        elif line.startswith("data: ") and event == "problem":
                            told.steps.append("problem")
                            break
            except httpx.TransportError:
                told.cut += 1
            await asyncio.sleep(0.2)
        return None

    async def buyer(self, abandon_rate: float = 0.0, seed: Optional[int] = None) -> Told:
        """One buyer from the product page to its order (or the sell-out); ``abandon_rate`` of
        them close the page at the payment step (their hold lapses, the shop settles it)."""
        told = Told(uuid.uuid4().hex)
        chance = random.Random(seed)
        if await self._send(told, "GET", "/") is None:
            return told
        joined = await self._send(told, "POST", "/join")
        if joined is None or joined.headers.get("location") == "/sold-out":
            told.steps.append("sold_out")
            return told
        while True:
            turn = await self._wait_for_turn(told)
            if turn is None:
                told.steps.append("gave_up")
                return told
            if turn < 0:
                told.steps.append("sold_out")
                return told
            step = await self._until_settled(told, "/buy")
            if step != "pay":
                if step == "not_your_turn":  # its window closed (a failover in between): queue again
                    continue
                return told
            if chance.random() < abandon_rate:
                told.steps.append("abandoned")
                return told
            await self._until_settled(told, "/pay", data={"card": GOOD_CARD})
            return told

    async def _until_settled(self, told: Told, path: str, **kwargs: object) -> str:
        """POSTs ``path`` again while the shop answers "confirming" (the outcome is not known
        yet): the step it ends at."""
        for _ in range(20):
            reply = await self._send(told, "POST", path, **kwargs)
            if reply is None:
                told.steps.append("gave_up")
                return "gave_up"
            step = reply.headers.get("x-shop-step", f"http {reply.status_code}")
            told.steps.append(step)
            told.answers.append((f"POST {path}", step))
            if step == "ordered":
                order = await self._send(told, "GET", "/order")
                if order is not None:
                    told.order_id = _order_id(order.text)
                return step
            if step not in AGAIN:
                return step
            await asyncio.sleep(0.5)
        return told.steps[-1]


def _order_id(page: str) -> Optional[str]:
    marker = '<code id="order-id">'
    at = page.find(marker)
    return page[at + len(marker):page.find("<", at + len(marker))] if at >= 0 else None


def summary(everyone: List[Told]) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for told in everyone:
        counts[told.outcome] = counts.get(told.outcome, 0) + 1
    return counts

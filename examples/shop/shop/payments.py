"""The shop's client of the payment provider. Every charge is sent under the order's id as its
idempotency key, so a charge sent again (a timeout, a restarted shop, the settler) charges
nothing more: one order, at most one payment."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Dict, Optional

import httpx

APPROVED, DECLINED, REFUNDED = "approved", "declined", "refunded"


class PaymentUnknown(Exception):
    """The provider gave no answer before the deadline: the charge may or may not have been
    taken. Sending it again under the same order id is safe."""


class Payments:
    def __init__(self, base_url: str, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self.http = httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(deadline_s / 2, connect=1.0))

    async def _send(self, method: str, path: str, **kwargs: Any) -> Optional[Dict[str, Any]]:
        """The provider's answer (None: 404), sent again on a transport error or a 5xx until
        the deadline."""
        deadline, backoff = time.monotonic() + self.deadline_s, 0.05
        while True:
            try:
                reply = await self.http.request(method, path, **kwargs)
                if reply.status_code == 404:
                    return None
                if reply.status_code < 500:
                    reply.raise_for_status()
                    answer: Dict[str, Any] = reply.json()
                    return answer
                failure: Exception = RuntimeError(f"provider answered {reply.status_code}")
            except httpx.TransportError as error:
                failure = error
            if time.monotonic() + backoff > deadline:
                raise PaymentUnknown(f"{method} {path}: {failure}")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def charge(self, order_id: str, buyer: str, amount: int, card: str) -> str:
        """APPROVED or DECLINED; PaymentUnknown after the deadline."""
        answer = await self._send("POST", "/charges", headers={"Idempotency-Key": order_id},
                                  json={"buyer": buyer, "amount": amount, "card": card})
        assert answer is not None
        return str(answer["status"])

    async def status(self, order_id: str) -> Optional[str]:
        """The order's charge (APPROVED, DECLINED, REFUNDED), None if it was never charged."""
        answer = await self._send("GET", f"/charges/{order_id}")
        return None if answer is None else str(answer["status"])

    async def refund(self, order_id: str) -> None:
        await self._send("POST", f"/charges/{order_id}/refund")

    async def close(self) -> None:
        await self.http.aclose()

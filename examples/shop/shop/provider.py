"""A fake payment provider: a local HTTP service with a configurable latency and failure rate,
idempotent as real ones are (Stripe's ``Idempotency-Key``): a charge sent again under its key
answers what the first one did and charges nothing more.

    PAYMENT_LATENCY_MS=200 PAYMENT_FAILURE_RATE=0.1 uvicorn shop.provider:app --port 8001

``POST /charges`` (header ``Idempotency-Key``; JSON ``buyer``, ``amount``, ``card``) answers
``{"id", "status": "approved" | "declined"}``; the card ``4000000000000002`` is always declined.
``POST /charges/{id}/refund`` refunds an approved charge (again: the same answer).
``GET /charges/{id}`` is one charge (404: none), ``GET /charges`` lists every charge: what the tests check "nobody pays twice" against."""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any, Dict, List

from fastapi import FastAPI, Header, HTTPException
from pydantic import BaseModel

DECLINED_CARD = "4000000000000002"

app = FastAPI(title="fake payment provider")
charges: Dict[str, Dict[str, Any]] = {}
deciding: Dict[str, "asyncio.Future[Dict[str, Any]]"] = {}
chance = random.Random(int(os.environ.get("PAYMENT_SEED", "0")) or None)


class Charge(BaseModel):
    buyer: str
    amount: int
    card: str = "4242424242424242"


def latency_s() -> float:
    """PAYMENT_LATENCY_MS: a fixed latency, or ``low-high`` for a uniform one."""
    low, _, high = os.environ.get("PAYMENT_LATENCY_MS", "100").partition("-")
    return chance.uniform(int(low), int(high or low)) / 1000


@app.post("/charges")
async def charge(body: Charge, idempotency_key: str = Header()) -> Dict[str, Any]:
    if idempotency_key in charges:
        return charges[idempotency_key]
    if idempotency_key in deciding:  # the same key sent twice at once: one decision for both
        return await asyncio.shield(deciding[idempotency_key])
    decided: "asyncio.Future[Dict[str, Any]]" = asyncio.get_running_loop().create_future()
    deciding[idempotency_key] = decided
    try:
        await asyncio.sleep(latency_s())
        failure_rate = float(os.environ.get("PAYMENT_FAILURE_RATE", "0"))
        declined = body.card == DECLINED_CARD or chance.random() < failure_rate
        charges[idempotency_key] = {"id": idempotency_key, "buyer": body.buyer, "amount": body.amount,
                                    "status": "declined" if declined else "approved"}
        decided.set_result(charges[idempotency_key])
        return charges[idempotency_key]
    finally:
        deciding.pop(idempotency_key, None)
        if not decided.done():
            decided.cancel()


@app.post("/charges/{charge_id}/refund")
async def refund(charge_id: str) -> Dict[str, Any]:
    found = charges.get(charge_id)
    if found is None:
        raise HTTPException(404, "no such charge")
    if found["status"] == "approved":
        found["status"] = "refunded"
    return found


@app.get("/charges/{charge_id}")
async def one(charge_id: str) -> Dict[str, Any]:
    found = charges.get(charge_id)
    if found is None:
        raise HTTPException(404, "no such charge")
    return found


@app.get("/charges")
async def listing() -> List[Dict[str, Any]]:
    return list(charges.values())

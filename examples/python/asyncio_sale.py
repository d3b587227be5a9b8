"""A flash sale from asyncio through the package: 1 000 tasks (some users twice) for 100 units
on one redis.asyncio client, through seckill.asyncio.Sale. Usage: python asyncio_sale.py
[port]. Exits non-zero if anything oversold."""

import asyncio
import sys

import redis.asyncio

from seckill import SOLD_OUT, OVER_LIMIT, SaleSpec
from seckill.asyncio import Sale

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 6379


async def main() -> None:
    client = redis.asyncio.Redis(host="127.0.0.1", port=PORT)
    sale = await Sale.create(client, "example:sale:asyncio", SaleSpec(stock=100, partitions=1), replace=True)
    # 1 000 tasks for 800 users: some tap twice, and LIMIT 1 holds.
    codes = await asyncio.gather(*(sale.try_buy(f"user-{i % 800}") for i in range(1_000)))
    winners = [i % 800 for i, code in enumerate(codes) if code >= 0]
    assert len(winners) == len(set(winners)), "a user bought twice"
    assert all(code >= 0 or code in (SOLD_OUT, OVER_LIMIT) for code in codes)
    info = await sale.info()
    assert info.sold == len(winners) == 100 and info.remaining == 0, info
    print(f"{len(winners)} winners, sold {info.sold} of {info.stock}")
    await client.aclose()


asyncio.run(main())

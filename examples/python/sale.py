"""A small flash sale through SECKILL.TRY from Python (redis-py): 40 concurrent buyers (some
twice) for 10 units. Usage: python sale.py [port]. Exits non-zero if anything oversold."""

import sys
from concurrent.futures import ThreadPoolExecutor

import redis

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 6379
KEY = "example:sale:python"
SOLD_OUT, ALREADY_BOUGHT = -1, -2


def buy(i):
    con = redis.Redis(host="127.0.0.1", port=PORT)
    user = f"user-{i % 30}"
    return user, con.execute_command("SECKILL.TRY", KEY, user)


def main():
    con = redis.Redis(host="127.0.0.1", port=PORT)
    con.execute_command("SECKILL.INIT", KEY, 10, "REPLACE")
    with ThreadPoolExecutor(max_workers=40) as pool:
        results = list(pool.map(buy, range(40)))
    winners = [user for user, reply in results if reply >= 0]
    assert len(winners) == len(set(winners)), "a user bought twice"
    assert all(reply >= 0 or reply in (SOLD_OUT, ALREADY_BOUGHT) for _, reply in results)
    info = con.execute_command("SECKILL.INFO", KEY)
    # A map under RESP3 (redis-py 8's default), a flat [name, value, ...] array under RESP2.
    fields = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2]))
    sold = fields[b"sold"]
    print(f"python example: {len(winners)} winners, sold {sold} of 10")
    assert (len(winners), sold) == (10, 10)


if __name__ == "__main__":
    main()

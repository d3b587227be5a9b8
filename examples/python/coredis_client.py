"""docs/any-client.md, "Python: coredis": a purchase, the reply shapes and a fenced lock
through coredis (asyncio). Run: python coredis_client.py PORT [cluster] (tests/any_client.rs
runs both)."""

import asyncio
import sys
import uuid

import coredis
from coredis.commands.request import CommandRequest
from coredis.exceptions import ResponseError
from coredis.typing import Key

port, mode = int(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else "single")


async def main() -> None:
    # coredis resends a command after a lost connection or a timeout (its default retry
    # policy: twice), so every TRY carries an ID (rule 1); stream_timeout longer than any
    # LOCK.ACQUIRE ... WAIT (rule 2).
    client = (coredis.RedisCluster(host="127.0.0.1", port=port, stream_timeout=5) if mode == "cluster"
              else coredis.Redis(host="127.0.0.1", port=port, stream_timeout=5))
    async with client:

        async def call(name: str, key: str, *args: object) -> object:
            # A module command is a CommandRequest; the key wrapped in Key() is how a cluster
            # client finds its node (a plain str: "Could not map ... to a node").
            return await client.execute_command(
                CommandRequest(name.encode(), Key(key), *args, execution_parameters={}))

        sale, lock = "{coredis}:sale", "{coredis}:lock"
        await call("SECKILL.INIT", sale, 10, "LIMIT", 2, "REPLACE")
        attempt = uuid.uuid4().hex
        left = await call("SECKILL.TRY", sale, "alice", 1, "ID", attempt)
        assert await call("SECKILL.TRY", sale, "alice", 1, "ID", attempt) == left
        assert await call("SECKILL.BOUGHT", sale, "alice") == 1

        # coredis speaks RESP3: INFO is a map with booleans; errors keep Redis's text.
        info = await call("SECKILL.INFO", sale)
        assert isinstance(info, dict) and info[b"sold"] == 1 and info[b"sold_out"] is False, info
        try:
            await call("SECKILL.TRY", "{coredis}:none", "alice")
        except ResponseError as error:
            assert str(error).startswith("NOSALE"), error

        token = uuid.uuid4().hex
        fence = await call("LOCK.ACQUIRE", lock, token, 10_000, "WAIT", 1_000)
        assert await call("LOCK.RELEASE", lock, token) == 1
        following = await call("LOCK.ACQUIRE", lock, token, 10_000)
        assert isinstance(fence, int) and following > fence and fence < 2**53
        await call("LOCK.RELEASE", lock, token)
        print(f"coredis {coredis.__version__} {mode}: bought, {left} left; fences {fence} < {following}")


asyncio.run(main())

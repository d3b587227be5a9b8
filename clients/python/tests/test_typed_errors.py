"""Every module or server error the package can meet is typed (#42): a lock on a server
without the module is ``ModuleMissingError`` like a sale; a key of another type is
``WrongTypeError`` from ``open``, ``create``, ``try_buy`` and ``Lock.hold``, sync and asyncio; a
one-key sale opened as a partitioned one is ``BadManifestError``. Nothing is written."""

import asyncio

import pytest
import redis
import redis.asyncio

import seckill
import seckill.asyncio
from conftest import PROTOCOL
from seckill import BadManifestError, Lock, ModuleMissingError, SaleSpec, WrongTypeError


def test_a_lock_on_a_server_without_the_module_names_it(bare_server):
    client = redis.Redis(port=bare_server, protocol=PROTOCOL)
    with pytest.raises(ModuleMissingError):
        with Lock(client, "lock:x").hold(wait_ms=0):
            pass

    async def main() -> None:
        aclient = redis.asyncio.Redis(port=bare_server, protocol=PROTOCOL)
        with pytest.raises(ModuleMissingError):
            async with seckill.asyncio.Lock(aclient, "lock:x").hold(wait_ms=0):
                pass
        await aclient.aclose()

    asyncio.run(main())
    assert client.keys("*") == []


def test_a_key_of_another_type_is_a_wrong_type_error_everywhere(server):
    client = redis.Redis(port=server, protocol=PROTOCOL)
    client.set("plain", "a string")
    client.set("{p/0}", "a string")
    before = client.dump("plain")
    calls = {
        "Sale.open": lambda: seckill.Sale.open(client, "plain"),
        "Sale.create": lambda: seckill.Sale.create(client, "plain", SaleSpec(stock=1, partitions=1)),
        "try_buy": lambda: seckill.Sale(client, "plain").try_buy("u"),
        "bought": lambda: seckill.Sale(client, "plain").bought("u"),
        "Lock.hold": lambda: Lock(client, "plain").hold(wait_ms=0).__enter__(),
    }
    for what, call in calls.items():
        with pytest.raises(WrongTypeError):
            call()
        assert client.dump("plain") == before, what

    async def main() -> None:
        aclient = redis.asyncio.Redis(port=server, protocol=PROTOCOL)
        with pytest.raises(WrongTypeError):
            await seckill.asyncio.Sale.open(aclient, "plain")
        with pytest.raises(WrongTypeError):
            await seckill.asyncio.Sale(aclient, "plain").try_buy("u")
        await aclient.aclose()

    asyncio.run(main())
    seckill.Sale.create(client, "one-key", SaleSpec(stock=1, partitions=1))
    with pytest.raises(BadManifestError):
        seckill.PartitionedSale.open(client, "one-key")
    assert sorted(client.keys("*")) == [b"one-key", b"plain", b"{p/0}"]


def test_a_client_of_the_other_api_is_a_type_error_before_any_io(server):
    """A sync client given to ``seckill.asyncio`` (or the reverse) is a TypeError that says
    which to use, at construction and in ``create``/``open``, nothing written (it was an
    AttributeError about a coroutine, or an ``await`` on a dict)."""
    sync_client = redis.Redis(port=server, protocol=PROTOCOL)
    async_client = redis.asyncio.Redis(port=server, protocol=PROTOCOL)
    spec = SaleSpec(stock=1, partitions=1)
    for call in (
        lambda: seckill.Sale(async_client, "mix"),
        lambda: seckill.Sale.create(async_client, "mix", spec),
        lambda: seckill.PartitionedSale.open(async_client, "mix"),
        lambda: Lock(async_client, "mix"),
        lambda: seckill.asyncio.Sale(sync_client, "mix"),
        lambda: seckill.asyncio.Lock(sync_client, "mix"),
    ):
        with pytest.raises(TypeError, match="seckill"):
            call()

    async def main() -> None:
        with pytest.raises(TypeError, match="sync classes"):
            await seckill.asyncio.Sale.create(sync_client, "mix", spec)
        await async_client.aclose()

    asyncio.run(main())
    assert sync_client.keys("*") == []

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


BAD_USERS = [None, 7, True, ["x"], "", b"", "u" * 513, b"u" * 513]
BAD_COUNTS = [None, "2", True, 2.0, 0, -1, 2**63]


def _sale_calls(sale):
    """Every public call of a sale taking a user or a count, with one argument replaced."""
    for bad in BAD_USERS:
        yield f"try_buy(user={bad!r:.20})", lambda b=bad: sale.try_buy(b)
        yield f"try_buy_acked(user={bad!r:.20})", lambda b=bad: sale.try_buy_acked(b)
        yield f"confirm(user={bad!r:.20})", lambda b=bad: sale.confirm(b)
        yield f"cancel(user={bad!r:.20})", lambda b=bad: sale.cancel(b)
        yield f"bought(user={bad!r:.20})", lambda b=bad: sale.bought(b)
    for bad in BAD_COUNTS:
        if bad is not None:  # qty None is "all" for cancel
            yield f"try_buy(qty={bad!r})", lambda b=bad: sale.try_buy("u", b)
            yield f"cancel(qty={bad!r})", lambda b=bad: sale.cancel("u", b)
        if bad != 0:  # no replica and no wait are fine for WAIT
            yield f"try_buy_acked(replicas={bad!r})", lambda b=bad: sale.try_buy_acked("u", 1, b)
            yield f"try_buy_acked(timeout_ms={bad!r})", lambda b=bad: sale.try_buy_acked("u", 1, 1, b)
        yield f"restock({bad!r})", lambda b=bad: sale.restock(b)


@pytest.mark.parametrize("kind", ["one-key", "partitioned"])
def test_every_bad_argument_is_typed_and_writes_nothing(server, kind):
    """The argument policy (docs/clients.md, "Arguments"), one table for every call: a wrong
    type (None, a list, a bool, a float, a str for a count) is ``ArgumentTypeError`` (a
    TypeError); empty, too long (513 bytes) or out of range is ``InvalidArgumentError``; the
    keyspace is the same after (DUMP of every key), sync and asyncio."""
    client = redis.Redis(port=server, protocol=PROTOCOL)
    if kind == "one-key":
        sale = seckill.Sale.create(client, "args", SaleSpec(stock=5, partitions=1, limit=2, hold_ms=60_000))
    else:
        sale = seckill.PartitionedSale.create(client, "args", SaleSpec(stock=5, partitions=2, limit=2, hold_ms=60_000))
    keyspace = {key: client.dump(key) for key in client.keys("*")}
    count = 0
    for what, call in _sale_calls(sale):
        with pytest.raises(seckill.InvalidArgumentError) as raised:
            call()
        kind_of = type(raised.value).__name__
        assert kind_of in ("ArgumentTypeError", "InvalidArgumentError"), what
        count += 1
    assert count > 60
    with pytest.raises(TypeError):
        sale.try_buy(None)
    with pytest.raises(ValueError):
        sale.try_buy("u" * 513)
    with pytest.raises(seckill.InvalidArgumentError):
        Lock(client, "lock:args", ttl_ms=10**30)
    with pytest.raises(seckill.InvalidArgumentError):
        Lock(client, "lock:args").hold(wait_ms=10**30)

    async def main() -> None:
        aclient = redis.asyncio.Redis(port=server, protocol=PROTOCOL)
        opened = await (seckill.asyncio.Sale.open(aclient, "args") if kind == "one-key"
                        else seckill.asyncio.PartitionedSale.open(aclient, "args"))
        for bad in (None, True, "", "u" * 513):
            with pytest.raises(seckill.InvalidArgumentError):
                await opened.try_buy(bad)
        with pytest.raises(TypeError):
            await opened.cancel("u", True)
        await aclient.aclose()

    asyncio.run(main())
    assert {key: client.dump(key) for key in client.keys("*")} == keyspace


def test_settings_after_the_spec_are_keyword_only(server):
    """``create(c, name, spec, RetryPolicy(...))`` (a policy where ``seal_ms`` was) wrote the
    sale and then failed; the settings after the spec are keyword-only now: a TypeError before
    anything is written."""
    client = redis.Redis(port=server, protocol=PROTOCOL)
    with pytest.raises(TypeError):
        seckill.PartitionedSale.create(client, "p:pos", SaleSpec(stock=3, partitions=4),
                                       seckill.RetryPolicy(deadline_s=2))  # type: ignore[misc]
    with pytest.raises(TypeError):
        seckill.Sale.create(client, "pos", SaleSpec(stock=3, partitions=1),
                            seckill.RetryPolicy(deadline_s=2))  # type: ignore[misc]
    assert client.keys("*") == []
    sale = seckill.PartitionedSale.create(client, "p:pos", SaleSpec(stock=3, partitions=4),
                                          retry=seckill.RetryPolicy(deadline_s=2), seal_ms=100)
    assert sale.retry.deadline_s == 2

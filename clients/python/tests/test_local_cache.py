"""The sold-out cache (``local_cache=True``) against real servers: refusals answered in the
process, every change pushed back by Redis ends them, a killed tracking connection, a change
planted in the middle of the reads that make a mark, a failover and a moved slot."""

import asyncio
import statistics
import threading
import time

import pytest
import redis
import redis.asyncio

import seckill.asyncio
from seckill import SOLD_OUT, PartitionedSale, RetryPolicy, Sale, SaleSpec, partition_of

from conftest import PROTOCOL, command_calls, master_and_replica, promote, wait_until

TRIES = 100_000


def _calls(ports, command: str) -> int:
    """``command``'s calls on the servers at ``ports`` (INFO commandstats)."""
    return sum(command_calls(port, command) for port in ports)


def _masters(cluster: redis.RedisCluster):
    return [node.port for node in cluster.get_primaries()]


def _user_in(partition: int, partitions: int, prefix: str) -> str:
    return next(f"{prefix}{n}" for n in range(10_000) if partition_of(f"{prefix}{n}", partitions) == partition)


def _refused_locally_many(sale, ports, partitions: int) -> None:
    """Sold out: TRIES purchases, of which at most ``partitions`` reach a server."""
    before = _calls(ports, "seckill.try")
    for n in range(TRIES):
        assert sale.try_buy(f"late{n}") == SOLD_OUT
    sent = _calls(ports, "seckill.try") - before
    print(f"{sent} of {TRIES} sold-out tries reached a server")
    assert sent <= partitions
    assert sale.stats.local_refusals >= TRIES - partitions


def test_sold_out_tries_are_answered_in_the_process_one_key(server):
    client = redis.Redis(port=server, protocol=PROTOCOL)
    sale = Sale.create(client, "cached", SaleSpec(stock=3, partitions=1), local_cache=True)
    assert [sale.try_buy(u) for u in "abc"] == [2, 1, 0]
    _refused_locally_many(sale, [server], 1)
    plain = Sale(client, "cached")  # without the cache: every try is sent
    before = _calls([server], "seckill.try")
    assert all(plain.try_buy(f"p{n}") == SOLD_OUT for n in range(100))
    assert _calls([server], "seckill.try") - before == 100
    assert plain.stats.local_refusals == 0


def test_sold_out_tries_are_answered_in_the_process_partitioned(cluster):
    sale = PartitionedSale.create(cluster, "cached-p", SaleSpec(stock=40, partitions=4), local_cache=True)
    assert sum(sale.try_buy(f"b{n}") >= 0 for n in range(60)) == 40
    _refused_locally_many(sale, _masters(cluster), 4)
    masters = {cluster.get_node_from_key(key).name for key in sale.keys}
    assert sale._sold_out.connections() == len(masters), "one tracking connection per master"
    assert PartitionedSale.open(cluster, "cached-p", local_cache=True).try_buy("again") == SOLD_OUT


def test_sold_out_tries_are_answered_in_the_process_asyncio(cluster):
    ports = _masters(cluster)

    async def main():
        client = redis.asyncio.RedisCluster(host="127.0.0.1", port=ports[0], protocol=PROTOCOL)
        sale = await seckill.asyncio.PartitionedSale.create(
            client, "cached-a", SaleSpec(stock=20, partitions=4), local_cache=True)
        assert sum([await sale.try_buy(f"b{n}") >= 0 for n in range(30)]) == 20
        before = _calls(ports, "seckill.try")
        for n in range(TRIES):
            assert await sale.try_buy(f"late{n}") == SOLD_OUT
        assert _calls(ports, "seckill.try") - before <= 4
        masters = {client.get_node_from_key(key).name for key in sale.keys}
        assert sale._sold_out.connections() == len(masters), "one tracking connection per master"
        # A unit back: the asyncio buyer through the cache gets it.
        buyer = next(b.user for b in await sale.buyers())
        await sale.cancel(buyer)
        deadline = time.monotonic() + 1
        while await sale.try_buy("back") == SOLD_OUT:
            assert time.monotonic() < deadline, "the returned unit was not sold within 1 s"
            await asyncio.sleep(0)
        assert (await sale.info()).sold == 20
        await client.aclose()

    asyncio.run(main())


def _come_back(kind: str, admin: redis.Redis, sale) -> None:
    if kind == "cancel":
        admin.execute_command("SECKILL.CANCEL", sale.key, "a")
    elif kind == "restock":
        admin.execute_command("SECKILL.RESTOCK", sale.key, 1)
    elif kind == "absorb":
        # Another partition lends this one a unit: LEND there, ABSORB here.
        donor = sale.key.replace("/0}", "/1}")
        admin.execute_command("SECKILL.LEND", donor, "t1", 1, "TO", sale.key)
        admin.execute_command("SECKILL.ABSORB", sale.key, "t1", 1, "FROM", donor)


@pytest.mark.parametrize("kind", ["cancel", "hold expiry", "restock", "absorb"])
def test_a_unit_that_comes_back_is_sold_through_the_cache(server, kind):
    client = redis.Redis(port=server, protocol=PROTOCOL)
    admin = redis.Redis(port=server)
    if kind == "absorb":
        # One partition of a two-partition sale, bought out while the other has a unit.
        PartitionedSale.create(client, "absorbing", SaleSpec(stock=2, partitions=2))
        sale = Sale(client, "{absorbing/0}", local_cache=True)
        assert sale.try_buy("a") == 0
    else:
        hold = SaleSpec(stock=1, partitions=1, hold_ms=300) if kind == "hold expiry" else None
        sale = Sale.create(client, "back", hold or SaleSpec(stock=1, partitions=1), local_cache=True)
        assert sale.try_buy("a") == 0
    assert sale.try_buy("b") == SOLD_OUT and sale.try_buy("b") == SOLD_OUT
    assert sale.stats.local_refusals == 1, "the second refusal was the cache's"
    changed = time.monotonic()
    if kind != "hold expiry":
        _come_back(kind, admin, sale)
        changed = time.monotonic()
    deadline = changed + (1.3 if kind == "hold expiry" else 1.0)
    while sale.try_buy("b") == SOLD_OUT:
        assert time.monotonic() < deadline, f"a unit back by {kind} was not sold within the deadline"
    lag_ms = (time.monotonic() - changed) * 1000
    print(f"{kind}: sold {lag_ms:.2f} ms after the change")
    assert sale.bought("b") == 1
    assert sale.stats.invalidations >= 1


def test_a_change_between_the_reads_cancels_the_mark(server):
    """The planted delay: while the cache reads a two-partition sale, after partition 0 was
    read and before partition 1 is, a unit comes back to partition 0. Its push arrives before
    the last read's answer, and the mark must not be set."""
    client = redis.Redis(port=server, protocol=PROTOCOL)
    admin = redis.Redis(port=server)
    sale = PartitionedSale.create(client, "planted", SaleSpec(stock=2, partitions=2), local_cache=True)
    first = _user_in(0, 2, "first")
    assert sale.try_buy(first) >= 0 and sale.try_buy(_user_in(1, 2, "second")) >= 0
    planted = []

    def before_read(key: str) -> None:
        if key == sale.keys[0]:
            planted.append(_calls([server], "seckill.info"))
        elif key == sale.keys[1] and len(planted) == 1:
            # Partition 0's read has run on the server: now the change.
            wait_until(lambda: _calls([server], "seckill.info") > planted[0], "partition 0's read")
            assert admin.execute_command("SECKILL.CANCEL", sale.keys[0], first) == 1
            planted.append("cancelled")

    sale._sold_out.before_read = before_read
    assert sale.try_buy("third") == SOLD_OUT
    assert planted[-1] == "cancelled"
    assert not sale._sold_out.refuses(sale._cache_id), "a mark made over a change"
    assert sale.try_buy(_user_in(0, 2, "fourth")) == 0, "the returned unit was refused"


@pytest.mark.parametrize("how", ["TYPE normal", "ID"])
def test_a_killed_tracking_connection_ends_its_marks(server, how):
    client = redis.Redis(port=server, protocol=PROTOCOL)
    admin = redis.Redis(port=server)
    sale = Sale.create(client, "killed", SaleSpec(stock=1, partitions=1), local_cache=True)
    assert sale.try_buy("a") == 0 and sale.try_buy("b") == SOLD_OUT
    assert sale._sold_out.refuses(sale._cache_id) and sale._sold_out.connections() == 1
    tracking = [c["id"] for c in admin.client_list() if "t" in c["flags"]]
    assert len(tracking) == 1, "one tracking connection"
    if how == "ID":
        admin.execute_command("CLIENT", "KILL", "ID", tracking[0])
    else:
        admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    killed = time.monotonic()
    wait_until(lambda: not sale._sold_out.refuses(sale._cache_id), "the marks to go", timeout=1.0)
    print(f"marks gone {(time.monotonic() - killed) * 1000:.2f} ms after the kill")
    before = _calls([server], "seckill.try")
    assert sale.try_buy("c") == SOLD_OUT
    assert _calls([server], "seckill.try") == before + 1, "the next try went to the server"
    # A new tracking connection reads the sale again and marks it.
    assert sale._sold_out.refuses(sale._cache_id) and sale._sold_out.connections() == 1
    assert sale.try_buy("d") == SOLD_OUT and _calls([server], "seckill.try") == before + 1


def _move_slot(client: redis.RedisCluster, key: str, ports) -> int:
    """Moves ``key``'s slot (and its keys) to another master, as a resharding does; its port."""
    slot = client.keyslot(key)
    source = client.get_node_from_key(key).port
    target = next(p for p in ports if p != source)
    src, dst = redis.Redis(port=source), redis.Redis(port=target)
    src_id, dst_id = (r.execute_command("CLUSTER", "MYID") for r in (src, dst))
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
    src.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)
    for port in ports:
        redis.Redis(port=port).execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    return target


def _sold_again_within_a_second(sale, admin_cluster, user: str, buyer: str) -> None:
    assert admin_cluster.execute_command("SECKILL.CANCEL", sale.keys[partition_of(user, 3)], user) == 1
    deadline = time.monotonic() + 1
    while (code := sale.try_buy(buyer)) == SOLD_OUT:
        assert time.monotonic() < deadline, "a unit back on the new owner was not sold within 1 s"
    assert code >= 0


def test_marks_are_dropped_for_a_moved_slot_and_a_failed_master(own_cluster):
    ports = [n.port for n in own_cluster if redis.Redis(port=n.port).info("replication")["role"] == "master"]
    client = redis.RedisCluster(host="127.0.0.1", port=ports[0], protocol=PROTOCOL)
    admin = redis.RedisCluster(host="127.0.0.1", port=ports[0])
    sale = PartitionedSale.create(client, "moving", SaleSpec(stock=3, partitions=3), local_cache=True,
                                  retry=RetryPolicy(deadline_s=30))
    buyers = [_user_in(i, 3, "m") for i in range(3)]
    assert all(sale.try_buy(u) >= 0 for u in buyers)
    assert sale.try_buy("x") == SOLD_OUT and sale._sold_out.refuses(sale._cache_id)

    # Resharding: the slot of partition 0 moves; MIGRATE deletes the key where it was.
    target = _move_slot(client, sale.keys[0], ports)
    wait_until(lambda: not sale._sold_out.refuses(sale._cache_id), "the mark to go", timeout=1.0)
    assert sale.try_buy("x") == SOLD_OUT and sale._sold_out.refuses(sale._cache_id), "marked again"
    assert client.get_node_from_key(sale.keys[0]).port == target
    admin.nodes_manager.initialize()
    _sold_again_within_a_second(sale, admin, buyers[0], "after-move")

    # A master SIGKILLed and its replica promoted: its tracking connection is lost.
    assert sale.try_buy("y") == SOLD_OUT and sale._sold_out.refuses(sale._cache_id)
    master, replica = master_and_replica(own_cluster, sale.keys[1])
    promote(own_cluster, replica, master)
    wait_until(lambda: not sale._sold_out.refuses(sale._cache_id), "the mark to go", timeout=1.0)
    assert sale.try_buy("y") == SOLD_OUT
    assert client.get_node_from_key(sale.keys[1]).port == replica.port
    admin.nodes_manager.initialize()
    _sold_again_within_a_second(sale, admin, buyers[1], "after-failover")
    info = sale.info()
    assert (info.sold, info.remaining) == (3, 0)


def test_many_threads_share_one_mark_and_one_connection(server):
    client = redis.Redis(port=server, protocol=PROTOCOL)
    sale = Sale.create(client, "shared", SaleSpec(stock=50, partitions=1), local_cache=True)
    told = []

    def buy(n: int) -> None:
        for k in range(200):
            told.append(sale.try_buy(f"t{n}-{k}"))

    threads = [threading.Thread(target=buy, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(code >= 0 for code in told) == 50 and sale.info().sold == 50
    assert sale._sold_out.connections() == 1
    sent = sale.stats.tries
    assert sent + sale.stats.local_refusals == 3_200
    print(f"16 threads, 3 200 tries: {sent} sent, median code {statistics.median(told)}")


@pytest.mark.parametrize("page", ["docs/clients.md", "clients/python/README.md"])
def test_the_sold_out_cache_example_runs(server, page):
    from conftest import REPO

    text = (REPO / page).read_text(encoding="utf-8")
    block = text.split("<!-- sold-out-cache-example -->\n```python\n", 1)[1].split("```", 1)[0]
    block = block.replace("redis.Redis()", f"redis.Redis(port={server}, protocol={PROTOCOL})")
    for _ in range(2):  # a block that runs once runs twice: replace=True resets the sale
        exec(compile(block, page, "exec"), {})

"""The Python client against a real local Redis Cluster with the module."""

import pathlib
import random
import threading
from collections import Counter

import pytest
import redis

import seckill
from seckill import OVER_LIMIT, SOLD_OUT, PartitionedSale, SaleSpec, partition_of

SHARED = pathlib.Path(__file__).resolve().parents[2]
HASH_TABLE = SHARED / "partition-hash.txt"


def test_every_number_is_the_shared_tables():
    rows = [line.split() for line in (SHARED / "protocol.txt").read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]
    ours = [(name, getattr(seckill.protocol, name)) for _, name, _ in rows]
    assert ours == [(name, int(value)) for _, name, value in rows]
    assert [name for _, name, _ in rows] == [
        "SOLD_OUT", "OVER_LIMIT", "NOT_STARTED", "ENDED", "DRAINED", "NOT_ADMITTED", "MAX_PARTITIONS",
        "MIN_MODULE_VERSION"]


def test_users_hash_to_the_same_partitions_as_the_rust_crate():
    rows = [line.split() for line in HASH_TABLE.read_text(encoding="utf-8").splitlines()
            if line and not line.startswith("#")]
    assert len(rows) >= 10
    for user, partitions, want in rows:
        assert partition_of(user, int(partitions)) == int(want), user
    assert partition_of(b"\xff\x00", 7) == partition_of(bytes([0xFF, 0]), 7)


def test_create_open_and_typed_errors(cluster):
    spec = SaleSpec(stock=100, partitions=8, limit=2)
    sale = PartitionedSale.create(cluster, "py:errors", spec)
    with pytest.raises(seckill.SaleExistsError):
        PartitionedSale.create(cluster, "py:errors", spec)
    opened = PartitionedSale.open(cluster, "py:errors")
    assert opened.spec == spec and opened.keys == sale.keys
    with pytest.raises(seckill.NoSaleError):
        PartitionedSale.open(cluster, "py:missing")
    with pytest.raises(seckill.InvalidArgumentError):
        PartitionedSale.create(cluster, "py:{bad}", spec)
    with pytest.raises(seckill.InvalidArgumentError, match="qty must be an integer between 1 and 2"):
        sale.try_buy("alice", 3)
    assert sale.try_buy("alice", 2) >= 0
    assert sale.try_buy("alice") == OVER_LIMIT
    assert sale.bought("alice") == 2
    info = sale.info()
    assert (info.stock, info.sold, info.buyers, info.remaining) == (100, 2, 1, 98)
    assert [p.partition for p in info.partitions] == list(range(8))
    assert all(p.partitions == 8 for p in info.partitions)
    # A creation that stopped half way is refused by open, and delete clears it.
    cluster.hset("py:half", "partitions", 4)
    with pytest.raises(seckill.BadManifestError):
        PartitionedSale.open(cluster, "py:half")
    PartitionedSale.delete(cluster, "py:half")
    PartitionedSale.create(cluster, "py:half", SaleSpec(stock=4, partitions=4))


def test_concurrent_skewed_demand_sells_out_exactly(cluster):
    stock, partitions, limit = 2_000, 8, 2
    sale = PartitionedSale.create(cluster, "py:skew", SaleSpec(stock=stock, partitions=partitions, limit=limit))
    users, hot, cold = [], 0, 0
    wanted = 3 * stock // limit
    n = 0
    while len(users) < wanted:
        user = f"user:{n:010}"
        n += 1
        if partition_of(user, partitions) < 2 and hot < wanted * 7 // 10:
            users.append(user)
            hot += 1
        elif partition_of(user, partitions) >= 2 and cold < wanted - wanted * 7 // 10:
            users.append(user)
            cold += 1
    attempts = [u for u in users for _ in range(limit + 1)]
    # Hot and cold buyers mixed all along (a fixed order): the hot partitions run dry while
    # the others still have stock, so they must borrow.
    random.Random(7).shuffle(attempts)
    outcomes = Counter()
    lock = threading.Lock()

    def buyer(chunk):
        mine = Counter()
        for user in chunk:
            code = sale.try_buy(user)
            mine["bought" if code >= 0 else code] += 1
        with lock:
            outcomes.update(mine)

    threads = [threading.Thread(target=buyer, args=(attempts[i::40],)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    info = sale.info()
    assert info.balanced(), info
    assert (info.sold, info.remaining, info.in_flight, info.pending_out) == (stock, 0, 0, 0)
    assert outcomes["bought"] == stock
    assert outcomes["bought"] + outcomes[SOLD_OUT] + outcomes[OVER_LIMIT] == len(attempts)
    owners = Counter()
    for b in sale.buyers():
        assert b.partition == partition_of(b.user, partitions)
        owners[b.user] += b.qty
    assert sum(owners.values()) == stock and max(owners.values()) <= limit
    assert sale.stats.transfers > 0


def test_recover_finishes_a_transfer_whose_mover_died(cluster):
    sale = PartitionedSale.create(cluster, "py:recover", SaleSpec(stock=80, partitions=4))
    lent = cluster.execute_command("SECKILL.LEND", sale.keys[1], "dead-mover", 10, "TO", sale.keys[2])
    assert lent == 10
    before = sale.info()
    assert (before.in_flight, before.pending_out, before.remaining) == (10, 10, 70)
    assert sale.recover() == 1
    after = sale.info()
    assert (after.in_flight, after.pending_out, after.remaining) == (0, 0, 80)
    assert after.balanced()
    assert sale.recover() == 0


def test_holds_confirm_cancel_and_one_consumer_group_over_the_streams(cluster):
    spec = SaleSpec(stock=8, partitions=4, limit=2, hold_ms=60_000, events=True, events_maxlen=1000)
    sale = PartitionedSale.create(cluster, "py:orders", spec)
    sale.create_group("shipping")
    sale.create_group("shipping")  # idempotent
    for user in ("alice", "bob", "carol"):
        assert sale.try_buy(user) >= 0
    assert sale.info().held == 3
    assert sale.confirm("alice") is True
    assert sale.confirm("alice") is False
    assert sale.cancel("bob") == 1
    events = sale.read_group("shipping", "worker-1")
    kinds = Counter((e.get("event"), e.get("user")) for e in events)
    assert kinds == Counter({("purchase", "alice"): 1, ("purchase", "bob"): 1, ("purchase", "carol"): 1,
                             ("confirm", "alice"): 1, ("cancel", "bob"): 1})
    assert {e.partition for e in events} == {partition_of(u, 4) for u in ("alice", "bob", "carol")}
    assert all(sale.ack("shipping", e) for e in events)
    assert sale.read_group("shipping", "worker-1") == []
    sale.restock(4)
    info = sale.info()
    assert (info.stock, info.restocked, info.held, info.sold) == (8, 4, 1, 1)
    assert info.balanced()


def test_a_sold_out_sale_refuses_in_one_round_trip(cluster):
    sale = PartitionedSale.create(cluster, "py:soldout", SaleSpec(stock=4, partitions=4))
    bought = sum(1 for n in range(40) if sale.try_buy(f"u{n}") >= 0)
    assert bought == 4
    late = PartitionedSale.open(cluster, "py:soldout", seal_ms=600_000)
    assert all(late.try_buy(f"late{n}") == SOLD_OUT for n in range(100))
    assert late.stats.tries == 100
    assert late.stats.borrowing_tries <= 4, late.stats



def test_the_readme_cluster_tour_runs(cluster, capsys):
    import importlib.util

    path = pathlib.Path(__file__).resolve().parents[1] / "examples/cluster_tour.py"
    spec = importlib.util.spec_from_file_location("cluster_tour", path)
    tour = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tour)
    assert tour.main(cluster) == {"sold": 1000, "stock": 1000, "balanced": True}
    assert "a late buyer gets -1" in capsys.readouterr().out


def test_an_acknowledged_purchase_reports_its_replicas(cluster):
    sale = PartitionedSale.create(cluster, "py:acked", SaleSpec(stock=2, partitions=2))
    code, acked = sale.try_buy_acked("alice", replicas=1, timeout_ms=10_000)
    assert code >= 0 and acked == 1, "each master has one replica"
    # Two replicas are asked for, one exists: WAIT times out and says 1.
    code, acked = sale.try_buy_acked("bob", replicas=2, timeout_ms=50)
    assert code >= 0 and acked == 1
    assert sale.try_buy_acked("carol")[0] == SOLD_OUT
    assert sale.info().sold == 2


@pytest.mark.parametrize("kind", ["one-key", "partitioned"])
def test_create_with_replace_resets_a_sale_sync_and_async(server, kind):
    """``create(..., replace=True)``: a sale of that name (buyers, events, partitions) is reset
    to the new spec; without it SaleExistsError; a bad ``replace`` writes nothing."""
    import asyncio

    import redis.asyncio

    import seckill.asyncio
    from conftest import PROTOCOL

    client = redis.Redis(port=server, protocol=PROTOCOL)
    if kind == "one-key":
        make, name = seckill.Sale.create, "sale:replaced"
        spec, other = SaleSpec(stock=3, partitions=1, events=True), SaleSpec(stock=5, partitions=1)
    else:
        make, name = PartitionedSale.create, "sale:replaced-p"
        spec, other = SaleSpec(stock=8, partitions=4, events=True), SaleSpec(stock=5, partitions=2)
    sale = make(client, name, spec)
    assert sale.try_buy("alice") >= 0
    with pytest.raises(seckill.SaleExistsError):
        make(client, name, spec)
    keys = sorted(client.keys("*"))
    with pytest.raises(TypeError):
        make(client, name, other, replace="yes")
    assert sorted(client.keys("*")) == keys, "nothing written"
    fresh = make(client, name, other, replace=True)
    info = fresh.info()
    assert (info.stock, info.sold, info.remaining) == (5, 0, 5)
    assert fresh.bought("alice") == 0 and list(fresh.buyers()) == []
    assert not [k for k in client.keys("*") if b"events" in k], "the old events went with it"

    async def again() -> int:
        aclient = redis.asyncio.Redis(port=server, protocol=PROTOCOL)
        amake = seckill.asyncio.Sale.create if kind == "one-key" else seckill.asyncio.PartitionedSale.create
        replaced = await amake(aclient, name, spec, replace=True)
        remaining = (await replaced.info()).remaining
        await aclient.aclose()
        return remaining

    assert asyncio.run(again()) == spec.stock


def test_a_spec_without_partitions_fits_either_kind(server):
    """``SaleSpec(stock=...)`` makes a one-key sale (it raised "a one-key sale has
    partitions=1" when the default was 16) and a partitioned one of 16 partitions."""
    client = redis.Redis(port=server)
    one = seckill.Sale.create(client, "spec:one", SaleSpec(stock=3))
    assert one.info().stock == 3
    many = PartitionedSale.create(client, "spec:many", SaleSpec(stock=32))
    assert many.spec.partitions == 16 and len(many.keys) == 16
    assert PartitionedSale.open(client, "spec:many").spec == many.spec
    with pytest.raises(seckill.InvalidArgumentError):
        seckill.Sale.create(client, "spec:four", SaleSpec(stock=3, partitions=4))

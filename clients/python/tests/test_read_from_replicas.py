"""``read_from_replicas=True`` on a sale handle: ``position`` and ``place`` are answered by a
replica of the key's master (INFO commandstats on each server says which), on one server with
a replica and on a cluster, sync and asyncio each; the answers equal the master's; a frozen replica
costs one bounded wait, then the master answers; without the setting the replica sees
nothing."""

import asyncio
import os
import signal
import time

import pytest
import redis
import redis.asyncio

import seckill.asyncio
from seckill import PartitionedSale, Sale, SaleSpec

from conftest import PROTOCOL, command_calls, one_master_and_replica, wait_until

USERS = [f"u{n}" for n in range(20)]
SPEC = SaleSpec(stock=5, queue=True)


def positions(port: int) -> int:
    """SECKILL.POSITION calls the server at ``port`` ran."""
    return command_calls(port, "seckill.position")


def synced(master: int, replica: int) -> bool:
    offset = redis.Redis(port=master).info("replication")["master_repl_offset"]
    return int(redis.Redis(port=replica).info("replication").get("slave_repl_offset", -1)) >= offset


def test_positions_and_places_come_from_the_replica_of_one_server():
    with one_master_and_replica() as (master, replica):
        client = redis.Redis(port=master.port, protocol=PROTOCOL)
        sale = Sale.create(client, "room", SPEC, read_from_replicas=True)
        for user in USERS:
            sale.join(user)
        wait_until(lambda: synced(master.port, replica.port), "the replica in sync")
        plain = Sale(client, "room")
        expected = [plain.position(user) for user in USERS]
        before = positions(master.port), positions(replica.port)
        assert [sale.position(user) for user in USERS] == expected
        assert [int(place) for place in map(sale.place, USERS)] == expected  # type: ignore[arg-type]
        assert positions(master.port) == before[0]
        assert positions(replica.port) == before[1] + 2 * len(USERS)
        assert sale.position("stranger") is None

        # Frozen: one read waits out the replica's timeout, then the master answers them all.
        os.kill(replica.process.pid, signal.SIGSTOP)
        began = time.monotonic()
        assert [sale.position(user) for user in USERS] == expected
        took = time.monotonic() - began
        os.kill(replica.process.pid, signal.SIGCONT)
        assert positions(master.port) == before[0] + len(USERS)
        print(f"{len(USERS)} positions with the replica frozen: {took:.2f} s")


def test_positions_and_places_come_from_the_replica_of_one_server_asyncio():
    async def main(master: int, replica: int) -> None:
        client = redis.asyncio.Redis(port=master, protocol=PROTOCOL)
        sale = await seckill.asyncio.Sale.create(client, "room", SPEC, read_from_replicas=True)
        for user in USERS:
            await sale.join(user)
        wait_until(lambda: synced(master, replica), "the replica in sync")
        plain = seckill.asyncio.Sale(client, "room")
        expected = [await plain.position(user) for user in USERS]
        before = positions(master), positions(replica)
        assert [await sale.position(user) for user in USERS] == expected
        assert [int(p) for p in [await sale.place(user) for user in USERS]] == expected  # type: ignore[arg-type]
        assert positions(master) == before[0]
        assert positions(replica) == before[1] + 2 * len(USERS)
        await client.aclose()

    with one_master_and_replica() as (master, replica):
        asyncio.run(main(master.port, replica.port))


def test_without_the_setting_the_replica_answers_nothing():
    with one_master_and_replica() as (master, replica):
        client = redis.Redis(port=master.port, protocol=PROTOCOL)
        sale = Sale.create(client, "room", SPEC)
        sale.join("a")
        sale.position("a")
        sale.place("a")
        assert positions(replica.port) == 0
        with pytest.raises(TypeError):
            Sale(client, "room", read_from_replicas="yes")  # type: ignore[arg-type]


def test_a_cluster_replica_answers_the_asyncio_reads(cluster):
    async def main() -> None:
        client = redis.asyncio.RedisCluster(host="127.0.0.1", port=cluster.get_primaries()[0].port,
                                            protocol=PROTOCOL)
        sale = await seckill.asyncio.PartitionedSale.create(
            client, "replica-reads", SaleSpec(stock=5, partitions=3, queue=True), replace=True,
            read_from_replicas=True)
        for user in USERS:
            await sale.join(user)
        plain = await seckill.asyncio.PartitionedSale.open(client, "replica-reads")
        expected = [await plain.position(user) for user in USERS]
        master_ports = [node.port for node in cluster.get_primaries()]
        replica_ports = [node.port for node in cluster.get_replicas()]
        for master_port in master_ports:
            replica_port = next(p for p in replica_ports
                                if redis.Redis(port=p).info("replication")["master_port"] == master_port)
            wait_until(lambda: synced(master_port, replica_port), "the replicas in sync")
        before = sum(map(positions, master_ports)), sum(map(positions, replica_ports))
        assert [await sale.position(user) for user in USERS] == expected
        assert [int(p) for p in [await sale.place(user) for user in USERS]] == expected  # type: ignore[arg-type]
        assert sum(map(positions, master_ports)) == before[0]
        assert sum(map(positions, replica_ports)) == before[1] + 2 * len(USERS)
        await client.aclose()

    asyncio.run(main())


def test_a_cluster_replica_answers_the_sync_reads(cluster):
    sale = PartitionedSale.create(cluster, "replica-reads-sync", SaleSpec(stock=5, partitions=3, queue=True),
                                  replace=True, read_from_replicas=True)
    for user in USERS:
        sale.join(user)
    key = sale.keys[0]
    master, replica = master_and_replica_ports(cluster, key)
    wait_until(lambda: synced(master, replica), "the replica in sync")
    user = next(u for u in USERS if sale._key_of(u) == key)
    before = positions(master), positions(replica)
    assert sale.position(user) == PartitionedSale.open(cluster, "replica-reads-sync").position(user)
    assert positions(replica) == before[1] + 1
    assert positions(master) == before[0] + 1  # the second read, by the plain handle


def master_and_replica_ports(cluster: redis.RedisCluster, key: str):
    master = cluster.get_node_from_key(key).port
    replica = cluster.get_node_from_key(key, replica=True).port
    return master, replica

"""Durability: "bought" means kept by a failover, by default. A handle's ``durability``
("replica" unless set) answers a purchase once a replica acknowledged it, raises
``NotReplicatedError`` when none did in time, sends no WAIT to a master with no replica, and
shares one WAIT between the concurrent purchases of an asyncio process."""

import asyncio
import contextlib
import os
import signal
import tempfile
import threading
import time

import pytest
import redis
import redis.asyncio

import seckill
import seckill.asyncio
from conftest import (PROTOCOL, Node, _answers, _require_module_built, command_calls, link_up, one_master_and_replica,
                      wait_until)
from seckill import (ArgumentTypeError, InvalidArgumentError, NotReplicatedError, OutcomeUnknownError, RetryPolicy,
                     Sale, SaleSpec)


def waits(port: int) -> int:
    """WAITs the server at ``port`` ran (INFO commandstats)."""
    return command_calls(port, "wait")


def client(port: int) -> redis.Redis:
    return redis.Redis(port=port, protocol=PROTOCOL)


def test_the_settings_are_checked_before_anything_is_sent(server):
    with pytest.raises(InvalidArgumentError, match="durability must be one of"):
        Sale(client(server), "s", durability="disk")
    with pytest.raises(ArgumentTypeError):
        Sale(client(server), "s", durability=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="ack_timeout_ms"):
        Sale(client(server), "s", ack_timeout_ms=0)
    with pytest.raises(ArgumentTypeError):
        Sale(client(server), "s").try_buy("u", attempt_id=7)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="attempt id"):
        Sale(client(server), "s").try_buy("u", attempt_id="x" * 65)
    # The acknowledgement timeout: a tenth of the retry deadline, within 100 ms .. 1 s.
    assert Sale(client(server), "s").ack_timeout_ms == 1_000
    assert Sale(client(server), "s", retry=RetryPolicy(deadline_s=2.0)).ack_timeout_ms == 200
    assert Sale(client(server), "s", retry=RetryPolicy.none()).ack_timeout_ms == 100
    assert Sale(client(server), "s", durability="aof").ack_timeout_ms == 2_000, "one fsync period more"
    assert Sale(client(server), "s").durability == "replica"
    assert redis.Redis(port=server).exists("s") == 0


def test_a_master_that_never_had_a_replica_is_answered_without_a_wait(server):
    sale = Sale.create(client(server), "s", SaleSpec(stock=10, partitions=1, hold_ms=60_000))
    assert [sale.try_buy(f"u{i}") for i in range(5)] == [9, 8, 7, 6, 5]
    assert sale.confirm("u0") and sale.cancel("u1") == 1
    sale.restock(2)
    assert waits(server) == 0


def test_an_asyncio_handle_on_a_lone_master_sends_no_wait(server):
    async def main() -> None:
        sale = await seckill.asyncio.Sale.create(redis.asyncio.Redis(port=server, protocol=PROTOCOL), "s",
                                                 SaleSpec(stock=300, partitions=1))
        codes = await asyncio.gather(*(sale.try_buy(f"u{i}") for i in range(256)))
        assert sorted(codes) == list(range(44, 300))

    asyncio.run(main())
    assert waits(server) == 0


def test_a_purchase_is_answered_once_a_replica_has_it_and_a_cut_replica_makes_it_not_replicated():
    with one_master_and_replica() as (master, replica):
        # The default acknowledgement timeout where the replica is up: a loaded machine's replica
        # took more than 300 ms to acknowledge the INIT once (a clean-clone run).
        application = client(master.port)
        sale = Sale.create(application, "s", SaleSpec(stock=10, partitions=1))
        assert sale.try_buy("alice") == 9
        assert waits(master.port) >= 1, "the sale's INIT and the purchase waited for the replica"
        assert redis.Redis(port=replica.port).execute_command("SECKILL.BOUGHT", "s", "alice") == 1
        # The replica frozen and its link cut: the master alone has what it is sent now.
        os.kill(replica.process.pid, signal.SIGSTOP)
        redis.Redis(port=master.port).execute_command("CLIENT", "KILL", "TYPE", "replica")
        cut = Sale(application, "s", ack_timeout_ms=300)  # the same client: it saw the replica
        started = time.monotonic()
        with pytest.raises(NotReplicatedError) as raised:
            cut.try_buy("bob")
        waited = time.monotonic() - started
        assert isinstance(raised.value, OutcomeUnknownError)
        assert raised.value.reply == 8 and raised.value.attempt_id
        assert waited >= 0.3, "it waited for the replica"
        # A handle that asks for the master's answer only gets it without waiting.
        before = waits(master.port)
        assert Sale(client(master.port), "s", durability="master").try_buy("carol") == 7
        assert waits(master.port) == before
        # Back: the same attempt id answers the purchase again (not a second one), and waits.
        os.kill(replica.process.pid, signal.SIGCONT)
        wait_until(lambda: link_up(replica), "the replica's link")
        assert sale.try_buy("bob", attempt_id=raised.value.attempt_id) == 7
        assert redis.Redis(port=replica.port).execute_command("SECKILL.BOUGHT", "s", "bob") == 1
        assert sale.info().sold == 3


def test_a_purchase_answered_by_a_master_turned_replica_is_never_told_bought():
    """Handles still pointed at a master that turned replica (the old master back as a replica
    of the promoted one) whose replicas take writes (``replica-read-only no``): a purchase runs
    there, and the WAIT after it is refused ("WAIT cannot be used with replica instances"). It
    is sent again under its attempt id (the write ran: the outcome is unknown), never told
    "bought" for a unit the new master never had: sync and asyncio. (A failover between a
    write and its WAIT meets the same refusal: test_async's cluster failover met it.)"""
    with one_master_and_replica() as (old, new):
        retry = RetryPolicy(deadline_s=1.0)
        sale = Sale.create(client(old.port), "s", SaleSpec(stock=10, partitions=1), retry=retry)
        assert sale.try_buy("alice") == 9

        async def main() -> None:
            asale = await seckill.asyncio.Sale.open(redis.asyncio.Redis(port=old.port, protocol=PROTOCOL), "s",
                                                    retry=retry)
            assert await asale.try_buy("carol") == 8
            # The failover: the replica promoted, the old master following it, taking writes.
            redis.Redis(port=new.port).execute_command("REPLICAOF", "NO", "ONE")
            redis.Redis(port=old.port).config_set("replica-read-only", "no")
            redis.Redis(port=old.port).execute_command("REPLICAOF", "127.0.0.1", new.port)
            wait_until(lambda: link_up(old), "the old master following the new one")
            with pytest.raises(OutcomeUnknownError) as raised:
                sale.try_buy("bob")
            assert not isinstance(raised.value, NotReplicatedError)
            with pytest.raises(OutcomeUnknownError):
                await asale.try_buy("dave")

        asyncio.run(main())
        bought = redis.Redis(port=new.port)
        assert [bought.execute_command("SECKILL.BOUGHT", "s", user) for user in ("alice", "carol", "bob", "dave")] \
            == [1, 1, 0, 0]


def test_whoever_was_told_bought_owns_the_unit_after_the_failover():
    """The incident in small: buyers on a master whose replica is frozen and cut off for 0.4 s,
    then the master dies and the replica is promoted. A "master" handle's buyers are
    told "bought" for units the promoted replica never had (the failure this guards against);
    the default handle's buyers are told "bought" only for units it has."""
    with one_master_and_replica() as (master, replica):
        client(master.port).execute_command("SECKILL.INIT", "s", 100_000)
        redis.Redis(port=master.port).execute_command("WAIT", 1, 5_000)
        told = {"replica": [], "master": []}
        stop = threading.Event()

        def buyer(durability: str, name: str) -> None:
            sale = Sale(client(master.port), "s", durability=durability, ack_timeout_ms=100,
                        retry=RetryPolicy(deadline_s=0.5))
            n = 0
            while not stop.is_set():
                user = f"{name}-{n}"
                n += 1
                try:
                    if sale.try_buy(user) >= 0:
                        told[durability].append(user)
                except (OutcomeUnknownError, redis.exceptions.RedisError, seckill.UnavailableError):
                    pass  # not told "bought"

        threads = [threading.Thread(target=buyer, args=(d, f"{d}{i}")) for d in told for i in range(2)]
        for thread in threads:
            thread.start()
        wait_until(lambda: all(len(users) >= 20 for users in told.values()), "purchases on both handles")
        # Frozen and cut: what the master writes from now on never reaches it (bytes already in
        # its socket would, on SIGCONT).
        os.kill(replica.process.pid, signal.SIGSTOP)
        redis.Redis(port=master.port).execute_command("CLIENT", "KILL", "TYPE", "replica")
        time.sleep(0.4)  # the fault's length: the replica takes nothing for this long
        master.kill()
        stop.set()
        for thread in threads:
            thread.join()
        os.kill(replica.process.pid, signal.SIGCONT)
        promoted = redis.Redis(port=replica.port)
        promoted.execute_command("REPLICAOF", "NO", "ONE")
        owns = lambda user: promoted.execute_command("SECKILL.BOUGHT", "s", user) == 1  # noqa: E731
        lost_kept = [user for user in told["replica"] if not owns(user)]
        lost_master = [user for user in told["master"] if not owns(user)]
        assert lost_kept == [], f"{len(lost_kept)} buyers told bought own nothing"
        assert lost_master, "the master-only answers were lost in this failover (the test's premise)"


def test_concurrent_asyncio_purchases_share_their_waits():
    with one_master_and_replica() as (master, replica):
        async def main() -> None:
            con = redis.asyncio.Redis(port=master.port, protocol=PROTOCOL)
            sale = await seckill.asyncio.Sale.create(con, "s", SaleSpec(stock=300, partitions=1))
            before = waits(master.port)
            codes = await asyncio.gather(*(sale.try_buy(f"u{i}") for i in range(256)))
            assert sorted(codes) == list(range(44, 300))
            sent = waits(master.port) - before
            assert 1 <= sent <= 32, f"{sent} WAITs for 256 purchases"
            await (con.aclose() if hasattr(con, "aclose") else con.close())

        asyncio.run(main())
        assert Sale(client(replica.port), "s").info().sold == 256


def has_waitaof(port: int) -> bool:
    try:
        redis.Redis(port=port).execute_command("WAITAOF", 0, 0, 1)
    except redis.exceptions.ResponseError as error:
        return "unknown command" not in str(error).lower()
    return True


def test_aof_durability_needs_waitaof_and_an_aof_and_waits_for_the_disk(server):
    con = client(server)
    if not has_waitaof(server):
        # Redis 7.0: refused at open and at create, nothing written.
        with pytest.raises(InvalidArgumentError, match="WAITAOF"):
            Sale.create(con, "s", SaleSpec(stock=10, partitions=1), durability="aof")
        assert redis.Redis(port=server).exists("s") == 0
        return
    with pytest.raises(InvalidArgumentError, match="appendonly"):
        Sale.create(con, "s", SaleSpec(stock=10, partitions=1), durability="aof")
    assert redis.Redis(port=server).exists("s") == 0
    redis.Redis(port=server).config_set("appendonly", "yes")
    wait_until(lambda: redis.Redis(port=server).info("persistence")["aof_rewrite_in_progress"] == 0, "the AOF")
    sale = Sale.create(con, "s", SaleSpec(stock=10, partitions=1), durability="aof")
    assert sale.try_buy("alice") == 9
    assert command_calls(server, "waitaof") >= 2, "the INIT and the purchase waited for the disk"


def test_recover_absorbs_a_crashed_movers_transfer_only_once_a_replica_has_its_lend():
    # A mover LENT units out of one partition and died before ABSORB. Absorbed at once by
    # recover while no replica has that LEND, a failover of the source would give the units
    # back while the target sells them too: an oversell. Recover first sends the LEND again
    # as a kept write (it moves nothing and propagates a marker a WAIT counts).
    with one_master_and_replica() as (master, replica):
        # The default acknowledgement timeout while the replica is up (see above); 300 ms for
        # the recover that must not finish.
        application = client(master.port)
        sale = seckill.PartitionedSale.create(application, "drop", SaleSpec(stock=10, partitions=2))
        quick = seckill.PartitionedSale.open(application, "drop", ack_timeout_ms=300)
        source, target = sale.keys
        # A purchase the replica acknowledged: the package's connection to the master has a
        # write of its own, so a WAIT on it that covers no later write is satisfied at once.
        sale.try_buy("alice")
        # Frozen with its link up: the master counts it, and it acknowledged everything before
        # the LEND.
        os.kill(replica.process.pid, signal.SIGSTOP)
        assert redis.Redis(port=master.port).execute_command("SECKILL.LEND", source, "crashed-1", 4, "TO", target) == 4
        assert quick.recover() == 0, "not finished while no replica has the LEND"
        infos = sale.partition_infos()
        assert (infos[0].pending_out, infos[1].absorbed) == (4, 0)
        os.kill(replica.process.pid, signal.SIGCONT)
        wait_until(lambda: link_up(replica), "the replica's link")
        assert sale.recover() == 1
        infos = sale.partition_infos()
        assert (infos[0].pending_out, infos[1].absorbed) == (0, 4)
        assert sum(i.remaining for i in infos) == 9, "every unit once: 10, one sold"
        assert redis.Redis(port=replica.port).execute_command("SECKILL.TRANSFERS", source) == []

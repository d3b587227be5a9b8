"""seckill.asyncio on redis.asyncio, and the one-key Sale (sync and async): a thousand tasks sell
a one-key sale exactly while a ticker proves the loop never blocks (not even through a busy
server's timeouts and the retries' backoff); a stopped server fails calls within the retry
deadline with a typed, retryable error and serves them again once back, nothing bought twice;
holds, events and partitioned sales on one server and on a real cluster."""

import asyncio
import os
import pathlib
import random
import signal
import threading
import time
from collections import Counter

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

import seckill
import seckill.asyncio
from conftest import PROTOCOL, buy_until_kept, wait_until
from seckill import OVER_LIMIT, SOLD_OUT, RetryPolicy, SaleSpec, partition_of


async def _ticker(stop: asyncio.Event):
    """Ticks every 10 ms until ``stop``: the longest gap between two ticks. Any blocking call
    on the loop (a time.sleep, a sync socket read, a threading lock) stretches it."""
    ticks, worst, last = 0, 0.0, time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(0.01)
        now = time.monotonic()
        worst, last, ticks = max(worst, now - last), now, ticks + 1
    return ticks, worst


def test_a_thousand_tasks_sell_a_one_key_sale_exactly_and_never_block_the_loop(server):
    tasks, users, stock, limit = 1_000, 400, 500, 2
    answered = [0]

    def busy_spell():
        direct = redis.Redis(port=server)
        wait_until(lambda: answered[0] >= 100, "first purchases")
        direct.execute_command("DEBUG", "SLEEP", "0.4")

    async def main():
        # A 100 ms reply timeout, so the busy spell times calls out and they are retried.
        client = redis.asyncio.Redis(port=server, protocol=PROTOCOL, socket_timeout=0.1)
        sale = await seckill.asyncio.Sale.create(client, "py:async", SaleSpec(stock=stock, partitions=1, limit=limit))
        stop = asyncio.Event()
        ticker = asyncio.create_task(_ticker(stop))

        async def buyer(n: int):
            # Spread over 200 ms, so that the spell falls inside the run.
            await asyncio.sleep((n % 200) / 1000)
            user = f"user:{n % users}"
            started = time.monotonic()
            code = await sale.try_buy(user)
            answered[0] += 1
            return user, code, time.monotonic() - started

        spell = threading.Thread(target=busy_spell)
        spell.start()
        results = await asyncio.gather(*(buyer(n) for n in range(tasks)))
        stop.set()
        ticks, worst = await ticker
        spell.join()
        bought = Counter(user for user, code, _ in results if code >= 0)
        assert all(code in (SOLD_OUT, OVER_LIMIT) for _, code, _ in results if code < 0)
        slow = sum(1 for _, _, took in results if took >= 0.3)
        info = await sale.info()
        print(f"{tasks} tasks: {sum(bought.values())} bought, {slow} waited out the busy spell; "
              f"ticker: {ticks} ticks, longest gap {worst * 1000:.1f} ms")
        assert (sum(bought.values()), info.sold, info.remaining) == (stock, stock, 0)
        for user, count in bought.items():
            assert count <= limit
            assert await sale.bought(user) == count, user
        assert sum(b.qty for b in await sale.buyers()) == stock
        assert slow > 0, "no call met the busy spell: the test proves nothing"
        assert worst < 0.1, f"the loop was blocked for {worst * 1000:.0f} ms"
        await client.aclose()

    asyncio.run(main())


def test_a_stopped_server_fails_calls_in_time_and_serves_them_again_once_back(server):
    buyers, deadline = 10, 0.8
    pid = int(redis.Redis(port=server).info("server")["process_id"])

    async def main():
        # Each call waits 200 ms for its reply, and redis-py's own blind retries (up to 3, with
        # backoffs of seconds in redis-py 8) are off: the sale's RetryPolicy retries, by id.
        client = redis.asyncio.Redis(port=server, protocol=PROTOCOL, socket_timeout=0.2,
                                     retry=Retry(NoBackoff(), 0))
        sale = await seckill.asyncio.Sale.create(
            client, "py:stopped", SaleSpec(stock=1_000_000, partitions=1, limit=1_000_000),
            retry=RetryPolicy(deadline_s=deadline))
        resumed = asyncio.Event()

        async def buyer(n: int):
            user, bought, unknown, after, unavailable = f"user:{n}", 0, 0, 0, 0
            # One unit at a time until the server was stopped, resumed, and served this buyer
            # twice since. (A call that was in flight across the whole stop may be answered
            # after it: not every buyer sees an unknown outcome.)
            give_up = time.monotonic() + 30
            while after < 2 and time.monotonic() < give_up:
                started = time.monotonic()
                try:
                    assert await sale.try_buy(user) >= 0
                    bought += 1
                    after += 1 if resumed.is_set() else 0
                except seckill.OutcomeUnknownError as error:
                    assert seckill.is_retryable(error.last_error), error
                    took = time.monotonic() - started
                    # The deadline, plus the reply it was waiting for and a new connection's
                    # handshake (HELLO and two CLIENT SETINFO, each bounded by the 200 ms timeout).
                    assert took < deadline + 1.5, took
                    unknown += 1
                except seckill.UnavailableError as error:
                    # Every send met the server known down: not bought (checked below).
                    assert isinstance(error.last_error, seckill.NotSentError), error
                    unavailable += 1
            return user, bought, unknown, unavailable

        running = asyncio.gather(*(buyer(n) for n in range(buyers)))
        await asyncio.sleep(0.2)
        os.kill(pid, signal.SIGSTOP)
        await asyncio.sleep(2.0)
        os.kill(pid, signal.SIGCONT)
        resumed.set()
        unknowns = 0
        for user, bought, unknown, _ in await running:
            owned = await sale.bought(user)
            # Every purchase answered is owned; each one without an answer is owned once at
            # most, however many times it was sent.
            assert bought <= owned <= bought + unknown, (user, bought, unknown, owned)
            unknowns += unknown
        info = await sale.info()
        print(f"{buyers} buyers through a 2 s stop: {unknowns} OutcomeUnknownError within the deadline; "
              f"{info.sold} sold")
        assert unknowns >= 1, "no call met the stop: the test proves nothing"
        assert sum(b.qty for b in await sale.buyers()) == info.sold
        await client.aclose()

    asyncio.run(main())


def test_one_key_sales_sync_and_async_with_holds_events_and_typed_errors(server):
    client = redis.Redis(port=server, protocol=PROTOCOL)
    spec = SaleSpec(stock=3, partitions=1, hold_ms=60_000, events=True)
    sale = seckill.Sale.create(client, "py:one", spec)
    with pytest.raises(seckill.SaleExistsError):
        seckill.Sale.create(client, "py:one", spec)
    with pytest.raises(seckill.NoSaleError):
        seckill.Sale.open(client, "py:none")
    with pytest.raises(seckill.InvalidArgumentError):
        seckill.Sale.create(client, "py:two", SaleSpec(stock=3, partitions=2))
    with pytest.raises(seckill.InvalidArgumentError):
        seckill.Sale.create(client, "a{}b", SaleSpec(stock=3, partitions=1, events=True))
    with pytest.raises(TypeError):
        seckill.Sale(client, 7)  # type: ignore[arg-type]
    sale.create_group("shipping")
    assert sale.try_buy("alice") == 2 and sale.try_buy("bob") == 1
    assert sale.try_buy("alice") == OVER_LIMIT
    assert sale.confirm("alice") and not sale.confirm("alice")
    assert sale.cancel("bob") == 1
    sale.restock(2)
    assert sale.try_buy_acked("carol", 1, replicas=0, timeout_ms=100) == (3, 0)
    info = sale.info()
    assert (info.stock, info.restocked, info.sold, info.held) == (3, 2, 1, 1) and info.balanced()
    events = [(e.get("event"), e.get("user")) for e in sale.read_group("shipping", "w1")]
    assert events[:2] == [("purchase", "alice"), ("purchase", "bob")] and len(events) == 6, events
    assert all(sale.ack("shipping", e) for e in sale.read_group("shipping", "w1")) is True
    assert {b.user for b in sale.buyers()} == {b"alice", b"carol"}
    with pytest.raises(seckill.InvalidArgumentError):
        sale.restock(0)
    no_holds = seckill.Sale.create(client, "py:plain", SaleSpec(stock=1, partitions=1))
    with pytest.raises(seckill.NoHoldsError):
        no_holds.confirm("alice")

    async def the_same_through_asyncio():
        aclient = redis.asyncio.Redis(port=server, protocol=PROTOCOL)
        same = await seckill.asyncio.Sale.open(aclient, "py:one")
        assert await same.bought("alice") == 1
        assert await same.try_buy("dave") == 2
        assert await same.try_buy("dave") == OVER_LIMIT
        assert await same.cancel("carol") == 1
        assert (await same.info()).remaining == 3
        with pytest.raises(seckill.SaleExistsError):
            await seckill.asyncio.Sale.create(aclient, "py:one", spec)
        await same.delete()
        await aclient.aclose()

    asyncio.run(the_same_through_asyncio())
    assert client.keys("*") == [b"py:plain"]


def test_a_one_key_sale_names_a_missing_module(bare_server):
    client = redis.Redis(port=bare_server, protocol=PROTOCOL)
    with pytest.raises(seckill.ModuleMissingError):
        seckill.Sale.create(client, "py:one", SaleSpec(stock=3, partitions=1))

    async def main():
        aclient = redis.asyncio.Redis(port=bare_server, protocol=PROTOCOL)
        with pytest.raises(seckill.ModuleMissingError):
            await seckill.asyncio.PartitionedSale.create(aclient, "py:p", SaleSpec(stock=3, partitions=2))
        await aclient.aclose()

    asyncio.run(main())
    assert client.keys("*") == []


def _async_cluster(sync_cluster: redis.RedisCluster) -> redis.asyncio.RedisCluster:
    node = sync_cluster.get_default_node()
    return redis.asyncio.RedisCluster(host=node.host, port=node.port, protocol=PROTOCOL)


def test_skewed_demand_sells_out_exactly_through_asyncio_on_a_cluster(cluster):
    stock, partitions, limit = 2_000, 8, 2
    wanted = 3 * stock // limit
    users = [f"auser:{n}" for n in range(wanted)]
    # The hot half of the demand hashes to partitions 0 and 1.
    hot = [u for u in (f"ahot:{n}" for n in range(40 * wanted)) if partition_of(u, partitions) < 2][: wanted // 2]
    attempts = [u for u in users[: wanted // 2] + hot for _ in range(limit + 1)]
    # Hot and cold buyers mixed all along: the hot partitions run dry while the others still
    # have stock, so they must borrow.
    random.Random(7).shuffle(attempts)

    async def main():
        client = _async_cluster(cluster)
        sale = await seckill.asyncio.PartitionedSale.create(
            client, "py:askew", SaleSpec(stock=stock, partitions=partitions, limit=limit))
        queue = list(reversed(attempts))
        outcomes = Counter()

        async def buyer():
            while queue:
                code = await sale.try_buy(queue.pop())
                outcomes["bought" if code >= 0 else code] += 1

        await asyncio.gather(*(buyer() for _ in range(100)))
        info = await sale.info()
        assert info.balanced(), info
        assert (info.sold, info.remaining, info.in_flight) == (stock, 0, 0)
        assert outcomes["bought"] == stock
        assert sum(outcomes.values()) == len(attempts)
        owners = Counter()
        for b in await sale.buyers():
            assert b.partition == partition_of(b.user, partitions)
            owners[b.user] += b.qty
        assert sum(owners.values()) == stock and max(owners.values()) <= limit
        assert sale.stats.transfers > 0
        opened = await seckill.asyncio.PartitionedSale.open(client, "py:askew")
        assert opened.spec == sale.spec
        await seckill.asyncio.PartitionedSale.delete(client, "py:askew")
        await client.aclose()

    asyncio.run(main())


def test_holds_events_and_acked_purchases_through_asyncio_on_a_cluster(cluster):
    async def main():
        client = _async_cluster(cluster)
        spec = SaleSpec(stock=8, partitions=4, limit=2, hold_ms=60_000, events=True)
        sale = await seckill.asyncio.PartitionedSale.create(client, "py:aorders", spec)
        await sale.create_group("shipping")
        for user in ("alice", "bob", "carol"):
            code, acked = await sale.try_buy_acked(user, 1, replicas=1, timeout_ms=5_000)
            assert code >= 0 and acked == 1, (user, code, acked)
        assert await sale.confirm("alice")
        assert await sale.cancel("bob") == 1
        events = sorted((e.get("event"), e.get("user")) for e in await sale.read_group("shipping", "w1"))
        assert events == [("cancel", "bob"), ("confirm", "alice"), ("purchase", "alice"),
                          ("purchase", "bob"), ("purchase", "carol")]
        await sale.restock(6)
        info = await sale.info()
        assert (info.stock, info.restocked, info.held, info.sold) == (8, 6, 1, 1) and info.balanced()
        assert await sale.recover() == 0
        await client.aclose()

    asyncio.run(main())


def test_the_readme_one_key_block_runs(server):
    """clients/python/README.md's first example, on this test's server, twice in a row."""
    readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = readme.split("```python\n", 1)[1].split("```", 1)[0]
    block = block.replace("redis.Redis()", f"redis.Redis(port={server}, protocol={PROTOCOL})")
    block = block.replace("redis.asyncio.Redis()", f"redis.asyncio.Redis(port={server}, protocol={PROTOCOL})")
    for _ in range(2):  # runs twice in a row: replace=True resets the sale
        exec(compile(block, "README.md", "exec"), {})
    assert seckill.Sale(redis.Redis(port=server), "sale:bottles").bought("user:42") == 1


def test_a_killed_master_is_followed_by_the_asyncio_client(own_cluster):
    """A master SIGKILLed mid-sale under 10 asyncio buyers: the client and the sale made before
    the kill go on once the replica is promoted; every purchase a replica acknowledged is
    still owned, and nobody refused owns anything."""
    first = own_cluster[0]

    async def main():
        client = redis.asyncio.RedisCluster(host="127.0.0.1", port=first.port, protocol=PROTOCOL)
        sale = await seckill.asyncio.PartitionedSale.create(
            client, "akilled", SaleSpec(stock=10_000, partitions=16, limit=2), retry=RetryPolicy(deadline_s=60))
        hot = client.get_node_from_key(sale.keys[0]).port
        answers, progress = [], [0]

        async def buyer(task: int) -> None:
            for n in range(60):
                user = f"akilled:{task}:{n}"
                code, acked = await sale.try_buy_acked(user, 1, replicas=1, timeout_ms=200)
                answers.append((user, code, acked))
                progress[0] += 1

        buyers = asyncio.gather(*(buyer(t) for t in range(10)))
        while progress[0] <= 150:
            await asyncio.sleep(0.01)
        next(n for n in own_cluster if n.port == hot).kill()
        await buyers
        kept = 0
        for user, code, acked in answers:
            owned = await sale.bought(user)
            assert owned <= 2
            if code >= 0 and acked >= 1:
                assert owned == 1, f"{user}: a replicated purchase survives the kill"
                kept += 1
            elif code < 0:
                assert owned == 0, f"{user}: refused yet owns"
        print(f"{len(answers)} answers through the kill, {kept} replicated purchases kept")
        assert len(answers) == 600 and kept > 0
        await client.aclose()

    asyncio.run(main())


def test_a_mover_that_died_is_finished_by_asyncio_buyers(cluster):
    """A LEND whose mover died before ABSORB: the asyncio buyers finish it (recover) and the
    sale still sells out exactly, nothing left in flight."""
    stock, partitions = 400, 4

    async def main():
        client = _async_cluster(cluster)
        sale = await seckill.asyncio.PartitionedSale.create(
            client, "py:amover", SaleSpec(stock=stock, partitions=partitions, limit=1))
        assert cluster.execute_command("SECKILL.LEND", sale.keys[2], "dead-1", 50, "TO", sale.keys[0]) == 50
        users = [f"amover:{n}" for n in range(3 * stock)]
        queue = list(users)

        async def buyer():
            while queue:
                await sale.try_buy(queue.pop())

        await asyncio.gather(*(buyer() for _ in range(100)))
        info = await sale.info()
        assert info.balanced(), info
        assert (info.sold, info.remaining, info.in_flight, info.pending_out) == (stock, 0, 0, 0)
        assert sale.stats.recovered >= 1, sale.stats
        await client.aclose()

    asyncio.run(main())


def _cli(*args: str) -> bool:
    from conftest import CLI
    import subprocess

    return subprocess.run([CLI, *args], capture_output=True).returncode == 0


def _cluster_nodes_listing(port: int) -> str:
    listing = redis.Redis(port=port).execute_command("CLUSTER", "NODES")
    return listing.decode() if isinstance(listing, bytes) else str(listing)


def _owns_slots(port: int) -> bool:
    me = redis.Redis(port=port).execute_command("CLUSTER", "MYID")
    me = me.decode() if isinstance(me, bytes) else me
    line = next(l for l in _cluster_nodes_listing(port).splitlines() if l.startswith(me))
    return len(line.split()) > 8


async def _sell_out_while(client, name: str, fault, stock: int = 4_000):
    """``stock`` units over 16 partitions (LIMIT 1) to twice as many users from 64 asyncio
    tasks, while ``fault()`` (a coroutine) runs: every unit sold exactly once, to a buyer told
    so, nothing left in flight. Returns how many answers came while the fault ran."""
    sale = await seckill.asyncio.PartitionedSale.create(
        client, name, SaleSpec(stock=stock, partitions=16, limit=1), retry=RetryPolicy(deadline_s=60))
    queue = [f"{name}:{n}" for n in range(2 * stock)]
    random.Random(3).shuffle(queue)
    told, progress = {}, [0]

    async def buyer() -> None:
        while queue:
            user = queue.pop()
            told[user] = 1 if await buy_until_kept(sale, user) >= 0 else 0
            progress[0] += 1

    buyers = asyncio.gather(*(buyer() for _ in range(64)))
    fault_task = asyncio.ensure_future(fault(sale, progress))
    await buyers
    during = await fault_task
    info = await sale.info()
    assert (info.sold, info.remaining, info.in_flight) == (stock, 0, 0), info
    assert sum(told.values()) == stock
    users, owned = list(told), []
    for start in range(0, len(users), 100):  # the cluster client's pool: 100 calls at a time
        owned += await asyncio.gather(*(sale.bought(user) for user in users[start:start + 100]))
    assert dict(zip(users, owned)) == told, "each buyer owns what it was told"
    return sale, during


def test_asyncio_buyers_sell_out_exactly_through_a_cluster_failover(own_cluster):
    async def main():
        client = redis.asyncio.RedisCluster(host="127.0.0.1", port=own_cluster[0].port, protocol=PROTOCOL)

        async def failover(sale, progress):
            while progress[0] < 1_000:
                await asyncio.sleep(0.005)
            hot = client.get_node_from_key(sale.keys[0]).port
            replica = next(n.port for n in own_cluster
                           if redis.Redis(port=n.port).info("replication").get("master_port") == hot)
            at = progress[0]
            await asyncio.to_thread(redis.Redis(port=replica).execute_command, "CLUSTER", "FAILOVER")
            while redis.Redis(port=replica).info("replication")["role"] != "master":
                await asyncio.sleep(0.01)
            return progress[0] - at, replica

        sale, (during, replica) = await _sell_out_while(client, "afailover", failover)
        print(f"{during} answers while the replica took over")
        assert client.get_node_from_key(sale.keys[0]).port == replica
        await client.aclose()

    asyncio.run(main())


def test_asyncio_buyers_sell_out_exactly_while_two_masters_join_and_the_cluster_rebalances(own_cluster, tmp_path):
    from conftest import Node, _answers

    joined = [Node(str(tmp_path), ["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"]) for _ in range(2)]
    try:
        for node in joined:
            wait_until(lambda: _answers(node.port), f"the server on {node.port}")
        entry = f"127.0.0.1:{own_cluster[0].port}"
        members = [n.port for n in own_cluster]
        for node in joined:
            assert _cli("--cluster", "add-node", f"127.0.0.1:{node.port}", entry)
            members.append(node.port)
            wait_until(lambda: all(
                sum("connected" in l for l in _cluster_nodes_listing(p).splitlines()) == len(members)
                for p in members), "every node to know every other")
        done = threading.Event()
        rebalanced = []

        def rebalance():
            # A node that still thinks the cluster is down refuses the keys MIGRATE brings it
            # (CLUSTERDOWN), so rebalance fails; an operator runs it again, as this does.
            for _ in range(3):
                wait_until(lambda: all(redis.Redis(port=p).cluster("info")["cluster_state"] == "ok"
                                       for p in members), "the cluster up")
                if _cli("--cluster", "rebalance", entry, "--cluster-use-empty-masters"):
                    rebalanced.append(True)
                    break
            done.set()

        async def main():
            client = redis.asyncio.RedisCluster(host="127.0.0.1", port=own_cluster[0].port, protocol=PROTOCOL)

            async def grow(sale, progress):
                thread = threading.Thread(target=rebalance)
                thread.start()
                at = progress[0]
                while not done.is_set():
                    await asyncio.sleep(0.01)
                thread.join()
                return progress[0] - at

            sale, during = await _sell_out_while(client, "agrow", grow, stock=8_000)
            print(f"{during} answers while the rebalance ran")
            assert rebalanced, "rebalance failed three times"
            assert during > 500, "the buyers were not buying while slots moved"
            owners = {client.get_node_from_key(key).port for key in sale.keys}
            assert any(_owns_slots(n.port) for n in joined)
            assert owners & {n.port for n in joined}, "no partition moved to a new master"
            await client.aclose()

        asyncio.run(main())
    finally:
        for node in joined:
            node.kill()


def test_a_pool_smaller_than_the_calls_in_flight_fails_them_unless_it_blocks(server):
    """Sizing redis-py's asyncio pool (clients/python/README.md): the package's reads go through
    the application's client, so 200 concurrent calls on a pool of 10 connections fail with
    redis-py 8's ``MaxConnectionsError`` (a ``ConnectionError``; redis-py 5's "Too many
    connections" came in some runs only); a ``BlockingConnectionPool`` of the same size makes
    them wait their turn instead: none fails."""

    async def run(client: redis.asyncio.Redis, name: str) -> list:
        sale = await seckill.asyncio.Sale.create(client, name, SaleSpec(stock=1_000, partitions=1))

        async def one(n: int) -> int:
            # A read through the application's client (purchases go on the package's own
            # connections): 200 of them at once want 200 of the pool's connections.
            return await sale.bought(f"u{n}")

        answers = await asyncio.gather(*(one(n) for n in range(200)), return_exceptions=True)
        await client.aclose()
        return [a for a in answers if isinstance(a, BaseException)]

    small = redis.asyncio.Redis(port=server, protocol=PROTOCOL, max_connections=10)
    failures = asyncio.run(run(small, "pool:small"))
    assert all(isinstance(f, redis.ConnectionError) for f in failures), failures[:3]
    if int(redis.__version__.split(".")[0]) >= 8:  # redis-py 5 failed them in some runs only
        assert failures, "a pool of 10 served 200 calls at once"
    pool = redis.asyncio.BlockingConnectionPool(port=server, protocol=PROTOCOL, max_connections=10, timeout=10)
    assert asyncio.run(run(redis.asyncio.Redis(connection_pool=pool), "pool:blocking")) == []

"""Availability under faults (docs/clients.md, "One master down"): a frozen or killed master
costs only the calls that need it. Buyers of partitions on the other masters are answered at
the speed of a healthy call, sync and async, with and without the sold-out cache; a purchase
that never reached a server is ``UnavailableError``, not an unknown outcome; a lock asks a
replica attached after its first grant."""

import asyncio
import multiprocessing
import os
import queue
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Tuple

import pytest
import redis
import redis.asyncio

import seckill
import seckill._lock
import seckill.asyncio
from seckill import SOLD_OUT, LockTimeout, PartitionedSale, RetryPolicy, Sale, SaleSpec, UnavailableError

from conftest import (PROTOCOL, Node, _answers, buy_until_kept, cluster_nodes, command_calls, master_and_replica,
                      wait_until)

PARTITIONS = 16
#: How long the fault lasts while buyers are timed.
FAULT_S = 5.0
#: The clusters of the fault-window tests mark a failed master FAIL only after this long, far
#: past FAULT_S: these tests measure one master down *before* a failover. Once it is marked
#: FAIL, every node refuses every key with CLUSTERDOWN until its replica is promoted
#: (``cluster-require-full-coverage yes``, the default): about a second in which buyers of all
#: partitions wait alike (measured: a 9 s window at node-timeout 5000 had an asyncio max of
#: 1.16 s). That is the failover's cost, measured by ``make soak``.
NODE_TIMEOUT_MS = 15_000
#: What 99 % of the buyers of a healthy partition are answered within, and what none may wait:
#: far below the fault (before, every such buyer waited 3 to 10 s, the failed master's reads),
#: above a healthy call on a loaded 2-core machine running 6 servers and the 4 flavours (when
#: they shared one Python process, one call of about 3 000 took 1.13 s there once, and a p99
#: of 654 ms was seen in CI: they waited for the GIL, see ``_Flavours``).
#: The share answered within 100 ms is measured by `make bench` ("Availability under a fault").
P99_BOUND_S = 0.5
BOUND_S = 2.5


def _summary(name: str, latencies: List[float]) -> str:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    within = sum(1 for t in ordered if t <= 0.1) / len(ordered)
    return (f"{name}: {len(ordered)} calls, p50 {statistics.median(ordered) * 1000:.1f} ms, "
            f"p99 {p99 * 1000:.1f} ms, max {ordered[-1] * 1000:.1f} ms, {within:.1%} within 100 ms")


def _awaiting(task: "asyncio.Task[Any]") -> str:
    """Where ``task`` waits: its coroutines, outermost first."""
    frames, coroutine = [], task.get_coro()
    while coroutine is not None:
        frame = getattr(coroutine, "cr_frame", None) or getattr(coroutine, "gi_frame", None)
        if frame is not None:
            frames.append(f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} {frame.f_code.co_name}")
        coroutine = getattr(coroutine, "cr_await", None) or getattr(coroutine, "gi_yieldfrom", None)
    return " > ".join(frames)


def _users_off(cluster: redis.RedisCluster, sale: PartitionedSale, port: int, prefix: str, count: int) -> List[str]:
    """``count`` users whose partition is served by a master other than ``port``."""
    users = []
    for n in range(100_000):
        user = f"{prefix}{n}"
        if cluster.get_node_from_key(sale.keys[sale.partition_of(user)]).port != port:
            users.append(user)
            if len(users) == count:
                return users
    raise AssertionError("not enough users")


def _unsealed(cluster: redis.RedisCluster, sale: PartitionedSale) -> bool:
    return not any(info.sealed for info in sale.partition_infos())


class _Flavours:
    """Buyers of one sale in four flavours, each on its own client in a process of its own (as
    applications run: one process's flavours would wait for each other's turn with the GIL,
    not for the servers): sync (4 threads) and asyncio (8 tasks), with and without the sold-out
    cache. ``run`` has each flavour make its connections, then starts the fault, has them all
    buy for FAULT_S, and heals; every call's latency and reply (an error as its text) is
    recorded by flavour."""

    def __init__(self, port: int, name: str, spec: SaleSpec, seal_ms: int) -> None:
        self.port, self.name, self.spec, self.seal_ms = port, name, spec, seal_ms
        self.latencies: Dict[str, List[float]] = {}
        self.replies: Dict[str, List[object]] = {}
        #: Where each call that passed BOUND_S waited then (its stack): a failure says why.
        self.stalls: List[str] = []
        self._mutex = threading.Lock()
        self._processes = multiprocessing.get_context("fork")
        self._go, self._stop = self._processes.Event(), self._processes.Event()

    def _record(self, flavour: str, started: float, reply: object) -> None:
        if isinstance(reply, BaseException):
            reply = f"{type(reply).__name__}: {reply}"  # sent back to the test's process as text
        with self._mutex:
            self.latencies.setdefault(flavour, []).append(time.monotonic() - started)
            self.replies.setdefault(flavour, []).append(reply)

    def _flavour(self, kind: Callable[[bool, List[str], Any], None], cache: bool, users: List[str],
                 ready: Any, results: Any) -> None:
        """A flavour's process: its buyers, then its records sent back."""
        try:
            kind(cache, users, ready)
        finally:  # a flavour that failed sends what it has (and its traceback is printed)
            results.put((self.latencies, self.replies, self.stalls))

    def _sync(self, cache: bool, users: List[str], ready: Any) -> None:
        flavour = f"sync{' + cache' if cache else ''}"
        client = redis.RedisCluster(host="127.0.0.1", port=self.port, protocol=PROTOCOL)
        sale = PartitionedSale(client, self.name, self.spec, self.seal_ms, local_cache=cache)
        warmed = threading.Barrier(5, action=ready.set)
        calls: Dict[int, float] = {}  # a buyer thread's call in flight: when it started

        def watch() -> None:
            stalled = set()
            while not self._stop.is_set():
                time.sleep(0.25)
                for thread, started in list(calls.items()):
                    frame = sys._current_frames().get(thread)
                    if time.monotonic() - started > BOUND_S and (thread, started) not in stalled and frame:
                        stalled.add((thread, started))
                        self.stalls.append(f"{flavour}: " + " > ".join(
                            f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in traceback.extract_stack(frame)[-14:]))

        def buyer(chunk: List[str]) -> None:
            sale.try_buy(f"warm:{flavour}:{chunk[0]}")  # this thread's connections, made before the fault
            warmed.wait()
            self._go.wait()
            n = 0
            while not self._stop.is_set():
                started = calls[threading.get_ident()] = time.monotonic()
                try:
                    reply: object = sale.try_buy(chunk[n % len(chunk)])
                except Exception as error:  # noqa: BLE001 - recorded, asserted by the test
                    reply = error
                del calls[threading.get_ident()]
                self._record(flavour, started, reply)
                n += 1

        threads = [threading.Thread(target=buyer, args=(users[i::4],)) for i in range(4)]
        threads.append(threading.Thread(target=watch, daemon=True))
        for thread in threads:
            thread.start()
        warmed.wait()
        for thread in threads[:-1]:
            thread.join()
        client.close()

    def _async(self, cache: bool, users: List[str], ready: Any) -> None:
        flavour = f"asyncio{' + cache' if cache else ''}"

        async def main() -> None:
            client = redis.asyncio.RedisCluster(host="127.0.0.1", port=self.port, protocol=PROTOCOL)
            sale = seckill.asyncio.PartitionedSale(client, self.name, self.spec, self.seal_ms, local_cache=cache)
            await asyncio.gather(*(sale.try_buy(f"warm:{flavour}:{n}") for n in range(8)))
            ready.set()
            await asyncio.get_running_loop().run_in_executor(None, self._go.wait)

            async def buyer(chunk: List[str]) -> None:
                n = 0
                me = asyncio.current_task()
                assert me is not None
                while not self._stop.is_set():
                    started = time.monotonic()
                    watch = asyncio.get_running_loop().call_later(
                        BOUND_S, lambda: self.stalls.append(f"{flavour}: {_awaiting(me)}"))
                    try:
                        reply: object = await sale.try_buy(chunk[n % len(chunk)])
                    except Exception as error:  # noqa: BLE001 - recorded, asserted by the test
                        reply = error
                    watch.cancel()
                    self._record(flavour, started, reply)
                    n += 1

            await asyncio.gather(*(buyer(users[i::8]) for i in range(8)))
            await client.aclose()

        asyncio.run(main())

    def run(self, users: List[str], fault: Callable[[], None], heal: Callable[[], None],
            premise: Callable[[], None] = lambda: None) -> None:
        """The fault for FAULT_S under every flavour's buyers; ``premise`` is checked as the
        window ends (before the buyers' last calls are waited for, which on a loaded machine
        can take long enough for the node timeout to pass), ``heal`` once they stopped."""
        runners, readies = [], []
        results = self._processes.Queue()
        for kind in (self._sync, self._async):
            for cache in (False, True):
                ready = self._processes.Event()
                readies.append(ready)
                runners.append(self._processes.Process(target=self._flavour, args=(kind, cache, users, ready, results)))
        for runner in runners:
            runner.start()
        records = []
        try:
            for ready in readies:
                assert ready.wait(60), "a flavour could not make its connections"
            fault()
            self._go.set()
            time.sleep(FAULT_S)  # the fault's length: the buyers buy all along
            premise()
        finally:
            self._go.set()
            self._stop.set()
            try:
                # Read before the joins: a process exits once its records are read.
                records = [results.get(timeout=120) for _ in runners]
            except queue.Empty:
                raise AssertionError("a buyer hung past 120 s") from None
            finally:
                for runner in runners:
                    runner.join(timeout=10)
                    if runner.is_alive():
                        runner.kill()
                heal()
        for latencies, replies, stalls in records:
            self.latencies.update(latencies)
            self.replies.update(replies)
            self.stalls.extend(stalls)

    def check(self, allowed: Tuple[object, ...]) -> None:
        """Every flavour made calls, each answered with one of ``allowed``, 99 % of them within
        P99_BOUND_S and all within BOUND_S."""
        assert sorted(self.latencies) == ["asyncio", "asyncio + cache", "sync", "sync + cache"]
        for flavour, latencies in sorted(self.latencies.items()):
            print(_summary(flavour, latencies))
            odd = [reply for reply in self.replies[flavour] if reply not in allowed]
            assert not odd, f"{flavour}: {odd[:3]}"
            ordered = sorted(latencies)
            stalls = "".join(f"\nstalled in {stall}" for stall in self.stalls)
            assert ordered[int(len(ordered) * 0.99)] < P99_BOUND_S, _summary(flavour, latencies) + stalls
            assert ordered[-1] < BOUND_S, _summary(flavour, latencies) + stalls


@pytest.fixture
def unfailed_cluster():
    """A cluster of this test's own whose failed master is not marked FAIL within FAULT_S."""
    with cluster_nodes(NODE_TIMEOUT_MS) as nodes:
        yield nodes


@pytest.fixture(scope="module")
def thawed_cluster():
    """An ``unfailed_cluster`` shared by the tests that only freeze a master for a while and
    thaw it (each its own sale): one cluster's start (about 16 s) less."""
    with cluster_nodes(NODE_TIMEOUT_MS) as nodes:
        yield nodes


def _not_failed(entry: Node, victim: Node) -> None:
    """The test's premise held: ``entry`` still sees ``victim`` as a master not even suspected
    failed (no ``fail?``/``fail`` flag), so the window measured no failover."""
    with redis.Redis(port=entry.port, decode_responses=True) as client:
        nodes = client.execute_command("CLUSTER", "NODES")
    text = nodes if isinstance(nodes, str) else str(nodes)
    line = next(line for line in text.splitlines() if f":{victim.port}@" in line)
    flags = line.split()[2].split(",")
    assert "master" in flags and "fail" not in flags and "fail?" not in flags, line


def _sold_out_sale(cluster: redis.RedisCluster, name: str, seal_ms: int) -> PartitionedSale:
    sale = PartitionedSale.create(cluster, name, SaleSpec(stock=PARTITIONS * 2, partitions=PARTITIONS), seal_ms=seal_ms)
    n = 0
    while sale.info().remaining:
        sale.try_buy(f"early{n}")
        n += 1
    return sale


@pytest.mark.parametrize("fault", ["SIGSTOP", "SIGKILL"])
def test_one_master_down_after_sell_out_costs_only_its_own_buyers(unfailed_cluster, fault):
    """Sold out, past the seal (a drained partition answers DRAINED and its buyer reads the
    others): one master frozen or killed, every buyer of a partition on another master is
    refused as sold out at once. Before: 3-10 s each, waiting on the failed master's reads."""
    seal_ms = 200
    nodes = unfailed_cluster
    cluster = redis.RedisCluster(host="127.0.0.1", port=nodes[0].port, protocol=PROTOCOL)
    sale = _sold_out_sale(cluster, "avail:after", seal_ms)
    victim, _ = master_and_replica(nodes, sale.keys[0])
    users = _users_off(cluster, sale, victim.port, "late", 64)
    entry = next(node for node in nodes if node is not victim)
    flavours = _Flavours(entry.port, "avail:after", sale.spec, seal_ms)

    def fault_on() -> None:
        wait_until(lambda: _unsealed(cluster, sale), "every seal to lapse")
        if fault == "SIGSTOP":
            os.kill(victim.process.pid, signal.SIGSTOP)
        else:
            victim.kill()

    def heal() -> None:
        if fault == "SIGSTOP":
            os.kill(victim.process.pid, signal.SIGCONT)

    flavours.run(users, fault_on, heal, premise=lambda: _not_failed(entry, victim))
    flavours.check((SOLD_OUT,))


def test_one_master_frozen_mid_sale_the_others_keep_selling_and_the_sale_ends_exact(thawed_cluster):
    """Mid-sale, one master frozen: the other masters' buyers keep buying (their partitions
    drain and borrow from each other, skipping the frozen one's); after it, the sale sells
    out exactly and every purchase told is owned."""
    stock = 40 * PARTITIONS
    nodes = thawed_cluster
    cluster = redis.RedisCluster(host="127.0.0.1", port=nodes[0].port, protocol=PROTOCOL)
    sale = PartitionedSale.create(cluster, "avail:mid", SaleSpec(stock=stock, partitions=PARTITIONS), seal_ms=200)
    victim, _ = master_and_replica(nodes, sale.keys[0])
    users = _users_off(cluster, sale, victim.port, "mid", 4000)
    entry = next(node for node in nodes if node is not victim)
    flavours = _Flavours(entry.port, "avail:mid", sale.spec, 200)

    flavours.run(users, lambda: os.kill(victim.process.pid, signal.SIGSTOP),
                 lambda: os.kill(victim.process.pid, signal.SIGCONT), premise=lambda: _not_failed(entry, victim))
    flavours.check((seckill.OVER_LIMIT, *range(SOLD_OUT, stock)))
    told = sum(1 for replies in flavours.replies.values() for reply in replies if isinstance(reply, int) and reply >= 0)
    assert told > 0
    # The frozen master's units are still there: sold once it is back, by anyone.
    sale.retry = RetryPolicy(deadline_s=60)
    n = 0
    while sale.info().remaining:
        sale.try_buy(f"after{n}")
        n += 1
    info = sale.info()
    assert info.sold == stock and info.remaining == 0
    owned = sum(buyer.qty for buyer in sale.buyers())
    assert owned == stock
    bought_during = sum(sale.bought(user) for user in set(users))
    assert bought_during == told, (bought_during, told)


def _user_of(sale: PartitionedSale, partition: int, prefix: str) -> str:
    return next(f"{prefix}{n}" for n in range(100_000) if sale.partition_of(f"{prefix}{n}") == partition)


def test_a_transfer_left_pending_to_a_frozen_master_stalls_no_other_buyer(thawed_cluster):
    """A mover died between LEND and ABSORB, lending a unit to a partition whose master then
    froze. The buyers of drained partitions on the other masters find the transfer pending
    while they borrow: they leave it (it can only end on the frozen master) and are refused
    at once as sold out, sync and asyncio. Before, their recovery sent the ABSORB to the frozen
    master and waited on it: the client's socket timeout (5 s by default in redis-py 8; none,
    so until the thaw, in redis-py 5). Once thawed, ``recover`` ends the transfer."""
    nodes = thawed_cluster
    cluster = redis.RedisCluster(host="127.0.0.1", port=nodes[0].port, protocol=PROTOCOL)
    sale = PartitionedSale.create(cluster, "avail:pending", SaleSpec(stock=PARTITIONS, partitions=PARTITIONS),
                                  seal_ms=200)
    victim, _ = master_and_replica(nodes, sale.keys[0])
    healthy = [p for p in range(PARTITIONS) if cluster.get_node_from_key(sale.keys[p]).port != victim.port]
    source, sync_buyers, async_buyers = healthy[0], healthy[1], healthy[2]
    for partition in range(1, PARTITIONS):  # partition 0 (the victim's) keeps its unit
        if partition != source:
            assert sale.try_buy(_user_of(sale, partition, "early")) >= 0
    assert cluster.execute_command("SECKILL.LEND", sale.keys[source], "dead-mover-1", 1, "TO", sale.keys[0]) == 1
    entry = next(node for node in nodes if node is not victim)
    absorbed_before = command_calls(victim.port, "seckill.absorb")
    answers: Dict[str, object] = {}

    def sync_buyer() -> None:
        handle = PartitionedSale(redis.RedisCluster(host="127.0.0.1", port=entry.port, protocol=PROTOCOL),
                                 sale.name, sale.spec, 200)
        answers["sync"] = handle.try_buy(_user_of(sale, sync_buyers, "late"))

    def async_buyer() -> None:
        async def main() -> None:
            client = redis.asyncio.RedisCluster(host="127.0.0.1", port=entry.port, protocol=PROTOCOL)
            handle = seckill.asyncio.PartitionedSale(client, sale.name, sale.spec, 200)
            answers["asyncio"] = await handle.try_buy(_user_of(sale, async_buyers, "late"))
            await client.aclose()

        asyncio.run(main())

    os.kill(victim.process.pid, signal.SIGSTOP)
    try:
        buyers = [threading.Thread(target=sync_buyer), threading.Thread(target=async_buyer)]
        for buyer in buyers:
            buyer.start()
        # Generous: on a loaded machine a healthy call takes a second at worst; the wait this
        # test is about is the frozen master's, which lasts as long as the freeze.
        for buyer in buyers:
            buyer.join(timeout=60)
        stalled = [buyer.name for buyer in buyers if buyer.is_alive()]
    finally:
        os.kill(victim.process.pid, signal.SIGCONT)
    for buyer in buyers:
        buyer.join()
    assert not stalled, "a buyer waited for the frozen master"
    assert answers == {"sync": SOLD_OUT, "asyncio": SOLD_OUT}
    # The ABSORB a buyer had sent would have been read as the master thawed, before this PING.
    assert redis.Redis(port=victim.port).ping()
    assert command_calls(victim.port, "seckill.absorb") == absorbed_before, "a buyer sent the ABSORB to the frozen master"
    assert sale.recover() == 1
    info = sale.info()  # partition 0's own unit and the one lent to it: nothing lost
    assert (info.sold, info.remaining, info.in_flight) == (PARTITIONS - 2, 2, 0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_purchase_never_sent_is_unavailable_not_unknown():
    """Nothing listens on the port: every send was refused, so the purchase did not happen:
    UnavailableError (not OutcomeUnknownError) once the policy's deadline has passed."""
    port = _free_port()
    policy = RetryPolicy(deadline_s=0.5)
    sale = Sale(redis.Redis(port=port, protocol=PROTOCOL), "nowhere", retry=policy)
    started = time.monotonic()
    with pytest.raises(UnavailableError) as raised:
        sale.try_buy("u")
    took = time.monotonic() - started
    assert not isinstance(raised.value, seckill.OutcomeUnknownError)
    assert isinstance(raised.value.last_error, seckill.NotSentError)
    assert took < policy.deadline_s + 0.5, took
    with pytest.raises(UnavailableError):
        sale.cancel("u")

    async def main() -> None:
        async_sale = seckill.asyncio.Sale(redis.asyncio.Redis(port=port, protocol=PROTOCOL), "nowhere", retry=policy)
        started = time.monotonic()
        with pytest.raises(UnavailableError):
            await async_sale.try_buy_acked("u")
        assert time.monotonic() - started < policy.deadline_s + 0.5

    asyncio.run(main())
    print(f"nothing listening: UnavailableError after {took * 1000:.0f} ms (deadline 500 ms)")


def test_a_lock_asks_a_replica_attached_after_its_first_grant(server, tmp_path, monkeypatch):
    """A lock first granted with no replica online, then a replica attached and frozen: the
    next hold asks for its acknowledgement and is not granted. Before, the replica count read
    at the first grant (0) was kept for the lock's lifetime: granted, unreplicated."""
    monkeypatch.setattr(seckill._lock, "RECOUNT_EVERY_S", 0.2)
    master = redis.Redis(port=server, protocol=PROTOCOL)
    lock = seckill.Lock(master, "lock:recount", ttl_ms=5_000)
    with lock.hold(wait_ms=1_000):
        pass
    replica = Node(str(tmp_path), ["--replicaof", "127.0.0.1", str(server)])
    try:
        wait_until(lambda: _answers(replica.port), "the replica")
        wait_until(lambda: len(master.execute_command("ROLE")[2]) == 1
                   and redis.Redis(port=replica.port).info("replication")["master_link_status"] == "up",
                   "the replica to sync")
        os.kill(replica.process.pid, signal.SIGSTOP)
        time.sleep(0.2)  # RECOUNT_EVERY_S: the count read at the first grant is due again
        with pytest.raises(LockTimeout) as raised:
            with lock.hold(wait_ms=1_500):
                pass
        assert "no replica acknowledged" in raised.value.reason
    finally:
        os.kill(replica.process.pid, signal.SIGCONT)
        replica.kill()


@pytest.mark.skipif(os.environ.get("SECKILL_SOAK") != "1", reason="make soak: a failover at Redis's default node timeout takes ~20 s")
def test_the_default_policy_outlasts_a_failover_at_the_default_node_timeout():
    """A cluster with Redis's default ``cluster-node-timeout`` (15 000 ms), a master SIGKILLed
    under asyncio buyers with the default RetryPolicy: no OutcomeUnknownError (the replica is
    promoted before the deadline), and every purchase told is owned. With the old 10 s default,
    97 of a FastAPI shop's requests ended OutcomeUnknownError, none of them bought."""
    with cluster_nodes(node_timeout_ms=15_000) as nodes:
        entry = redis.RedisCluster(host="127.0.0.1", port=nodes[0].port, protocol=PROTOCOL)
        stock = 2_000
        sale = PartitionedSale.create(entry, "avail:default", SaleSpec(stock=stock, partitions=PARTITIONS))
        victim, replica = master_and_replica(nodes, sale.keys[0])
        assert replica is not None
        survivor = next(node for node in nodes if node is not victim)
        outcomes: Dict[str, List[object]] = {}

        async def main() -> float:
            client = redis.asyncio.RedisCluster(host="127.0.0.1", port=survivor.port, protocol=PROTOCOL)
            buyer_sale = seckill.asyncio.PartitionedSale(client, "avail:default", sale.spec)
            assert buyer_sale.retry == RetryPolicy()
            killed = asyncio.Event()

            async def buyer(t: int) -> None:
                for n in range(60):
                    user = f"u{t}:{n}"
                    try:
                        outcomes[user] = [await buy_until_kept(buyer_sale, user)]
                    except Exception as error:  # noqa: BLE001 - asserted below
                        outcomes[user] = [error]
                    if n == 5:
                        await killed.wait()

            tasks = asyncio.gather(*(buyer(t) for t in range(32)))
            while len(outcomes) < 32 * 6:
                await asyncio.sleep(0.01)
            victim.kill()
            killed_at = time.monotonic()
            killed.set()
            await tasks
            promoted = time.monotonic() - killed_at
            await client.aclose()
            return promoted

        took = asyncio.run(main())
        errors = [o[0] for o in outcomes.values() if isinstance(o[0], Exception)]
        assert not errors, errors[:3]
        told = {user for user, (code,) in outcomes.items() if isinstance(code, int) and code >= 0}
        wait_until(lambda: redis.Redis(port=replica.port).info("replication")["role"] == "master", "the promotion")
        check = PartitionedSale(redis.RedisCluster(host="127.0.0.1", port=survivor.port, protocol=PROTOCOL),
                                "avail:default", sale.spec)
        owners = {buyer.user.decode() for buyer in check.buyers()}
        assert owners & set(outcomes) == told
        print(f"a master killed at cluster-node-timeout 15 000: {len(outcomes)} purchases, no error, "
              f"the last answered {took:.1f} s after the kill")

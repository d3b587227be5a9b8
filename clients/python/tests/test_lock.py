"""seckill.Lock and seckill.asyncio.Lock against real servers and real faults: a stalled holder
keeps its lock, a frozen one is told it lost it (and its fenced write is refused), renewals
that cannot reach the server end the lease in time, failovers, and many holders at once."""

import asyncio
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import redis
import redis.asyncio

import seckill.asyncio
from seckill import InvalidArgumentError, Lock, LockLost, LockTimeout
from seckill.lock import WATCHDOG

from conftest import PROTOCOL, master_and_replica, promote, wait_until


def _info(client, name):
    reply = client.execute_command("LOCK.INFO", name)
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2]))
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in reply.items()}


def _owner(client, name):
    owner = _info(client, name)["owner"]
    return owner.decode() if isinstance(owner, bytes) else owner


def test_bad_input_is_refused_before_anything_is_sent():
    # A client for a port nobody listens on: anything sent would be a ConnectionError.
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        client = redis.Redis(port=unused.getsockname()[1])
        aclient = redis.asyncio.Redis(port=unused.getsockname()[1])
        for bad in (dict(name="", ttl_ms=1000), dict(name="k", ttl_ms=2), dict(name="k", ttl_ms="100"),
                    dict(name="k", ttl_ms=1000, renew_ms=990), dict(name=None, ttl_ms=1000),
                    dict(name="k", ttl_ms=1000, replicas=-1)):
            with pytest.raises(InvalidArgumentError):
                Lock(client, **bad)
            with pytest.raises(InvalidArgumentError):
                seckill.asyncio.Lock(aclient, **bad)
        with pytest.raises(InvalidArgumentError):
            Lock(client, "k").hold(wait_ms=-1)
        with pytest.raises(InvalidArgumentError):
            seckill.asyncio.Lock(aclient, "k").hold(wait_ms=-1)
        with pytest.raises(ValueError):  # InvalidArgumentError is a ValueError
            Lock(client, "k").hold(wait_ms=1.5)


def test_a_holder_stalled_ten_ttls_keeps_the_lock(server):
    client = redis.Redis(port=server, protocol=PROTOCOL)
    lock = Lock(client, "lock:stall", ttl_ms=200)
    refused = []
    with lock.hold(wait_ms=0) as guard:
        stop = threading.Event()

        def contender():
            while not stop.is_set():
                try:
                    Lock(client, "lock:stall", ttl_ms=200).hold(wait_ms=0).release()
                    refused.append(False)
                except LockTimeout:
                    refused.append(True)

        thread = threading.Thread(target=contender)
        thread.start()
        time.sleep(2.0)  # the holder's slow call: 10x the TTL
        stop.set()
        thread.join()
        guard.check()
        assert not guard.lost.is_set()
        assert _owner(client, "lock:stall") == guard.token
        assert refused and all(refused), "nobody else was granted the lock during the stall"
    assert _owner(client, "lock:stall") is None, "released"


def test_a_release_hands_the_lock_to_the_waiters_at_once_in_fifo_order(server):
    client = redis.Redis(port=server, protocol=PROTOCOL)
    granted = []

    def waiter(tag):
        other = Lock(client, "lock:fifo", ttl_ms=60_000).hold(wait_ms=30_000)
        granted.append((tag, other))

    # A 60 s lease: a grant within the second below is a handoff, not an expiry.
    with Lock(client, "lock:fifo", ttl_ms=60_000).hold(wait_ms=0) as guard:
        first = threading.Thread(target=waiter, args=("first",))
        first.start()
        wait_until(lambda: _info(client, "lock:fifo")["waiters"] == 1, "the first waiter to queue")
        second = threading.Thread(target=waiter, args=("second",))
        second.start()
        wait_until(lambda: _info(client, "lock:fifo")["waiters"] == 2, "the second waiter to queue")
    wait_until(lambda: len(granted) == 1, "the first waiter's grant", timeout=1.0)
    assert granted[0][0] == "first" and granted[0][1].fence > guard.fence
    assert _owner(client, "lock:fifo") == granted[0][1].token
    granted[0][1].release()
    wait_until(lambda: len(granted) == 2, "the second waiter's grant", timeout=1.0)
    assert granted[1][0] == "second" and granted[1][1].fence > granted[0][1].fence
    granted[1][1].release()
    first.join()
    second.join()


_FROZEN_HOLDER = textwrap.dedent(
    """
    import sqlite3, sys, redis
    from seckill import Lock, LockLost
    port, protocol, db = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    guard = Lock(redis.Redis(port=port, protocol=protocol), "lock:frozen", ttl_ms=300).hold(wait_ms=0)
    print("held", guard.fence, flush=True)
    sys.stdin.readline()  # SIGSTOP lands here; the parent writes a line after SIGCONT
    lost = guard.lost.wait(1.0)
    try:
        guard.check()
        checked = "passed"
    except LockLost:
        checked = "raised"
    # Written anyway, as a holder that skipped the check would: the fence refuses it.
    con = sqlite3.connect(db)
    rows = con.execute("UPDATE stock SET qty = 1, fence = ? WHERE id = 1 AND fence < ?",
                       (guard.fence, guard.fence)).rowcount
    con.commit()
    print("lost" if lost else "not-lost", checked, rows, flush=True)
    """
)


def test_a_frozen_holder_is_told_it_lost_and_its_fenced_write_is_refused(server, tmp_path):
    db = str(tmp_path / "stock.db")
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE stock (id INTEGER PRIMARY KEY, qty INTEGER, fence INTEGER)")
    con.execute("INSERT INTO stock VALUES (1, 100, 0)")
    con.commit()
    holder = subprocess.Popen([sys.executable, "-c", _FROZEN_HOLDER, str(server), str(PROTOCOL), db],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        held = holder.stdout.readline().split()
        assert held[0] == "held", held
        frozen_fence = int(held[1])
        os.kill(holder.pid, signal.SIGSTOP)
        client = redis.Redis(port=server, protocol=PROTOCOL)
        with Lock(client, "lock:frozen", ttl_ms=10_000).hold(wait_ms=5_000) as guard:
            assert guard.fence > frozen_fence
            guard.check()
            rows = con.execute("UPDATE stock SET qty = 99, fence = ? WHERE id = 1 AND fence < ?",
                               (guard.fence, guard.fence)).rowcount
            con.commit()
            assert rows == 1
            os.kill(holder.pid, signal.SIGCONT)
            holder.stdin.write("go\n")
            holder.stdin.flush()
            lost, checked, rows = holder.stdout.readline().split()
        assert (lost, checked, rows) == ("lost", "raised", "0")
        assert con.execute("SELECT qty, fence FROM stock").fetchone() == (99, guard.fence)
    finally:
        holder.kill()
        holder.wait()


def _lost_within_a_ttl(guard, fault_started: float, ttl_ms: int) -> None:
    """``lost`` fires, and no later than the TTL after the last renewal (which was before the
    fault started, or during it, and the lease's deadline says when)."""
    last_deadline = guard.lease.deadline
    assert guard.lost.wait(5.0), "lost never fired"
    lost_at = time.monotonic()
    latest = max(last_deadline, guard.lease.deadline) + guard.settings.margin_ms / 1000
    print(f"lost {1000 * (lost_at - fault_started):.0f} ms after the fault; bound {ttl_ms} ms after the last renewal")
    assert lost_at - fault_started <= ttl_ms / 1000 + 0.05
    assert lost_at <= latest + 0.05
    with pytest.raises(LockLost):
        guard.check()


def test_lost_fires_within_a_ttl_when_the_server_is_paused(server):
    client = redis.Redis(port=server, protocol=PROTOCOL)
    admin = redis.Redis(port=server, single_connection_client=True)
    with Lock(client, "lock:paused", ttl_ms=300).hold(wait_ms=0) as guard:
        time.sleep(0.25)  # a renewal or two on the way
        admin.execute_command("CLIENT", "PAUSE", 1_000, "ALL")
        _lost_within_a_ttl(guard, time.monotonic(), 300)


def test_lost_fires_within_a_ttl_when_the_watchdog_connection_is_cut(server):
    client = redis.Redis(port=server, protocol=PROTOCOL)
    admin = redis.Redis(port=server, single_connection_client=True)
    admin.ping()
    try:
        with Lock(client, "lock:cut", ttl_ms=300).hold(wait_ms=0) as guard:
            time.sleep(0.25)
            # Every other connection killed, and no new one let in.
            admin.config_set("maxclients", 1)
            admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            _lost_within_a_ttl(guard, time.monotonic(), 300)
            admin.config_set("maxclients", 10_000)
    finally:
        admin.config_set("maxclients", 10_000)


def test_failovers_lose_unreplicated_grants_only(own_cluster):
    client = redis.RedisCluster(host="127.0.0.1", port=own_cluster[0].port, protocol=PROTOCOL)
    # Unreplicated grant (replicas=0) made while the replica is frozen: lost to the failover.
    master, replica = master_and_replica(own_cluster, "lock:a")
    os.kill(replica.process.pid, signal.SIGSTOP)
    # Its link cut too: else the grant waits in the frozen replica's socket and arrives later.
    redis.Redis(port=master.port).execute_command("CLIENT", "KILL", "TYPE", "replica")
    guard = Lock(client, "lock:a", ttl_ms=3_000, replicas=0).hold(wait_ms=0)
    promote(own_cluster, replica, master)
    assert guard.lost.wait(10.0), "the next renewal finds the grant gone"
    assert "answered 0" in guard.lost_reason
    with pytest.raises(LockLost):
        guard.check()
    with Lock(client, "lock:a", ttl_ms=3_000, replicas=0).hold(wait_ms=0) as successor:
        assert successor.fence > guard.fence
    guard.release()

    # With the default (a replica must have it), nothing is granted while the replica is frozen,
    # and a grant made before the freeze survives the promotion.
    name = next(f"lock:{n}" for n in range(100) if master_and_replica(own_cluster, f"lock:{n}")[1])
    master, replica = master_and_replica(own_cluster, name)
    survivor = Lock(client, name, ttl_ms=5_000).hold(wait_ms=0)
    os.kill(replica.process.pid, signal.SIGSTOP)
    with pytest.raises(LockTimeout) as refused:
        Lock(client, "{" + name + "}:other", ttl_ms=5_000, replica_timeout_ms=200).hold(wait_ms=1_000)
    assert "no replica acknowledged" in refused.value.reason
    assert _owner(redis.Redis(port=master.port), "{" + name + "}:other") is None, "the refused grant was handed back"
    promote(own_cluster, replica, master)
    # Renewals now reach the promoted replica, which has the grant; its lease goes on.
    renewed_from = survivor.lease.deadline
    wait_until(lambda: survivor.lease.deadline > renewed_from + 1, "a renewal on the promoted replica", timeout=10)
    survivor.check()
    assert _owner(redis.Redis(port=replica.port), name) == survivor.token
    survivor.release()


def test_a_hundred_threads_hold_one_lock_one_at_a_time_in_fence_order(server):
    client = redis.Redis(port=server, protocol=PROTOCOL, max_connections=400)
    lock = Lock(client, "lock:many", ttl_ms=300)
    inside, fences, overlaps = [0], [], []
    mutex = threading.Lock()

    def holder():
        with lock.hold(wait_ms=60_000) as guard:
            with mutex:
                inside[0] += 1
                overlaps.append(inside[0])
                fences.append(guard.fence)
            time.sleep(0.002)
            guard.check()
            with mutex:
                inside[0] -= 1

    threads = [threading.Thread(target=holder) for _ in range(100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(fences) == 100 and max(overlaps) == 1, "never two holders at once"
    assert fences == sorted(fences) and len(set(fences)) == 100, "fences strictly increase in grant order"
    assert _owner(client, "lock:many") is None
    _no_renewal_outlives_its_guard(client)


def _no_renewal_outlives_its_guard(client) -> None:
    """Nothing is left to renew, and no LOCK.EXTEND reaches the server over three renewal
    periods (of the 300 ms leases above) after the last release."""
    assert WATCHDOG.watched() == 0
    extends = lambda: int(client.info("commandstats").get("cmdstat_lock.extend", {}).get("calls", 0))
    before = extends()
    time.sleep(0.3)  # an absence: nothing to await
    assert extends() == before, "a released guard was renewed"


def test_a_hundred_tasks_hold_one_lock_one_at_a_time_and_run_is_cancelled_on_loss(server):
    async def main():
        client = redis.asyncio.Redis(port=server, protocol=PROTOCOL)
        lock = seckill.asyncio.Lock(client, "lock:tasks", ttl_ms=300)
        inside, fences, overlaps = [0], [], []

        async def holder():
            async with lock.hold(wait_ms=60_000) as guard:
                inside[0] += 1
                overlaps.append(inside[0])
                fences.append(guard.fence)
                await asyncio.sleep(0.002)
                guard.check()
                inside[0] -= 1

        await asyncio.gather(*(holder() for _ in range(100)))
        assert len(fences) == 100 and max(overlaps) == 1, "never two holders at once"
        assert fences == sorted(fences) and len(set(fences)) == 100
        assert asyncio.all_tasks() == {asyncio.current_task()}, "no watchdog task outlives its guard"
        _no_renewal_outlives_its_guard(redis.Redis(port=server))

        # run(): the routine is cancelled the moment the lease is lost (the server paused).
        admin = redis.asyncio.Redis(port=server)
        cancelled = asyncio.Event()

        async def slow_call():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        async with lock.hold(wait_ms=0) as guard:
            assert await guard.run(asyncio.sleep(0.01, result="done")) == "done"
            await admin.execute_command("CLIENT", "PAUSE", 1_000, "ALL")
            paused = time.monotonic()
            with pytest.raises(LockLost):
                await guard.run(slow_call())
            assert cancelled.is_set() and time.monotonic() - paused <= 0.35
        await client.aclose() if hasattr(client, "aclose") else await client.close()

    asyncio.run(main())


@pytest.mark.parametrize("page", ["README.md", "docs/locks.md"])
def test_the_lock_example_runs(server, page):
    """The fenced-lock block of the README and of docs/locks.md, on this test's server."""
    import pathlib

    text = (pathlib.Path(__file__).resolve().parents[3] / page).read_text(encoding="utf-8")
    block = text.split("<!-- lock-example -->\n```python\n", 1)[1].split("```", 1)[0]
    block = block.replace("redis.Redis()", f"redis.Redis(port={server}, protocol={PROTOCOL})")
    exec(compile(block, page, "exec"), {})
    assert _owner(redis.Redis(port=server), "lock:stock:42") is None, "released by the with"


def test_a_grant_asked_again_after_a_lost_answer_waits_only_what_is_left(server):
    """The waiter's connection is cut (CLIENT KILL) while it waits in the server's queue: it
    asks again with the same token, for what is left of wait_ms, not for all of it again."""
    client = redis.Redis(port=server, protocol=PROTOCOL)
    admin = redis.Redis(port=server, single_connection_client=True)
    with Lock(client, "lock:again", ttl_ms=60_000).hold(wait_ms=0):
        outcome = []

        def waiter():
            started = time.monotonic()
            try:
                Lock(client, "lock:again", ttl_ms=60_000).hold(wait_ms=1_500)
            except LockTimeout as timeout:
                outcome.append((time.monotonic() - started, timeout.reason))

        thread = threading.Thread(target=waiter)
        thread.start()
        wait_until(lambda: _info(admin, "lock:again")["waiters"] == 1, "the waiter to queue")
        time.sleep(0.5)  # half way through its wait
        admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        # The kill freed the waiter (waiters 0): one in the queue now has asked again.
        wait_until(lambda: _info(admin, "lock:again")["waiters"] == 1, "the waiter to ask again")
        thread.join()
        took, reason = outcome[0]
        print(f"LockTimeout after {took:.2f} s for wait_ms=1500, the answer lost at ~0.5 s")
        assert took < 1.5 + 0.3, f"waited {took:.2f} s: the whole wait again"
        assert "held by another" in reason or "no answer" in reason


def test_a_waiter_unblocked_by_the_server_waits_on_and_gets_the_lock(server):
    """A master that turns replica under a failover unblocks its blocked clients with
    ``UNBLOCKED`` (the faults run met it 45 times in 20 minutes); ``CLIENT UNBLOCK .. ERROR``
    does the same here. Nothing was granted, so the waiter asks again within its ``wait_ms``
    and gets the lock when it is released, instead of a raw ResponseError."""
    client = redis.Redis(port=server, protocol=PROTOCOL)
    lock = Lock(client, "unblocked", ttl_ms=10_000)
    first = lock.hold(wait_ms=0)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(Lock(client, "unblocked", ttl_ms=10_000).hold(wait_ms=10_000)))
    waiter.start()

    def blocked_ids() -> list:
        return [c["id"] for c in client.client_list() if c.get("cmd") == "lock.acquire" and "b" in c.get("flags", "")]

    wait_until(lambda: blocked_ids(), "the waiter to block")
    for client_id in blocked_ids():
        assert client.client_unblock(client_id, error=True)
    wait_until(lambda: blocked_ids(), "the waiter to block again")
    first.release()
    waiter.join()
    assert len(got) == 1 and got[0].fence > first.fence
    got[0].release()

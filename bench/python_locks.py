"""The locks' rows of `make bench`: seckill.Lock against redis-py's own Lock on one server.

- Uncontended: hold + release per second on one thread, seckill (LOCK.ACQUIRE + LOCK.RELEASE
  on the lock's own connection, plus the watchdog thread a guard starts) against redis-py's
  Lock (SET NX PX, then its Lua compare-and-delete), 3 rounds interleaved; with each round's
  server time per call from INFO commandstats.
- Handoff: a holder releases while one waiter waits; the time from the release call to the
  waiter's grant. seckill's waiter waits in the server (LOCK.ACQUIRE ... WAIT); redis-py's
  polls (blocking=True, its default 0.1 s sleep between tries).

Prints one line of numbers: ours/s theirs/s our_acquire_usec our_release_usec set_usec
evalsha_usec our_p50_ms our_p99_ms their_p50_ms their_p99_ms.
Usage: python python_locks.py port holds handoffs"""

import statistics
import sys
import threading
import time
from typing import Callable, Dict, List

import redis

import seckill

PORT, HOLDS, HANDOFFS = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


def usec_per_call(admin: redis.Redis) -> Dict[str, float]:
    stats = admin.info("commandstats")
    return {name: float(fields["usec_per_call"]) for name, fields in stats.items()}


def ours(round_: int) -> float:
    client = redis.Redis(port=PORT)
    lock = seckill.Lock(client, f"bench:lock:ours:{round_}", ttl_ms=30_000)
    started = time.monotonic()
    for _ in range(HOLDS):
        lock.hold(wait_ms=0).release()
    return HOLDS / (time.monotonic() - started)


def theirs(round_: int) -> float:
    client = redis.Redis(port=PORT)
    lock = client.lock(f"bench:lock:theirs:{round_}", timeout=30)
    started = time.monotonic()
    for _ in range(HOLDS):
        lock.acquire(blocking=False)
        lock.release()
    return HOLDS / (time.monotonic() - started)


def handoffs(hold: Callable[[], Callable[[], None]], queued: Callable[[], bool]) -> List[float]:
    """Milliseconds from each release to the waiting thread's grant."""
    latencies = []
    for _ in range(HANDOFFS):
        release = hold()
        granted: List[float] = []
        waiter_release: List[Callable[[], None]] = []

        def waiter() -> None:
            waiter_release.append(hold())
            granted.append(time.monotonic())

        thread = threading.Thread(target=waiter)
        thread.start()
        while not queued():
            time.sleep(0.001)
        released = time.monotonic()
        release()
        thread.join()
        latencies.append((granted[0] - released) * 1000)
        waiter_release[0]()
    return latencies


def our_handoffs() -> List[float]:
    client = redis.Redis(port=PORT)
    lock = seckill.Lock(client, "bench:lock:handoff:ours", ttl_ms=30_000)

    def hold() -> Callable[[], None]:
        guard = lock.hold(wait_ms=30_000)
        return lambda: guard.release() and None

    def queued() -> bool:
        info = client.execute_command("LOCK.INFO", "bench:lock:handoff:ours")
        if isinstance(info, list):
            info = dict(zip(info[::2], info[1::2]))
        return int(info[b"waiters"]) == 1

    return handoffs(hold, queued)


def their_handoffs() -> List[float]:
    client = redis.Redis(port=PORT)

    def hold() -> Callable[[], None]:
        lock = client.lock("bench:lock:handoff:theirs", timeout=30, thread_local=False)
        lock.acquire(blocking=True)
        return lock.release

    # A polling waiter shows nowhere in the server: give it a moment to start polling.
    started = [0.0]

    def queued() -> bool:
        if not started[0]:
            started[0] = time.monotonic()
        if time.monotonic() - started[0] < 0.02:
            return False
        started[0] = 0.0
        return True

    return handoffs(hold, queued)


def percentile(values: List[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    admin = redis.Redis(port=PORT)
    mine, others = [], []
    acquire_us, release_us, set_us, evalsha_us = [], [], [], []
    for round_ in range(3):
        admin.config_resetstat()
        mine.append(ours(round_))
        stats = usec_per_call(admin)
        acquire_us.append(stats.get("cmdstat_lock.acquire", 0.0))
        release_us.append(stats.get("cmdstat_lock.release", 0.0))
        admin.config_resetstat()
        others.append(theirs(round_))
        stats = usec_per_call(admin)
        set_us.append(stats.get("cmdstat_set", 0.0))
        evalsha_us.append(stats.get("cmdstat_evalsha", 0.0))
    mine_handoffs, their_latencies = our_handoffs(), their_handoffs()
    print(
        f"{statistics.median(mine):.0f} {statistics.median(others):.0f} "
        f"{statistics.median(acquire_us):.2f} {statistics.median(release_us):.2f} "
        f"{statistics.median(set_us):.2f} {statistics.median(evalsha_us):.2f} "
        f"{percentile(mine_handoffs, 0.5):.3f} {percentile(mine_handoffs, 0.99):.3f} "
        f"{percentile(their_latencies, 0.5):.3f} {percentile(their_latencies, 0.99):.3f}"
    )


main()

"""The lock's pure core, no server: the settings' checks, the lease's clock arithmetic and the
guard's check, every branch."""

import threading

import pytest

from seckill import InvalidArgumentError, LockLost
from seckill._lock import GuardState, Lease, LockSettings, ReplicaCount


def settings(**overrides):
    values = dict(name="k", ttl_ms=3_000, renew_ms=None, max_hold_ms=None, replicas=None,
                  replica_timeout_ms=1_000, margin_ms=None)
    values.update(overrides)
    return LockSettings.build(**values)


def test_defaults_renew_at_a_third_with_redlocks_drift_margin():
    s = settings()
    assert (s.renew_ms, s.margin_ms, s.replicas) == (1_000, 32, None)
    assert settings(name=b"k").name == "k"


@pytest.mark.parametrize("bad", [
    dict(name=""), dict(name=7), dict(ttl_ms=2), dict(ttl_ms=True), dict(ttl_ms=3.0),
    dict(margin_ms=3_000), dict(margin_ms=-1), dict(renew_ms=0), dict(renew_ms=2_968),
    dict(max_hold_ms=0), dict(replicas=-1), dict(replica_timeout_ms=0),
])
def test_every_bad_setting_is_an_invalid_argument(bad):
    with pytest.raises(InvalidArgumentError):
        settings(**bad)


def test_the_lease_runs_from_each_acknowledged_send_less_the_margin():
    lease = Lease(settings(), 100.0)
    assert lease.deadline == pytest.approx(100.0 + 2.968)
    assert lease.delay(100.0) == pytest.approx(1.0)
    assert not lease.expired(102.9) and lease.expired(102.968)
    lease.renewed(101.0, 3_000)
    assert lease.deadline == pytest.approx(103.968) and lease.next_renewal == pytest.approx(102.0)
    lease.renewed(100.5, 3_000)  # an older send acknowledged late never shortens the lease
    assert lease.deadline == pytest.approx(103.968)
    lease.failed(102.0)
    assert lease.next_renewal == pytest.approx(102.05)
    assert lease.delay(110.0) == 0.0


def test_max_hold_cuts_the_renewals_short_then_stops_them():
    lease = Lease(settings(max_hold_ms=4_000), 100.0)
    assert lease.renewal_ttl(101.0) == 3_000
    assert lease.renewal_ttl(102.5) == 1_500
    assert lease.renewal_ttl(103.99) is None
    # A cap shorter than the TTL: no renewal at all, the watchdog sleeps until the deadline.
    short = Lease(settings(max_hold_ms=1_000), 100.0)
    assert short.renewal_ttl(100.99) is None
    assert short.delay(100.99) == pytest.approx(102.968 - 100.99)


def test_check_reads_the_clock_itself_so_a_frozen_process_knows_on_waking():
    guard = GuardState(settings(), ReplicaCount(None), "t", 1, 0.0, threading.Event())
    # Monotonic time is far past 0 + ttl: no watchdog ran, yet check() knows.
    with pytest.raises(LockLost):
        guard.check()
    assert guard.lost.is_set() and "deadline" in guard.lost_reason
    guard.lose("a later reason")
    assert "deadline" in guard.lost_reason, "the first reason stays"


def test_a_released_guard_checks_as_lost():
    import time

    guard = GuardState(settings(), ReplicaCount(None), "t", 1, time.monotonic(), threading.Event())
    guard.check()
    guard.released = True
    with pytest.raises(LockLost, match="released"):
        guard.check()


def test_a_released_guard_has_no_next_step():
    """The watchdog stops on its own once the guard is released: an asyncio cancellation can
    be swallowed by wait_for (Python 3.11) when it meets a reply, and the watchdog then renewed
    a released lease forever (1 run in 3 of the 100-task test hung for its whole wait)."""
    import time

    from seckill._lock import next_step

    guard = GuardState(settings(), ReplicaCount(None), "t", 1, time.monotonic() - 2.0, threading.Event())
    assert next_step(guard, time.monotonic()) == (3_000, pytest.approx(0.968, abs=0.05))
    guard.released = True
    assert next_step(guard, time.monotonic()) is None
    assert not guard.lost.is_set(), "a release is not a loss"

"""The waiting room's pure client parts, no server needed: ``TurnWatch`` (how a place moves by
the sale's events, and when only the server can tell) and a partitioned sale's rate split."""

from seckill._waiting import TurnWatch
from seckill.info import SaleEvent


def _event(n: int, kind: str, user: str = "", remaining: int = 5) -> SaleEvent:
    return SaleEvent(0, "s", f"1-{n}", {"event": kind, "user": user, "remaining": str(remaining)})


def test_a_quiet_stream_asks_the_server():
    watch = TurnWatch(b"me", "s", "0-0", 4)
    assert watch.read([]) is True
    assert watch.place == 4 and watch.last_id == "0-0"


def test_the_first_admissions_ask_then_later_ones_count_down():
    watch = TurnWatch(b"me", "s", "0-0", 10)
    assert watch.read([_event(1, "admit", "a")]) is True, "START's shuffle may have moved it"
    assert watch.last_id == "1-1" and watch.place == 10
    watch.asked(6)
    assert watch.synced and watch.place == 6
    assert watch.read([_event(2, "admit", "b"), _event(3, "try", "b"), _event(4, "admit", "c")]) is False
    assert watch.place == 4 and watch.last_id == "1-4"


def test_its_own_admission_ends_the_wait():
    watch = TurnWatch(b"me", "s", "0-0", 2, synced=True)
    assert watch.read([_event(1, "admit", "a"), _event(2, "admit", "me"), _event(3, "admit", "z")]) is False
    assert watch.place == 0 and watch.done


def test_more_admissions_than_places_ahead_ask():
    watch = TurnWatch(b"me", "s", "0-0", 2, synced=True)
    assert watch.read([_event(1, "admit", "a"), _event(2, "admit", "b")]) is True
    assert watch.place == 2, "left for the server's answer"


def test_a_sale_that_may_be_sold_out_asks_and_none_keeps_the_place():
    watch = TurnWatch(b"me", "s", "0-0", 3, synced=True)
    assert watch.read([_event(1, "try", "a", remaining=0)]) is True
    watch.asked(None)
    assert watch.place == 3
    watch.asked(-1)
    assert watch.done


def test_a_partitioned_rooms_rate_is_split_by_stock_share_as_the_rust_crate_splits_it():
    from fractions import Fraction

    from seckill import SaleSpec

    assert SaleSpec(stock=8, partitions=4, queue=True, admit_rate=(4, 100)).room_rate(0) == (1, 100)
    spec = SaleSpec(stock=1_001, partitions=16, queue=True, admit_rate=(100, 100))
    assert spec.room_rate(0) == (9, 143)
    rates = [spec.room_rate(i) for i in range(16)]
    assert sum(Fraction(rate[0], rate[1]) for rate in rates if rate) == 1
    assert SaleSpec(stock=2, partitions=4, queue=True, admit_rate=(4, 100)).room_rate(3) == (1, 100)
    big = SaleSpec(stock=2**63 - 1, partitions=3, queue=True, admit_rate=(2**63 - 1, 2**63 - 3)).room_rate(1)
    assert big is not None and 1 <= big[0] <= 2**63 - 1 and 1 <= big[1] <= 2**63 - 1
    assert SaleSpec(stock=8, partitions=4).room_rate(0) is None

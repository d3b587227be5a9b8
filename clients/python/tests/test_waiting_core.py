"""The waiting room's pure client parts, no server needed: ``Follower`` (how the waiters'
places move by the room's entries, and when only the server can tell) and a partitioned sale's
rate split."""

from seckill._waiting import Follower, Place, Waiter
from seckill.info import SaleEvent


def _event(n: int, kind: str, user: str = "", remaining: int = 5, qty: int = 0) -> SaleEvent:
    return SaleEvent(0, "s", f"1-{n}", {"event": kind, "user": user, "remaining": str(remaining),
                                         "qty": str(qty)})


def _follower(*places: int, drawn: bool = True) -> "tuple[Follower, list[Waiter]]":
    follower = Follower("k", "s", "1-0", None, drawn)
    waiters = []
    for n, place in enumerate(places):
        waiter = follower.add(f"w{n}")
        follower.told(waiter, (place, -1), "1-0")
        waiters.append(waiter)
    return follower, waiters


def test_admissions_and_drops_move_everyone_up_and_the_admitted_one_is_told_its_turn():
    follower, (a, b) = _follower(3, 5)
    turned, ask = follower.read([_event(1, "admit", "x"), _event(2, "drop", "y"), _event(3, "purchase", "x")])
    assert (turned, ask) == ([], False)
    assert (follower.current(a), follower.current(b)) == (1, 3)
    turned, ask = follower.read([_event(4, "admit", "w0")])
    assert turned == [a] and a.done and follower.current(a) == 0
    assert follower.current(b) == 2 and follower.last_id == "1-4"


def test_a_place_never_reaches_the_turn_without_the_entry_that_admits_it():
    follower, (a,) = _follower(2)
    follower.read([_event(1, "admit", "x"), _event(2, "admit", "y")])
    assert follower.current(a) == 1 and a.ask, "the server is asked"


def test_a_leaver_ahead_moves_the_waiters_behind_it_up_and_no_one_else():
    follower, (a, b, c) = _follower(2, 4, 6)
    follower.read([_event(1, "leave", "x", qty=3)])
    assert [int(follower.current(w)) for w in (a, b, c)] == [2, 3, 5]
    follower.read([_event(2, "leave", "x", qty=0)])
    assert [int(follower.current(w)) for w in (a, b, c)] == [2, 3, 5], "an admitted leaver moves no one"


def test_a_draw_a_possible_sell_out_and_a_dropped_waiter_ask_the_server():
    follower, (a,) = _follower(4, drawn=False)
    assert follower.read([_event(1, "draw", qty=9)]) == ([], True) and follower.drawn
    assert follower.read([_event(2, "purchase", "x", remaining=0)])[1] is True
    assert follower.read([_event(3, "drop", "w0")])[1] is True and a.ask
    assert follower.read([_event(4, "lapse", "z")]) == ([], False)


def test_a_place_told_as_of_an_older_entry_counts_the_departures_after_it():
    follower, _ = _follower()
    follower.read([_event(1, "admit", "x"), _event(2, "admit", "y"), _event(3, "admit", "z")])
    late = follower.add("late")
    follower.told(late, (5, -1), "1-1")  # told after entry 1: entries 2 and 3 moved it since
    assert follower.current(late) == 3
    early = follower.add("early")
    follower.told(early, (5, -1), "1-9")  # told as of an entry the reader has not read yet
    assert early.pending is not None
    follower.read([_event(9, "admit", "x"), _event(10, "admit", "y")])
    assert early.pending is None and follower.current(early) == 4


def test_a_stream_that_went_back_after_a_failover_is_read_from_its_last_entry():
    follower, (a,) = _follower(5)
    follower.read([_event(7, "admit", "x")])
    follower.rewound("1-3")  # the promoted replica had entries up to 1-3
    assert follower.last_id == "1-3"
    follower.told(a, (4, -1), "1-3")
    assert follower.current(a) == 4
    follower.read([_event(4, "admit", "y")])
    assert follower.current(a) == 3
    follower.rewound("1-9")
    assert follower.last_id == "1-4", "a newer entry is no rewind"


def test_the_server_answers_its_turn_a_sell_out_or_not_in_the_room():
    follower, (a, b, c) = _follower(2, 3, 4)
    follower.told(a, (0, 0), "1-0")
    follower.told(b, (-1, -1), "1-0")
    follower.told(c, None, "1-0")
    assert (a.done, b.done, follower.current(b)) == (True, True, -1)
    assert c.ask and not c.done
    assert follower.asking() == [c]


def test_before_start_the_number_is_how_many_wait_and_the_eta_counts_down():
    follower, _ = _follower(drawn=False)
    waiter = follower.add("u")
    follower.told(waiter, (40, 60_000), "1-0")
    place = follower.current(waiter)
    assert (int(place), place.drawn) == (40, False)
    assert 59_000 <= place.eta_ms <= 60_000
    assert repr(Place(3, 10, True)) == "Place(3, eta_ms=10, drawn=True)"


def test_two_pages_of_one_user_share_a_waiter_until_the_last_goes():
    follower = Follower("k", "s", "0-0", None, True)
    first, second = follower.add("u"), follower.add("u")
    assert first is second
    assert follower.remove(first) is False and "u".encode() in follower.waiters
    assert follower.remove(second) is True and not follower.waiters


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

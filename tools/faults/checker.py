"""Judges one run: the history, the faults, and the final state read from the servers once
every fault was healed. Pure: no Redis here (``test_checker.py`` feeds it synthetic runs).

Errors (a run with any is red):
- oversell: ``sold + held > stock + restocked``, or the units not conserved
  (``remaining + held + sold + in_flight != stock + restocked``);
- over LIMIT: a user owning more than the sale's LIMIT;
- double purchase: a user owning more units than its purchases that were ``ok`` or ``info``
  (each user buys once: a second unit is a purchase applied twice, or one told ``fail``);
- lost kept purchase: ``try_buy`` on a handle of the default durability answered "bought"
  (a replica acknowledged it) and not owned at the end (``buy``; ``buy_acked`` with an
  acknowledgement, in histories of the harness before #51);
- lost kept confirm: ``confirm`` (default durability) answered True and the unit not owned at
  the end;
- fences: the store accepted writes out of fence order, or two holders' accepted writes
  interleaved, or one fence granted to two holders;
- holds (the sale made with HOLD, each user holding once, then confirming, cancelling or
  leaving the hold to expire): the sale's units conserved as above, a user owning more than
  its holds that were ``ok`` or ``info``, or owning a unit it never sent a confirm for (a
  cancelled or expired hold that did not go back to stock).

Reported, not judged: purchases answered by a ``durability="master"`` handle and lost (the
window the default closes), with when; ``NotReplicated`` answers, owned at the end or not;
``info`` purchases owned or not; availability per phase."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .history import INFO, OK, Fault, Op


@dataclass
class SaleState:
    """A sale's totals and buyers, read at the end."""

    stock: int
    restocked: int
    remaining: int
    held: int
    sold: int
    in_flight: int
    limit: int
    owned: Dict[str, int]


@dataclass
class FinalState:
    sale: SaleState
    #: The store's accepted writes in the order it applied them: (fence, holder, at).
    writes: List[Tuple[int, str, float]]
    #: The sale made with HOLD, once no hold is left (None: a run without it).
    holds: Optional[SaleState] = None


@dataclass
class Verdict:
    errors: List[str] = field(default_factory=list)
    lost_unreplicated: List[Tuple[float, str]] = field(default_factory=list)
    info_owned: int = 0
    info_not_owned: int = 0
    not_replicated_owned: int = 0
    not_replicated_not_owned: int = 0
    phases: Dict[str, Dict[str, Any]] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not self.errors


def _by_user(ops: List[Op], *names: str) -> Dict[str, List[Op]]:
    by_user: Dict[str, List[Op]] = defaultdict(list)
    for op in ops:
        if op.f in names:
            by_user[op.args["user"]].append(op)
    return by_user


#: The purchases of the run: kept (default durability), master-only, and the old harness's.
PURCHASES = ("buy", "buy_master", "buy_acked")


def _kept(op: Op) -> bool:
    """Whether ``op`` was told "bought" with a replica's acknowledgement."""
    if op.type != OK:
        return False
    if op.f == "buy":
        return True
    return op.f == "buy_acked" and isinstance(op.value, list) and op.value[1] >= 1


def _not_replicated(op: Op) -> bool:
    return op.type == INFO and isinstance(op.value, dict) and "not_replicated" in op.value


def check_units(final: SaleState, verdict: Verdict) -> None:
    if final.sold + final.held > final.stock + final.restocked:
        verdict.errors.append(f"oversell: sold {final.sold} + held {final.held} > stock {final.stock}"
                              f" + restocked {final.restocked}")
    if final.remaining + final.held + final.sold + final.in_flight != final.stock + final.restocked:
        verdict.errors.append("units not conserved: remaining + held + sold + in flight = "
                              f"{final.remaining + final.held + final.sold + final.in_flight}, "
                              f"stock + restocked = {final.stock + final.restocked}")
    for user, qty in final.owned.items():
        if qty > final.limit:
            verdict.errors.append(f"over LIMIT: {user} owns {qty} (LIMIT {final.limit})")


def check_sale(ops: List[Op], final: SaleState, verdict: Verdict) -> None:
    check_units(final, verdict)
    for user, purchases in _by_user(ops, *PURCHASES).items():
        owned = final.owned.get(user, 0)
        possible = sum(1 for op in purchases if op.type in (OK, INFO))
        if owned > possible:
            verdict.errors.append(f"double purchase: {user} owns {owned}, "
                                  f"{possible} purchase(s) may have applied")
        told = sum(1 for op in purchases if op.type == OK)
        if any(_kept(op) for op in purchases) and owned < told:
            verdict.errors.append(f"lost kept purchase: {user} (acknowledged by a replica) owns {owned}")
        elif owned < told:
            verdict.lost_unreplicated += [(op.end, user) for op in purchases if op.type == OK]
        for op in purchases:
            if _not_replicated(op):
                if owned:
                    verdict.not_replicated_owned += 1
                else:
                    verdict.not_replicated_not_owned += 1
            elif op.type == INFO:
                if owned:
                    verdict.info_owned += 1
                else:
                    verdict.info_not_owned += 1


def check_holds(ops: List[Op], final: SaleState, verdict: Verdict) -> None:
    check_units(final, verdict)
    if final.held:
        verdict.errors.append(f"holds left at the end: {final.held} units (every hold expires)")
    holds, confirms = _by_user(ops, "hold"), _by_user(ops, "confirm")
    for user, owned in final.owned.items():
        possible = sum(1 for op in holds.get(user, []) if op.type in (OK, INFO))
        if owned > possible:
            verdict.errors.append(f"double hold: {user} owns {owned}, {possible} hold(s) may have applied")
        if owned and not any(op.type in (OK, INFO) for op in confirms.get(user, [])):
            verdict.errors.append(f"unconfirmed hold kept: {user} owns {owned} and never confirmed")
    for user, ops_of_user in confirms.items():
        for op in ops_of_user:
            if op.type == OK and op.value is True and not final.owned.get(user):
                verdict.errors.append(f"lost kept confirm: {user} (acknowledged by a replica) owns nothing")
            elif _not_replicated(op):
                if final.owned.get(user):
                    verdict.not_replicated_owned += 1
                else:
                    verdict.not_replicated_not_owned += 1


def check_locks(ops: List[Op], final: FinalState, verdict: Verdict) -> None:
    last: Optional[Tuple[int, str, float]] = None
    for write in final.writes:
        if last is not None:
            if write[0] < last[0]:
                verdict.errors.append(f"store accepted fence {write[0]} ({write[1]}) after {last[0]} ({last[1]})")
            elif write[0] == last[0] and write[1] != last[1]:
                verdict.errors.append(f"fence {write[0]} written by two holders: {last[1]} and {write[1]}")
        last = write
    holders: Dict[int, str] = {}
    for op in ops:
        if op.f == "lock" and op.type == OK:
            fence = op.value["fence"]
            if holders.setdefault(fence, op.process) != op.process:
                verdict.errors.append(f"fence {fence} granted twice: to {holders[fence]} and {op.process}")


def _phase(at: float, faults: List[Fault]) -> str:
    for fault in faults:
        if fault.start <= at <= fault.end:
            return "fault"
        if fault.end < at <= fault.end + 10:
            return "healing"
    return "healthy"


def availability(ops: List[Op], faults: List[Fault], verdict: Verdict) -> None:
    """Per phase: the share of purchases answered ok or fail (a definite answer), and latency."""
    by_phase: Dict[str, List[Op]] = defaultdict(list)
    for op in ops:
        if op.f in PURCHASES:
            by_phase[_phase(op.start, faults)].append(op)
    for phase, phase_ops in sorted(by_phase.items()):
        latencies = sorted(op.end - op.start for op in phase_ops)
        verdict.phases[phase] = {
            "operations": len(phase_ops),
            "definite": sum(1 for op in phase_ops if op.type != INFO) / len(phase_ops),
            "bought": sum(1 for op in phase_ops if op.type == OK),
            "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        }


def check(ops: List[Op], faults: List[Fault], final: FinalState) -> Verdict:
    verdict = Verdict()
    check_sale(ops, final.sale, verdict)
    if final.holds is not None:
        check_holds(ops, final.holds, verdict)
    check_locks(ops, final, verdict)
    availability(ops, faults, verdict)
    return verdict

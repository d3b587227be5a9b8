"""The faults harness's own tests (``make faults-test``, inside ``make test``): the checker on
synthetic runs, one rule broken at a time; a smoke run (one partition, one short pause, one
kill) that must be valid and leave nothing behind; Ctrl-C in the middle of a run cleaning up.
With ``FAULTS_PLANTS=1`` (``make soak``), real runs with each planted bug, each found."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from . import net
from .checker import FinalState, SaleState, check
from .history import FAIL, INFO, OK, Fault, Op

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def buy(user: str, kind: str, value: object = 0, f: str = "buy", at: float = 1.0) -> Op:
    return Op("p", f, at, at + 0.01, kind, {"user": user}, value)


def final(owned: Dict[str, int], sold: int = 0, stock: int = 10,
          writes: Optional[List[Tuple[int, str, float]]] = None, held: int = 0) -> FinalState:
    sold = sold or sum(owned.values())
    return FinalState(SaleState(stock, 0, stock - sold - held, held, sold, 0, 2, owned), writes or [])


def errors(ops: List[Op], state: FinalState) -> List[str]:
    return check(ops, [Fault("kill", ["n"], 0.5, 2.0)], state).errors


def test_a_clean_run_is_valid() -> None:
    ops = [buy("a", OK), buy("b", FAIL, -1), buy("c", INFO, "timeout"), buy("d", OK, [3, 1], "buy_acked")]
    assert errors(ops, final({"a": 1, "c": 1, "d": 1})) == []


def test_oversell_and_units_not_conserved_are_errors() -> None:
    assert any("oversell" in e for e in errors([], final({}, sold=11)))
    broken = final({"a": 1})
    broken.sale.remaining += 1
    assert any("not conserved" in e for e in errors([buy("a", OK)], broken))


def test_over_limit_is_an_error() -> None:
    assert any("over LIMIT" in e for e in errors([buy("a", OK)] * 3, final({"a": 3})))


def test_a_purchase_applied_twice_or_told_failed_and_owned_is_an_error() -> None:
    assert any("double purchase" in e for e in errors([buy("a", OK)], final({"a": 2})))
    assert any("double purchase" in e for e in errors([buy("a", FAIL, -1)], final({"a": 1})))


def test_a_lost_kept_purchase_is_an_error_a_master_only_one_is_reported() -> None:
    assert any("lost kept purchase" in e for e in errors([buy("a", OK)], final({})))
    assert any("lost kept purchase" in e for e in errors([buy("a", OK, [3, 1], "buy_acked")], final({})))
    verdict = check([buy("a", OK, [3, 0], "buy_acked"), buy("b", OK, 3, "buy_master")], [], final({}))
    assert verdict.valid and len(verdict.lost_unreplicated) == 2


def test_not_replicated_answers_are_counted_owned_or_not() -> None:
    not_replicated = {"not_replicated": 3}
    verdict = check([buy("a", INFO, not_replicated), buy("b", INFO, not_replicated)], [], final({"a": 1}))
    assert verdict.valid
    assert (verdict.not_replicated_owned, verdict.not_replicated_not_owned) == (1, 1)
    assert (verdict.info_owned, verdict.info_not_owned) == (0, 0)


def test_a_kept_unconfirmed_hold_a_double_hold_holds_left_and_a_lost_kept_confirm_are_errors() -> None:
    def run(owned: Dict[str, int], ops: List[Op], held: int = 0) -> List[str]:
        state = final({})
        sold = sum(owned.values())
        state.holds = SaleState(10, 0, 10 - sold - held, held, sold, 0, 1, owned)
        return check(ops, [], state).errors

    confirmed = [buy("a", OK, 3, "hold"), buy("a", OK, True, "confirm")]
    assert run({"a": 1}, confirmed) == []
    assert run({"a": 1}, [buy("a", INFO, "timeout", "hold"), buy("a", INFO, "timeout", "confirm")]) == []
    assert run({}, [buy("b", OK, 3, "hold"), buy("b", OK, 1, "cancel")]) == []
    assert any("unconfirmed hold kept" in e for e in run({"b": 1}, [buy("b", OK, 3, "hold"), buy("b", OK, 1, "cancel")]))
    assert any("unconfirmed hold kept" in e for e in run({"c": 1}, [buy("c", OK, 3, "hold")]))
    double = run({"a": 1}, [buy("a", FAIL, -1, "hold"), buy("a", OK, True, "confirm")])
    assert any("double hold" in e for e in double)
    assert any("holds left" in e for e in run({}, [], held=1))
    assert any("lost kept confirm" in e for e in run({}, confirmed))


def test_fences_out_of_order_shared_or_granted_twice_are_errors() -> None:
    assert any("after" in e for e in errors([], final({}, writes=[(5, "x", 1.0), (4, "y", 2.0)])))
    assert any("two holders" in e for e in errors([], final({}, writes=[(5, "x", 1.0), (5, "y", 2.0)])))
    grants = [Op("x", "lock", 1, 2, OK, {}, {"fence": 7}), Op("y", "lock", 3, 4, OK, {}, {"fence": 7})]
    assert any("granted twice" in e for e in errors(grants, final({})))
    assert errors([], final({}, writes=[(4, "x", 1.0), (4, "x", 1.5), (5, "y", 2.0)])) == []


def _env() -> Dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tools"))


def _run(*args: str, out: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "faults", "--out", out, *args], env=_env(),
                          capture_output=True, text=True, timeout=300)


def _nothing_left(out: str) -> None:
    # The tables of runs that are over (a run's table is named by its pid): another run going on
    # beside the tests (make faults in another terminal) keeps its own.
    over = [t for t in net.tables() if not os.path.exists(f"/proc/{t[len(net.PREFIX):]}")] if net.available() else []
    assert not over, over
    assert not os.path.exists(os.path.join(out, "nodes"))
    leftover = subprocess.run(["pgrep", "-f", out], capture_output=True, text=True).stdout.split()
    assert leftover == [], f"processes left: {leftover}"


def test_a_smoke_run_is_valid_and_leaves_nothing_behind(tmp_path: Path) -> None:
    out = str(tmp_path / "smoke")
    run = _run("--smoke", "--seed", "7", out=out)
    print(run.stdout)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "VALID" in run.stdout and os.path.exists(os.path.join(out, "timeline.png"))
    _nothing_left(out)


def test_ctrl_c_in_the_middle_of_a_run_cleans_up(tmp_path: Path) -> None:
    out = str(tmp_path / "interrupted")
    run = subprocess.Popen([sys.executable, "-m", "faults", "--out", out, "--seconds", "60", "--seed", "8"],
                           env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(out, "history-2.jsonl")):  # the workload started
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.05)
    run.send_signal(signal.SIGINT)
    try:
        run.wait(timeout=60)
    finally:
        run.kill()  # a run that ignored Ctrl-C fails here, and leaves nothing either
    _nothing_left(out)


PLANTS = [("no-ids", "double purchase"), ("unfenced-store", "store accepted fence"),
          ("counter-fences", "granted twice")]


@pytest.mark.skipif(os.environ.get("FAULTS_PLANTS") != "1", reason="make soak runs the planted bugs")
@pytest.mark.parametrize("plant,found", PLANTS)
def test_each_planted_bug_is_found(tmp_path: Path, plant: str, found: str) -> None:
    run = _run("--smoke", "--seed", "9", "--plant", plant, out=str(tmp_path / plant))
    print(run.stdout)
    assert run.returncode == 1 and found in run.stdout, run.stdout + run.stderr

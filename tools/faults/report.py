"""The run's report: ``report.md`` (the verdict, the faults, the figures) and ``timeline.png``
in the manner of Jepsen's plots: purchases per second by outcome, their latency, a shaded band
per fault, and a mark where an acknowledged purchase was lost."""

from __future__ import annotations

import os
from collections import Counter
from typing import List

from .checker import PURCHASES, Verdict
from .history import FAIL, INFO, OK, Fault, Op

COLOURS = {"partition": "#f4a3a3", "kill": "#a3c4f4", "pause-short": "#f4e3a3", "pause-long": "#e3a3f4",
           "bridge": "#f4c3a3", "ring": "#c3a3f4", "loss": "#a3f4e3", "kill-empty": "#a3a3f4", "migrate": "#c3f4a3"}


def plot(ops: List[Op], faults: List[Fault], verdict: Verdict, path: str, t0: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buys = [op for op in ops if op.f in PURCHASES]
    fig, (rate, latency) = plt.subplots(2, 1, figsize=(12, 6), sharex=True)
    for kind, colour in ((OK, "tab:green"), (FAIL, "tab:blue"), (INFO, "tab:orange")):
        per_second = Counter(int(op.end - t0) for op in buys if op.type == kind)
        seconds = sorted(per_second)
        rate.plot(seconds, [per_second[s] for s in seconds], label=kind, color=colour, linewidth=1)
    rate.set_ylabel("purchases / s")
    rate.legend(loc="upper right")
    latency.scatter([op.start - t0 for op in buys], [(op.end - op.start) * 1000 for op in buys],
                    s=2, c=["tab:green" if op.type == OK else "tab:blue" if op.type == FAIL else "tab:orange"
                            for op in buys])
    latency.set_yscale("log")
    latency.set_ylabel("latency (ms)")
    latency.set_xlabel("seconds into the run")
    for axis in (rate, latency):
        for fault in faults:
            axis.axvspan(fault.start - t0, fault.end - t0, color=COLOURS.get(fault.kind, "#dddddd"), alpha=0.5)
        for at, _ in verdict.lost_unreplicated:
            axis.axvline(at - t0, color="red", linewidth=0.5)
    for fault in faults:
        rate.annotate(fault.kind, (fault.start - t0, rate.get_ylim()[1] * 0.95), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def during(at: float, faults: List[Fault]) -> str:
    """The kind of fault an answer at ``at`` came in (or within 2 s after), else "healthy"."""
    for fault in faults:
        if fault.start <= at <= fault.end + 2:
            return fault.kind
    return "healthy"


def markdown(seed: int, seconds: float, plants: List[str], faults: List[Fault], ops: List[Op],
             verdict: Verdict, t0: float) -> str:
    lines = [f"# Faults run: seed {seed}, {seconds:.0f} s" + (f", planted: {', '.join(plants)}" if plants else ""),
             "", f"**{'VALID' if verdict.valid else 'INVALID'}**: {len(verdict.errors)} error(s)."]
    lines += [f"- {error}" for error in verdict.errors[:50]]
    counts = Counter((op.f, op.type) for op in ops)
    lines += ["", "| operation | ok | fail | info |", "| --- | --- | --- | --- |"]
    for f in ("buy", "buy_master", "buy_acked", "hold", "confirm", "cancel", "lock"):
        lines.append(f"| {f} | {counts[(f, OK)]} | {counts[(f, FAIL)]} | {counts[(f, INFO)]} |")
    lines += ["", f"Purchases answered by a `durability=\"master\"` handle and lost (the window the default "
              f"closes): "
              f"{len(verdict.lost_unreplicated)}"
              + (f", at {', '.join(f'{at - t0:.1f} s' for at, _ in verdict.lost_unreplicated[:20])}"
                 if verdict.lost_unreplicated else "") + ".",
              "By fault: " + (", ".join(f"{kind} {n}" for kind, n in Counter(
                  during(at, faults) for at, _ in verdict.lost_unreplicated).most_common())
                  or "none") + " (the lost master-only purchases, by the fault they were answered in).",
              f"Answers `NotReplicated` (purchases, holds and confirms applied by the master, no replica's "
              f"acknowledgement in time): {verdict.not_replicated_owned} owned at the end, "
              f"{verdict.not_replicated_not_owned} not.",
              f"Purchases with an unknown outcome: {verdict.info_owned} owned, {verdict.info_not_owned} not.",
              "", "| phase | purchases | definite answers | bought | p50 ms | p99 ms |",
              "| --- | --- | --- | --- | --- | --- |"]
    for phase, figures in verdict.phases.items():
        lines.append(f"| {phase} | {figures['operations']} | {figures['definite']:.1%} | {figures['bought']} "
                     f"| {figures['p50_ms']:.1f} | {figures['p99_ms']:.1f} |")
    lines += ["", "| fault | targets | from | to |", "| --- | --- | --- | --- |"]
    lines += [f"| {f.kind} | {' '.join(f.targets)} | {f.start - t0:.1f} s | {f.end - t0:.1f} s |" for f in faults]
    lines += ["", "![timeline](timeline.png)", ""]
    return "\n".join(lines)


def write(out: str, seed: int, seconds: float, plants: List[str], faults: List[Fault], ops: List[Op],
          verdict: Verdict, t0: float) -> None:
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(markdown(seed, seconds, plants, faults, ops, verdict, t0))
    plot(ops, faults, verdict, os.path.join(out, "timeline.png"), t0)

"""Which nodes failed lately, so that a call that needs a failed node fails at once instead of
waiting its own timeout, and a call that does not need it never waits for it.

A node that refused a connection, dropped one, or let a call time out is *down*. A call to a
down node raises ``NotSentError`` (retryable: nothing was written) without touching the
network, until the node's next probe time; then one call is let through as the probe, and its
answer says whether the node is back. Probes come 0.1 s after the failure, then twice as far
apart, 1 s at most. A new slot map that sends a key elsewhere needs no probe: the health is
kept per node address, not per key. The Rust crate's ``health.rs`` keeps the same rules."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict

import redis

#: The first probe of a node after its failure, and the longest wait between two probes.
FIRST_PROBE_S = 0.1
MAX_PROBE_S = 1.0


class NotSentError(redis.exceptions.ConnectionError):
    """A call that was never written to a socket: its node is known down, or no connection to
    it could be made. The server never saw it, so the call did not run; sending it again is
    safe and may be answered once the node is back or replaced."""


@dataclass
class _Down:
    probe_at: float
    interval: float
    probing: bool = False


class NodeHealth:
    """The down nodes of one client (its sync threads or its event loop's tasks)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._down: Dict[str, _Down] = {}
        self._mutex = threading.Lock()

    def check(self, node: str) -> None:
        """Raises ``NotSentError`` if ``node`` is down and this call is not its probe."""
        if not self._down:  # the healthy case: no lock taken
            return
        with self._mutex:
            down = self._down.get(node)
            if down is None:
                return
            if down.probing or self._clock() < down.probe_at:
                raise NotSentError(f"node {node} is down (a call to it failed lately); not sent")
            down.probing = True

    def failed(self, node: str) -> None:
        """A call to ``node`` failed as a down node's would: down until its next probe."""
        with self._mutex:
            down = self._down.get(node)
            interval = FIRST_PROBE_S if down is None else min(down.interval * 2, MAX_PROBE_S)
            self._down[node] = _Down(self._clock() + interval, interval)

    def answered(self, node: str) -> None:
        """``node`` answered a call: up."""
        if node in self._down:
            with self._mutex:
                self._down.pop(node, None)

    def is_down(self, node: str) -> bool:
        return node in self._down

"""The faults of a run: a seeded schedule (the seed is printed; the same seed draws the same
kinds, lengths and choices), each fault healed and the cluster converged before the next.

- ``partition``: a master and one client group on one side, every other node and client on
  the other, for 2.5 node timeouts: the majority promotes the master's replica while the old
  master still takes writes from the clients on its side, until it sees it lost.
- ``kill``: SIGKILL of a master, restarted from its AOF after 2 node timeouts (it comes back
  as a replica of the promoted one).
- ``pause-short`` / ``pause-long``: SIGSTOP of a master for 0.8 node timeout (no failover:
  calls time out, then are answered) or two (a failover behind the frozen master's back)."""

from __future__ import annotations

import random
import signal
import time
from dataclasses import dataclass
from typing import Callable, List, Optional

from .cluster import Cluster, Node
from .history import Fault
from .net import Network

KINDS = ["partition", "kill", "pause-short", "pause-long"]
#: The smoke run of ``make test``: one partition, one kill.
SMOKE = ["partition", "kill"]
#: The planted bugs' runs add the short pause, which a client without attempt ids answers with
#: a second purchase.
PLANTED = ["partition", "pause-short", "kill"]


@dataclass
class Step:
    kind: str
    quiet_s: float  # healthy time before the fault


def schedule(seed: int, seconds: float, node_timeout_s: float, kinds: Optional[List[str]] = None) -> List[Step]:
    """Faults for a run of about ``seconds`` (``kinds`` given: exactly those, in order)."""
    rng = random.Random(seed)
    if kinds is not None:
        return [Step(kind, 1.0 + rng.random()) for kind in kinds]
    steps, planned = [], 0.0
    while planned < seconds:
        step = Step(rng.choice(KINDS), 1.0 + 3.0 * rng.random())
        steps.append(step)
        # A fault and its healing take about 5 node timeouts, the quiet time before it aside.
        planned += step.quiet_s + 5 * node_timeout_s
    return steps


class Nemesis:
    def __init__(self, cluster: Cluster, network: Optional[Network], client_addresses: List[str],
                 lock_key: str, seed: int, record: Callable[[Fault], None]) -> None:
        self.cluster, self.network = cluster, network
        self.client_addresses, self.lock_key = client_addresses, lock_key
        self.rng = random.Random(seed ^ 0x5EC)
        self.record = record
        self.timeout_s = cluster.node_timeout_ms / 1000

    def run(self, steps: List[Step], stop_at: float) -> None:
        for step in steps:
            time.sleep(step.quiet_s)
            if time.time() >= stop_at:
                return
            if step.kind == "partition" and self.network is None:
                continue  # no root or no nft: said at the start
            getattr(self, step.kind.replace("-", "_"))()
            self.cluster.wait_converged()

    def _victim(self) -> Node:
        """A master, the lock key's more often than the others: its grants are the ones a
        failover can lose."""
        masters = self.cluster.masters()
        lock_master = self.cluster.master_of(self.lock_key)
        return lock_master if self.rng.random() < 0.5 else self.rng.choice(masters)

    def partition(self) -> None:
        assert self.network is not None
        victim = self._victim()
        clients = self.rng.choice(self.client_addresses)
        side_a = [victim.address, clients]
        side_b = [n.address for n in self.cluster.nodes if n is not victim] + \
                 [c for c in self.client_addresses if c != clients]
        start = time.time()
        self.network.partition(side_a, side_b)
        time.sleep(2.5 * self.timeout_s)
        self.network.heal()
        self.record(Fault("partition", [victim.name, clients], start, time.time()))

    def kill(self) -> None:
        victim = self.rng.choice(self.cluster.masters())
        start = time.time()
        victim.kill()
        time.sleep(2 * self.timeout_s)
        victim.start()
        self.record(Fault("kill", [victim.name], start, time.time()))

    def _pause(self, kind: str, length_s: float) -> None:
        victim = self._victim()
        start = time.time()
        victim.signal(signal.SIGSTOP)
        time.sleep(length_s)
        victim.signal(signal.SIGCONT)
        self.record(Fault(kind, [victim.name], start, time.time()))

    def pause_short(self) -> None:
        self._pause("pause-short", 0.8 * self.timeout_s)

    def pause_long(self) -> None:
        self._pause("pause-long", 2 * self.timeout_s)

"""Client metrics for Prometheus: what the application's sale handles did, by operation and
outcome (``pip install './clients/python[metrics]'``, which brings ``prometheus_client``)::

    import prometheus_client
    import seckill.metrics

    seckill.metrics.enable()                 # on prometheus_client's default registry
    prometheus_client.start_http_server(9100)

From then on every call of a sale handle in the process (``Sale``, ``PartitionedSale``, sync
and ``seckill.asyncio``), and each ``hold`` and ``release`` of a ``Lock`` (operations
``lock_hold`` and ``lock_release``), counts once in
``seckill_client_calls_total{operation, outcome}`` and is timed in
``seckill_client_call_duration_seconds{operation, outcome}``; each send of a purchase or a
cancel made again after a lost answer counts in ``seckill_client_retries_total{operation}``.
Outcomes: a purchase's ``bought``, ``sold_out``, ``over_limit``, ``not_started``, ``ended``,
``not_admitted``, ``local_refusal`` (the sold-out cache answered); a lock's ``not_granted``
(``LockTimeout``) and ``lost`` (a release that found the lease gone); any call's ``ok``,
``unknown`` (``OutcomeUnknownError``, or a call cancelled on its way), ``not_replicated``,
``unavailable``, ``error``. The Rust crate records the same
names (its ``metrics`` feature); docs/monitoring.md has the alert on unknown outcomes.
"""

from __future__ import annotations

import weakref
from typing import Optional, Tuple

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from . import _observe

__all__ = ["BUCKETS", "ClientMetrics", "disable", "enable"]

#: The latency histogram's buckets, seconds: a purchase on loopback takes well under a
#: millisecond, one that waits for a replica a few, one retried through a failover seconds.
BUCKETS: Tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                              1.0, 2.5, 5.0, 10.0, 30.0)


def _base(name: str) -> str:
    """``prometheus_client`` adds ``_total`` to a counter's name itself."""
    return name[: -len("_total")] if name.endswith("_total") else name


class ClientMetrics:
    """The three metrics, registered in one registry; ``enable`` makes the process record in
    them."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ("operation", "outcome")
        self.calls = Counter(_base(_observe.CALLS),
                             "Calls of seckill sale handles and locks, by operation and outcome.",
                             labels, registry=registry)
        self.duration = Histogram(
            _base(_observe.DURATION),
            "Time a call of a seckill sale handle or lock took, retries and replica acknowledgement included.",
            labels, registry=registry, buckets=BUCKETS)
        self.retries = Counter(_base(_observe.RETRIES),
                               "Sends of a purchase or a cancel made again after a lost answer.",
                               ("operation",), registry=registry)

    def call(self, operation: str, outcome: str, seconds: float) -> None:
        self.calls.labels(operation, outcome).inc()
        self.duration.labels(operation, outcome).observe(seconds)

    def retry(self, operation: str) -> None:
        self.retries.labels(operation).inc()


_registered: "weakref.WeakKeyDictionary[CollectorRegistry, ClientMetrics]" = weakref.WeakKeyDictionary()


def enable(registry: Optional[CollectorRegistry] = None) -> ClientMetrics:
    """Records every call of the process's sale handles in ``registry`` (prometheus_client's
    default one if None) from now on, and returns the metrics. Calling it again with the same
    registry changes nothing; with another, records there instead."""
    registry = REGISTRY if registry is None else registry
    metrics = _registered.get(registry)
    if metrics is None:
        metrics = _registered[registry] = ClientMetrics(registry)
    _observe.install(metrics)
    return metrics


def disable() -> None:
    """Records nothing from now on (the metrics keep their values)."""
    _observe.install(None)

"""The shop's ``/metrics``, for Prometheus: the pages its buyers were shown (``shop_pages_total``,
by route and step: how many were told "ordered", "sold out", "we are confirming", "the shop is
busy") and the seckill package's client metrics (every purchase, confirm, cancel... by outcome,
with its latency; clients/metrics.txt).

uvicorn runs several worker processes and a scrape reaches one of them: each worker writes its
counts to files in ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's multiprocess mode, set by
``shop.launch`` before the workers start) and any worker answers a scrape with the sum of all.
Without that variable (one process, the app imported by a test) the process's own registry
answers."""

from __future__ import annotations

import os

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, multiprocess

import seckill.metrics

#: The environment variable prometheus_client's multiprocess mode reads at its import.
MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"

PAGES = Counter("shop_pages", "Responses that showed a buyer a step of the shop, by route and step",
                ["route", "step"])

CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST


def enable() -> None:
    """Records the package's client calls (once per worker process)."""
    seckill.metrics.enable()


def shown(route: str, step: str) -> None:
    PAGES.labels(route, step).inc()


def exposition() -> bytes:
    """What a scrape reads: every worker's counts summed, or this process's own."""
    if os.environ.get(MULTIPROC_DIR):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return prometheus_client.generate_latest(registry)
    return prometheus_client.generate_latest()

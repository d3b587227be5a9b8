"""The shop's parts for its tests: servers from the Python package's tests (one server, or a
cluster of 3 masters with a replica each), the fake payment provider and the shop on uvicorn
(``shop.launch``, as ``make shop`` starts them), each stopped at the end."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

SHOP_DIR = Path(__file__).resolve().parents[1]
REPO = SHOP_DIR.parents[1]
sys.path.insert(0, str(SHOP_DIR))
sys.path.insert(0, str(REPO / "tools"))  # chromium.py

from shop import launch  # noqa: E402

_spec = importlib.util.spec_from_file_location("seckill_test_servers", REPO / "clients/python/tests/conftest.py")
assert _spec and _spec.loader
servers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(servers)

SCREENSHOTS = REPO / "target/screenshots"


@dataclass
class ShopParts:
    """A running shop: its URL, database, provider URL, and how to restart it."""

    target: str
    workdir: Path
    provider_port: int
    shop_port: int
    workers: int
    env: Dict[str, str] = field(default_factory=dict)
    processes: List[Any] = field(default_factory=list)
    shop: Optional[Any] = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.shop_port}"

    @property
    def provider(self) -> str:
        return f"http://127.0.0.1:{self.provider_port}"

    @property
    def db(self) -> str:
        return str(self.workdir / "orders.db")

    def start_shop(self) -> None:
        self.shop = launch.start_shop(self.shop_port, {
            "SHOP_REDIS": self.target, "SHOP_SALE": "drop", "SHOP_DB": self.db,
            "SHOP_PAYMENTS": self.provider, **self.env}, workers=self.workers, log=self.workdir / "shop.log")

    def kill_shop(self) -> None:
        """SIGKILL to the shop's uvicorn and every worker: nothing finishes its request."""
        assert self.shop is not None
        launch.stop(self.shop, sig=9)


@contextlib.contextmanager
def running_shop(target: str, *, workers: int = 2, latency_ms: str = "50", failure_rate: float = 0.0,
                 env: Optional[Dict[str, str]] = None) -> Iterator[ShopParts]:
    workdir = Path(tempfile.mkdtemp(prefix="seckill-shop-test-"))
    parts = ShopParts(target, workdir, servers._free_port(), servers._free_port(), workers, env or {})
    try:
        parts.processes.append(launch.start_provider(parts.provider_port, latency_ms, failure_rate,
                                                     workdir / "provider.log"))
        parts.start_shop()
        yield parts
    finally:
        if parts.shop is not None:
            launch.stop(parts.shop)
        for process in parts.processes:
            launch.stop(process)
        if os.environ.get("SHOP_KEEP_LOGS"):
            print(f"the shop's logs: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def server() -> Iterator[int]:
    with servers._single_node(module=True) as port:
        yield port


@pytest.fixture
def cluster_nodes() -> Iterator[List[Any]]:
    with servers.cluster_nodes() as nodes:
        yield nodes

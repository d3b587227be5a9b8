"""Debian's ``prometheus`` for the shop's tests, on loopback, scraping the shop every second
(the exporter's tests have the same in Rust: exporter/tests/support/mod.rs)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import httpx

from conftest import servers


class Prometheus:
    def __init__(self, address: str) -> None:
        self.address = address

    def query(self, promql: str) -> List[Dict[str, Any]]:
        """An instant query's result vector."""
        reply = httpx.get(f"http://{self.address}/api/v1/query", params={"query": promql}, timeout=10)
        assert reply.status_code == 200, f"{promql}: {reply.text}"
        result: List[Dict[str, Any]] = reply.json()["data"]["result"]
        return result

    def by(self, promql: str, *labels: str) -> Dict[Tuple[str, ...], int]:
        """A query's values, keyed by the given labels' values (no label: the key ())."""
        return {tuple(series["metric"].get(label, "") for label in labels): int(float(series["value"][1]))
                for series in self.query(promql)}


@contextlib.contextmanager
def scraping(target: str) -> Iterator[Prometheus]:
    """A Prometheus scraping ``target`` (host:port) every second; stopped and removed after."""
    folder = Path(tempfile.mkdtemp(prefix="seckill-shop-prometheus-"))
    (folder / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        f"scrape_configs:\n  - job_name: shop\n    static_configs:\n      - targets: [\"{target}\"]\n")
    address = f"127.0.0.1:{servers._free_port()}"
    with open(folder / "prometheus.log", "wb") as log:
        process = subprocess.Popen(["prometheus", f"--config.file={folder / 'prometheus.yml'}",
                                    f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address={address}"],
                                   stdout=log, stderr=subprocess.STDOUT)
    try:
        def ready() -> bool:
            try:
                return httpx.get(f"http://{address}/-/ready", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        servers.wait_until(ready, "Prometheus to be ready", timeout=60)
        yield Prometheus(address)
    finally:
        process.kill()
        process.wait()
        shutil.rmtree(folder, ignore_errors=True)

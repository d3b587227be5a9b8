"""``make faults``: python -m faults [--seconds S] [--seed N] [--smoke] [--plant P,...]

Starts the cluster (3 masters + 3 replicas, each node on its own loopback address), creates a
partitioned sale, starts three client processes (each on its own address: a partition puts
one of them on the minority side), runs the nemesis, heals, waits for the cluster to converge,
reads the final state, checks the history and writes the report to ``--out`` (default
``faults-out/``, ignored by git). Exits 0 when the run is valid, 1 when the checker found an
error. Every node, nftables table and process it made is gone at the end, after Ctrl-C too."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import IO, Dict, List, Optional

import redis

import seckill
from seckill import SaleSpec

from . import net, report
from .checker import FinalState, SaleState, check
from .cluster import Cluster, die_with_parent, wait_until
from .history import Fault, Op, read, write
from .nemesis import PLANTED, SMOKE, Nemesis, schedule
from .store import FencedStore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = os.path.join(ROOT, "target", "release", "libseckill.so")
#: The Python client processes' source addresses, then the Rust one's (examples/faults_buyer.rs:
#: tokio buyers through `seckill_client::aio`, when built).
CLIENTS = ["127.0.0.21", "127.0.0.22", "127.0.0.23"]
RUST_CLIENT = "127.0.0.24"
RUST_BUYER = os.path.join(ROOT, "target", "release", "examples", "faults_buyer")
SALE, HOLDS, LOCK = "faults:sale", "faults:holds", "{faults}:lock"
PARTITIONS, LIMIT = 16, 2
#: The holds sale: 4 partitions, LIMIT 1, holds of 1.5 s; units per second of the run.
HOLDS_PARTITIONS, HOLDS_LIMIT, HOLD_MS, HOLDS_PER_S = 4, 1, 1_500, 40
#: Units per second of the run: about a third of what the buyers try, so that the sale sells
#: out in the middle of the run and both halves are seen under faults.
STOCK_PER_S = 300
PLANTS = ["no-ids", "unfenced-store", "counter-fences"]


def _spawn(workers: List[subprocess.Popen[bytes]], out: IO[str], env: Dict[str, str], args: List[str]) -> None:
    """Starts a client process writing to ``out``, kept in ``workers`` for the cleanup. Ctrl-C is
    held off meanwhile: one arriving between the fork and the append would leave the process
    out of the cleanup."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        workers.append(subprocess.Popen(args, stdout=out, env=env, preexec_fn=die_with_parent))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _stop_on_signals() -> None:
    """Ctrl-C and SIGTERM end the run through its cleanup. SIGINT is set explicitly: a process
    started in the background by a non-interactive shell inherits it ignored, and Python then
    installs no KeyboardInterrupt for it (the CI-style run here ignored Ctrl-C that way)."""
    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def sale_state(client: redis.RedisCluster, name: str, limit: int) -> SaleState:
    sale = seckill.PartitionedSale.open(client, name)
    info = sale.info()
    owned: Dict[str, int] = {}
    for buyer in sale.buyers():
        owned[buyer.user.decode()] = owned.get(buyer.user.decode(), 0) + buyer.qty
    return SaleState(info.stock, info.restocked, info.remaining, info.held, info.sold, info.in_flight, limit, owned)


def final_state(cluster: Cluster, store_path: str) -> FinalState:
    entry = cluster.entry()
    client = redis.RedisCluster(host=entry.address, port=entry.port)
    try:
        holds = seckill.PartitionedSale.open(client, HOLDS)
        # Every hold left expires within its 1.5 s, on the server's timer.
        wait_until(lambda: holds.info().held == 0, "the last holds to expire")
        return FinalState(sale_state(client, SALE, LIMIT), FencedStore(store_path).accepted(),
                          sale_state(client, HOLDS, HOLDS_LIMIT))
    finally:
        client.close()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--smoke", action="store_true",
                        help="one partition, one kill (with --plant, a short pause between them)")
    parser.add_argument("--plant", default="", help=f"comma-separated planted bugs: {', '.join(PLANTS)}")
    parser.add_argument("--node-timeout-ms", type=int, default=1_000)
    parser.add_argument("--min-replicas", type=int, default=0,
                        help="min-replicas-to-write on every node (max lag 1 s): a master cut from its "
                             "replicas refuses writes (docs/faults.md)")
    parser.add_argument("--out", default=os.path.join(ROOT, "faults-out"))
    options = parser.parse_args(argv)
    plants = [p for p in options.plant.split(",") if p]
    assert all(p in PLANTS for p in plants), f"plants: {PLANTS}"
    seed = options.seed if options.seed is not None else int.from_bytes(os.urandom(4), "big")
    print(f"faults: seed {seed} (replay with --seed {seed})", flush=True)
    _stop_on_signals()
    shutil.rmtree(options.out, ignore_errors=True)
    os.makedirs(options.out)
    network: Optional[net.Network] = None
    if net.available():
        net.remove_stale()
        network = net.Network()
    else:
        print("faults: no network partitions (they need root and nft); the other faults run", flush=True)
    cluster: Optional[Cluster] = None
    workers: List[subprocess.Popen[bytes]] = []
    try:
        module_args = ["fences", "counter"] if "counter-fences" in plants else []
        server_args = ["--min-replicas-to-write", str(options.min_replicas), "--min-replicas-max-lag", "1"] \
            if options.min_replicas else []
        cluster = Cluster(os.path.join(options.out, "nodes"), MODULE, options.node_timeout_ms, module_args, server_args)
        entry = cluster.entry()
        fixed = (PLANTED if plants else SMOKE) if options.smoke else None
        steps = schedule(seed, options.seconds, options.node_timeout_ms / 1000, fixed)
        seconds = sum(s.quiet_s for s in steps) + 6 * len(steps) * options.node_timeout_ms / 1000 + 3 \
            if options.smoke else options.seconds
        setup = redis.RedisCluster(host=entry.address, port=entry.port)
        spec = SaleSpec(stock=int(seconds * STOCK_PER_S), partitions=PARTITIONS, limit=LIMIT)
        sale_keys = seckill.PartitionedSale.create(setup, SALE, spec).keys
        seckill.PartitionedSale.create(setup, HOLDS, SaleSpec(stock=int(seconds * HOLDS_PER_S), partitions=HOLDS_PARTITIONS,
                                                              limit=HOLDS_LIMIT, hold_ms=HOLD_MS))
        setup.close()
        store_path = os.path.join(options.out, "store.sqlite")
        FencedStore(store_path)
        t0 = time.time()
        stop_at = t0 + seconds
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tools") + os.pathsep + os.environ.get("PYTHONPATH", ""))
        for n, address in enumerate(CLIENTS):
            out = open(os.path.join(options.out, f"history-{n}.jsonl"), "w")
            _spawn(workers, out, env,
                   [sys.executable, "-m", "faults.workload", "--name", f"c{n}", "--source", address,
                    "--entry", cluster.nodes[n].name, "--sale", SALE, "--holds", HOLDS, "--lock", LOCK, "--store", store_path,
                    "--seconds", str(seconds), "--seed", str(seed + n), "--plant", options.plant,
                    *(["--cache"] if n == 0 else [])])
        clients = list(CLIENTS)
        if os.path.exists(RUST_BUYER):
            clients.append(RUST_CLIENT)
            nodes = ",".join(f"redis://{node.name}/" for node in cluster.nodes)
            out = open(os.path.join(options.out, f"history-{len(CLIENTS)}.jsonl"), "w")
            # --run names the run on the command line, as the Python workers' paths do: the
            # Ctrl-C test finds whatever of the run is left by it.
            _spawn(workers, out, env,
                   [RUST_BUYER, "--name", "rust", "--source", RUST_CLIENT, "--nodes", nodes, "--sale", SALE,
                    "--seconds", str(seconds), "--run", options.out])
        else:
            print(f"faults: {RUST_BUYER} is missing (make examples): no Rust buyers", flush=True)
        faults: List[Fault] = []
        nemesis = Nemesis(cluster, network, clients, LOCK, sale_keys, seed, faults.append)
        nemesis.run(steps, stop_at)
        for worker in workers:
            worker.wait(timeout=max(stop_at - time.time(), 0) + 60)
        if network is not None:
            network.heal()
        cluster.wait_converged()
        final = final_state(cluster, store_path)
        with open(os.path.join(options.out, "final.json"), "w") as f:
            json.dump(dataclasses.asdict(final), f)
        ops: List[Op] = []
        for n in range(len(clients)):
            with open(os.path.join(options.out, f"history-{n}.jsonl")) as f:
                ops += list(read(f))
        ops.sort(key=lambda op: op.start)
        with open(os.path.join(options.out, "history.jsonl"), "w") as f:
            for record in [*faults, *ops]:
                write(f, record)
        verdict = check(ops, faults, final)
        report.write(options.out, seed, time.time() - t0, plants, faults, ops, verdict, t0)
        print(f"faults: {len(ops)} operations, {len(faults)} faults, "
              f"{'VALID' if verdict.valid else 'INVALID'}; report in {options.out}/report.md", flush=True)
        for error in verdict.errors[:10]:
            print(f"  {error}", flush=True)
        return 0 if verdict.valid else 1
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        if network is not None:
            network.remove()
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(os.path.join(options.out, "nodes"), ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

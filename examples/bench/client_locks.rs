//!
//! The client libraries' locks against redis-py's own `Lock` (bench/python_locks.py):
//! uncontended hold + release, and the handoff from a release to a waiting holder's grant.

use super::{Config, python_numbers};
use seckill_harness::Server;
use std::fmt::Write;

pub fn section(cfg: &Config) -> (String, String) {
    let server = Server::start();
    let holds = (cfg.requests / 30).max(300);
    let args = [server.port.to_string(), holds.to_string(), "50".to_string()];
    let n = python_numbers("python_locks.py", &args, 10);
    let (ours, theirs) = (n[0], n[1]);
    let mut md = String::new();
    writeln!(
        md,
        "\n## Locks in the client libraries\n\n| Python, one thread ({holds} holds, 3 rounds interleaved, median) | holds/s | server µs per call |\n| --- | ---: | ---: |"
    )
    .unwrap();
    writeln!(
        md,
        "| `seckill.Lock.hold(wait_ms=0)` + `release()` (LOCK.ACQUIRE, LOCK.RELEASE) | {ours:.0} | {:.2} + {:.2} |",
        n[2], n[3]
    )
    .unwrap();
    writeln!(
        md,
        "| redis-py `Lock.acquire(blocking=False)` + `release()` (SET NX PX, EVALSHA) | {theirs:.0} | {:.2} + {:.2} |",
        n[4], n[5]
    )
    .unwrap();
    writeln!(
        md,
        "\n| handoff, release to the waiter's grant (50 handoffs) | p50 ms | p99 ms |\n| --- | ---: | ---: |\n| `seckill.Lock`: the waiter waits in the server | {:.3} | {:.3} |\n| redis-py `Lock(blocking=True)`: the waiter polls | {:.3} | {:.3} |",
        n[6], n[7], n[8], n[9]
    )
    .unwrap();
    let uncontended = ours / theirs;
    let handoff = n[8] / n[6];
    let targets = format!(
        "| Python lock uncontended hold + release >= 1.5x redis-py Lock | {uncontended:.2}x | {} |\n| Python lock handoff p50 >= 20x lower than redis-py's polling Lock | {handoff:.0}x | {} |\n",
        if uncontended >= 1.5 { "yes" } else { "**no**" },
        if handoff >= 20.0 { "yes" } else { "**no**" }
    );
    (md, targets)
}

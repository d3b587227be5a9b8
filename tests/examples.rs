//! Runs the client examples, and small versions of `make demo` and `make bench`, so that none
//! of them can rot. `make test` builds the examples and the Python virtual environment first.

use seckill_harness::Server;
use std::path::Path;
use std::process::Command;

fn run(program: &Path, args: &[&str]) -> String {
    assert!(
        program.exists(),
        "{} is missing: run `make test`, which builds the examples and .venv",
        program.display()
    );
    let out = Command::new(program)
        .args(args)
        .output()
        .expect("run example");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{} failed:\n{stdout}\n{}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `program args` twice in a row against the same server, as a user runs an example again:
/// the second run's output, which must equal the first's.
fn run_twice(program: &Path, args: &[&str]) -> String {
    let first = run(program, args);
    let second = run(program, args);
    assert_eq!(
        first,
        second,
        "{} ran differently the second time",
        program.display()
    );
    second
}

#[test]
fn rust_client_example_sells_exactly_the_stock() {
    let server = Server::start();
    let out = run_twice(&example_binary("sale"), &[&server.url()]);
    assert!(out.contains("10 winners, sold 10 of 10"), "{out}");
}

/// Runs `examples/python/<script>` (redis-py in `.venv`) twice against a fresh server.
fn run_python_example(script: &str) -> String {
    let server = Server::start();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join(".venv/bin/python");
    let script = root.join("examples/python").join(script);
    run_twice(
        &python,
        &[script.to_str().unwrap(), &server.port.to_string()],
    )
}

#[test]
fn python_client_example_sells_exactly_the_stock() {
    let out = run_python_example("sale.py");
    assert!(out.contains("10 winners, sold 10 of 10"), "{out}");
}

#[test]
fn python_order_stream_reconciles_with_the_sale() {
    let out = run_python_example("order_stream.py");
    assert!(
        out.contains("7 orders, 5 paid, 2 expired unpaid, reconciled with SECKILL.BUYERS"),
        "{out}"
    );
}

#[test]
fn python_order_service_has_an_order_row_for_every_unit_sold() {
    let out = run_python_example("order_service.py");
    assert!(
        out.contains(
            "order service: 20 paid orders, every one a final unit; 0 given back; 0 in stock"
        ),
        "{out}"
    );
}

fn example_binary(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/release/examples")
        .join(name)
}

#[test]
fn demo_smoke_run_shows_module_rows_exact() {
    let out = run(&example_binary("demo"), &["--smoke"]);
    assert!(
        out.contains("module rows: exactly 20 sold, 0 oversold, 0 duplicates"),
        "{out}"
    );
    for row in [
        "1. naive",
        "2. patched",
        "3. module: SECKILL.TRY",
        "4. module: LOCK.ACQUIRE",
    ] {
        assert!(out.contains(row), "{row} missing:\n{out}");
    }
}

#[test]
fn bench_smoke_run_writes_table_csv_and_chart() {
    let dir = std::env::temp_dir().join(format!("seckill-bench-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = run(
        &example_binary("bench"),
        &["--smoke", "--out", dir.to_str().unwrap()],
    );
    assert!(out.contains("| SECKILL.TRY success | 16 |"), "{out}");
    let md = std::fs::read_to_string(dir.join("latest.md")).unwrap();
    assert!(md.contains("| target | measured | met |"), "{md}");
    let csv = std::fs::read_to_string(dir.join("latest.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 2 * 14, "{csv}");
    assert!(csv.starts_with("row,pipeline,ops,vs_incr,vs_lua,usec_per_call\n"));
    let png = std::fs::read(dir.join("latest.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG chart");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn python_asyncio_example_sells_exactly_the_stock() {
    let out = run_python_example("asyncio_sale.py");
    assert!(out.contains("100 winners, sold 100 of 100"), "{out}");
}

#[test]
fn python_fenced_lock_example_refuses_the_stale_write() {
    let out = run_python_example("fenced_lock.py");
    assert!(
        out.contains("20 refills, fences increasing, a stale write refused"),
        "{out}"
    );
}

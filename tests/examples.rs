//! Runs the Rust and Python client examples against a real server, so they cannot rot.
//! `make test` builds the Rust example and the Python virtual environment first.

mod common;

use common::Server;
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

#[test]
fn rust_client_example_sells_exactly_the_stock() {
    let server = Server::start();
    let binary = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/examples/sale");
    let out = run(&binary, &[&server.url()]);
    assert!(out.contains("10 winners, sold 10 of 10"), "{out}");
}

#[test]
fn python_client_example_sells_exactly_the_stock() {
    let server = Server::start();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join(".venv/bin/python");
    let script = root.join("examples/python/sale.py");
    let out = run(
        &python,
        &[script.to_str().unwrap(), &server.port.to_string()],
    );
    assert!(out.contains("10 winners, sold 10 of 10"), "{out}");
}

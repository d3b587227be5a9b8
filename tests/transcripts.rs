//! Runs every `tests/transcripts/*.txt` (read by `seckill_harness::transcript`) through
//! `redis-cli` (`REDIS_CLI`) against a fresh server and compares each reply with the
//! transcript. A file named `*.resp3.txt` talks RESP3 (`redis-cli -3`).

use seckill_harness::transcript::{self, files, first_code_block, parse};
use seckill_harness::{Server, cli_binary};
use std::io::Write;
use std::process::{Command, Stdio};

fn run_cli(port: u16, resp3: bool, command: &str) -> Vec<String> {
    let mut args = vec!["-p".to_string(), port.to_string(), "--no-raw".to_string()];
    if resp3 {
        args.push("-3".to_string());
    }
    let mut child = Command::new(cli_binary())
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run redis-cli");
    writeln!(child.stdin.take().unwrap(), "{command}").unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn every_transcript_replays_exactly() {
    let files = files();
    assert!(files.len() >= 3, "transcripts found: {files:?}");
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in &files {
        // Readable fences (1, 2, 3): the opt-in counter mode, which the README's lock
        // transcripts say they use.
        let server = Server::start_with(&["fences", "counter"]);
        let text = std::fs::read_to_string(file).unwrap();
        let resp3 = file.to_string_lossy().ends_with(".resp3.txt");
        for step in parse(&text) {
            let got = run_cli(server.port, resp3, &step.command);
            checked += 1;
            if got != step.expected {
                failures.push(format!(
                    "{}:{}: > {}\n  expected: {:?}\n  got:      {:?}",
                    file.file_name().unwrap().to_string_lossy(),
                    step.line,
                    step.command,
                    step.expected,
                    got
                ));
            }
        }
    }
    println!("{checked} transcript steps in {} files", files.len());
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn readme_tour_is_the_tour_transcript() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let tour = std::fs::read_to_string(transcript::dir().join("tour.txt")).unwrap();
    let start = readme
        .find("<!-- tour:start -->")
        .expect("tour start marker");
    let end = readme.find("<!-- tour:end -->").expect("tour end marker");
    let block = &readme[start..end];
    let body = first_code_block(block);
    let tour_body: String = tour
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        body.trim(),
        tour_body.trim(),
        "README tour and tests/transcripts/tour.txt differ"
    );
}

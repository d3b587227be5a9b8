//! docs/any-client.md's recipes, run as written: Node.js (ioredis and node-redis, pinned by
//! `examples/node/package-lock.json`), Go (redigo, from Debian's packages), plain redis-py,
//! Valkey GLIDE and coredis (pinned by `examples/python/recipes-requirements.txt`),
//! each against a single server and a 3-master cluster with a replica each; the fences through ioredis and the
//! pitfalls shown with real faults (`examples/node/hazards.mjs`). `make recipes` runs them
//! (once per CI run, with the client matrix, not once per server): they are `#[ignore]`d in a
//! plain `cargo test`. The docs' code blocks are the files (checked in every `cargo test`).

use seckill_harness::transcript::first_code_block;
use seckill_harness::{Server, command_calls, start_cluster_with_replicas};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `program args` in `dir`; panics with its output unless it succeeds; prints its stdout.
fn run(dir: &Path, program: &str, args: &[&str], envs: &[(&str, &str)]) {
    let out = Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{program} {args:?}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    print!("{stdout}");
}

fn found(program: &str) -> bool {
    Command::new(program).arg("--version").output().is_ok()
        || Command::new(program).arg("version").output().is_ok()
}

/// The Python with redis-py: make venv's, else the system's.
fn python() -> PathBuf {
    let venv = root().join(".venv/bin/python");
    if venv.exists() {
        venv
    } else {
        "python3".into()
    }
}

const GOPATH: &str = "/usr/share/gocode";

/// MOVED replies sent by the nodes of `cluster` so far (INFO errorstats).
fn moved(cluster: &[Server]) -> i64 {
    cluster
        .iter()
        .map(|node| {
            let stats: String = redis::cmd("INFO")
                .arg("errorstats")
                .query(&mut node.con())
                .unwrap();
            stats
                .lines()
                .find_map(|l| l.strip_prefix("errorstat_MOVED:count="))
                .map_or(0, |n| n.trim().parse().unwrap())
        })
        .sum()
}

#[test]
#[ignore = "make recipes runs it: Node.js, Go, redis-py, valkey-glide and coredis, once per CI run"]
fn the_recipes_run_against_a_server_and_a_cluster() {
    let node_dir = root().join("examples/node");
    assert!(
        node_dir.join("node_modules/ioredis").exists(),
        "examples/node has no node_modules: make recipes runs npm ci there"
    );
    let server = Server::start();
    // A replica per master: the GLIDE recipe reads a position from one.
    let cluster = start_cluster_with_replicas(3, 1, &[]);
    let (masters, replicas) = cluster.split_at(3);
    let single = server.port.to_string();
    let entry = cluster[0].port.to_string();
    let targets = [(single.as_str(), None), (entry.as_str(), Some("cluster"))];
    let python = python();
    let go = found("go")
        && Path::new(GOPATH)
            .join("src/github.com/gomodule/redigo")
            .exists();
    for (port, mode) in targets {
        let args = |first: &[&'static str]| -> Vec<&str> {
            first.iter().copied().chain([port]).chain(mode).collect()
        };
        // MOVED replies the cluster sent during one recipe: a client that finds the key sends
        // none.
        let redirected = |recipe: &dyn Fn()| -> i64 {
            let before = moved(&cluster);
            recipe();
            moved(&cluster) - before
        };
        let ioredis = redirected(&|| run(&node_dir, "node", &args(&["ioredis.mjs"]), &[]));
        let node_redis = redirected(&|| run(&node_dir, "node", &args(&["node_redis.mjs"]), &[]));
        let redis_py = redirected(&|| {
            run(
                &root().join("examples/python"),
                python.to_str().unwrap(),
                &args(&["any_client.py"]),
                &[],
            )
        });
        let python_recipe = |file: &'static str| {
            run(
                &root().join("examples/python"),
                python.to_str().unwrap(),
                &args(&[file]),
                &[],
            )
        };
        let positions_on_replicas = || -> i64 {
            replicas
                .iter()
                .map(|node| command_calls(&mut node.con(), "seckill.position"))
                .sum()
        };
        let replica_reads = positions_on_replicas();
        let glide = redirected(&|| python_recipe("glide_client.py"));
        let replica_reads = positions_on_replicas() - replica_reads;
        let coredis = redirected(&|| python_recipe("coredis_client.py"));
        if mode.is_some() {
            println!(
                "MOVED replies: ioredis {ioredis}, node-redis {node_redis}, redis-py {redis_py}, \
                 valkey-glide {glide}, coredis {coredis}"
            );
            assert_eq!(
                (node_redis, redis_py, glide, coredis),
                (0, 0, 0, 0),
                "clients given the key route it"
            );
            assert_eq!(replica_reads, 1, "GLIDE's position read went to a replica");
            assert!(
                masters
                    .iter()
                    .all(|m| command_calls(&mut m.con(), "seckill.position") == 0)
            );
        }
        if go {
            run(
                &root().join("examples/go"),
                "go",
                &args(&["run", "redigo.go"]),
                &[("GO111MODULE", "off"), ("GOPATH", GOPATH)],
            );
        }
    }
    if !go {
        println!(
            "Go recipe SKIPPED: no go or redigo here (apt-get install golang-go golang-github-gomodule-redigo-dev)"
        );
    }
    run(&node_dir, "node", &["fences.mjs", &single], &[]);
    run(&node_dir, "node", &["hazards.mjs", &single], &[]);
}

/// Each `<!-- example: PATH -->` in docs/any-client.md is followed by a code block that is the
/// file at PATH, as the recipes test runs it.
#[test]
fn the_docs_show_the_recipes_as_they_run() {
    let doc = std::fs::read_to_string(root().join("docs/any-client.md")).unwrap();
    let mut shown = 0;
    for part in doc.split("<!-- example: ").skip(1) {
        let (path, rest) = part.split_once(" -->").unwrap();
        let block = first_code_block(rest);
        let file =
            std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(
            block, file,
            "docs/any-client.md's block for {path} differs from the file"
        );
        shown += 1;
    }
    assert!(shown >= 6, "examples shown: {shown}");
}

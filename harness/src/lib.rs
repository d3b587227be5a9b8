//! The one harness every integration test, example and benchmark uses: starts a real server
//! (`REDIS_SERVER`, default `redis-server`) with the module on a free loopback port in its own
//! directory, and kills it when dropped, also when the test panics; clusters, replicas and
//! faults on top; `buyers` times a partitioned sale's buyers through a fault.

pub mod buyers;
pub mod http;
pub mod invariants;
pub mod seeded;
pub mod topology;
pub mod transcript;

use std::collections::HashMap;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub fn server_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

pub fn cli_binary() -> String {
    std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_string())
}

pub fn module_path() -> PathBuf {
    let path = std::env::var_os("SECKILL_MODULE").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/libseckill.so"),
        PathBuf::from,
    );
    assert!(
        path.exists(),
        "{} is missing: run `make test` (or `cargo build --release`) first",
        path.display()
    );
    path
}

/// A free loopback port at most 55535: a cluster node also listens on its port + 10000.
pub fn free_port() -> u16 {
    // Ports handed out in this process, and their cluster bus ports: the kernel may offer a
    // port again before the server given it listens (the Python fixtures once started two
    // cluster nodes on one port in CI).
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind a free port")
            .port();
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if port <= 55_535 && !handed_out.iter().any(|&p| p == port || p == port + 10_000) {
            handed_out.extend([port, port + 10_000]);
            return port;
        }
    }
}

/// A new empty directory under the system's temp dir, named by this process and a counter.
pub fn fresh_dir() -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "seckill-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create server dir");
    dir
}

/// Polls `condition` every millisecond until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub struct Server {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
    extra: Vec<String>,
}

impl Server {
    /// A server with persistence off.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// A server with extra `--option value` arguments.
    pub fn start_with(extra: &[&str]) -> Server {
        Server::start_in(fresh_dir(), extra)
    }

    /// A server whose working directory (RDB and AOF files) is `dir`.
    pub fn start_in(dir: PathBuf, extra: &[&str]) -> Server {
        let mut server = Server {
            child: None,
            port: 0,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        server.launch();
        server
    }

    fn launch(&mut self) {
        self.launch_on(None);
    }

    /// Starts the server on `port`, or on a free port (`None`).
    fn launch_on(&mut self, port: Option<u16>) {
        for attempt in 0..5 {
            self.port = port.unwrap_or_else(free_port);
            let log = self.dir.join(format!("server-{}.log", self.port));
            let mut args: Vec<String> = [
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--dir",
                self.dir.to_str().expect("utf-8 temp dir"),
                "--save",
                "",
                "--appendonly",
                "no",
                "--enable-debug-command",
                "yes",
                "--logfile",
                log.to_str().expect("utf-8 log path"),
                "--loadmodule",
                module_path().to_str().expect("utf-8 module path"),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            args.extend(self.extra.iter().cloned());
            let mut command = Command::new(server_binary());
            // If this process dies without unwinding (SIGKILL, abort), the server dies too.
            unsafe {
                command.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let mut child = command
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", server_binary()));
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    if text.contains("Address already in use") && attempt < 4 {
                        std::thread::sleep(Duration::from_millis(200));
                        break;
                    }
                    panic!("server exited with {status} during start; log:\n{text}");
                }
                if self.ping() {
                    self.child = Some(child);
                    return;
                }
                assert!(Instant::now() < deadline, "server did not answer PING");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        panic!("no free port found for the server");
    }

    fn ping(&self) -> bool {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con))
            .is_ok_and(|pong| pong == "PONG")
    }

    /// The server's process id (to pin it to a core in benchmarks).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn con(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .expect("client")
            .get_connection()
            .expect("connection")
    }

    /// Kills the server at once (no save on exit) and starts it again on the same directory.
    pub fn kill_and_restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// A multiplexed async connection to the server (call it on a tokio runtime).
    pub async fn async_con(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    /// Kills the server at once and starts it again on the same directory and port, as a
    /// restarted server is to its clients.
    pub fn kill_and_restart_on_its_port(&mut self) {
        self.kill();
        self.launch_on(Some(self.port));
    }

    /// Sends `sig` to the running server (SIGSTOP freezes it, SIGCONT resumes it).
    pub fn signal(&self, sig: i32) {
        let pid = self.pid().expect("a running server") as i32;
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    }

    /// Stops the server with SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server, appends `commands` to its AOF as if clients had sent them, and starts
    /// it again: how commands only AOF loading may run get into a test.
    pub fn crash_and_append_to_aof(&mut self, commands: &[Vec<Vec<u8>>]) {
        self.kill();
        let incr = self.aof_file("i");
        let mut bytes = Vec::new();
        for argv in commands {
            encode_command(argv, &mut bytes);
        }
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(incr)
            .expect("open the incremental AOF");
        std::io::Write::write_all(&mut file, &bytes).expect("append to the AOF");
        self.launch();
    }

    /// The newest AOF file of `kind` (`b` base, `i` incremental) in the manifest. Its lines
    /// are `key value` pairs (`file NAME seq N type T`, and since Redis 7.4 more after them).
    pub fn aof_file(&self, kind: &str) -> PathBuf {
        let aof_dir = self.dir.join("appendonlydir");
        let manifest = std::fs::read_to_string(aof_dir.join("appendonly.aof.manifest"))
            .expect("an AOF manifest: start the server with --appendonly yes");
        let name = manifest
            .lines()
            .rev()
            .find_map(|line| {
                let words: Vec<&str> = line.split_whitespace().collect();
                let field = |key: &str| {
                    words
                        .chunks(2)
                        .find(|pair| pair[0] == key)
                        .and_then(|pair| pair.get(1).copied())
                };
                (field("type") == Some(kind))
                    .then(|| field("file"))
                    .flatten()
            })
            .unwrap_or_else(|| panic!("no AOF file of type {kind} in the manifest:\n{manifest}"));
        aof_dir.join(name)
    }

    pub fn log(&self) -> String {
        let path = self.dir.join(format!("server-{}.log", self.port));
        std::fs::read_to_string(path).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// One command in the Redis protocol, as clients send it and the AOF stores it.
pub fn encode_command(argv: &[impl AsRef<[u8]>], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", argv.len()).as_bytes());
    for arg in argv {
        let arg = arg.as_ref();
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// Runs one command and returns its raw reply (errors included).
pub fn call(con: &mut redis::Connection, args: &[&[u8]]) -> redis::RedisResult<redis::Value> {
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).expect("command name"));
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query(con)
}

/// Builds `args[0]` with the rest as arguments.
pub fn command(args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd
}

/// Runs one command that must reply `+OK`.
pub fn ok(con: &mut redis::Connection, args: &[&str]) {
    let reply: String = command(args)
        .query(con)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert_eq!(reply, "OK", "{args:?}");
}

/// Runs one command that must reply an integer.
pub fn int(con: &mut redis::Connection, args: &[&str]) -> i64 {
    let cmd = command(args);
    cmd.query(con).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Runs one command that must fail, and returns the error's full text as the server sent it.
pub fn error(con: &mut redis::Connection, args: &[&str]) -> String {
    let cmd = command(args);
    match cmd.query::<redis::Value>(con) {
        Ok(v) => panic!("{args:?} should fail, replied {v:?}"),
        Err(e) => error_text(&e),
    }
}

/// An error reply's full text as the server sent it, e.g. `ERR syntax error`.
pub fn error_text(e: &redis::RedisError) -> String {
    let code = e.code().unwrap_or("");
    let detail = e.detail().unwrap_or("");
    format!("{code} {detail}").trim().to_string()
}

/// A flat `[name, value, ...]` reply as (name, integer) pairs; non-integers become -999.
pub fn fields(con: &mut redis::Connection, args: &[&str]) -> Vec<(String, i64)> {
    fields_on(con, args)
}

/// [`fields`] over any connection kind (a cluster connection, say).
pub fn fields_on(con: &mut impl redis::ConnectionLike, args: &[&str]) -> Vec<(String, i64)> {
    let cmd = command(args);
    let reply: Vec<redis::Value> = cmd.query(con).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    reply
        .chunks(2)
        .map(|pair| {
            let name: String = redis::from_redis_value(pair[0].clone()).expect("field name");
            let value = match &pair[1] {
                redis::Value::Int(n) => *n,
                _ => -999,
            };
            (name, value)
        })
        .collect()
}

pub fn field(con: &mut redis::Connection, args: &[&str], name: &str) -> i64 {
    fields(con, args)
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("{args:?} has no field {name}"))
        .1
}

/// The server's `used_memory`.
pub fn used_memory(con: &mut redis::Connection) -> i64 {
    let text: String = redis::cmd("INFO")
        .arg("memory")
        .query(con)
        .expect("INFO memory");
    text.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .expect("used_memory")
        .trim()
        .parse()
        .expect("integer")
}

/// One `seckill_*` counter from `INFO seckill`.
pub fn info_counter(con: &mut redis::Connection, name: &str) -> i64 {
    let text: String = redis::cmd("INFO").arg("seckill").query(con).expect("INFO");
    let prefix = format!("seckill_{name}:");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("INFO seckill has no {name}"))
        .trim()
        .parse()
        .expect("integer counter")
}

/// Clients blocked in the server now (`INFO clients`: a `WAIT`, a `BLOCK`, a lock's wait).
pub fn blocked_clients(con: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("clients").query(con).expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix("blocked_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO clients has blocked_clients")
}

/// How many times `command` ran on the server, from `INFO commandstats` (0 if never).
pub fn command_calls(con: &mut redis::Connection, command: &str) -> i64 {
    commandstat(con, command, "calls") as i64
}

/// A master that writes every change to its AOF with `appendfsync always` (so a SIGKILL loses
/// nothing acknowledged and a restart replays it), and a replica in sync with it.
pub fn durable_master_and_replica() -> (Server, Server) {
    let master = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = Server::start();
    replicate(&replica, &master);
    (master, replica)
}

/// Makes `server` busy `spells` times, each a `DEBUG SLEEP 0.6` (longer than a client's short
/// socket timeout) then 100 ms of service, starting when `start` lets every party go; sets
/// `done` after the last. What clients that retry are tested against.
pub fn busy_spells(
    server: &Server,
    spells: usize,
    start: std::sync::Arc<std::sync::Barrier>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let url = server.url();
    std::thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        start.wait();
        for _ in 0..spells {
            let _: () = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg("0.6")
                .query(&mut con)
                .unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    })
}

/// This process's CPU time so far, user and system (getrusage): what a client costs, its
/// servers being other processes.
pub fn cpu_time() -> Duration {
    rusage(libc::RUSAGE_SELF)
}

/// The CPU time of this process's children that ended and were waited for (a
/// redis-benchmark run as a client).
pub fn children_cpu_time() -> Duration {
    rusage(libc::RUSAGE_CHILDREN)
}

fn rusage(who: libc::c_int) -> Duration {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(who, &mut usage) };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// Process `pid`'s CPU time so far, user and system (`/proc/<pid>/stat`, in clock ticks): what
/// a server costs beside the client's [`cpu_time`]. Zero when the process is gone.
pub fn process_cpu_time(pid: u32) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // The command name may hold spaces: the fields after it start past the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are the stat file's fields 14 and 15: 11 and 12 past the name.
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis((ticks(11) + ticks(12)) * 1000 / per_second)
}

/// A field of `command`'s line in `INFO commandstats` (`calls`, `usec_per_call`, ...); 0 when
/// the command never ran since the last `CONFIG RESETSTAT`.
pub fn commandstat(con: &mut redis::Connection, command: &str, field: &str) -> f64 {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .expect("INFO");
    let prefix = format!("cmdstat_{}:", command.to_lowercase());
    let field = format!("{field}=");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|line| line.split(',').find_map(|f| f.strip_prefix(&field)))
        .and_then(|value| value.parse().ok())
        .unwrap_or(0.0)
}

/// The markdown a Python bench script (`bench/<script>`, on the repository's venv) prints for
/// `args`; panics with its stderr if it fails.
pub fn python_bench(script: &str, args: &[&str]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let script = root.join("bench").join(script);
    let out = std::process::Command::new(root.join(".venv/bin/python"))
        .arg(&script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the bench prints text")
}

/// `redis-benchmark -P 16 -c 16` sending `requests` `SECKILL.TRY key <prefix><random> 1` to
/// `server` (`REDIS_BENCHMARK` chooses the binary): how long it took. The benches' ceiling.
pub fn redis_benchmark_try(server: &Server, key: &str, prefix: &str, requests: usize) -> Duration {
    let binary = std::env::var("REDIS_BENCHMARK").unwrap_or_else(|_| "redis-benchmark".into());
    let started = Instant::now();
    let out = Command::new(&binary)
        .args(["-h", "127.0.0.1", "-p", &server.port.to_string()])
        .args(["-n", &requests.to_string(), "-c", "16", "-P", "16", "-q"])
        .args(["-r", "100000000000"])
        .args(["SECKILL.TRY", key, &format!("{prefix}__rand_int__"), "1"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {binary}: {e}"));
    assert!(out.status.success(), "{binary} failed");
    started.elapsed()
}

/// Makes `replica` replicate `master` and waits until the link is up and in sync.
pub fn replicate(replica: &Server, master: &Server) {
    let mut con = replica.con();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query(&mut con)
        .expect("REPLICAOF");
    wait_until(Duration::from_secs(20), "replica link up", || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut con)
            .unwrap();
        info.contains("master_link_status:up")
    });
}

/// Starts `masters` cluster-enabled servers (with `extra` arguments first) and joins them into one
/// cluster with `redis-cli --cluster create`, slots split evenly; returns once every node
/// reports `cluster_state:ok`.
pub fn start_cluster(masters: usize, extra: &[&str]) -> Vec<Server> {
    start_cluster_with_replicas(masters, 0, extra)
}

/// As [`start_cluster`], with `replicas` replicas per master (the masters come first), each
/// in sync with its master.
pub fn start_cluster_with_replicas(masters: usize, replicas: usize, extra: &[&str]) -> Vec<Server> {
    let nodes: Vec<Server> = (0..masters * (1 + replicas))
        .map(|_| start_cluster_node(extra))
        .collect();
    let created = Command::new(cli_binary())
        .args(["--cluster", "create"])
        .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .output()
        .expect("redis-cli --cluster create");
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stdout)
    );
    for node in &nodes {
        wait_cluster_ok(node);
    }
    // A replica whose first sync has not finished cannot be promoted ("Disconnected from
    // master for longer than allowed"): a test that kills a master needs every link up.
    for node in &nodes {
        wait_until(Duration::from_secs(30), "every replica's link up", || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut node.con())
                .unwrap_or_default();
            info.contains("role:master") || info.contains("master_link_status:up")
        });
    }
    // Each node learns of the others' replicas by gossip, after they synced: a slot map read
    // from a node that has not yet lists none (read_from_replicas, durability).
    for node in nodes.iter().filter(|_| replicas > 0) {
        wait_until(
            Duration::from_secs(30),
            "every node to list every replica",
            || {
                let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query(&mut node.con())
                    .unwrap_or_default();
                !slots.is_empty() && slots.iter().all(|range| range.len() > 2 + replicas)
            },
        );
    }
    nodes
}

/// One cluster-enabled server, not yet part of any cluster; a failed node is marked FAIL after
/// 5 s unless `extra` gives its own `--cluster-node-timeout`.
pub fn start_cluster_node(extra: &[&str]) -> Server {
    // Module arguments (`extra` may start with them) must follow the module path.
    let mut args = extra.to_vec();
    args.extend(["--cluster-enabled", "yes"]);
    if !extra.contains(&"--cluster-node-timeout") {
        args.extend(["--cluster-node-timeout", "5000"]);
    }
    Server::start_with(&args)
}

/// A server without the module (to show what a client says of one), killed when dropped.
pub struct PlainServer {
    pub port: u16,
    child: Child,
}

impl PlainServer {
    pub fn start() -> PlainServer {
        let port = free_port();
        let child = Command::new(server_binary())
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let server = PlainServer { port, child };
        wait_until(Duration::from_secs(30), "the plain server", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for PlainServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How many public commands the module registers (docs/commands.md lists each): one number for
/// every test that counts them, so a new command is one edit here, not a hunt through suites
/// that run on only some servers.
pub const PUBLIC_COMMANDS: usize = 21;

/// The commands the module registered, as `COMMAND LIST FILTERBY MODULE seckill` names them
/// (internal ones, `seckill._*` and `lock._*`, included).
pub fn module_commands(con: &mut redis::Connection) -> Vec<String> {
    redis::cmd("COMMAND")
        .arg("LIST")
        .arg("FILTERBY")
        .arg("MODULE")
        .arg("seckill")
        .query(con)
        .expect("COMMAND LIST FILTERBY MODULE")
}

/// Whether `observer` sees the node on `port` as a master not even suspected failed (no
/// `fail?` or `fail` flag in its `CLUSTER NODES` line).
pub fn seen_healthy_master(observer: &Server, port: u16) -> bool {
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut observer.con())
        .expect("CLUSTER NODES");
    let line = nodes
        .lines()
        .find(|line| line.contains(&format!(":{port}@")))
        .unwrap_or_else(|| panic!("no node on port {port} in {nodes}"));
    let flags: Vec<&str> = line.split(' ').nth(2).unwrap_or("").split(',').collect();
    flags.contains(&"master") && !flags.contains(&"fail") && !flags.contains(&"fail?")
}

pub fn wait_cluster_ok(node: &Server) {
    let mut con = node.con();
    wait_until(Duration::from_secs(30), "cluster_state:ok", || {
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con).unwrap();
        info.contains("cluster_state:ok")
    });
}

pub fn cluster_node_id(server: &Server) -> String {
    redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut server.con())
        .expect("CLUSTER MYID")
}

/// Makes the server `con` talks to a master (`REPLICAOF NO ONE`), as an operator promotes a
/// replica.
pub fn promote(con: &mut redis::Connection) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(con)
        .expect("REPLICAOF NO ONE");
}

/// Freezes `replica` and cuts its link to the master `con` talks to, so that the master's
/// next writes never reach it (data already in the socket would otherwise arrive when it is
/// resumed with SIGCONT).
pub fn isolate_replica(replica: &Server, con: &mut redis::Connection) {
    replica.signal(libc::SIGSTOP);
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(con)
        .unwrap();
}

/// Waits until `count` replicas acknowledged every write made on `con` (Redis' WAIT counts
/// from the connection's own last write: on a connection that wrote nothing it returns at
/// once, so it must be the writer's).
pub fn wait_replicas(con: &mut redis::Connection, count: i64) {
    let acked: i64 = redis::cmd("WAIT")
        .arg(count)
        .arg(30_000)
        .query(con)
        .unwrap();
    assert_eq!(acked, count, "replicas acknowledged");
}

/// One stream entry: its ID and its fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub id: String,
    pub fields: HashMap<String, String>,
}

impl Event {
    pub fn get(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }

    /// The ms part of the entry's ID: when the server wrote it.
    pub fn id_ms(&self) -> u64 {
        let ms = self.id.split('-').next().unwrap_or_default();
        ms.parse().expect("a stream entry ID")
    }
}

/// Entries as XRANGE and XREAD reply them: (id, [field, value, ...]).
pub type Entries = Vec<(String, Vec<String>)>;
/// XREAD and XREADGROUP replies: (stream, entries) per stream.
pub type StreamsReply = Vec<(String, Entries)>;

pub fn parse_entries(entries: Entries) -> Vec<Event> {
    entries
        .into_iter()
        .map(|(id, flat)| Event {
            id,
            fields: flat
                .chunks(2)
                .map(|pair| (pair[0].clone(), pair[1].clone()))
                .collect(),
        })
        .collect()
}

pub fn stream(con: &mut redis::Connection, key: &str) -> Vec<Event> {
    let entries: Entries = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query(con)
        .unwrap();
    parse_entries(entries)
}

/// Blocks (server side) until the stream has an entry after `after`, and returns it.
pub fn next_event(con: &mut redis::Connection, key: &str, after: &str) -> Event {
    let reply: Option<StreamsReply> = redis::cmd("XREAD")
        .arg("COUNT")
        .arg(1)
        .arg("BLOCK")
        .arg(10_000)
        .arg("STREAMS")
        .arg(key)
        .arg(after)
        .query(con)
        .unwrap();
    let (_, entries) = reply.expect("an entry within 10 s").remove(0);
    parse_entries(entries).remove(0)
}

pub fn server_now_ms(con: &mut redis::Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
    secs * 1000 + micros / 1000
}

pub fn dump(con: &mut redis::Connection, key: &str) -> Vec<u8> {
    redis::cmd("DUMP").arg(key).query(con).unwrap()
}

/// Runs BGREWRITEAOF and waits until the rewrite finished successfully.
pub fn rewrite_aof(con: &mut redis::Connection) {
    let _: () = redis::cmd("BGREWRITEAOF").query(con).unwrap();
    wait_until(Duration::from_secs(20), "AOF rewrite", || {
        let text: String = redis::cmd("INFO").arg("persistence").query(con).unwrap();
        text.contains("aof_rewrite_in_progress:0")
            && text.contains("aof_rewrite_scheduled:0")
            && text.contains("aof_last_bgrewrite_status:ok")
    });
}

//! The sold-out cache ([`SoldOutCache`], `with_local_cache`): a sale the server showed sold out
//! is refused in this process, with nothing sent, for as long as Redis would tell us it
//! changed. The same rules as the Python package's `_tracking.py` (docs/clients.md, "The
//! sold-out cache"):
//!
//! - One tracking connection per node (per master in a cluster) and per cache, RESP3 with
//!   `CLIENT TRACKING ON`: the keys it reads are remembered by the server, which pushes
//!   `invalidate [key]` on that connection at their next change (the module signals a sale key
//!   when a command or its hold timer changes it, never on a refusal).
//! - After the server answered SOLD_OUT, the sale's keys are read (`SECKILL.INFO`) on those
//!   connections; the mark is set when every key shows no units left (a partitioned sale: and
//!   none in flight between partitions) and no push or lost connection touched a key between
//!   its read and the decision (a generation per key, compared under one lock).
//! - A push clears the marks covering its key (a flush: all the node's); a lost connection, a
//!   late reply or a node no longer master (`ROLE` every second while marks are held) clears
//!   every mark the connection covered. A key's node is learned by following MOVED from the
//!   seeds.
//! - Only refusals are cached: purchases always go to the server.
//!
//! Each tracking connection has a reader thread; buyers read the marks (one read lock) and
//! wait for a reading on a channel, so async buyers never block their runtime.

mod resp;

use crate::error::{Error, Result};
use redis::{ConnectionAddr, IntoConnectionInfo};
use resp::{Frame, encode, parse};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

/// How long a tracking connection may take to connect or to answer; a slower one is dropped
/// with its marks.
const REPLY_TIMEOUT: Duration = Duration::from_secs(1);
/// How often a node covering marks is asked whether it is still a master.
const ROLE_CHECK: Duration = Duration::from_secs(1);

/// What a reading found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Marked,
    Unmarked,
    /// A key was answered MOVED: its node is learned, a second reading goes there.
    Moved,
    /// Not answered within [`STALLED_READING`]: the caller goes; the reading goes on.
    Stalled,
}

/// How long a refused buyer waits for a reading, at most: a reading that waits on a frozen
/// master must not hold the refusals of the other masters' buyers (the Python package's
/// `STALLED_READING_S`).
pub(crate) const STALLED_READING: Duration = Duration::from_millis(250);

/// A sold-out cache for the sales of one Redis deployment (one server, or one cluster), shared
/// by the sale handles given it with `with_local_cache` (clones share it). Made from one or
/// more plain-TCP addresses (`redis://[user:pass@]host:port[/db]`); in a cluster, any nodes:
/// each key's master is found by following MOVED.
#[derive(Clone)]
pub struct SoldOutCache {
    shared: Arc<Shared>,
}

struct Shared {
    seeds: Vec<(String, u16)>,
    username: Option<String>,
    password: Option<String>,
    db: i64,
    /// sale id -> its mark (the END of the sale in unix ms, 0 without one).
    marks: RwLock<HashMap<String, u64>>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    nodes: HashMap<String, Arc<Tracked>>,
    node_of: HashMap<String, (String, u16)>,
    generation: HashMap<String, u64>,
    sales_of: HashMap<String, HashSet<String>>,
    invalidations: HashMap<String, u64>,
    /// sale id -> its reading in progress (one at a time).
    readings: HashMap<String, Arc<Mutex<Reading>>>,
}

type Handler = Box<dyn FnOnce(&Arc<Shared>, Frame) + Send>;

struct Tracked {
    name: String,
    writer: Mutex<TcpStream>,
    handlers: Mutex<VecDeque<(Instant, Handler)>>,
    keys: Mutex<HashSet<String>>,
    lost: AtomicBool,
}

struct Reading {
    sale: String,
    keys: Vec<String>,
    whole_sale: bool,
    answers: HashMap<String, (Frame, u64)>,
    failed: bool,
    moved: bool,
    /// Who waits for the outcome; emptied when the reading is finished, or stalled.
    waiters: Vec<oneshot::Sender<Outcome>>,
    finished: bool,
    started: Instant,
}

impl SoldOutCache {
    /// A cache for the deployment at `seeds`; nothing is connected until a sale sells out.
    pub fn new<T: IntoConnectionInfo>(seeds: impl IntoIterator<Item = T>) -> Result<SoldOutCache> {
        let mut addrs = Vec::new();
        let mut settings = None;
        for seed in seeds {
            let info = seed.into_connection_info()?;
            match info.addr() {
                ConnectionAddr::Tcp(host, port) => addrs.push((host.clone(), *port)),
                other => {
                    return Err(Error::InvalidArgument(format!(
                        "the sold-out cache connects over plain TCP, not {other:?}"
                    )));
                }
            }
            settings.get_or_insert(info.redis_settings().clone());
        }
        let Some(settings) = settings else {
            return Err(Error::InvalidArgument(
                "the sold-out cache needs an address".into(),
            ));
        };
        Ok(SoldOutCache {
            shared: Arc::new(Shared {
                seeds: addrs,
                username: settings.username().map(str::to_string),
                password: settings.password().map(str::to_string),
                db: settings.db(),
                marks: RwLock::default(),
                state: Mutex::default(),
            }),
        })
    }

    /// Whether `sale` is marked sold out now.
    pub(crate) fn refuses(&self, sale: &str) -> bool {
        let marks = self.shared.marks.read().unwrap_or_else(|e| e.into_inner());
        marks
            .get(sale)
            .is_some_and(|&until| until == 0 || now_ms() < until)
    }

    /// Invalidations Redis pushed for `sale`'s keys.
    pub(crate) fn invalidations(&self, sale: &str) -> u64 {
        let state = self.shared.state();
        state.invalidations.get(sale).copied().unwrap_or(0)
    }

    /// Tracking connections open now.
    pub fn connections(&self) -> usize {
        self.shared.state().nodes.len()
    }

    /// The server refused `sale` as sold out: its `keys` are read on a thread of the cache's,
    /// which marks it if they show it so; one reading per sale at a time (a second caller
    /// waits for the first's answer).
    pub(crate) fn learn(
        &self,
        sale: &str,
        keys: &[String],
        whole_sale: bool,
    ) -> oneshot::Receiver<Outcome> {
        let (tx, rx) = oneshot::channel();
        let mut state = self.shared.state();
        if let Some(reading) = state.readings.get(sale) {
            let mut reading = lock(reading);
            if reading.started.elapsed() >= STALLED_READING {
                let _ = tx.send(Outcome::Stalled);
            } else {
                reading.waiters.push(tx);
            }
            return rx;
        }
        let reading = Arc::new(Mutex::new(Reading {
            sale: sale.to_string(),
            keys: keys.to_vec(),
            whole_sale,
            answers: HashMap::new(),
            failed: false,
            moved: false,
            waiters: vec![tx],
            finished: false,
            started: Instant::now(),
        }));
        state.readings.insert(sale.to_string(), reading.clone());
        drop(state);
        let (shared, started, watched) = (self.shared.clone(), reading.clone(), reading.clone());
        let spawned = std::thread::Builder::new()
            .name("seckill-tracking".into())
            .spawn(move || start(&shared, &started))
            .and_then(|_| {
                std::thread::Builder::new()
                    .name("seckill-tracking-stall".into())
                    .spawn(move || release_waiters_when_stalled(&watched))
            });
        if spawned.is_err() {
            self.shared.fail(&reading);
        }
        rx
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Sends a reading's reads (on the thread `learn` started).
fn start(shared: &Arc<Shared>, reading: &Arc<Mutex<Reading>>) {
    let (sale, keys) = {
        let r = lock(reading);
        (r.sale.clone(), r.keys.clone())
    };
    for key in keys {
        let Some(node) = shared.node_for(&key) else {
            shared.fail(reading);
            return;
        };
        shared
            .state()
            .sales_of
            .entry(key.clone())
            .or_default()
            .insert(sale.clone());
        lock(&node.keys).insert(key.clone());
        let answering = reading.clone();
        let read_key = key.clone();
        let handler: Handler =
            Box::new(move |shared, frame| answered(shared, &answering, read_key, frame));
        if node
            .send(&[b"SECKILL.INFO", key.as_bytes()], handler)
            .is_err()
        {
            shared.lose(&node); // fails the reads already sent, through their handlers
            shared.fail(reading); // and this one, if it was the first
            return;
        }
    }
}

/// Sees to it that nobody waits for `reading` past STALLED_READING (its connections may be
/// made to, or its answers awaited from, a frozen master).
fn release_waiters_when_stalled(reading: &Arc<Mutex<Reading>>) {
    let started = lock(reading).started;
    std::thread::sleep(STALLED_READING.saturating_sub(started.elapsed()));
    for waiter in lock(reading).waiters.drain(..) {
        let _ = waiter.send(Outcome::Stalled);
    }
}

fn answered(shared: &Arc<Shared>, reading: &Arc<Mutex<Reading>>, key: String, frame: Frame) {
    let mut state = shared.state();
    let mut r = lock(reading);
    if r.finished {
        return; // a failed reading's later answers change nothing
    }
    match &frame {
        Frame::Map(_) | Frame::Array(_) => {
            let seen = state.generation.get(&key).copied().unwrap_or(0);
            r.answers.insert(key, (frame, seen));
        }
        Frame::Error(message) => {
            r.failed = true;
            if let Some(node) = moved_to(message) {
                r.moved = true;
                state.node_of.insert(key, node);
            }
        }
        _ => r.failed = true,
    }
    if !r.failed && r.answers.len() < r.keys.len() {
        return;
    }
    let marked = !r.failed && shows_sold_out(&state, &r);
    if marked {
        let ends = r
            .answers
            .values()
            .map(|(f, _)| f.field("end"))
            .filter(|&e| e > 0);
        let until = ends.min().unwrap_or(0) as u64;
        let mut marks = shared.marks.write().unwrap_or_else(|e| e.into_inner());
        marks.insert(r.sale.clone(), until);
    }
    let outcome = if r.moved {
        Outcome::Moved
    } else if marked {
        Outcome::Marked
    } else {
        Outcome::Unmarked
    };
    finish(&mut state, reading, &mut r, outcome);
}

/// Ends `reading` (held locked as `r`): its waiters get `outcome`, and the sale may be read
/// again.
fn finish(state: &mut State, reading: &Arc<Mutex<Reading>>, r: &mut Reading, outcome: Outcome) {
    r.finished = true;
    if state
        .readings
        .get(&r.sale)
        .is_some_and(|current| Arc::ptr_eq(current, reading))
    {
        state.readings.remove(&r.sale);
    }
    for waiter in r.waiters.drain(..) {
        let _ = waiter.send(outcome);
    }
}

fn shows_sold_out(state: &State, r: &Reading) -> bool {
    let generation = |key: &String| state.generation.get(key).copied().unwrap_or(0);
    if r.answers
        .iter()
        .any(|(key, (_, seen))| generation(key) != *seen)
    {
        return false; // a key changed (or its connection went) after it was read
    }
    let infos: Vec<&Frame> = r.answers.values().map(|(f, _)| f).collect();
    if infos.iter().any(|f| f.field("remaining") > 0) {
        return false;
    }
    if !r.whole_sale {
        return true;
    }
    let in_flight: i64 = infos
        .iter()
        .map(|f| f.field("lent") - f.field("absorbed"))
        .sum();
    in_flight == 0 && infos.iter().all(|f| f.field("pending_out") == 0)
}

/// The node a `MOVED <slot> <host>:<port>` (or ASK) error reply names.
fn moved_to(message: &str) -> Option<(String, u16)> {
    let details = message
        .strip_prefix("MOVED ")
        .or_else(|| message.strip_prefix("ASK "))?;
    crate::routing::redirect_address(details)
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// A reading that could not be sent: no mark; the next refusal asks again.
    fn fail(&self, reading: &Arc<Mutex<Reading>>) {
        let mut state = self.state();
        let mut r = lock(reading);
        if !r.finished {
            finish(&mut state, reading, &mut r, Outcome::Unmarked);
        }
    }

    /// The tracking connection for `key`: its known node's, else a seed's.
    fn node_for(self: &Arc<Self>, key: &str) -> Option<Arc<Tracked>> {
        let known = self.state().node_of.get(key).cloned();
        let candidates: Vec<(String, u16)> = known
            .into_iter()
            .chain(self.seeds.iter().cloned())
            .collect();
        for (host, port) in candidates {
            let name = format!("{host}:{port}");
            // A lost node still listed (its `lose` under way) is connected to anew.
            if let Some(node) = self.state().nodes.get(&name)
                && !node.lost.load(Ordering::SeqCst)
            {
                return Some(node.clone());
            }
            let Ok(node) = self.connect(&host, port) else {
                continue;
            };
            let mut state = self.state();
            if let Some(other) = state.nodes.get(&name)
                && !other.lost.load(Ordering::SeqCst)
            {
                return Some(other.clone()); // connected meanwhile by another reading
            }
            state.nodes.insert(name, node.clone());
            drop(state);
            let (shared, reader) = (self.clone(), node.clone());
            let spawned = std::thread::Builder::new()
                .name("seckill-tracking".into())
                .spawn(move || serve(&shared, &reader));
            if spawned.is_err() {
                self.lose(&node);
                continue;
            }
            return Some(node);
        }
        None
    }

    fn connect(&self, host: &str, port: u16) -> std::io::Result<Arc<Tracked>> {
        let addr = (host, port)
            .to_socket_addrs()?
            .next()
            .ok_or(ErrorKind::AddrNotAvailable)?;
        let mut stream = TcpStream::connect_timeout(&addr, REPLY_TIMEOUT)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
        let mut hello: Vec<&[u8]> = vec![b"HELLO", b"3"];
        if let Some(password) = &self.password {
            let user = self.username.as_deref().unwrap_or("default");
            hello.extend([b"AUTH".as_slice(), user.as_bytes(), password.as_bytes()]);
        }
        let db = self.db.to_string();
        let mut commands = vec![hello];
        if self.db != 0 {
            commands.push(vec![b"SELECT", db.as_bytes()]);
        }
        commands.push(vec![b"CLIENT", b"TRACKING", b"ON"]);
        let mut buffer = Vec::new();
        for command in commands {
            stream.write_all(&encode(&command))?;
            if let Frame::Error(message) = read_frame(&mut stream, &mut buffer)? {
                return Err(std::io::Error::other(message));
            }
        }
        Ok(Arc::new(Tracked {
            name: format!("{host}:{port}"),
            writer: Mutex::new(stream),
            handlers: Mutex::default(),
            keys: Mutex::default(),
            lost: AtomicBool::new(false),
        }))
    }

    /// A push: the marks of its keys go (a null list: the server flushed its table).
    fn pushed(&self, node: &Tracked, items: &[Frame]) {
        if items.first().and_then(Frame::text) != Some("invalidate") {
            return;
        }
        let keys: Vec<String> = match items.get(1) {
            Some(Frame::Array(keys)) => keys
                .iter()
                .filter_map(|k| k.text().map(str::to_string))
                .collect(),
            _ => lock(&node.keys).iter().cloned().collect(),
        };
        self.invalidate(&keys, true);
    }

    fn invalidate(&self, keys: &[String], count: bool) {
        let mut state = self.state();
        let mut marks = self.marks.write().unwrap_or_else(|e| e.into_inner());
        for key in keys {
            *state.generation.entry(key.clone()).or_default() += 1;
            let sales: Vec<String> = state
                .sales_of
                .get(key)
                .into_iter()
                .flatten()
                .cloned()
                .collect();
            for sale in sales {
                if count {
                    *state.invalidations.entry(sale.clone()).or_default() += 1;
                }
                marks.remove(&sale);
            }
        }
    }

    /// The connection failed, is late, or its node is no master: every mark it covered goes.
    fn lose(self: &Arc<Self>, node: &Arc<Tracked>) {
        if node.lost.swap(true, Ordering::SeqCst) {
            return;
        }
        let _ = lock(&node.writer).shutdown(std::net::Shutdown::Both);
        // Its marks go before it stops counting (`connections`): whoever sees it gone sees
        // them gone (a test that waited for the count once found a mark still there).
        let keys: Vec<String> = lock(&node.keys).iter().cloned().collect();
        self.invalidate(&keys, false);
        {
            let mut state = self.state();
            if state
                .nodes
                .get(&node.name)
                .is_some_and(|n| Arc::ptr_eq(n, node))
            {
                state.nodes.remove(&node.name);
            }
            state
                .node_of
                .retain(|_, (host, port)| format!("{host}:{port}") != node.name);
        }
        let handlers: Vec<_> = lock(&node.handlers).drain(..).collect();
        for (_, handler) in handlers {
            handler(
                self,
                Frame::Error("the tracking connection was lost".into()),
            );
        }
    }

    fn covers_marks(&self, node: &Tracked) -> bool {
        let keys = lock(&node.keys).clone();
        let state = self.state();
        let marks = self.marks.read().unwrap_or_else(|e| e.into_inner());
        keys.iter()
            .filter_map(|k| state.sales_of.get(k))
            .flatten()
            .any(|sale| marks.contains_key(sale))
    }
}

impl Tracked {
    fn send(&self, args: &[&[u8]], handler: Handler) -> std::io::Result<()> {
        // The handler is queued before the command leaves, so its reply finds it.
        let mut handlers = lock(&self.handlers);
        lock(&self.writer).write_all(&encode(args))?;
        handlers.push_back((Instant::now(), handler));
        Ok(())
    }

    fn late(&self) -> bool {
        let handlers = lock(&self.handlers);
        handlers
            .front()
            .is_some_and(|(sent, _)| sent.elapsed() > REPLY_TIMEOUT)
    }
}

fn read_frame(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> std::io::Result<Frame> {
    loop {
        match parse(buffer) {
            Ok(Some((frame, used))) => {
                buffer.drain(..used);
                return Ok(frame);
            }
            Ok(None) => {}
            Err(_) => return Err(std::io::Error::other("not RESP")),
        }
        let mut chunk = [0u8; 4096];
        let read = stream.read(&mut chunk)?;
        if read == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

/// A tracking connection's reader: replies to their handlers, pushes to the marks, in the
/// order the server sent them.
fn serve(shared: &Arc<Shared>, node: &Arc<Tracked>) {
    let Ok(mut stream) = lock(&node.writer).try_clone() else {
        shared.lose(node);
        return;
    };
    let mut buffer = Vec::new();
    let mut checked = Instant::now();
    while !node.lost.load(Ordering::SeqCst) {
        match read_frame(&mut stream, &mut buffer) {
            Ok(Frame::Push(items)) => shared.pushed(node, &items),
            Ok(frame) => {
                let handler = lock(&node.handlers).pop_front();
                if let Some((_, handler)) = handler {
                    handler(shared, frame);
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
        if node.late() {
            break;
        }
        if checked.elapsed() >= ROLE_CHECK {
            checked = Instant::now();
            if shared.covers_marks(node) {
                let reader = node.clone();
                let role: Handler = Box::new(move |shared, frame| {
                    let master = matches!(&frame, Frame::Array(items) if items.first().and_then(Frame::text) == Some("master"));
                    if !master {
                        shared.lose(&reader);
                    }
                });
                if node.send(&[b"ROLE"], role).is_err() {
                    break;
                }
            }
        }
    }
    shared.lose(node);
}

/// A sale handle's side of the cache: its id there and the keys whose reads make its mark.
#[derive(Clone)]
pub(crate) struct Cached {
    cache: SoldOutCache,
    id: String,
    keys: Vec<String>,
    whole_sale: bool,
}

impl Cached {
    /// `id`: the sale's name in the cache ("key:<key>", "sale:<name>"); `whole_sale`: the
    /// mark is a partitioned sale's, which also needs no units in flight.
    pub(crate) fn new(
        cache: &SoldOutCache,
        id: String,
        keys: Vec<String>,
        whole_sale: bool,
    ) -> Cached {
        Cached {
            cache: cache.clone(),
            id,
            keys,
            whole_sale,
        }
    }

    pub(crate) fn refuses(&self) -> bool {
        self.cache.refuses(&self.id)
    }

    pub(crate) fn invalidations(&self) -> u64 {
        self.cache.invalidations(&self.id)
    }

    /// After the server's SOLD_OUT: waits for the reads that may mark the sale (a key found
    /// moved is read once more where it is now).
    pub(crate) async fn learn(&self) {
        for _ in 0..2 {
            let reading = self.cache.learn(&self.id, &self.keys, self.whole_sale);
            if reading.await != Ok(Outcome::Moved) {
                return;
            }
        }
    }
}

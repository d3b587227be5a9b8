//! A randomized, model-based test of escrow transfers over three sale keys (issue 31): LEND,
//! ABSORB, SETTLE, TRY, CANCEL and RESTOCK at random, every transfer step repeated under the
//! same id and tried again under ids already used elsewhere, against a model of docs/commands.md's
//! contract, across DEBUG RELOAD, a replica and an AOF replay. After every step each reply is
//! the model's, each key's INFO is the model's, and, read from the server alone,
//! `Σ (remaining + held + sold) + in flight == Σ (stock + restocked)`.
//!
//! The mover here is honest as docs/commands.md asks: it ABSORBs only what a LEND replied, at the
//! LEND's destination. So any unit created or lost is the module's doing, as in issue 31,
//! where a settled id lent again to another key let that key absorb units never taken.

use seckill_harness::{dump, durable_master_and_replica, error_text, fields, wait_replicas};
use std::collections::HashMap;

const KEYS: [&str; 3] = ["{a}", "{b}", "{c}"];
/// Key 2 is a sale with HOLD: its purchases are held, not final, for the whole run.
const HOLD_KEY: usize = 2;
const STOCK: [u64; 3] = [20, 5, 0];
const LIMIT: u64 = 3;
const USERS: [&str; 6] = ["u0", "u1", "u2", "u3", "u4", "u5"];
const MAX_UNITS: u64 = i64::MAX as u64;
const STEPS: usize = 1_500;
const RELOAD_EVERY: usize = 250;

/// xorshift64*: a fixed seed gives the same walk on every run and machine.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[derive(Clone, Debug)]
enum Record {
    Lent {
        to: usize,
        asked: u64,
        units: u64,
        settled: bool,
    },
    Absorbed {
        from: usize,
        units: u64,
    },
}

#[derive(Default)]
struct Key {
    stock: u64,
    restocked: u64,
    remaining: u64,
    lent: u64,
    absorbed: u64,
    owned: HashMap<&'static str, u64>,
    ledger: HashMap<String, Record>,
}

/// Units a LEND replied, on their way to `dst` until it absorbs them.
struct Flight {
    src: usize,
    dst: usize,
    id: String,
    units: u64,
    absorbed: bool,
}

type Reply = Result<i64, String>;

fn conflict(why: &str) -> Reply {
    Err(format!("ERR transfer id {why}"))
}

#[derive(Default)]
struct Model {
    keys: Vec<Key>,
    flights: Vec<Flight>,
    /// Every transfer id used so far, to be tried again elsewhere.
    ids: Vec<String>,
    /// Every LEND that moved or repeated: (src, id, n, dst), to be repeated as it was.
    lends: Vec<(usize, String, u64, usize)>,
}

impl Model {
    fn try_buy(&mut self, k: usize, user: &'static str, qty: u64) -> Reply {
        let key = &mut self.keys[k];
        let owned = key.owned.entry(user).or_default();
        if key.remaining < qty {
            return Ok(-1);
        }
        if *owned + qty > LIMIT {
            return Ok(-2);
        }
        *owned += qty;
        key.remaining -= qty;
        Ok(key.remaining as i64)
    }

    fn cancel(&mut self, k: usize, user: &'static str, qty: u64) -> Reply {
        let key = &mut self.keys[k];
        let owned = key.owned.entry(user).or_default();
        let back = qty.min(*owned);
        *owned -= back;
        key.remaining += back;
        Ok(back as i64)
    }

    fn restock(&mut self, k: usize, units: u64) -> Reply {
        let key = &mut self.keys[k];
        if key.stock + key.restocked + key.absorbed > MAX_UNITS - units {
            return Err(format!(
                "ERR units would take the sale past {MAX_UNITS} units"
            ));
        }
        key.restocked += units;
        key.remaining += units;
        Ok(key.remaining as i64)
    }

    fn lend(&mut self, src: usize, id: &str, n: u64, dst: usize) -> Reply {
        if src == dst {
            return Err("ERR a transfer needs two different sale keys".into());
        }
        let key = &mut self.keys[src];
        let units = match key.ledger.get(id) {
            Some(Record::Lent {
                to, asked, units, ..
            }) => {
                if *to != dst {
                    return conflict("already lent to another sale key");
                }
                if *asked != n {
                    return conflict("already lent with another n");
                }
                *units
            }
            Some(Record::Absorbed { .. }) => return conflict("already absorbed here"),
            None => {
                let units = n.min(key.remaining);
                key.remaining -= units;
                key.lent += units;
                key.ledger.insert(
                    id.to_string(),
                    Record::Lent {
                        to: dst,
                        asked: n,
                        units,
                        settled: false,
                    },
                );
                if units > 0 {
                    self.flights.push(Flight {
                        src,
                        dst,
                        id: id.to_string(),
                        units,
                        absorbed: false,
                    });
                }
                units
            }
        };
        self.lends.push((src, id.to_string(), n, dst));
        Ok(units as i64)
    }

    fn absorb(&mut self, dst: usize, id: &str, n: u64, src: usize) -> Reply {
        if src == dst {
            return Err("ERR a transfer needs two different sale keys".into());
        }
        let key = &mut self.keys[dst];
        match key.ledger.get(id) {
            Some(Record::Absorbed { from, units }) => {
                if *from != src {
                    return conflict("already absorbed from another sale key");
                }
                if *units != n {
                    return conflict("already absorbed with another n");
                }
                return Ok(0);
            }
            Some(Record::Lent { .. }) => return conflict("already lent from here"),
            None => {}
        }
        key.remaining += n;
        key.absorbed += n;
        key.ledger.insert(
            id.to_string(),
            Record::Absorbed {
                from: src,
                units: n,
            },
        );
        let flight = self
            .flights
            .iter_mut()
            .find(|f| !f.absorbed && f.src == src && f.dst == dst && f.id == id && f.units == n)
            .expect("the honest mover absorbs only what a LEND replied");
        flight.absorbed = true;
        Ok(1)
    }

    fn settle(&mut self, src: usize, id: &str) -> Reply {
        match self.keys[src].ledger.get_mut(id) {
            Some(Record::Lent { settled, .. }) if !*settled => {
                *settled = true;
                Ok(1)
            }
            _ => Ok(0),
        }
    }

    fn in_flight(&self) -> u64 {
        self.flights
            .iter()
            .filter(|f| !f.absorbed)
            .map(|f| f.units)
            .sum()
    }

    /// INFO's fields as the model has them.
    fn info(&self, k: usize) -> [(&'static str, u64); 7] {
        let key = &self.keys[k];
        let owned: u64 = key.owned.values().sum();
        let (held, sold) = if k == HOLD_KEY {
            (owned, 0)
        } else {
            (0, owned)
        };
        let pending_out = key
            .ledger
            .values()
            .map(|r| match r {
                Record::Lent {
                    units,
                    settled: false,
                    ..
                } => *units,
                _ => 0,
            })
            .sum();
        [
            ("remaining", key.remaining),
            ("held", held),
            ("sold", sold),
            ("restocked", key.restocked),
            ("lent", key.lent),
            ("absorbed", key.absorbed),
            ("pending_out", pending_out),
        ]
    }
}

fn send(con: &mut redis::Connection, args: &[String]) -> Reply {
    let mut cmd = redis::cmd(&args[0]);
    for arg in &args[1..] {
        cmd.arg(arg);
    }
    cmd.query::<i64>(con).map_err(|e| error_text(&e))
}

/// One random step: the command and the model's reply to it.
fn step(model: &mut Model, rng: &mut Rng, next_id: &mut u64) -> (Vec<String>, Reply) {
    let k = rng.below(3) as usize;
    let other = (k + 1 + rng.below(2) as usize) % 3;
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    match rng.below(100) {
        0..=29 => {
            let (user, qty) = (rng.pick(&USERS), 1 + rng.below(LIMIT));
            let reply = model.try_buy(k, user, qty);
            (s(&["SECKILL.TRY", KEYS[k], user, &qty.to_string()]), reply)
        }
        30..=39 => {
            let (user, qty) = (rng.pick(&USERS), 1 + rng.below(LIMIT));
            let reply = model.cancel(k, user, qty);
            (
                s(&["SECKILL.CANCEL", KEYS[k], user, &qty.to_string()]),
                reply,
            )
        }
        40..=44 => {
            // Now and then the largest argument, which the bound refuses on a stocked key.
            let units = if rng.chance(20) {
                MAX_UNITS
            } else {
                1 + rng.below(4)
            };
            let reply = model.restock(k, units);
            (s(&["SECKILL.RESTOCK", KEYS[k], &units.to_string()]), reply)
        }
        45..=64 => {
            // LEND: a fresh id, an id used before (anywhere, any direction), or a LEND
            // repeated exactly; now and then towards its own key.
            let (src, id, n, dst) = if !model.lends.is_empty() && rng.chance(25) {
                let i = rng.below(model.lends.len() as u64) as usize;
                model.lends[i].clone()
            } else {
                let id = if model.ids.is_empty() || rng.chance(45) {
                    *next_id += 1;
                    format!("t{next_id}")
                } else {
                    model.ids[rng.below(model.ids.len() as u64) as usize].clone()
                };
                let dst = if rng.chance(3) { k } else { other };
                (k, id, 1 + rng.below(6), dst)
            };
            if !model.ids.contains(&id) {
                model.ids.push(id.clone());
            }
            let reply = model.lend(src, &id, n, dst);
            let n = n.to_string();
            (
                s(&["SECKILL.LEND", KEYS[src], &id, &n, "TO", KEYS[dst]]),
                reply,
            )
        }
        65..=84 if !model.flights.is_empty() => {
            // ABSORB what a LEND replied (again, if it was absorbed already), or, for an id
            // the destination absorbed, the same id with another n or from another key.
            let f = &model.flights[rng.below(model.flights.len() as u64) as usize];
            let (mut src, dst, id, mut n) = (f.src, f.dst, f.id.clone(), f.units);
            if matches!(
                model.keys[dst].ledger.get(&id),
                Some(Record::Absorbed { .. })
            ) {
                match rng.below(4) {
                    0 => n += 1,
                    1 => src = 3 - src - dst,
                    _ => {}
                }
            }
            let reply = model.absorb(dst, &id, n, src);
            let n = n.to_string();
            (
                s(&["SECKILL.ABSORB", KEYS[dst], &id, &n, "FROM", KEYS[src]]),
                reply,
            )
        }
        _ => {
            // SETTLE any id used so far at any key, or one never used.
            let id = if model.ids.is_empty() || rng.chance(10) {
                "never-used".to_string()
            } else {
                model.ids[rng.below(model.ids.len() as u64) as usize].clone()
            };
            let reply = model.settle(k, &id);
            (s(&["SECKILL.SETTLE", KEYS[k], &id]), reply)
        }
    }
}

/// INFO of every key equals the model's, and the server's own totals keep the summed
/// identity with the model's units in flight.
fn check(con: &mut redis::Connection, model: &Model, at: &str) {
    let mut held_anywhere = 0;
    let mut issued = 0;
    for (k, key) in KEYS.iter().enumerate() {
        let info: HashMap<String, i64> = fields(con, &["SECKILL.INFO", key]).into_iter().collect();
        for (name, expected) in model.info(k) {
            assert_eq!(info[name], expected as i64, "{at}: {key} {name}");
        }
        held_anywhere += info["remaining"] + info["held"] + info["sold"];
        issued += info["stock"] + info["restocked"];
    }
    assert_eq!(
        held_anywhere + model.in_flight() as i64,
        issued,
        "{at}: Σ (remaining + held + sold) + in flight == Σ (stock + restocked)"
    );
}

fn dumps(con: &mut redis::Connection) -> Vec<Vec<u8>> {
    KEYS.iter().map(|key| dump(con, key)).collect()
}

#[test]
fn random_transfers_with_repeated_and_reused_ids_never_create_or_lose_units() {
    let (mut master, replica) = durable_master_and_replica();
    let mut con = master.con();
    let mut model = Model::default();
    for (k, key) in KEYS.iter().enumerate() {
        let mut init = vec![
            "SECKILL.INIT".to_string(),
            key.to_string(),
            STOCK[k].to_string(),
            "LIMIT".into(),
            LIMIT.to_string(),
        ];
        if k == HOLD_KEY {
            init.extend(["HOLD".into(), "3600000".into()]);
        }
        let mut cmd = redis::cmd(&init[0]);
        cmd.arg(&init[1..]);
        let _: () = cmd.query(&mut con).unwrap();
        model.keys.push(Key {
            stock: STOCK[k],
            remaining: STOCK[k],
            ..Key::default()
        });
    }
    let mut rng = Rng(0x5eed_0031);
    let mut next_id = 0;
    let mut refused_reuses = 0;
    for i in 1..=STEPS {
        let (args, expected) = step(&mut model, &mut rng, &mut next_id);
        let got = send(&mut con, &args);
        assert_eq!(got, expected, "step {i}: {args:?}");
        if matches!(&expected, Err(e) if e.starts_with("ERR transfer id already lent")) {
            refused_reuses += 1;
        }
        check(&mut con, &model, &format!("step {i} after {args:?}"));
        if i % RELOAD_EVERY == 0 {
            wait_replicas(&mut con, 1);
            let before = dumps(&mut con);
            assert_eq!(dumps(&mut replica.con()), before, "step {i}: replica");
            let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
            assert_eq!(dumps(&mut con), before, "step {i}: DEBUG RELOAD");
            check(&mut con, &model, &format!("step {i} after DEBUG RELOAD"));
        }
    }
    // The walk reached what it is for: settled and pending ids lent again, honest absorbs,
    // and finished transfers.
    assert!(
        refused_reuses >= 50,
        "only {refused_reuses} reused ids refused"
    );
    assert!(model.flights.iter().filter(|f| f.absorbed).count() >= 50);
    let settled = model
        .keys
        .iter()
        .flat_map(|k| k.ledger.values())
        .filter(|r| matches!(r, Record::Lent { settled: true, .. }))
        .count();
    assert!(settled >= 20, "only {settled} settled transfers");

    // The replica and an AOF replay hold what the master holds, byte for byte.
    wait_replicas(&mut con, 1);
    let end = dumps(&mut con);
    assert_eq!(dumps(&mut replica.con()), end, "replica at the end");
    master.kill_and_restart();
    let mut con = master.con();
    assert_eq!(dumps(&mut con), end, "AOF replay");
    check(&mut con, &model, "after the AOF replay");
}

//! The waiting room at a thousand waiters a process through the Rust crate (#50): the pages of
//! one handle share one reader of the room's stream (a non-blocking read every 50 ms by one
//! page at a time), so a thousand async pages on one multiplexed connection, and a thousand
//! threads, each learn of their turn in time to buy, and Redis sends the process well under a
//! MB. Before (one blocking stream read per page, a connection each): the Python package's
//! run of the same sale had 960 of 1 000 told their turn and then refused.

use futures_util::StreamExt;
use seckill_client::aio::FlashSale as _;
use seckill_client::{FlashSale, QueueSpec, Sale, SaleSpec, TryReply, aio};
use seckill_harness::{Server, server_now_ms};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const WAITERS: usize = 1_000;
const STOCK: u64 = 200;
/// Bytes from Redis to the process for the whole sale, at most: 5 KB a waiter.
const BYTES_BOUND: i64 = 5_000_000;

fn spec(con: &mut redis::Connection) -> SaleSpec {
    let start = server_now_ms(con) + 2_000;
    SaleSpec::new(STOCK, 1)
        .window(Some(start), None)
        .queue(QueueSpec {
            admit_rate: Some((50, 1_000)),
            window_ms: Some(4_000),
            presence_ms: None,
        })
        .events(None)
}

fn sent(con: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("stats").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_net_output_bytes:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn check(outcomes: &HashMap<String, String>, bytes: i64) {
    let refused: Vec<&String> = outcomes
        .values()
        .filter(|o| o.starts_with("refused"))
        .collect();
    assert!(
        refused.is_empty(),
        "{} told their turn were refused: {:?}",
        refused.len(),
        &refused[..refused.len().min(5)]
    );
    let bought = outcomes.values().filter(|o| *o == "bought").count();
    let sold_out = outcomes.values().filter(|o| *o == "sold out").count();
    assert_eq!(
        (bought, sold_out),
        (STOCK as usize, WAITERS - STOCK as usize)
    );
    println!(
        "{WAITERS} waiters: Redis sent {:.2} MB to the process",
        bytes as f64 / 1e6
    );
    assert!(bytes < BYTES_BOUND, "{bytes}");
}

#[test]
fn a_thousand_async_pages_on_one_connection_each_told_its_turn_buy() {
    let server = Server::start();
    let mut admin = server.con();
    let spec = spec(&mut admin);
    let before = sent(&mut admin);
    let outcomes = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut con = server.async_con().await;
        let sale = Arc::new(
            aio::Sale::replace(&mut con, "scale:async", &spec)
                .await
                .unwrap(),
        );
        let mut pages = Vec::new();
        for n in 0..WAITERS {
            let (sale, mut own) = (sale.clone(), con.clone());
            pages.push(tokio::spawn(async move {
                let user = format!("u{n}");
                let mut places = Box::pin(sale.wait_for_turn(own.clone(), &user, 5_000));
                while let Some(place) = places.next().await {
                    match place.unwrap().position {
                        0 => {
                            let outcome = match sale.try_buy(&mut own, &user, 1).await.unwrap() {
                                TryReply::Bought { .. } => "bought".to_string(),
                                other => format!("refused {other:?}"),
                            };
                            return (user, outcome);
                        }
                        -1 => return (user, "sold out".to_string()),
                        _ => {}
                    }
                }
                (user, "ended".to_string())
            }));
        }
        let mut outcomes = HashMap::new();
        for page in pages {
            let (user, outcome) = tokio::time::timeout(std::time::Duration::from_secs(120), page)
                .await
                .expect("a page hangs")
                .unwrap();
            outcomes.insert(user, outcome);
        }
        outcomes
    });
    check(&outcomes, sent(&mut admin) - before);
}

#[test]
fn a_thousand_sync_pages_on_threads_each_told_its_turn_buy() {
    let server = Server::start();
    let mut admin = server.con();
    let spec = spec(&mut admin);
    let sale = Arc::new(Sale::replace(&mut admin, "scale:sync", &spec).unwrap());
    let outcomes = Arc::new(Mutex::new(HashMap::new()));
    let before = sent(&mut admin);
    let pages: Vec<_> = (0..WAITERS)
        .map(|n| {
            let (sale, outcomes, mut own) = (sale.clone(), outcomes.clone(), server.con());
            std::thread::spawn(move || {
                let user = format!("u{n}");
                let mut outcome = "ended".to_string();
                let mut buy = false;
                for place in sale.wait_for_turn(&mut own, &user, 5_000) {
                    match place.unwrap().position {
                        0 => {
                            buy = true;
                            break;
                        }
                        -1 => outcome = "sold out".to_string(),
                        _ => {}
                    }
                }
                if buy {
                    outcome = match FlashSale::try_buy(&*sale, &mut own, &user, 1).unwrap() {
                        TryReply::Bought { .. } => "bought".to_string(),
                        other => format!("refused {other:?}"),
                    };
                }
                outcomes.lock().unwrap().insert(user, outcome);
            })
        })
        .collect();
    for page in pages {
        page.join().unwrap();
    }
    let outcomes = outcomes.lock().unwrap().clone();
    check(&outcomes, sent(&mut admin) - before);
}

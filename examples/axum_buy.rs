//! A web service that sells through the async client, as a service would run it: `POST
//! /buy/{user}` on axum, one `seckill_client::aio::PartitionedSale` and one
//! `aio::ClusterSession` shared by every request.
//!
//! Usage: `axum_buy [nodes] [listen-address] [stock] [sale]`: `nodes` is one server's URL or
//! a cluster's nodes, comma-separated (default `redis://127.0.0.1:6379/`); the service listens
//! on `127.0.0.1:3000` unless told, sells `stock` units (100) of the sale `sale`
//! (`sale:web`). Prints `listening on ADDRESS` once it serves.
//!
//! - Restartable: it opens the sale when it exists and creates it only when it does not (two
//!   replicas of the service starting at once: one creates, the other opens).
//! - One server or a cluster, the same code: the session reads the slot map, or serves every
//!   slot from the one server; it connects anew after a restart or a failover by itself.
//! - Every request answers within the sale's deadline (`SECKILL_DEADLINE_MS`, 10 000 by
//!   default): 200 `bought, N left in this partition`; 409 `sold out` / `over limit` / ...;
//!   503 `not bought, try again` when no send reached Redis (nothing happened); 503 with the
//!   attempt id when Redis may have run it (`GET /bought/{user}` tells what happened); 400 for
//!   a bad user id; 500 for anything else.
//! - Ctrl-C or SIGTERM: stops taking requests, finishes the ones in flight, exits 0.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use seckill_client::aio::{ClusterSession, FlashSale, PartitionedSale};
use seckill_client::{Error, RetryPolicy, SaleSpec, TryReply};
use std::sync::Arc;
use std::time::Duration;

/// Partitions of the sale: 4, so that a cluster's masters share it (one server serves them
/// all as well).
const PARTITIONS: u32 = 4;

struct Shop {
    sale: PartitionedSale,
    /// Cloned per request: the clones share one connection per node, pipelined.
    session: ClusterSession,
}

type Answer = (StatusCode, String);

async fn buy(State(shop): State<Arc<Shop>>, Path(user): Path<String>) -> Answer {
    match shop.sale.try_buy(&mut shop.session.clone(), &user, 1).await {
        Ok(TryReply::Bought { remaining }) => (
            StatusCode::OK,
            format!("bought, {remaining} left in this partition"),
        ),
        Ok(TryReply::SoldOut) => (StatusCode::CONFLICT, "sold out".into()),
        Ok(TryReply::OverLimit) => (StatusCode::CONFLICT, "over limit".into()),
        Ok(other) => (StatusCode::CONFLICT, format!("refused: {}", other.code())),
        Err(e) => failure(e),
    }
}

async fn bought(State(shop): State<Arc<Shop>>, Path(user): Path<String>) -> Answer {
    match shop.sale.bought(&mut shop.session.clone(), &user).await {
        Ok(units) => (StatusCode::OK, units.to_string()),
        Err(e) => failure(e),
    }
}

/// Each typed error as the HTTP status a client can act on.
fn failure(e: Error) -> Answer {
    match e {
        Error::Unavailable { attempt_id, .. } => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not bought, try again (attempt {attempt_id} never reached Redis)"),
        ),
        Error::OutcomeUnknown { attempt_id, .. } => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("outcome unknown: attempt {attempt_id}; GET /bought/{{user}} tells"),
        ),
        Error::InvalidArgument(why) => (StatusCode::BAD_REQUEST, why),
        Error::Redis(e) if seckill_client::is_retryable(&e) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("try again: {e}"))
        }
        other => (StatusCode::INTERNAL_SERVER_ERROR, other.to_string()),
    }
}

/// The sale `name`: opened when it exists, created when it does not, opened when another
/// process created it meanwhile.
async fn open_or_create(
    session: &mut ClusterSession,
    name: &str,
    stock: u64,
) -> seckill_client::Result<PartitionedSale> {
    match PartitionedSale::open(session, name).await {
        Err(Error::NoSale(_)) => {
            match PartitionedSale::create(session, name, &SaleSpec::new(stock, PARTITIONS)).await {
                Err(Error::SaleExists(_)) => PartitionedSale::open(session, name).await,
                created => created,
            }
        }
        opened => opened,
    }
}

async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = terminate => {},
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let nodes: Vec<String> = args
        .get(1)
        .map_or("redis://127.0.0.1:6379/", String::as_str)
        .split(',')
        .map(String::from)
        .collect();
    let listen = args.get(2).map_or("127.0.0.1:3000", String::as_str);
    let stock: u64 = args.get(3).map_or(Ok(100), |s| s.parse())?;
    let name = args.get(4).map_or("sale:web", String::as_str);
    let deadline_ms: u64 =
        std::env::var("SECKILL_DEADLINE_MS").map_or(Ok(10_000), |s| s.parse())?;
    let mut session = ClusterSession::connect(nodes).await?;
    let sale = open_or_create(&mut session, name, stock)
        .await?
        .with_retry(RetryPolicy {
            deadline: Duration::from_millis(deadline_ms),
            ..RetryPolicy::default()
        });
    let shop = Arc::new(Shop { sale, session });
    let app = Router::new()
        .route("/buy/{user}", post(buy))
        .route("/bought/{user}", get(bought))
        .with_state(shop);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    println!("stopped");
    Ok(())
}

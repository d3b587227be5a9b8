//! A web service that sells through the async client: `POST /buy/{user}` on axum, one
//! `seckill_client::aio::Sale` and one multiplexed connection shared by every request.
//!
//! Usage: `axum_buy [redis-url] [listen-address] [stock]` (defaults `redis://127.0.0.1:6379/`,
//! `127.0.0.1:3000`, 100). Prints `listening on ADDRESS` once it serves. Answers 200 `bought,
//! N left`, 409 `sold out` / `over limit` / ..., 503 with the error when Redis gave no answer
//! (the attempt id is in the text: `GET /bought/{user}` tells what happened).

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use redis::aio::MultiplexedConnection;
use seckill_client::aio::{FlashSale, Sale};
use seckill_client::{SaleSpec, TryReply};
use std::sync::Arc;

struct Shop {
    sale: Sale,
    /// Cloned per request: clones share one connection, whose requests are pipelined.
    con: MultiplexedConnection,
}

async fn buy(State(shop): State<Arc<Shop>>, Path(user): Path<String>) -> (StatusCode, String) {
    match shop.sale.try_buy(&mut shop.con.clone(), &user, 1).await {
        Ok(TryReply::Bought { remaining }) => (StatusCode::OK, format!("bought, {remaining} left")),
        Ok(TryReply::SoldOut) => (StatusCode::CONFLICT, "sold out".into()),
        Ok(TryReply::OverLimit) => (StatusCode::CONFLICT, "over limit".into()),
        Ok(other) => (StatusCode::CONFLICT, format!("refused: {}", other.code())),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

async fn bought(State(shop): State<Arc<Shop>>, Path(user): Path<String>) -> (StatusCode, String) {
    match shop.sale.bought(&mut shop.con.clone(), &user).await {
        Ok(units) => (StatusCode::OK, units.to_string()),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let url = args
        .get(1)
        .map_or("redis://127.0.0.1:6379/", String::as_str);
    let listen = args.get(2).map_or("127.0.0.1:3000", String::as_str);
    let stock: u64 = args.get(3).map_or(Ok(100), |s| s.parse())?;
    let mut con = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let sale = Sale::create(&mut con, "sale:web", &SaleSpec::new(stock, 1)).await?;
    let shop = Arc::new(Shop { sale, con });
    let app = Router::new()
        .route("/buy/{user}", post(buy))
        .route("/bought/{user}", get(bought))
        .with_state(shop);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

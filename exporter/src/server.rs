//! The HTTP side: `/metrics` for Prometheus, `/` the live page, `/sales.json` what the page
//! reads. Every request scrapes afresh within its budget.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{Html, IntoResponse, Json};
use axum::routing::get;
use serde_json::{Value, json};

use crate::exposition::{Format, encode, label_text};
use crate::metrics::{families, sale_labels};
use crate::scrape::{Scraper, Snapshot};

pub struct App {
    pub scraper: Scraper,
    pub timeout: Duration,
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/sales.json", get(sales))
        .route("/", get(page))
        .with_state(app)
}

/// The scrape's budget: Prometheus's own timeout (its header) less a margin for the answer to
/// travel, or `--timeout-ms`, whichever is shorter.
fn budget(headers: &HeaderMap, configured: Duration) -> Duration {
    let asked = headers
        .get("x-prometheus-scrape-timeout-seconds")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(|s| Duration::from_secs_f64((s * 0.8).max(0.05)));
    asked.map_or(configured, |asked| asked.min(configured))
}

async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> impl IntoResponse {
    let format = Format::from_accept(
        headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(""),
    );
    let snapshot = app.scraper.scrape(budget(&headers, app.timeout)).await;
    let body = encode(&families(&snapshot.nodes, snapshot.seconds), format);
    ([(header::CONTENT_TYPE, format.content_type())], body)
}

async fn sales(State(app): State<Arc<App>>, headers: HeaderMap) -> Json<Value> {
    let snapshot = app.scraper.scrape(budget(&headers, app.timeout)).await;
    Json(snapshot_json(&snapshot))
}

async fn page() -> impl IntoResponse {
    (
        [(header::CACHE_CONTROL, "no-store")],
        Html(include_str!("../page/index.html")),
    )
}

/// What the live page reads: every node, every sale key and lock key, named as in `/metrics`.
fn snapshot_json(snapshot: &Snapshot) -> Value {
    let mut sales = Vec::new();
    let mut locks = Vec::new();
    for node in &snapshot.nodes {
        for sale in &node.sales {
            let (name, partition) = sale_labels(sale);
            sales.push(json!({
                "sale": name,
                "partition": partition,
                "key": label_text(&sale.key),
                "instance": node.instance,
                "stock": sale.stock,
                "remaining": sale.remaining,
                "sold": sale.sold,
                "held": sale.held,
                "buyers": sale.buyers,
                "sold_out": sale.sold_out,
                "waiting": sale.room.map(|r| r.waiting),
                "admitted": sale.room.map(|r| r.admitted),
            }));
        }
        for lock in &node.locks {
            locks.push(json!({
                "key": label_text(&lock.key),
                "instance": node.instance,
                "held": lock.held,
                "waiters": lock.waiters,
            }));
        }
    }
    let nodes: Vec<Value> = snapshot
        .nodes
        .iter()
        .map(|node| {
            json!({
                "instance": node.instance,
                "up": node.failure.is_none(),
                "failure": node.failure,
                "counters": node.counters,
            })
        })
        .collect();
    json!({ "seconds": snapshot.seconds, "nodes": nodes, "sales": sales, "locks": locks })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_prometheus_timeout_with_a_margin_or_the_configured_one() {
        let configured = Duration::from_millis(1500);
        let mut headers = HeaderMap::new();
        assert_eq!(budget(&headers, configured), configured);
        headers.insert("x-prometheus-scrape-timeout-seconds", "1".parse().unwrap());
        assert_eq!(budget(&headers, configured), Duration::from_millis(800));
        headers.insert("x-prometheus-scrape-timeout-seconds", "10".parse().unwrap());
        assert_eq!(budget(&headers, configured), configured);
        for bad in ["0", "-3", "nan", "soon"] {
            headers.insert("x-prometheus-scrape-timeout-seconds", bad.parse().unwrap());
            assert_eq!(budget(&headers, configured), configured, "{bad}");
        }
    }
}

//! What the exporter's tests share: the exporter and a Prometheus as real processes, and a
//! small HTTP GET (the tests need nothing more, and no HTTP client crate for it).

#![allow(dead_code)] // each test file uses its part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use seckill_harness::{free_port, fresh_dir, wait_until};
use serde_json::Value;

/// `GET path` on `address` (HOST:PORT): the status and the body.
pub fn http_get(address: &str, path: &str) -> std::io::Result<(u16, String)> {
    seckill_harness::http::request(address, "GET", path)
}

pub fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The repository's root (the exporter's crate is one folder down).
pub fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub struct Exporter {
    pub address: String,
    child: Child,
}

impl Exporter {
    /// The workspace's `seckill-exporter` reading `redis` (URLs), once it serves.
    pub fn start(redis: &[String], extra: &[&str]) -> Exporter {
        let address = format!("127.0.0.1:{}", free_port());
        let mut command = Command::new(env!("CARGO_BIN_EXE_seckill-exporter"));
        for url in redis {
            command.args(["--redis", url]);
        }
        let child = command
            .args(["--listen", &address])
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("start seckill-exporter");
        let exporter = Exporter { address, child };
        wait_until(Duration::from_secs(30), "the exporter to serve", || {
            http_get(&exporter.address, "/metrics").is_ok_and(|(status, _)| status == 200)
        });
        exporter
    }

    pub fn metrics(&self) -> String {
        let (status, body) = http_get(&self.address, "/metrics").expect("GET /metrics");
        assert_eq!(status, 200, "{body}");
        body
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Debian's `prometheus`, on loopback, scraping `target` every second and evaluating the
/// repository's `monitoring/alerts.yml` every second.
pub struct Prometheus {
    pub address: String,
    child: Child,
    dir: PathBuf,
}

impl Prometheus {
    pub fn start(target: &str) -> Prometheus {
        let dir = fresh_dir();
        let rules = repository().join("monitoring/alerts.yml");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: seckill\n    honor_labels: true\n    static_configs:\n      - targets: [\"{target}\"]\n",
            rules.display()
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let address = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("prometheus (Debian's `prometheus` package; .ci/run installs it)");
        let prometheus = Prometheus {
            address,
            child,
            dir,
        };
        wait_until(Duration::from_secs(60), "Prometheus to be ready", || {
            http_get(&prometheus.address, "/-/ready").is_ok_and(|(status, _)| status == 200)
        });
        prometheus
    }

    /// An instant query's result vector (`data.result`).
    pub fn query(&self, promql: &str) -> Vec<Value> {
        let path = format!("/api/v1/query?query={}", percent_encode(promql));
        let (status, body) = http_get(&self.address, &path).expect("query Prometheus");
        assert_eq!(status, 200, "{promql}: {body}");
        let reply: Value = serde_json::from_str(&body).expect("JSON from Prometheus");
        reply["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Waits until `promql` returns at least one series; returns them.
    pub fn query_until_data(&self, promql: &str, timeout: Duration) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let result = self.query(promql);
            if !result.is_empty() {
                return result;
            }
            assert!(
                Instant::now() < deadline,
                "{promql} returned no data in {timeout:?}; Prometheus log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Alerts now pending or firing: (name, labels, state).
    pub fn alerts(&self) -> Vec<(String, Value, String)> {
        let (_, body) = http_get(&self.address, "/api/v1/alerts").expect("alerts");
        let reply: Value = serde_json::from_str(&body).expect("JSON from Prometheus");
        reply["data"]["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|a| {
                (
                    a["labels"]["alertname"].as_str().unwrap_or("").to_string(),
                    a["labels"].clone(),
                    a["state"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    /// Waits until alert `name` is pending or firing with `label` = `value`.
    pub fn wait_for_alert(&self, name: &str, label: &str, value: &str) {
        poll(
            &format!("{name} {{{label}=\"{value}\"}} pending or firing"),
            || {
                self.alerts()
                    .iter()
                    .any(|(n, labels, _)| n == name && labels[label] == value)
            },
        );
    }

    /// Waits until `sum by (sale) (seckill_sale_remaining)` of `sale` is `units`.
    pub fn wait_for_remaining(&self, sale: &str, units: i64) {
        let query = format!("sum by (sale) (seckill_sale_remaining{{sale=\"{sale}\"}})");
        poll(
            &format!("{sale}'s remaining at {units} in Prometheus"),
            || {
                let result = self.query(&query);
                let seen = result
                    .first()
                    .and_then(|r| r["value"][1].as_str()?.parse().ok());
                seen == Some(units)
            },
        );
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls `condition` every 100 ms (each poll is an HTTP query) until it holds, 60 s at most.
pub fn poll(what: &str, mut condition: impl FnMut() -> bool) {
    wait_until(Duration::from_secs(60), what, || {
        let held = condition();
        if !held {
            std::thread::sleep(Duration::from_millis(100));
        }
        held
    });
}

/// Every PromQL query of the shipped Grafana dashboard.
pub fn dashboard_queries() -> Vec<String> {
    let path = repository().join("monitoring/grafana/seckill-dashboard.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            queries.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    queries
}

/// A sample's value in Prometheus's text format: the line starting with `series` (its name and
/// labels as written).
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

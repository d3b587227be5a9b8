//! `seckill-exporter`: Prometheus metrics (`GET /metrics`) and a live page (`GET /`) of every
//! seckill sale and lock on a server or a cluster. See docs/monitoring.md.

mod cli;
mod exposition;
mod metrics;
mod reading;
mod scrape;
mod server;
mod topology;

use std::sync::Arc;

use scrape::Scraper;

fn main() {
    let words: Vec<String> = std::env::args().skip(1).collect();
    let options = match cli::parse(&words) {
        Ok(Some(options)) => options,
        Ok(None) => {
            println!("{}", cli::USAGE);
            return;
        }
        Err(why) => {
            eprintln!("seckill-exporter: {why}\n{}", cli::USAGE);
            std::process::exit(2);
        }
    };
    let seeds = options
        .redis
        .iter()
        .map(|url| redis::IntoConnectionInfo::into_connection_info(url.as_str()))
        .collect::<Result<Vec<_>, _>>()
        .expect("checked by cli::parse");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(&options.listen).await {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("seckill-exporter: cannot listen on {}: {e}", options.listen);
                std::process::exit(1);
            }
        };
        let address = listener.local_addr().expect("a bound address");
        println!(
            "seckill-exporter: serving http://{address}/metrics and the live page http://{address}/"
        );
        let app = server::router(Arc::new(server::App {
            scraper: Scraper::new(seeds),
            timeout: options.timeout,
        }));
        let stopped = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(stopped)
            .await
        {
            eprintln!("seckill-exporter: {e}");
            std::process::exit(1);
        }
    });
}

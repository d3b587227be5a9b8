//! The command line, parsed from its words (pure, unit-tested).

use std::time::Duration;

pub const USAGE: &str = "\
usage: seckill-exporter --redis redis://HOST:PORT [--redis ...] [--listen HOST:PORT] [--timeout-ms N]

  --redis URL      a node to read (repeat for several servers); given a cluster node, every
                   node of its cluster is read, and followed as it changes
  --listen ADDR    where to serve /metrics and the live page / (default 127.0.0.1:9799)
  --timeout-ms N   a scrape's budget when the scraper does not send one (default 1500)";

#[derive(Debug, PartialEq)]
pub struct Options {
    pub redis: Vec<String>,
    pub listen: String,
    pub timeout: Duration,
}

/// The options, `Ok(None)` for `--help`, or what is wrong.
pub fn parse(words: &[String]) -> Result<Option<Options>, String> {
    let mut redis = Vec::new();
    let mut listen = "127.0.0.1:9799".to_string();
    let mut timeout = Duration::from_millis(1500);
    let mut words = words.iter();
    while let Some(word) = words.next() {
        let mut value = |name: &str| {
            words
                .next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match word.as_str() {
            "--help" | "-h" => return Ok(None),
            "--redis" => {
                let url = value("--redis")?;
                redis::Client::open(url.as_str()).map_err(|e| format!("--redis {url}: {e}"))?;
                redis.push(url);
            }
            "--listen" => {
                listen = value("--listen")?;
                if listen
                    .rsplit_once(':')
                    .and_then(|(_, p)| p.parse::<u16>().ok())
                    .is_none()
                {
                    return Err(format!("--listen {listen}: not HOST:PORT"));
                }
            }
            "--timeout-ms" => {
                let text = value("--timeout-ms")?;
                match text.parse::<u64>() {
                    Ok(ms) if (1..=60_000).contains(&ms) => timeout = Duration::from_millis(ms),
                    _ => return Err(format!("--timeout-ms {text}: an integer from 1 to 60000")),
                }
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if redis.is_empty() {
        return Err("at least one --redis URL is needed".into());
    }
    Ok(Some(Options {
        redis,
        listen,
        timeout,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn every_option_and_the_defaults() {
        let options = parse(&words(
            "--redis redis://127.0.0.1:7000 --redis redis://h:7001 --listen 0.0.0.0:9 --timeout-ms 800",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(options.redis.len(), 2);
        assert_eq!(options.listen, "0.0.0.0:9");
        assert_eq!(options.timeout, Duration::from_millis(800));
        let defaults = parse(&words("--redis redis://127.0.0.1:6379"))
            .unwrap()
            .unwrap();
        assert_eq!(defaults.listen, "127.0.0.1:9799");
        assert_eq!(defaults.timeout, Duration::from_millis(1500));
        assert_eq!(parse(&words("--help")), Ok(None));
    }

    #[test]
    fn bad_input_is_named() {
        for (line, says) in [
            ("", "at least one --redis"),
            ("--redis", "--redis needs a value"),
            ("--redis nope://x", "--redis nope://x"),
            ("--redis redis://h:1 --listen h", "not HOST:PORT"),
            ("--redis redis://h:1 --timeout-ms 0", "from 1 to 60000"),
            ("--redis redis://h:1 --timeout-ms x", "from 1 to 60000"),
            ("--redis redis://h:1 --what", "unknown argument --what"),
        ] {
            let error = parse(&words(line)).unwrap_err();
            assert!(error.contains(says), "{line}: {error}");
        }
    }
}

//! The text formats Prometheus scrapes: its own (version 0.0.4, the default) and OpenMetrics 1.0
//! (when the scraper's Accept header asks for it). Written here rather than through a metrics
//! crate because what is exported is a snapshot of another process's state, read at each
//! scrape, not metrics this process updates: `prometheus-client` writes OpenMetrics only and
//! keeps registered metrics alive between scrapes, which would keep a deleted sale's series.
//! The two formats differ in four rules, each unit-tested below; `promtool check metrics` and a
//! real Prometheus check the output in tests/exporter.rs.

use std::fmt::Write;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// One metric family: `name` is the family's name (a counter's without `_total`, which its
/// samples carry), `unit` its unit suffix when it has one (seconds).
#[derive(Debug)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub unit: Option<&'static str>,
    pub samples: Vec<Sample>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: Vec<(&'static str, String)>,
    pub value: f64,
}

impl Family {
    pub fn new(name: &'static str, kind: Kind, help: &'static str) -> Family {
        Family {
            name,
            help,
            kind,
            unit: None,
            samples: Vec::new(),
        }
    }

    pub fn unit(mut self, unit: &'static str) -> Family {
        self.unit = Some(unit);
        self
    }

    pub fn sample(&mut self, labels: Vec<(&'static str, String)>, value: f64) {
        self.samples.push(Sample { labels, value });
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Prometheus,
    OpenMetrics,
}

impl Format {
    /// OpenMetrics when the Accept header names it (as Prometheus does when it prefers it).
    pub fn from_accept(accept: &str) -> Format {
        if accept.contains("application/openmetrics-text") {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

pub fn encode(families: &[Family], format: Format) -> String {
    let mut out = String::new();
    for family in families {
        let sample_name = match family.kind {
            Kind::Counter => format!("{}_total", family.name),
            Kind::Gauge => family.name.to_string(),
        };
        // Prometheus's format names a counter's family by its samples' name; OpenMetrics by
        // the name without `_total`, and adds the unit.
        let family_name = match format {
            Format::Prometheus => sample_name.as_str(),
            Format::OpenMetrics => family.name,
        };
        let kind = match family.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(out, "# HELP {family_name} {}", escape_help(family.help));
        let _ = writeln!(out, "# TYPE {family_name} {kind}");
        if let (Format::OpenMetrics, Some(unit)) = (format, family.unit) {
            let _ = writeln!(out, "# UNIT {family_name} {unit}");
        }
        for sample in &family.samples {
            out.push_str(&sample_name);
            if !sample.labels.is_empty() {
                out.push('{');
                for (i, (name, value)) in sample.labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{name}=\"{}\"", escape_label_value(value));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {}", number(sample.value));
        }
    }
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

/// A label value for a key, which may hold any byte: valid UTF-8 as it is, each byte of an
/// invalid sequence as `\xNN` (so the value is UTF-8, as both formats require, and readable).
pub fn label_text(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for byte in chunk.invalid() {
            let _ = write!(out, "\\x{byte:02x}");
        }
    }
    out
}

fn escape_label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Whole numbers without a fraction (every count), others as Rust prints them.
fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn families() -> Vec<Family> {
        let mut tries = Family::new("seckill_tries", Kind::Counter, "TRY calls.");
        tries.sample(vec![("instance", "127.0.0.1:6379".into())], 12.0);
        let mut remaining = Family::new("seckill_sale_remaining", Kind::Gauge, "Units left.");
        remaining.sample(
            vec![("sale", "a\"b\\c\nd".into()), ("partition", String::new())],
            5.0,
        );
        let mut took = Family::new(
            "seckill_scrape_duration_seconds",
            Kind::Gauge,
            "Scrape time.",
        )
        .unit("seconds");
        took.sample(vec![], 0.0125);
        vec![tries, remaining, took]
    }

    #[test]
    fn prometheus_text_names_counters_with_total_and_has_no_eof() {
        let text = encode(&families(), Format::Prometheus);
        assert_eq!(
            text,
            "# HELP seckill_tries_total TRY calls.\n\
             # TYPE seckill_tries_total counter\n\
             seckill_tries_total{instance=\"127.0.0.1:6379\"} 12\n\
             # HELP seckill_sale_remaining Units left.\n\
             # TYPE seckill_sale_remaining gauge\n\
             seckill_sale_remaining{sale=\"a\\\"b\\\\c\\nd\",partition=\"\"} 5\n\
             # HELP seckill_scrape_duration_seconds Scrape time.\n\
             # TYPE seckill_scrape_duration_seconds gauge\n\
             seckill_scrape_duration_seconds 0.0125\n"
        );
    }

    #[test]
    fn openmetrics_names_the_counter_family_without_total_adds_units_and_eof() {
        let text = encode(&families(), Format::OpenMetrics);
        assert!(text.starts_with(
            "# HELP seckill_tries TRY calls.\n# TYPE seckill_tries counter\nseckill_tries_total{"
        ));
        assert!(text.contains(
            "# TYPE seckill_scrape_duration_seconds gauge\n# UNIT seckill_scrape_duration_seconds seconds\n"
        ));
        assert!(text.ends_with("seckill_scrape_duration_seconds 0.0125\n# EOF\n"));
    }

    #[test]
    fn the_accept_header_picks_the_format() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::from_accept(prometheus), Format::OpenMetrics);
        assert_eq!(Format::from_accept("*/*"), Format::Prometheus);
        assert_eq!(Format::from_accept(""), Format::Prometheus);
        assert!(
            Format::OpenMetrics
                .content_type()
                .starts_with("application/openmetrics-text")
        );
    }

    #[test]
    fn a_key_of_any_bytes_is_a_utf8_label() {
        assert_eq!(label_text(b"sale:1"), "sale:1");
        assert_eq!(label_text("café".as_bytes()), "café");
        assert_eq!(label_text(b"a\xff\xfeb"), "a\\xff\\xfeb");
        assert_eq!(label_text(b""), "");
    }

    #[test]
    fn help_text_is_escaped() {
        assert_eq!(escape_help("a\\b\nc"), "a\\\\b\\nc");
    }

    #[test]
    fn numbers_print_whole_counts_without_a_fraction() {
        assert_eq!(number(3.0), "3");
        assert_eq!(number(-1.0), "-1");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(1e20), "100000000000000000000");
    }
}

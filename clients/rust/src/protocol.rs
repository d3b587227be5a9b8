//! The module's numbers this crate names, defined once here and checked against the table
//! both client libraries share (`clients/protocol.txt`).

/// `SECKILL.TRY`: fewer than `qty` units left.
pub const SOLD_OUT: i64 = -1;
/// `SECKILL.TRY`: the user would go over LIMIT.
pub const OVER_LIMIT: i64 = -2;
/// `SECKILL.TRY`: before START.
pub const NOT_STARTED: i64 = -3;
/// `SECKILL.TRY`: at or after END.
pub const ENDED: i64 = -4;
/// `SECKILL.TRY` on a partition that is drained but not sealed: other partitions may lend it
/// units. The client borrows and tries again, so callers never see it.
pub const DRAINED: i64 = -5;
/// `SECKILL.TRY` on a sale with a waiting room: the user is not admitted (it waits, never
/// joined, or its window lapsed).
pub const NOT_ADMITTED: i64 = -6;
/// The oldest module this client works with, as `INFO seckill` gives it (major * 10 000 +
/// minor * 100 + patch): 0.12.0, the first with `SECKILL.LEAVE`, `PRESENCE` and `WITHETA` (the
/// waiting room's reader); 0.11.0 was the first whose repeated attempt is covered by a `WAIT`
/// after it (a purchase sent again on a new connection, then acknowledged).
pub const MIN_MODULE_VERSION: i64 = 1200;
/// Most partitions one sale may have (`SECKILL.INIT ... PARTITIONS n`).
pub const MAX_PARTITIONS: u32 = 16_384;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_number_is_the_shared_tables() {
        let table = include_str!("../../protocol.txt");
        let ours = [
            ("SOLD_OUT", SOLD_OUT),
            ("OVER_LIMIT", OVER_LIMIT),
            ("NOT_STARTED", NOT_STARTED),
            ("ENDED", ENDED),
            ("DRAINED", DRAINED),
            ("NOT_ADMITTED", NOT_ADMITTED),
            ("MAX_PARTITIONS", i64::from(MAX_PARTITIONS)),
            ("MIN_MODULE_VERSION", MIN_MODULE_VERSION),
        ];
        let rows: Vec<(&str, i64)> = table
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let cells: Vec<&str> = l.split_whitespace().collect();
                (cells[1], cells[2].parse().unwrap())
            })
            .collect();
        assert_eq!(rows, ours);
    }

    /// The module, this crate and the Python package carry one version.
    #[test]
    fn one_version_for_the_module_the_crate_and_the_package() {
        let version_in = |text: &str, key: &str| -> String {
            text.lines()
                .find_map(|line| line.trim().strip_prefix(key))
                .map(|rest| {
                    rest.trim()
                        .trim_start_matches('=')
                        .trim()
                        .trim_matches('"')
                        .to_string()
                })
                .unwrap_or_else(|| panic!("no {key} line"))
        };
        let ours = env!("CARGO_PKG_VERSION");
        assert_eq!(
            version_in(include_str!("../../../Cargo.toml"), "version ="),
            ours
        );
        assert_eq!(
            version_in(include_str!("../../python/pyproject.toml"), "version ="),
            ours
        );
        assert_eq!(
            version_in(
                include_str!("../../python/src/seckill/__init__.py"),
                "__version__ ="
            ),
            ours
        );
    }
}

//! A sale's documented identity and its buyer scan, checked against a real server.

use redis::Value;
use std::collections::{HashMap, HashSet};

/// The documented identity, the limit, and the buyer scan agreeing with INFO, read in one
/// MULTI so that concurrent clients cannot change the sale between the reads. The clock still
/// runs inside a MULTI: a hold that comes due between INFO and BUYERS makes them disagree, so
/// INFO is read on both sides and the reads are taken again until the two INFOs agree.
pub fn assert_sale_invariants(con: &mut redis::Connection, key: &str) {
    let mut attempts = 0;
    let (info, (next, page)) = loop {
        let (before, scan, after): (Vec<Value>, (String, Vec<Value>), Vec<Value>) = redis::pipe()
            .atomic()
            .cmd("SECKILL.INFO")
            .arg(key)
            .cmd("SECKILL.BUYERS")
            .arg(key)
            .arg(0)
            .arg("COUNT")
            .arg(1_000_000)
            .cmd("SECKILL.INFO")
            .arg(key)
            .query(con)
            .unwrap();
        attempts += 1;
        if before == after {
            break (before, scan);
        }
        assert!(attempts < 20, "INFO never stood still across one MULTI");
    };
    assert_eq!(next, "0", "one page holds every buyer here");
    let info: HashMap<String, i64> = info
        .chunks(2)
        .filter_map(|pair| {
            let name: String = redis::from_redis_value(pair[0].clone()).ok()?;
            Some((name, redis::from_redis_value(pair[1].clone()).ok()?))
        })
        .collect();
    let n = |name: &str| info[name];
    assert!(n("remaining") >= 0 && n("held") >= 0 && n("sold") >= 0);
    assert_eq!(
        n("remaining") + n("held") + n("sold"),
        n("stock") + n("restocked"),
        "remaining + held + sold == stock + restocked: {info:?}"
    );
    let buyers: Vec<(String, i64)> = page
        .chunks(3)
        .map(|t| {
            (
                redis::from_redis_value(t[0].clone()).unwrap(),
                redis::from_redis_value(t[1].clone()).unwrap(),
            )
        })
        .collect();
    assert!(
        buyers
            .iter()
            .all(|(_, qty)| *qty >= 1 && *qty <= n("limit"))
    );
    assert_eq!(buyers.len() as i64, n("buyers"));
    let owned: i64 = buyers.iter().map(|(_, qty)| qty).sum();
    assert_eq!(owned, n("held") + n("sold"));
    let unique: HashSet<&String> = buyers.iter().map(|(u, _)| u).collect();
    assert_eq!(unique.len(), buyers.len(), "every buyer once");
}

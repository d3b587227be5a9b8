use super::*;
use crate::logic::buyers::BuyerRecord;
use crate::logic::escrow::Ledger;
use crate::logic::sale::{Sale, SaleConfig, SaleTotals};

/// `cargo test --release decode_timing -- --ignored --nocapture`: how long a big sale's
/// payload takes to decode (best of three), as the RDB load of `make bench-scale` does.
#[test]
#[ignore]
fn decode_timing() {
    const BUYERS: u64 = 10_000_000;
    let config = SaleConfig {
        stock: 2 * BUYERS,
        limit: 1,
        ..SaleConfig::default()
    };
    let users: Vec<String> = (0..BUYERS).map(|i| format!("user:{i:010}")).collect();
    let user_bytes = users.iter().map(String::len).sum();
    let record = BuyerRecord {
        final_qty: 1,
        ..BuyerRecord::default()
    };
    let records = users.iter().map(|user| (user.as_bytes(), record));
    let sale = Sale::from_parts(
        config,
        SaleTotals::default(),
        Ledger::default(),
        users.len(),
        user_bytes,
        records,
    )
    .unwrap();
    let t = std::time::Instant::now();
    let bytes = encode_sale(&sale);
    println!("encode: {:?} ({} bytes)", t.elapsed(), bytes.len());
    let mut best = std::time::Duration::MAX;
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let back = decode_sale(&bytes, SALE_VERSION).unwrap();
        best = best.min(t.elapsed());
        assert_eq!(back.summary(0), sale.summary(0));
    }
    println!("decode: {best:?} (best of 3)");
}

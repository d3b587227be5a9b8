//! Module 0.1's sale layout (version 1), read only: every purchase final, no settings but
//! stock and LIMIT.

use super::sale::{check_count, rebuilt};
use super::{DecodeError, Decoded, Reader};
use crate::logic::buyers::BuyerRecord;
use crate::logic::escrow::Ledger;
use crate::logic::sale::{Sale, SaleConfig, SaleTotals};

fn read_record_v1<'a>(reader: &mut Reader<'a>) -> Decoded<(&'a [u8], BuyerRecord)> {
    let user = reader.bytes()?;
    let final_qty = reader.varint()?;
    if final_qty == 0 {
        return Err(DecodeError("sale breaks an invariant"));
    }
    Ok((
        user,
        BuyerRecord {
            final_qty,
            ..BuyerRecord::default()
        },
    ))
}

/// v1 (module 0.1): `stock limit count (len user qty)*`, all varints, every purchase final.
pub(super) fn decode_sale_v1(reader: &mut Reader) -> Decoded<Sale> {
    let stock = reader.varint()?;
    let limit = reader.varint()?;
    let count = reader.varint()?;
    let count = check_count(reader, count, 3)?;
    let config = SaleConfig {
        stock,
        limit,
        ..SaleConfig::default()
    };
    rebuilt(
        reader,
        count,
        read_record_v1,
        config,
        SaleTotals::default(),
        Ledger::default(),
        1,
    )
}

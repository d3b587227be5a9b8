//! The arguments of the sale commands: INIT, the purchase path, BUYERS and the transfers.

use super::{
    ArgError, ArgResult, MAX_MS, identifier, integer, options, syntax_error, unknown_option,
    value_of,
};
use crate::logic::escrow::MAX_TRANSFER_ID;
use crate::logic::room::{DEFAULT_WINDOW_MS, Rate, RoomConfig};
use crate::logic::sale::{MAX_ATTEMPT_ID, MAX_PARTITIONS, MAX_UNITS};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitArgs<'a> {
    pub stock: u64,
    pub limit: u64,
    pub hold_ms: Option<u64>,
    pub start_ms: Option<u64>,
    pub end_ms: Option<u64>,
    pub events: Option<&'a [u8]>,
    pub events_maxlen: Option<u64>,
    pub partition: Option<PartitionArgs<'a>>,
    pub queue: Option<RoomConfig>,
    pub replace: bool,
}

/// `PARTITION i PARTITIONS n MANIFEST key`: the three go together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionArgs<'a> {
    pub manifest: &'a [u8],
    pub index: u64,
    pub count: u64,
}

/// An optional setting where 0 means "not set", as SECKILL.INFO prints an unset one, so that
/// whatever INFO prints INIT takes back.
fn unset_if_zero(raw: &[u8], what: &str) -> ArgResult<Option<u64>> {
    Ok(Some(integer(raw, what, 0, MAX_MS)?).filter(|&value| value > 0))
}

/// `SECKILL.INIT key stock [LIMIT n] [HOLD ms] [START unix_ms] [END unix_ms] [EVENTS stream
/// [MAXLEN n]] [PARTITION i PARTITIONS n MANIFEST key] [QUEUE [ADMIT n PER ms] [WINDOW ms]
/// [PRESENCE ms]] [REPLACE]`; HOLD 0, START 0, END 0 and MAXLEN 0 are the same as leaving them out.
pub fn init<'a>(rest: &'a [&'a [u8]]) -> ArgResult<InitArgs<'a>> {
    let (stock, options_rest) = rest.split_first().ok_or(ArgError::Arity)?;
    let mut parsed = InitArgs {
        stock: integer(stock, "stock", 0, MAX_UNITS)?,
        limit: 1,
        hold_ms: None,
        start_ms: None,
        end_ms: None,
        events: None,
        events_maxlen: None,
        partition: None,
        queue: None,
        replace: false,
    };
    let (mut index, mut count, mut manifest) = (None, None, None);
    let (mut queue, mut admit, mut per, mut window) = (false, None, None, None);
    let mut presence = None;
    options(options_rest, |name, value| {
        match name {
            "LIMIT" => parsed.limit = integer(value_of(name, value)?, "LIMIT", 1, MAX_UNITS)?,
            "HOLD" => parsed.hold_ms = unset_if_zero(value_of(name, value)?, "HOLD ms")?,
            "START" => parsed.start_ms = unset_if_zero(value_of(name, value)?, "START unix_ms")?,
            "END" => parsed.end_ms = unset_if_zero(value_of(name, value)?, "END unix_ms")?,
            "EVENTS" => parsed.events = Some(identifier(value_of(name, value)?, "EVENTS stream")?),
            "MAXLEN" => {
                parsed.events_maxlen = unset_if_zero(value_of(name, value)?, "MAXLEN")?;
            }
            "PARTITIONS" => {
                count = Some(integer(
                    value_of(name, value)?,
                    "PARTITIONS",
                    1,
                    MAX_PARTITIONS,
                )?);
            }
            "PARTITION" => {
                index = Some(integer(
                    value_of(name, value)?,
                    "PARTITION",
                    0,
                    MAX_PARTITIONS - 1,
                )?)
            }
            "MANIFEST" => manifest = Some(identifier(value_of(name, value)?, "MANIFEST key")?),
            "REPLACE" => {
                parsed.replace = true;
                return Ok(false);
            }
            "QUEUE" => {
                queue = true;
                return Ok(false);
            }
            "ADMIT" => admit = Some(integer(value_of(name, value)?, "ADMIT", 1, MAX_UNITS)?),
            "PER" => per = Some(integer(value_of(name, value)?, "PER ms", 1, MAX_MS)?),
            "WINDOW" => window = Some(integer(value_of(name, value)?, "WINDOW ms", 1, MAX_MS)?),
            "PRESENCE" => {
                presence = Some(integer(value_of(name, value)?, "PRESENCE ms", 1, MAX_MS)?);
            }
            _ => return Err(unknown_option(name.as_bytes())),
        }
        Ok(true)
    })?;
    parsed.partition = match (index, count, manifest) {
        (None, None, None) => None,
        (Some(index), Some(count), Some(manifest)) if index < count => Some(PartitionArgs {
            manifest,
            index,
            count,
        }),
        (Some(_), Some(count), Some(_)) => {
            return Err(ArgError::Invalid(format!(
                "ERR PARTITION must be an integer between 0 and {} (PARTITIONS - 1)",
                count - 1
            )));
        }
        _ => {
            return Err(ArgError::Invalid(
                "ERR PARTITION, PARTITIONS and MANIFEST go together".to_string(),
            ));
        }
    };
    if let (Some(start), Some(end)) = (parsed.start_ms, parsed.end_ms)
        && end <= start
    {
        return Err(ArgError::Invalid("ERR END must be after START".to_string()));
    }
    if !queue && (admit.is_some() || per.is_some() || window.is_some() || presence.is_some()) {
        return Err(ArgError::Invalid(
            "ERR ADMIT, PER, WINDOW and PRESENCE set the waiting room: give QUEUE too".to_string(),
        ));
    }
    if queue {
        let rate = match (admit, per) {
            (Some(users), Some(per_ms)) => Some(Rate { users, per_ms }),
            (None, None) => None,
            _ => {
                return Err(ArgError::Invalid(
                    "ERR ADMIT n and PER ms go together".to_string(),
                ));
            }
        };
        parsed.queue = Some(RoomConfig {
            rate,
            window_ms: window.unwrap_or(DEFAULT_WINDOW_MS),
            presence_ms: presence,
        });
    }
    if parsed.events_maxlen.is_some() && parsed.events.is_none() {
        return Err(ArgError::Invalid(
            "ERR MAXLEN trims the EVENTS stream: give EVENTS too".to_string(),
        ));
    }
    Ok(parsed)
}

/// A quantity whose range (1..=LIMIT) only the sale knows: anything that is not an integer in
/// 1..2^63-1 reads as 0, which the sale refuses with the one message for `qty`, naming its LIMIT.
fn quantity(raw: &[u8]) -> u64 {
    integer(raw, "qty", 1, MAX_UNITS).unwrap_or(0)
}

/// A purchase or a cancel: the buyer, the `qty` given (if any) and the attempt id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuyerCall<'a> {
    pub user: &'a [u8],
    pub qty: Option<u64>,
    pub attempt: Option<&'a [u8]>,
}

/// `user [qty] [ID attempt]`: `qty` is there when the word after the user is not `ID`.
fn buyer_call<'a>(rest: &[&'a [u8]]) -> ArgResult<BuyerCall<'a>> {
    let [user, after_user @ ..] = rest else {
        return Err(ArgError::Arity);
    };
    let user = identifier(user, "user")?;
    let (qty, options_rest) = match after_user {
        [word, ..] if word.eq_ignore_ascii_case(b"ID") => (None, after_user),
        [qty, more @ ..] => (Some(quantity(qty)), more),
        [] => (None, after_user),
    };
    // `ID attempt` is the one option, on every purchase a client library sends: matched here
    // without the general option parser's allocations; anything else goes to it for the same
    // errors as every other command.
    let attempt = match options_rest {
        [] => None,
        [word, value] if word.eq_ignore_ascii_case(b"ID") => Some(attempt_id(value)?),
        _ => {
            options(options_rest, |name, value| match name {
                "ID" => value_of(name, value).and_then(attempt_id).map(|_| true),
                _ => Err(unknown_option(name.as_bytes())),
            })?;
            // Every well-formed `ID attempt` took the branch above, so options() refused the
            // rest; should it not, refuse it still.
            return Err(syntax_error());
        }
    };
    Ok(BuyerCall { user, qty, attempt })
}

/// An attempt id, 1 to [`MAX_ATTEMPT_ID`] bytes.
pub fn attempt_id(raw: &[u8]) -> ArgResult<&[u8]> {
    if raw.is_empty() || raw.len() > MAX_ATTEMPT_ID {
        return Err(ArgError::Invalid(format!(
            "ERR attempt id must be 1 to {MAX_ATTEMPT_ID} bytes"
        )));
    }
    Ok(raw)
}

/// `SECKILL.TRY key user [qty] [ID attempt]`: `qty` defaults to 1.
pub fn try_buy<'a>(rest: &[&'a [u8]]) -> ArgResult<BuyerCall<'a>> {
    let call = buyer_call(rest)?;
    Ok(BuyerCall {
        qty: Some(call.qty.unwrap_or(1)),
        ..call
    })
}

/// A new buyer's user id against `seckill.max-user-bytes` (`max`): TRY from a client stores
/// nothing for a longer one. Copies from a master or the AOF are not checked: their TRY ran
/// where it was sent, and a replica with a smaller cap must still hold the same buyers.
pub fn user_within(user: &[u8], max: u64) -> ArgResult<()> {
    if user.len() as u64 > max {
        return Err(ArgError::Invalid(format!(
            "ERR user id is {} bytes, longer than seckill.max-user-bytes ({max})",
            user.len()
        )));
    }
    Ok(())
}

/// `SECKILL.BOUGHT key user`
pub fn user_only<'a>(rest: &[&'a [u8]]) -> ArgResult<&'a [u8]> {
    match rest {
        [user] => identifier(user, "user"),
        _ => Err(ArgError::Arity),
    }
}

/// `SECKILL.JOIN key user [WITHETA]` and `SECKILL.POSITION key user [WITHETA]`: the user,
/// and whether the reply adds its ETA.
pub fn place_call<'a>(rest: &[&'a [u8]]) -> ArgResult<(&'a [u8], bool)> {
    match rest {
        [user] => Ok((identifier(user, "user")?, false)),
        [user, flag] if flag.eq_ignore_ascii_case(b"WITHETA") => {
            Ok((identifier(user, "user")?, true))
        }
        [_, flag] => Err(unknown_option(flag)),
        _ => Err(ArgError::Arity),
    }
}

/// `SECKILL.CANCEL key user [qty] [ID attempt]`: no `qty` cancels all the user's units.
pub fn cancel<'a>(rest: &[&'a [u8]]) -> ArgResult<BuyerCall<'a>> {
    buyer_call(rest)
}

/// `SECKILL.TRANSFERS key [WITHASKED]`: whether each transfer adds the `n` its LEND asked.
pub fn transfers(rest: &[&[u8]]) -> ArgResult<bool> {
    match rest {
        [] => Ok(false),
        [flag] if flag.eq_ignore_ascii_case(b"WITHASKED") => Ok(true),
        [flag] => Err(unknown_option(flag)),
        _ => Err(ArgError::Arity),
    }
}

/// `SECKILL.ADMIT key n`
pub fn admit(rest: &[&[u8]]) -> ArgResult<u64> {
    match rest {
        [n] => integer(n, "n", 1, MAX_UNITS),
        _ => Err(ArgError::Arity),
    }
}

/// `SECKILL.RESTOCK key units`
pub fn restock(rest: &[&[u8]]) -> ArgResult<u64> {
    match rest {
        [units] => integer(units, "units", 1, MAX_UNITS),
        _ => Err(ArgError::Arity),
    }
}

/// Buyers a BUYERS call returns when COUNT is not given, as SCAN.
pub const DEFAULT_SCAN_COUNT: u64 = 10;

/// `SECKILL.SEAL key ms`
pub fn seal(rest: &[&[u8]]) -> ArgResult<u64> {
    match rest {
        [ms] => integer(ms, "ms", 1, MAX_MS),
        _ => Err(ArgError::Arity),
    }
}

/// `SECKILL.BUYERS key cursor [COUNT n]`
pub fn buyers(rest: &[&[u8]]) -> ArgResult<(u64, u64)> {
    let (cursor, options_rest) = rest.split_first().ok_or(ArgError::Arity)?;
    let cursor = integer(cursor, "cursor", 0, u64::MAX)
        .map_err(|_| ArgError::Invalid("ERR invalid cursor".to_string()))?;
    let mut count = DEFAULT_SCAN_COUNT;
    options(options_rest, |name, value| match name {
        "COUNT" => {
            count = integer(value_of(name, value)?, "COUNT", 1, MAX_UNITS)?;
            Ok(true)
        }
        _ => Err(unknown_option(name.as_bytes())),
    })?;
    Ok((cursor, count))
}

/// A transfer id: 1 to `MAX_TRANSFER_ID` bytes, binary-safe.
pub fn transfer_id(raw: &[u8]) -> ArgResult<&[u8]> {
    if raw.is_empty() || raw.len() > MAX_TRANSFER_ID {
        return Err(ArgError::Invalid(format!(
            "ERR transfer id must be 1 to {MAX_TRANSFER_ID} bytes"
        )));
    }
    Ok(raw)
}

/// A transfer between this sale key and another one (`peer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferArgs<'a> {
    pub id: &'a [u8],
    pub units: u64,
    pub peer: &'a [u8],
}

/// `id n TO dst` (LEND, `keyword` TO) or `id n FROM src` (ABSORB, FROM), after the sale's
/// `key`, which the other key must not be.
pub fn transfer<'a>(rest: &[&'a [u8]], key: &[u8], keyword: &str) -> ArgResult<TransferArgs<'a>> {
    let [id, units, word, peer] = rest else {
        return Err(ArgError::Arity);
    };
    if !word.eq_ignore_ascii_case(keyword.as_bytes()) {
        return Err(syntax_error());
    }
    let parsed = TransferArgs {
        id: transfer_id(id)?,
        units: integer(units, "n", 1, MAX_UNITS)?,
        peer: identifier(peer, "the other sale key")?,
    };
    if parsed.peer == key {
        return Err(ArgError::Invalid(
            "ERR a transfer needs two different sale keys".to_string(),
        ));
    }
    Ok(parsed)
}

/// `SECKILL.SETTLE key id`
pub fn settle<'a>(rest: &[&'a [u8]]) -> ArgResult<&'a [u8]> {
    match rest {
        [id] => transfer_id(id),
        _ => Err(ArgError::Arity),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::fixtures::invalid;
    use crate::args::*;

    #[test]
    fn a_user_id_past_the_cap_is_refused_with_its_length() {
        assert!(user_within(b"alice", 5).is_ok());
        match user_within(b"alice!", 5) {
            Err(ArgError::Invalid(text)) => assert_eq!(
                text,
                "ERR user id is 6 bytes, longer than seckill.max-user-bytes (5)"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn init_partition_options_go_together() {
        let parsed = init(&[
            b"10",
            b"partition",
            b"3",
            b"PARTITIONS",
            b"16",
            b"MANIFEST",
            b"sale:1",
        ])
        .unwrap();
        assert_eq!(
            parsed.partition,
            Some(PartitionArgs {
                manifest: b"sale:1",
                index: 3,
                count: 16
            })
        );
        for (rest, message) in [
            (
                &[&b"10"[..], b"PARTITION", b"3"][..],
                "ERR PARTITION, PARTITIONS and MANIFEST go together",
            ),
            (
                &[b"10", b"PARTITIONS", b"4", b"MANIFEST", b"m"],
                "ERR PARTITION, PARTITIONS and MANIFEST go together",
            ),
            (
                &[
                    b"10",
                    b"PARTITION",
                    b"4",
                    b"PARTITIONS",
                    b"4",
                    b"MANIFEST",
                    b"m",
                ],
                "ERR PARTITION must be an integer between 0 and 3 (PARTITIONS - 1)",
            ),
            (
                &[
                    b"10",
                    b"PARTITION",
                    b"0",
                    b"PARTITIONS",
                    b"0",
                    b"MANIFEST",
                    b"m",
                ],
                "ERR PARTITIONS must be an integer between 1 and 16384",
            ),
            (
                &[
                    b"10",
                    b"PARTITION",
                    b"0",
                    b"PARTITIONS",
                    b"1",
                    b"MANIFEST",
                    b"",
                ],
                "ERR MANIFEST key must not be empty",
            ),
        ] {
            assert_eq!(init(rest), Err(invalid(message)), "{rest:?}");
        }
        assert_eq!(seal(&[b"1000"]), Ok(1000));
        assert_eq!(
            seal(&[b"0"]),
            Err(invalid(
                "ERR ms must be an integer between 1 and 9223372036854775807"
            ))
        );
        assert_eq!(seal(&[]), Err(ArgError::Arity));
    }

    #[test]
    fn init_takes_a_waiting_room_with_its_rate_and_window() {
        let queue = |args: &[&[u8]]| init(args).map(|parsed| parsed.queue);
        assert_eq!(
            queue(&[b"10", b"QUEUE"]),
            Ok(Some(RoomConfig {
                rate: None,
                window_ms: DEFAULT_WINDOW_MS,
                presence_ms: None,
            }))
        );
        assert_eq!(
            queue(&[
                b"10",
                b"queue",
                b"ADMIT",
                b"100",
                b"PER",
                b"1000",
                b"WINDOW",
                b"5000",
                b"PRESENCE",
                b"30000"
            ]),
            Ok(Some(RoomConfig {
                rate: Some(Rate {
                    users: 100,
                    per_ms: 1000
                }),
                window_ms: 5000,
                presence_ms: Some(30_000),
            }))
        );
        assert_eq!(queue(&[b"10"]), Ok(None));
        for (args, error) in [
            (
                &[&b"10"[..], b"ADMIT", b"1", b"PER", b"1"][..],
                "give QUEUE too",
            ),
            (&[b"10", b"QUEUE", b"ADMIT", b"1"], "go together"),
            (&[b"10", b"QUEUE", b"PER", b"1"], "go together"),
            (&[b"10", b"QUEUE", b"ADMIT", b"0", b"PER", b"1"], "ADMIT"),
            (&[b"10", b"QUEUE", b"WINDOW", b"0"], "WINDOW"),
            (&[b"10", b"QUEUE", b"WINDOW", b"x"], "WINDOW"),
            (&[b"10", b"QUEUE", b"PRESENCE", b"0"], "PRESENCE"),
            (&[b"10", b"QUEUE", b"PRESENCE", b"-5"], "PRESENCE"),
            (&[b"10", b"PRESENCE", b"100"], "give QUEUE too"),
        ] {
            match init(args) {
                Err(ArgError::Invalid(message)) => assert!(message.contains(error), "{message}"),
                other => panic!("{args:?}: {other:?}"),
            }
        }
        assert_eq!(admit(&[b"3"]), Ok(3));
        assert!(admit(&[b"0"]).is_err());
        assert_eq!(admit(&[]), Err(ArgError::Arity));
    }

    #[test]
    fn join_and_position_take_witheta_once_and_nothing_else() {
        assert_eq!(place_call(&[b"ann"]), Ok((&b"ann"[..], false)));
        assert_eq!(place_call(&[b"ann", b"witheta"]), Ok((&b"ann"[..], true)));
        assert_eq!(
            place_call(&[b"ann", b"NOW"]),
            Err(ArgError::Invalid("ERR unknown option 'NOW'".to_string()))
        );
        for bad in [
            &[][..],
            &[&b"ann"[..], b"WITHETA", b"WITHETA"],
            &[b"ann", b"WITHETA", b"5"],
        ] {
            assert_eq!(place_call(bad), Err(ArgError::Arity), "{bad:?}");
        }
        assert!(place_call(&[b"", b"WITHETA"]).is_err());
    }

    #[test]
    fn transfers_takes_withasked_once_and_nothing_else() {
        assert_eq!(transfers(&[]), Ok(false));
        assert_eq!(transfers(&[b"withasked"]), Ok(true));
        assert_eq!(
            transfers(&[b"WITHETA"]),
            Err(ArgError::Invalid(
                "ERR unknown option 'WITHETA'".to_string()
            ))
        );
        assert_eq!(
            transfers(&[b"WITHASKED", b"WITHASKED"]),
            Err(ArgError::Arity)
        );
    }

    #[test]
    fn init_parses_options_in_any_order_and_case() {
        assert_eq!(
            init(&[b"10"]),
            Ok(InitArgs {
                stock: 10,
                limit: 1,
                hold_ms: None,
                start_ms: None,
                end_ms: None,
                events: None,
                events_maxlen: None,
                partition: None,
                queue: None,
                replace: false
            })
        );
        let parsed = init(&[b"10", b"EVENTS", b"s", b"maxlen", b"500"]).unwrap();
        assert_eq!(
            (parsed.events, parsed.events_maxlen),
            (Some(&b"s"[..]), Some(500))
        );
        let unset = init(&[b"10", b"EVENTS", b"s", b"MAXLEN", b"0"]).unwrap();
        assert_eq!(
            unset.events_maxlen, None,
            "MAXLEN 0 is unset, as INFO prints it"
        );
        assert_eq!(
            init(&[b"10", b"MAXLEN", b"5"]),
            Err(invalid(
                "ERR MAXLEN trims the EVENTS stream: give EVENTS too"
            ))
        );
        let parsed = init(&[b"10", b"replace", b"Limit", b"3"]).unwrap();
        assert_eq!((parsed.limit, parsed.replace), (3, true));
        assert_eq!(init(&[]), Err(ArgError::Arity));
        assert_eq!(
            init(&[b"10", b"LIMIT"]),
            Err(invalid("ERR LIMIT needs a value"))
        );
        assert_eq!(
            init(&[b"10", b"LIMIT", b"0"]),
            Err(invalid(
                "ERR LIMIT must be an integer between 1 and 9223372036854775807"
            ))
        );
        assert_eq!(
            init(&[b"10", b"BOGUS"]),
            Err(invalid("ERR unknown option 'BOGUS'"))
        );
        assert_eq!(
            init(&[b"-1"]),
            Err(invalid(
                "ERR stock must be an integer between 0 and 9223372036854775807"
            ))
        );
    }

    #[test]
    fn init_lifecycle_options() {
        let parsed = init(&[
            b"5", b"hold", b"30000", b"START", b"100", b"END", b"200", b"EVENTS", b"{s}:ev",
        ])
        .unwrap();
        assert_eq!(
            (
                parsed.hold_ms,
                parsed.start_ms,
                parsed.end_ms,
                parsed.events
            ),
            (Some(30_000), Some(100), Some(200), Some(&b"{s}:ev"[..]))
        );
        // 0 is "not set", as SECKILL.INFO prints it, for every optional setting.
        let unset = init(&[b"5", b"START", b"0", b"END", b"0", b"HOLD", b"0"]).unwrap();
        assert_eq!(
            (unset.start_ms, unset.end_ms, unset.hold_ms),
            (None, None, None)
        );
        for (args, message) in [
            (
                &[&b"5"[..], b"HOLD", b"-1"][..],
                "ERR HOLD ms must be an integer between 0 and 9223372036854775807",
            ),
            (
                &[b"5", b"END", b"x"],
                "ERR END unix_ms must be an integer between 0 and 9223372036854775807",
            ),
            (&[b"5", b"LIMIT", b"2", b"limit", b"3"], "ERR syntax error"),
            (&[b"5", b"REPLACE", b"REPLACE"], "ERR syntax error"),
            (
                &[b"5", b"START", b"9", b"END", b"9"],
                "ERR END must be after START",
            ),
            (
                &[b"5", b"EVENTS", b""],
                "ERR EVENTS stream must not be empty",
            ),
            (&[b"5", b"EVENTS"], "ERR EVENTS needs a value"),
        ] {
            assert_eq!(init(args), Err(invalid(message)), "{args:?}");
        }
    }

    #[test]
    fn lifecycle_commands() {
        assert_eq!(cancel(&[b"u"]), Ok(call(b"u", None, None)));
        assert_eq!(cancel(&[b"u", b"2"]), Ok(call(b"u", Some(2), None)));
        // Not an integer in 1..2^63-1: 0, which the sale refuses naming its LIMIT.
        for bad in [
            &b"0"[..],
            b"-1",
            b"abc",
            b"",
            b"9223372036854775808",
            b"18446744073709551616",
        ] {
            assert_eq!(
                cancel(&[b"u", bad]),
                Ok(call(b"u", Some(0), None)),
                "{bad:?}"
            );
            assert_eq!(
                try_buy(&[b"u", bad]),
                Ok(call(b"u", Some(0), None)),
                "{bad:?}"
            );
        }
        assert_eq!(cancel(&[]), Err(ArgError::Arity));
        assert_eq!(restock(&[b"3"]), Ok(3));
        assert_eq!(
            restock(&[b"0"]),
            Err(invalid(
                "ERR units must be an integer between 1 and 9223372036854775807"
            ))
        );
        assert_eq!(restock(&[]), Err(ArgError::Arity));
        assert_eq!(buyers(&[b"0"]), Ok((0, DEFAULT_SCAN_COUNT)));
        assert_eq!(buyers(&[b"7", b"count", b"2"]), Ok((7, 2)));
        assert_eq!(buyers(&[b"x"]), Err(invalid("ERR invalid cursor")));
        assert!(buyers(&[b"0", b"COUNT", b"0"]).is_err());
        assert_eq!(buyers(&[]), Err(ArgError::Arity));
    }

    #[test]
    fn try_and_user_commands() {
        assert_eq!(try_buy(&[b"u"]), Ok(call(b"u", Some(1), None)));
        assert_eq!(try_buy(&[b"u", b"3"]), Ok(call(b"u", Some(3), None)));
        assert_eq!(try_buy(&[]), Err(ArgError::Arity));
        assert_eq!(
            try_buy(&[b"u", b"1", b"x"]),
            Err(invalid("ERR unknown option 'X'"))
        );
        assert_eq!(
            try_buy(&[b"", b"1"]),
            Err(invalid("ERR user must not be empty"))
        );
        assert_eq!(try_buy(&[b"u", b"0"]), Ok(call(b"u", Some(0), None)));
        assert_eq!(user_only(&[b"u"]), Ok(&b"u"[..]));
        assert_eq!(user_only(&[]), Err(ArgError::Arity));
        assert_eq!(key_only(&[]), Ok(()));
        assert_eq!(key_only(&[b"x"]), Err(ArgError::Arity));
    }

    #[test]
    fn transfer_commands() {
        let lend: [&[u8]; 4] = [b"t1", b"5", b"to", b"{b}"];
        assert_eq!(
            transfer(&lend, b"{a}", "TO"),
            Ok(TransferArgs {
                id: b"t1",
                units: 5,
                peer: b"{b}"
            })
        );
        assert_eq!(
            transfer(&lend, b"{a}", "FROM"),
            Err(invalid("ERR syntax error"))
        );
        assert_eq!(
            transfer(&lend, b"{b}", "TO"),
            Err(invalid("ERR a transfer needs two different sale keys"))
        );
        assert_eq!(transfer(&lend[..3], b"{a}", "TO"), Err(ArgError::Arity));
        let long = [b'x'; MAX_TRANSFER_ID + 1];
        for (args, message) in [
            (
                [&long[..], b"5", b"TO", b"{b}"],
                "ERR transfer id must be 1 to 128 bytes",
            ),
            (
                [b"", b"5", b"TO", b"{b}"],
                "ERR transfer id must be 1 to 128 bytes",
            ),
            (
                [b"t", b"0", b"TO", b"{b}"],
                "ERR n must be an integer between 1 and 9223372036854775807",
            ),
            (
                [b"t", b"1", b"TO", b""],
                "ERR the other sale key must not be empty",
            ),
        ] {
            assert_eq!(transfer(&args, b"{a}", "TO"), Err(invalid(message)));
        }
        assert!(transfer_id(&long[..MAX_TRANSFER_ID]).is_ok());
        assert_eq!(settle(&[b"t"]), Ok(&b"t"[..]));
        assert_eq!(settle(&[]), Err(ArgError::Arity));
    }

    fn call<'a>(user: &'a [u8], qty: Option<u64>, attempt: Option<&'a [u8]>) -> BuyerCall<'a> {
        BuyerCall { user, qty, attempt }
    }

    #[test]
    fn try_and_cancel_take_an_attempt_id() {
        assert_eq!(
            try_buy(&[b"u", b"ID", b"a1"]),
            Ok(call(b"u", Some(1), Some(b"a1")))
        );
        assert_eq!(
            try_buy(&[b"u", b"2", b"id", b"a1"]),
            Ok(call(b"u", Some(2), Some(b"a1")))
        );
        assert_eq!(
            cancel(&[b"u", b"Id", b"a1"]),
            Ok(call(b"u", None, Some(b"a1")))
        );
        assert_eq!(
            cancel(&[b"u", b"1", b"ID", b"a1"]),
            Ok(call(b"u", Some(1), Some(b"a1")))
        );
        let too_long = [b'x'; 65];
        for bad in [&b""[..], &too_long] {
            assert_eq!(
                try_buy(&[b"u", b"ID", bad]),
                Err(invalid("ERR attempt id must be 1 to 64 bytes"))
            );
        }
        assert_eq!(
            try_buy(&[b"u", b"ID", &[b'x'; 64]]).map(|c| c.attempt.map(<[u8]>::len)),
            Ok(Some(64))
        );
        assert_eq!(
            try_buy(&[b"u", b"1", b"ID"]),
            Err(invalid("ERR ID needs a value"))
        );
        assert_eq!(
            try_buy(&[b"u", b"1", b"ID", b"a", b"ID", b"b"]),
            Err(invalid("ERR syntax error"))
        );
        assert_eq!(
            cancel(&[b"u", b"1", b"WHO", b"a"]),
            Err(invalid("ERR unknown option 'WHO'"))
        );
        // `ID` right after the user is the option, not a qty that is not a number.
        assert_eq!(
            try_buy(&[b"u", b"ID"]),
            Err(invalid("ERR ID needs a value"))
        );
    }
}

//! How a change to a sale reaches replicas and the AOF. Pure: the command layer describes the
//! change that just happened and asks [`plan`] which form to send.
//!
//! A change whose outcome depends on the sale alone replays exactly as the command itself.
//! One that also depends on the clock (HOLD, a window, a stream) replicates as
//! `SECKILL._REPLAY key now_ms [STREAM ids length] COMMAND args...` when it is the first of
//! its ms, and the sale keeps that clock: the others of the same ms replicate as the command
//! itself, which a replica or the AOF replays at the kept clock (a busy sale makes hundreds of
//! changes a ms, and the bare command costs a third less of TRY's time). Their stream entries
//! took the IDs that follow the sale's last one, which a replica derives alike; when another
//! writer went past those, or a MAXLEN trim left a length only the master knows (approximate
//! trimming depends on the server's node size), `_REPLAY` carries IDs and length. LEND and SEAL
//! record the clock in the state (the transfer's start, the seal's end), so they always replay
//! with it. A partition's seal only changes TRY's refusal (-1 or -5), never the state, so its
//! TRY stays self-contained.

use super::sale::SaleConfig;

/// The facts of one change that decide its replicated form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    /// It came as `SECKILL._REPLAY` (a master's stream, the AOF): it goes on as it came.
    pub replayed: bool,
    /// A client's command on this server (not the expiry timer's change, not a replay).
    pub from_client: bool,
    /// It writes the clock into the state (LEND, SEAL).
    pub records_clock: bool,
    /// Its outcome depends on the clock: see [`is_clocked`].
    pub clocked: bool,
    /// It ran at the clock the sale last replicated with.
    pub at_replay_clock: bool,
    /// It wrote stream entries.
    pub wrote_entries: bool,
    /// Every entry took the ID after the sale's last one, as a replica derives it.
    pub ids_derived: bool,
    /// The stream has a MAXLEN, which trims to a length only this server knows.
    pub trims_stream: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// The command as it came (`RM_ReplicateVerbatim`).
    Verbatim,
    /// `SECKILL._REPLAY` with this clock, and the entries' IDs and length if it wrote any;
    /// the sale then keeps this clock as its replay clock.
    Replay,
}

/// Whether changes to a sale with these settings depend on the clock (hold deadlines and
/// expiries, the window, stream entry IDs, the waiting room's draw, rate and windows), so that a replica must replay them at its
/// master's clock.
pub fn is_clocked(config: &SaleConfig) -> bool {
    config.hold_ms.is_some()
        || config.start_ms.is_some()
        || config.end_ms.is_some()
        || config.events.is_some()
        || config.queue.is_some()
}

/// The form a change replicates as.
pub fn plan(change: &Change) -> Form {
    if change.replayed {
        return Form::Verbatim;
    }
    let bare_replays_exactly = !change.records_clock
        && (!change.clocked || change.at_replay_clock)
        && (!change.wrote_entries || (change.ids_derived && !change.trims_stream));
    // The timer's change has no command of its own to send.
    if bare_replays_exactly && change.from_client {
        Form::Verbatim
    } else {
        Form::Replay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's TRY on a plain sale: the baseline every case changes one fact of.
    const PLAIN_TRY: Change = Change {
        replayed: false,
        from_client: true,
        records_clock: false,
        clocked: false,
        at_replay_clock: false,
        wrote_entries: false,
        ids_derived: true,
        trims_stream: false,
    };

    #[test]
    fn a_change_of_the_sale_alone_replicates_verbatim() {
        assert_eq!(plan(&PLAIN_TRY), Form::Verbatim);
    }

    #[test]
    fn a_clocked_change_replays_with_its_clock_unless_the_sale_replicated_this_ms() {
        let first = Change {
            clocked: true,
            ..PLAIN_TRY
        };
        assert_eq!(plan(&first), Form::Replay);
        let same_ms = Change {
            at_replay_clock: true,
            ..first
        };
        assert_eq!(plan(&same_ms), Form::Verbatim);
    }

    #[test]
    fn lend_and_seal_always_replay_with_their_clock() {
        for clocked in [false, true] {
            let lend = Change {
                records_clock: true,
                clocked,
                at_replay_clock: true,
                ..PLAIN_TRY
            };
            assert_eq!(plan(&lend), Form::Replay);
        }
    }

    #[test]
    fn entries_replicate_bare_only_with_derived_ids_and_no_trim() {
        let entries = Change {
            clocked: true,
            at_replay_clock: true,
            wrote_entries: true,
            ..PLAIN_TRY
        };
        assert_eq!(plan(&entries), Form::Verbatim);
        let overtaken = Change {
            ids_derived: false,
            ..entries
        };
        assert_eq!(plan(&overtaken), Form::Replay);
        let trimmed = Change {
            trims_stream: true,
            ..entries
        };
        assert_eq!(plan(&trimmed), Form::Replay);
    }

    #[test]
    fn the_timers_change_replays_and_a_replayed_one_goes_on_as_it_came() {
        let timer = Change {
            from_client: false,
            ..PLAIN_TRY
        };
        assert_eq!(plan(&timer), Form::Replay);
        let replayed = Change {
            replayed: true,
            from_client: false,
            records_clock: true,
            clocked: true,
            ..PLAIN_TRY
        };
        assert_eq!(plan(&replayed), Form::Verbatim);
    }

    #[test]
    fn hold_window_and_stream_each_make_a_sale_clocked() {
        let plain = SaleConfig::default();
        assert!(!is_clocked(&plain));
        for clocked in [
            SaleConfig {
                hold_ms: Some(1),
                ..SaleConfig::default()
            },
            SaleConfig {
                start_ms: Some(1),
                ..SaleConfig::default()
            },
            SaleConfig {
                end_ms: Some(1),
                ..SaleConfig::default()
            },
            SaleConfig {
                events: Some(b"s".to_vec()),
                ..SaleConfig::default()
            },
        ] {
            assert!(is_clocked(&clocked));
        }
    }
}

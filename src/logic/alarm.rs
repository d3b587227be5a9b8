//! Which one timer a key keeps armed for its next deadline. Pure: the command layer owns the
//! real timer and asks [`plan`] what to do with it whenever the key's next deadline may have
//! moved (a new holder, a release, a hold confirmed, a waiter gone, a timer fired).
//!
//! One timer per key, always due no later than the key's earliest live deadline: an earlier
//! deadline replaces a later timer (the bug this fixes kept the later one and served the earlier
//! deadline only when the later timer fired), a later deadline keeps the earlier timer (which
//! plans again when it fires), and no deadline at all stops it.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// The armed timer fires no later than the deadline: leave it.
    Keep,
    /// Arm a timer at this instant, stopping the armed one first if there is one.
    Arm(u64),
    /// Nothing is due any more: stop the armed timer.
    Stop,
    /// No timer is armed and none is needed.
    Idle,
}

/// `armed`: when the key's live timer fires (`None`: no timer); `wanted`: the key's earliest
/// live deadline (`None`: nothing to wait for).
pub fn plan(armed: Option<u64>, wanted: Option<u64>) -> Plan {
    match (armed, wanted) {
        (Some(at), Some(due)) if at <= due => Plan::Keep,
        (_, Some(due)) => Plan::Arm(due),
        (Some(_), None) => Plan::Stop,
        (None, None) => Plan::Idle,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case() {
        assert_eq!(plan(None, None), Plan::Idle);
        assert_eq!(plan(Some(5), None), Plan::Stop);
        assert_eq!(plan(None, Some(5)), Plan::Arm(5));
        assert_eq!(plan(Some(5), Some(5)), Plan::Keep);
        assert_eq!(plan(Some(4), Some(5)), Plan::Keep);
        // The case of the bug: a later timer must not stand in for an earlier deadline.
        assert_eq!(plan(Some(10_000), Some(200)), Plan::Arm(200));
    }
}

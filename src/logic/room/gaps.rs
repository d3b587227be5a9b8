//! The places in the queue whose user left from the middle of the line (`SECKILL.LEAVE`):
//! a position is the users still waiting ahead, plus one, so the places left empty between
//! the head and a user are subtracted. A Fenwick tree counts them in O(log n) per leave and
//! per position, at 4 bytes per place, made only once somebody leaves.

use super::table::grow_gently;
use crate::logic::buyers::allocated;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gaps {
    /// `tree[i - 1]` counts the gaps among places `(i - lowbit(i), i]`, 1-based; empty while
    /// nobody left.
    tree: Vec<u32>,
}

fn lowbit(i: usize) -> usize {
    i & i.wrapping_neg()
}

impl Gaps {
    /// One more place at the back of a queue of `places` (before it).
    pub fn push(&mut self, places: usize) {
        if self.tree.is_empty() {
            return;
        }
        debug_assert_eq!(self.tree.len(), places);
        let i = places + 1;
        // Node i covers (i - lowbit(i), i]; place i itself is no gap.
        let covered = self.before(places) - self.before(i - lowbit(i));
        grow_gently(&mut self.tree, 1);
        self.tree.push(covered as u32);
    }

    /// Place `place` (0-based) of a queue of `places` is empty from now on.
    pub fn mark(&mut self, place: usize, places: usize) {
        if self.tree.is_empty() {
            self.tree = vec![0; places];
        }
        let mut i = place + 1;
        while i <= self.tree.len() {
            self.tree[i - 1] += 1;
            i += lowbit(i);
        }
    }

    /// Gaps among places `0..place`.
    pub fn before(&self, place: usize) -> u64 {
        let mut i = place.min(self.tree.len());
        let mut sum = 0u64;
        while i > 0 {
            sum += u64::from(self.tree[i - 1]);
            i -= lowbit(i);
        }
        sum
    }

    /// Gaps among places `from..to`.
    pub fn between(&self, from: usize, to: usize) -> u64 {
        self.before(to) - self.before(from.min(to))
    }

    /// Bytes held, as the allocator counts them.
    pub fn bytes(&self) -> usize {
        allocated(self.tree.capacity() * size_of::<u32>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_counted_as_a_plain_count_would_while_the_queue_grows() {
        let mut gaps = Gaps::default();
        let mut plain: Vec<bool> = Vec::new();
        let mut x = 0x2545_F491_u64;
        for step in 0..2_000usize {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x.is_multiple_of(3) && !plain.is_empty() {
                let place = (x as usize / 3) % plain.len();
                if !plain[place] {
                    plain[place] = true;
                    gaps.mark(place, plain.len());
                }
            } else {
                gaps.push(plain.len());
                plain.push(false);
            }
            if step % 97 == 0 {
                for (from, to) in [(0, plain.len()), (plain.len() / 3, plain.len() / 2)] {
                    let expected = plain[from..to].iter().filter(|&&g| g).count() as u64;
                    assert_eq!(gaps.between(from, to), expected, "{from}..{to}");
                }
            }
        }
        assert!(gaps.bytes() >= plain.len() * 4);
    }

    #[test]
    fn nothing_is_held_while_nobody_left() {
        let mut gaps = Gaps::default();
        for places in 0..100 {
            gaps.push(places);
        }
        assert_eq!((gaps.before(100), gaps.bytes()), (0, 0));
        assert_eq!(gaps.between(7, 3), 0, "an empty range");
    }
}

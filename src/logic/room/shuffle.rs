//! The cohort's order: a Fisher-Yates shuffle driven by a generator seeded from the sale's
//! seed, so a master, its replicas and an AOF replay draw the same order from the same seed
//! (nothing random is drawn twice; the seed is replicated with the sale).

/// SplitMix64: a small, well-mixed 64-bit generator (Steele, Lea, Flood 2014), enough for an
/// unbiased shuffle; the seed, not the generator, is what must stay secret from buyers.
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..bound` (`bound > 0`): Lemire's multiply-and-reject, without
    /// the modulo bias of `next % bound`.
    pub fn below(&mut self, bound: u64) -> u64 {
        debug_assert!(bound > 0);
        let threshold = bound.wrapping_neg() % bound;
        loop {
            let product = u128::from(self.next_u64()) * u128::from(bound);
            if (product as u64) >= threshold {
                return (product >> 64) as u64;
            }
        }
    }
}

/// Puts `items` in a uniformly random order drawn from `seed`.
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut rng = SplitMix64::new(seed);
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_order_another_seed_another() {
        let (mut a, mut b, mut c): (Vec<u32>, Vec<u32>, Vec<u32>) =
            ((0..100).collect(), (0..100).collect(), (0..100).collect());
        shuffle(&mut a, 42);
        shuffle(&mut b, 42);
        shuffle(&mut c, 43);
        assert_eq!(a, b);
        assert_ne!(a, c);
        a.sort_unstable();
        assert_eq!(a, (0..100).collect::<Vec<u32>>(), "a permutation");
    }

    #[test]
    fn below_stays_in_range_and_hits_every_value() {
        let mut rng = SplitMix64::new(7);
        let mut seen = [0u32; 6];
        for _ in 0..6_000 {
            seen[rng.below(6) as usize] += 1;
        }
        // Each value about 1 000 times: a 5-sigma band (sigma ~ 29).
        assert!(seen.iter().all(|&n| (850..1150).contains(&n)), "{seen:?}");
        assert_eq!(rng.below(1), 0);
    }

    #[test]
    fn every_position_is_equally_likely_for_the_first_item() {
        // 3 items, 60 000 shuffles: the first item lands in each place ~20 000 times.
        let mut counts = [0u32; 3];
        for seed in 0..60_000u64 {
            let mut items = [0u8, 1, 2];
            shuffle(&mut items, seed);
            counts[items.iter().position(|&x| x == 0).unwrap()] += 1;
        }
        assert!(
            counts.iter().all(|&n| (19_400..20_600).contains(&n)),
            "{counts:?}"
        );
    }
}

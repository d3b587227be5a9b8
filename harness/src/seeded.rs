//! What the long-running tests share: a seeded random source that prints its seed (replayed
//! with `SECKILL_SEED`), and the short (`make test`) or long (`SECKILL_SOAK=1`, `make soak`)
//! size of a case.

/// Whether the long versions run (`SECKILL_SOAK=1`, `make soak`).
pub fn soak() -> bool {
    std::env::var_os("SECKILL_SOAK").is_some()
}

/// `short` in `make test`, `long` under `make soak`.
pub fn scale(short: usize, long: usize) -> usize {
    if soak() { long } else { short }
}

/// xorshift64*, seeded from SECKILL_SEED or the clock; the seed is printed to replay a run.
/// xorshift64*, seeded from `SECKILL_SEED` or the clock; the seed is printed with the case.
pub struct Rng(u64);

impl Rng {
    pub fn new(case: &str) -> Rng {
        let seed = std::env::var("SECKILL_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            })
            | 1;
        println!("[{case}] seed {seed} (SECKILL_SEED={seed} replays it)");
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

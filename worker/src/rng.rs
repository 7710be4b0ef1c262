//! NumPy's default random stream (`SeedSequence` -> `PCG64` -> `random()`), bit for bit,
//! so the classic-control envs draw the same initial states as Gymnasium for the same seed.
//!
//! Gymnasium seeds an env with `np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))`
//! and draws with `uniform(low, high)`, which is `low + (high - low) * next_double()`.

/// `numpy.random.SeedSequence(seed)` for a non-negative integer seed, reduced to the
/// four u64 words `PCG64` is seeded from (`generate_state(4, np.uint64)`).
fn seed_sequence_state(seed: u64) -> [u64; 4] {
    const INIT_A: u32 = 0x43b0_d7e5;
    const MULT_A: u32 = 0x931e_8875;
    const INIT_B: u32 = 0x8b51_f9dd;
    const MULT_B: u32 = 0x58f3_8ded;
    const MIX_MULT_L: u32 = 0xca01_f9dd;
    const MIX_MULT_R: u32 = 0x4973_f715;
    const XSHIFT: u32 = 16;
    const POOL: usize = 4;

    // The seed as little-endian u32 words (at least one word).
    let entropy: Vec<u32> =
        if seed >> 32 == 0 { vec![seed as u32] } else { vec![seed as u32, (seed >> 32) as u32] };

    let mut hash_const = INIT_A;
    let mut hashmix = |value: u32| -> u32 {
        let mut v = value ^ hash_const;
        hash_const = hash_const.wrapping_mul(MULT_A);
        v = v.wrapping_mul(hash_const);
        v ^ (v >> XSHIFT)
    };
    let mix = |x: u32, y: u32| -> u32 {
        let r = MIX_MULT_L.wrapping_mul(x).wrapping_sub(MIX_MULT_R.wrapping_mul(y));
        r ^ (r >> XSHIFT)
    };
    let mut pool = [0u32; POOL];
    for (i, slot) in pool.iter_mut().enumerate() {
        *slot = hashmix(entropy.get(i).copied().unwrap_or(0));
    }
    for src in 0..POOL {
        for dst in 0..POOL {
            if src != dst {
                let h = hashmix(pool[src]);
                pool[dst] = mix(pool[dst], h);
            }
        }
    }
    for &e in entropy.iter().skip(POOL) {
        for slot in pool.iter_mut() {
            let h = hashmix(e);
            *slot = mix(*slot, h);
        }
    }
    // generate_state(8 u32 words), viewed as 4 little-endian u64.
    let mut hash_const = INIT_B;
    let mut words = [0u32; 8];
    for (i, w) in words.iter_mut().enumerate() {
        let mut v = pool[i % POOL] ^ hash_const;
        hash_const = hash_const.wrapping_mul(MULT_B);
        v = v.wrapping_mul(hash_const);
        *w = v ^ (v >> XSHIFT);
    }
    std::array::from_fn(|i| words[2 * i] as u64 | (words[2 * i + 1] as u64) << 32)
}

/// NumPy's `PCG64` bit generator (128-bit LCG, XSL-RR output).
#[derive(Clone, Debug)]
pub struct Pcg64 {
    state: u128,
    inc: u128,
}

const PCG_MULT: u128 = (0x2360_ed05_1fc6_5da4 << 64) | 0x4385_df64_9fcc_f645;

impl Pcg64 {
    /// The generator NumPy builds for `np.random.default_rng(seed)`.
    pub fn from_seed(seed: u64) -> Pcg64 {
        let s = seed_sequence_state(seed);
        let init_state = (s[0] as u128) << 64 | s[1] as u128;
        let init_seq = (s[2] as u128) << 64 | s[3] as u128;
        let mut rng = Pcg64 { state: 0, inc: (init_seq << 1) | 1 };
        rng.step();
        rng.state = rng.state.wrapping_add(init_state);
        rng.step();
        rng
    }

    fn step(&mut self) {
        self.state = self.state.wrapping_mul(PCG_MULT).wrapping_add(self.inc);
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.step();
        let hi = (self.state >> 64) as u64;
        let lo = self.state as u64;
        (hi ^ lo).rotate_right((self.state >> 122) as u32)
    }

    /// A double in `[0, 1)` (NumPy's `random()`).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }

    /// NumPy's `uniform(low, high)`.
    pub fn uniform(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.next_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_numpy_default_rng() {
        // python -c "import numpy as np; g=np.random.default_rng(0); print([g.random() for _ in range(3)])"
        let mut g = Pcg64::from_seed(0);
        let got: Vec<f64> = (0..3).map(|_| g.next_f64()).collect();
        assert_eq!(got, vec![0.6369616873214543, 0.2697867137638703, 0.04097352393619469]);
        // np.random.default_rng(42).random()
        assert_eq!(Pcg64::from_seed(42).next_f64(), 0.7739560485559633);
        // A seed wider than 32 bits: np.random.default_rng(2**40 + 5).random()
        assert_eq!(Pcg64::from_seed((1 << 40) + 5).next_f64(), 0.004739459374490829);
    }
}

//! Picking the next token from the logits: greedy, or at a temperature,
//! optionally from the nucleus (top-p). The same algorithm and generator as
//! candle-transformers' `LogitsProcessor`, so a seed gives the same reply;
//! written here because it was the last thing this crate used of that
//! crate, which was a minute of every cold build.

use candle_core::{D, DType, Result, Tensor};
use rand::SeedableRng;
use rand::distr::Distribution;

/// How to pick.
pub enum Sampling {
    /// The likeliest token.
    ArgMax,
    /// From every token, at `temperature`.
    All { temperature: f64 },
    /// From the smallest set of likeliest tokens whose probabilities reach
    /// `p`, at `temperature`.
    TopP { p: f64, temperature: f64 },
}

/// Picks tokens with a seeded generator.
pub struct Sampler {
    rng: rand::rngs::StdRng,
    sampling: Sampling,
}

impl Sampler {
    pub fn new(seed: u64, sampling: Sampling) -> Sampler {
        Sampler {
            rng: rand::rngs::StdRng::seed_from_u64(seed),
            sampling,
        }
    }

    /// The next token for `logits` (one row).
    pub fn sample(&mut self, logits: &Tensor) -> Result<u32> {
        let logits = logits.to_dtype(DType::F32)?;
        let (temperature, top_p) = match self.sampling {
            Sampling::ArgMax => return logits.argmax(D::Minus1)?.to_scalar::<u32>(),
            Sampling::All { temperature } => (temperature, None),
            Sampling::TopP { p, temperature } => (temperature, Some(p as f32)),
        };
        let scaled = (&logits / temperature)?;
        let mut prs: Vec<f32> = candle_nn::ops::softmax_last_dim(&scaled)?.to_vec1()?;
        match top_p {
            Some(p) if p > 0.0 && p < 1.0 => self.top_p(&mut prs, p),
            _ => self.multinomial(&prs),
        }
    }

    fn multinomial(&mut self, prs: &[f32]) -> Result<u32> {
        let weights =
            rand::distr::weighted::WeightedIndex::new(prs).map_err(candle_core::Error::wrap)?;
        Ok(weights.sample(&mut self.rng) as u32)
    }

    /// Zeroes every probability outside the nucleus, then samples.
    fn top_p(&mut self, prs: &mut [f32], p: f32) -> Result<u32> {
        let mut order: Vec<usize> = (0..prs.len()).collect();
        order.sort_by(|&i, &j| prs[j].total_cmp(&prs[i]));
        let mut sum = 0.0;
        for i in order {
            if sum >= p {
                prs[i] = 0.0;
            } else {
                sum += prs[i];
            }
        }
        self.multinomial(prs)
    }
}

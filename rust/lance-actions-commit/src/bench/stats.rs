//! How sure a ratio is: a median ratio with a bootstrap interval, so that a bench can say whether
//! "1.05x" is a difference or the spread between runs.
//!
//! On a small shared machine single runs of one way vary by tens of percent (`design/benchmarks.md`),
//! and a median of three runs moves by as much between two runs of one build. A ratio alone cannot
//! tell a goal of 1.0x met from missed; its interval can: when the interval holds 1.0, the runs do
//! not tell the two ways apart. Ratios are paired by round (both ways ran in the same round, on the
//! same machine state), and the interval is the percentile bootstrap of the median: seeded, so a
//! report is replayable from its samples.

/// Resamples drawn for an interval.
const RESAMPLES: usize = 4_000;
/// Fixed, so that the same samples always give the same interval.
const SEED: u64 = 0x5eed_1e55_0fb0_0b0d;
/// The interval's coverage: 2.5% cut off on each side.
const TAIL: f64 = 0.025;

/// A median ratio of ours to theirs and its 95% bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RatioEstimate {
    pub ratio: f64,
    pub low: f64,
    pub high: f64,
    /// Pairs (rounds) the estimate rests on.
    pub pairs: usize,
}

impl RatioEstimate {
    /// Does the interval leave out 1.0, so that the runs tell the two ways apart?
    pub fn differs(&self) -> bool {
        self.low > 1.0 || self.high < 1.0
    }

    /// `1.04x [0.97, 1.10]`.
    pub fn display(&self) -> String {
        format!("{:.2}x [{:.2}, {:.2}]", self.ratio, self.low, self.high)
    }
}

/// The median of `xs` (the mean of the middle two for an even count); NaN when empty.
pub fn median(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 }
}

/// The median of the per-round ratios `ours[i] / theirs[i]` and its bootstrap interval. Pairs with a
/// figure that is not positive and finite are left out; `None` when none is left.
pub fn paired_ratio(ours: &[f64], theirs: &[f64]) -> Option<RatioEstimate> {
    let ratios: Vec<f64> = ours
        .iter()
        .zip(theirs)
        .filter(|(o, t)| o.is_finite() && t.is_finite() && **o > 0.0 && **t > 0.0)
        .map(|(o, t)| o / t)
        .collect();
    if ratios.is_empty() {
        return None;
    }
    let (low, high) = bootstrap_interval(&ratios);
    let estimate = RatioEstimate { ratio: median(&ratios), low, high, pairs: ratios.len() };
    debug_assert!(estimate.low <= estimate.ratio && estimate.ratio <= estimate.high, "{estimate:?}");
    Some(estimate)
}

/// The percentile interval of the median over resamples of `xs` drawn with replacement.
fn bootstrap_interval(xs: &[f64]) -> (f64, f64) {
    let mut rng = SplitMix(SEED);
    let mut sample = vec![0.0; xs.len()];
    let mut medians: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            for slot in sample.iter_mut() {
                *slot = xs[rng.below(xs.len())];
            }
            median(&sample)
        })
        .collect();
    medians.sort_by(f64::total_cmp);
    let at = |q: f64| medians[((q * (RESAMPLES - 1) as f64).round() as usize).min(RESAMPLES - 1)];
    // The percentile interval of a median can miss the sample's own median by a hair when the
    // count is even (the middle two's mean is not always a resampled median): widen to hold it.
    let point = median(xs);
    (at(TAIL).min(point), at(1.0 - TAIL).max(point))
}

/// SplitMix64: small, seeded, good enough to draw resample indices.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0; the modulo bias is below 2^-50 for any count a bench has).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(median(&[f64::NAN, 5.0]), 5.0, "NaN is left out");
    }

    #[test]
    fn identical_ways_give_one_with_an_interval_of_one() {
        let xs = [100.0, 120.0, 90.0, 110.0, 95.0];
        let e = paired_ratio(&xs, &xs).expect("pairs");
        assert_eq!((e.ratio, e.low, e.high, e.pairs), (1.0, 1.0, 1.0, 5));
        assert!(!e.differs());
    }

    #[test]
    fn a_consistent_gap_is_told_apart_and_a_noisy_one_is_not() {
        // Ours 20% faster in every round, whatever the round's level: the interval leaves out 1.0.
        let lance = [100.0, 140.0, 90.0, 120.0, 105.0, 130.0, 95.0, 115.0, 110.0];
        let ours: Vec<f64> = lance.iter().map(|l| l * 1.2).collect();
        let e = paired_ratio(&ours, &lance).expect("pairs");
        assert!((e.ratio - 1.2).abs() < 1e-9, "{e:?}");
        assert!(e.differs() && e.low > 1.0, "{e:?}");
        // Ratios scattered on both sides of 1.0: the interval holds it.
        let scattered = [0.8, 1.25, 0.9, 1.1, 0.95, 1.2, 0.85, 1.05, 1.0];
        let ours: Vec<f64> = lance.iter().zip(scattered).map(|(l, r)| l * r).collect();
        let e = paired_ratio(&ours, &lance).expect("pairs");
        assert!(!e.differs(), "{e:?}");
        assert!(e.low < 1.0 && e.high > 1.0, "{e:?}");
    }

    #[test]
    fn the_interval_holds_the_estimate_and_is_replayable() {
        let mut rng = SplitMix(7);
        for n in 1..40 {
            let ours: Vec<f64> = (0..n).map(|_| 50.0 + (rng.next() % 1000) as f64 / 10.0).collect();
            let theirs: Vec<f64> = (0..n).map(|_| 50.0 + (rng.next() % 1000) as f64 / 10.0).collect();
            let e = paired_ratio(&ours, &theirs).expect("pairs");
            assert!(e.low <= e.ratio && e.ratio <= e.high, "n = {n}: {e:?}");
            assert_eq!(paired_ratio(&ours, &theirs), Some(e), "seeded: the same samples, the same interval");
        }
    }

    #[test]
    fn pairs_without_a_usable_figure_are_left_out() {
        assert_eq!(paired_ratio(&[], &[]), None);
        assert_eq!(paired_ratio(&[1.0], &[0.0]), None, "a zero of theirs has no ratio");
        let e = paired_ratio(&[2.0, f64::NAN, 3.0], &[1.0, 1.0, f64::INFINITY]).expect("one pair");
        assert_eq!((e.ratio, e.pairs), (2.0, 1));
    }
}

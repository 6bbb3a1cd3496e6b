//! How sure a ratio is: the median of paired ratios with a distribution-free 95% interval, so that
//! a bench can say whether "1.05x" is a difference or the spread between runs.
//!
//! On a small shared machine single runs of one way vary by tens of percent (`design/benchmarks.md`),
//! and a median of three runs moves by as much between two runs of one build. A ratio alone cannot
//! tell a goal of 1.0x met from missed; its interval can: when the interval holds 1.0, the runs do
//! not tell the two ways apart. Ratios are paired by round (both ways ran in the same round, on the
//! same machine state).
//!
//! The interval is the order-statistic interval of a median (the sign test's): for `n` ratios
//! sorted, `[r(k), r(n + 1 - k)]` with the largest `k` for which the chance that fewer than `k`
//! ratios fall below the true median, on either side, is at most 2.5% (binomial, one half). It
//! assumes nothing of the ratios' distribution but that rounds are independent, and it needs at
//! least 6 rounds: with 5, even `[min, max]` covers the median only 93.75% of the time, and a
//! resampling interval would then claim more than the rounds can show.

/// Fewer pairs than this give no 95% interval.
pub const MIN_PAIRS_FOR_INTERVAL: usize = 6;
/// Each tail's chance, at most.
const TAIL: f64 = 0.025;

/// A median ratio of ours to theirs, with its 95% interval when there are pairs enough.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RatioEstimate {
    pub ratio: f64,
    /// `(low, high)`; `None` below [`MIN_PAIRS_FOR_INTERVAL`] pairs.
    pub interval: Option<(f64, f64)>,
    /// Pairs (rounds) the estimate rests on.
    pub pairs: usize,
}

impl RatioEstimate {
    /// Does the interval leave out 1.0, so that the runs tell the two ways apart? False without an
    /// interval.
    pub fn differs(&self) -> bool {
        self.interval.is_some_and(|(low, high)| low > 1.0 || high < 1.0)
    }

    /// `1.04x [0.97, 1.10]`, or `1.04x (3 rounds: too few for an interval)`.
    pub fn display(&self) -> String {
        match self.interval {
            Some((low, high)) => format!("{:.2}x [{low:.2}, {high:.2}]", self.ratio),
            None => format!(
                "{:.2}x ({} round(s): too few for an interval, {MIN_PAIRS_FOR_INTERVAL} needed)",
                self.ratio, self.pairs
            ),
        }
    }
}

/// The median of `xs` (the mean of the middle two for an even count); NaN when empty. NaNs are
/// left out.
pub fn median(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 }
}

/// The median of the per-round ratios `ours[i] / theirs[i]` and its 95% interval. Pairs with a
/// figure that is not positive and finite are left out; `None` when none is left.
pub fn paired_ratio(ours: &[f64], theirs: &[f64]) -> Option<RatioEstimate> {
    let mut ratios: Vec<f64> = ours
        .iter()
        .zip(theirs)
        .filter(|(o, t)| o.is_finite() && t.is_finite() && **o > 0.0 && **t > 0.0)
        .map(|(o, t)| o / t)
        .collect();
    if ratios.is_empty() {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    let interval = order_statistic_rank(n).map(|k| (ratios[k - 1], ratios[n - k]));
    let estimate = RatioEstimate { ratio: median(&ratios), interval, pairs: n };
    debug_assert!(
        estimate.interval.is_none_or(|(low, high)| low <= estimate.ratio && estimate.ratio <= high),
        "{estimate:?}"
    );
    Some(estimate)
}

/// The largest `k >= 1` with P(Binomial(n, 1/2) <= k - 1) <= 2.5%: `[r(k), r(n + 1 - k)]` then
/// covers the median with at least 95%. `None` when even `k = 1` does not (n < 6).
fn order_statistic_rank(n: usize) -> Option<usize> {
    // P(X = i) for i = 0, 1, ...: ln C(n, i) - n ln 2, built up term by term (no overflow for any n).
    let mut ln_p = -(n as f64) * std::f64::consts::LN_2;
    let mut below = 0.0; // P(X <= k - 1)
    let mut rank = None;
    for k in 1..=n.div_ceil(2) {
        let i = k - 1;
        if i > 0 {
            ln_p += ((n - i + 1) as f64 / i as f64).ln();
        }
        below += ln_p.exp();
        if below > TAIL {
            break;
        }
        rank = Some(k);
    }
    rank
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
    fn the_rank_is_the_sign_tests() {
        // Known values: n = 6 to 8 take the extremes, 9 to 11 the second, 12 to 14 the third,
        // 15 and 16 the fourth, 20 the sixth (tables of the sign test's median interval at 95%).
        let ranks: Vec<Option<usize>> = (1..=16).map(order_statistic_rank).collect();
        let mut expected = vec![None; 5];
        expected.extend([1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4].map(Some));
        assert_eq!(ranks, expected);
        assert_eq!(order_statistic_rank(20), Some(6));
        // Large counts stay finite and near n/2 - 0.98 sqrt(n).
        let k = order_statistic_rank(10_000).expect("a rank") as f64;
        assert!((k - (5_000.0 - 98.0)).abs() < 3.0, "{k}");
    }

    #[test]
    fn identical_ways_give_one_with_an_interval_of_one() {
        let xs = [100.0, 120.0, 90.0, 110.0, 95.0, 105.0];
        let e = paired_ratio(&xs, &xs).expect("pairs");
        assert_eq!((e.ratio, e.interval, e.pairs), (1.0, Some((1.0, 1.0)), 6));
        assert!(!e.differs());
    }

    #[test]
    fn too_few_rounds_claim_no_interval_and_no_difference() {
        // Five rounds all faster: the sign test cannot reach 95% (1/32 on each side is 3.1%).
        let lance = [100.0, 140.0, 90.0, 120.0, 105.0];
        let ours: Vec<f64> = lance.iter().map(|l| l * 1.5).collect();
        let e = paired_ratio(&ours, &lance).expect("pairs");
        assert_eq!((e.ratio, e.interval), (1.5, None));
        assert!(!e.differs());
        assert!(e.display().contains("too few for an interval"), "{}", e.display());
    }

    #[test]
    fn a_consistent_gap_is_told_apart_and_a_noisy_one_is_not() {
        // Ours 20% faster in every round, whatever the round's level: the interval leaves out 1.0.
        let lance = [100.0, 140.0, 90.0, 120.0, 105.0, 130.0, 95.0, 115.0, 110.0];
        let ours: Vec<f64> = lance.iter().map(|l| l * 1.2).collect();
        let e = paired_ratio(&ours, &lance).expect("pairs");
        assert!((e.ratio - 1.2).abs() < 1e-9, "{e:?}");
        assert!(e.differs() && e.interval.is_some_and(|(low, _)| low > 1.0), "{e:?}");
        // Ratios scattered on both sides of 1.0: the interval holds it.
        let scattered = [0.8, 1.25, 0.9, 1.1, 0.95, 1.2, 0.85, 1.05, 1.0];
        let ours: Vec<f64> = lance.iter().zip(scattered).map(|(l, r)| l * r).collect();
        let e = paired_ratio(&ours, &lance).expect("pairs");
        assert!(!e.differs(), "{e:?}");
        assert_eq!(e.interval, Some((0.85, 1.2)), "the second smallest and second largest of nine");
    }

    #[test]
    fn the_interval_holds_the_estimate_for_every_count() {
        let mut state = 7u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            50.0 + (state >> 54) as f64 / 10.0
        };
        for n in 1..60 {
            let ours: Vec<f64> = (0..n).map(|_| next()).collect();
            let theirs: Vec<f64> = (0..n).map(|_| next()).collect();
            let e = paired_ratio(&ours, &theirs).expect("pairs");
            assert_eq!(e.interval.is_some(), n >= MIN_PAIRS_FOR_INTERVAL, "n = {n}");
            if let Some((low, high)) = e.interval {
                assert!(low <= e.ratio && e.ratio <= high, "n = {n}: {e:?}");
            }
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

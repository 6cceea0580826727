//! Latencies measured one by one, their percentiles, and how far a percentile's change between
//! two sides measured by turns can be trusted: what the benchmarks and the timing scenarios
//! report (never what a test asserts on: a noisy machine moves them).

use std::time::Duration;

/// Latencies in the order they were measured; percentiles are taken over a sorted copy.
#[derive(Clone, Debug, Default)]
pub struct Latencies(Vec<Duration>);

impl Latencies {
    /// Room for `count` measurements.
    pub fn with_capacity(count: usize) -> Self {
        Self(Vec::with_capacity(count))
    }

    /// One more measurement.
    pub fn push(&mut self, latency: Duration) {
        self.0.push(latency);
    }

    /// How many were measured.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `p`th percentile (nearest rank: the smallest latency at least `p` % of them do not
    /// exceed), zero when none was measured.
    pub fn percentile(&self, p: u32) -> Duration {
        nearest_rank(&mut self.0.clone(), p)
    }

    /// The `p`th percentile in milliseconds, for tables.
    pub fn millis(&self, p: u32) -> f64 {
        self.percentile(p).as_secs_f64() * 1000.0
    }

    /// The slowest, zero when none was measured.
    pub fn max(&self) -> Duration {
        self.0.iter().copied().max().unwrap_or_default()
    }

    /// How much `other`'s `p`th percentile differs from this one's, in per cent of this one's
    /// (not finite when this one's is zero): the change alone, which [`Latencies::change`] gives
    /// with how far to trust it.
    pub fn percent_change(&self, other: &Latencies, p: u32) -> f64 {
        percent(self.percentile(p), other.percentile(p))
    }

    /// How much `other`'s `p`th percentile differs from this one's, and how far that moves by
    /// chance: the two sides are taken as pairs (the `i`th latency of each, measured by turns,
    /// so that what slowed one slowed the other), and [`RESAMPLES`] times as many pairs are
    /// drawn with replacement and the change computed again (a paired bootstrap). `None` unless
    /// both sides hold the same number of latencies and this side's percentile is above zero.
    pub fn change(&self, other: &Latencies, p: u32) -> Option<Change> {
        let pairs = self.len();
        let base_percentile = self.percentile(p);
        if pairs != other.len() || base_percentile.is_zero() {
            return None;
        }
        let mut draws = Draws(SEED);
        let mut base = Vec::with_capacity(pairs);
        let mut changed = Vec::with_capacity(pairs);
        let mut changes: Vec<f64> = (0..RESAMPLES)
            .map(|_| {
                base.clear();
                changed.clear();
                for _ in 0..pairs {
                    let i = draws.below(pairs);
                    base.push(self.0[i]);
                    changed.push(other.0[i]);
                }
                percent(nearest_rank(&mut base, p), nearest_rank(&mut changed, p))
            })
            .collect();
        changes.sort_unstable_by(f64::total_cmp);
        Some(Change {
            measured: percent(base_percentile, other.percentile(p)),
            low: changes[RESAMPLES * 25 / 1000],
            high: changes[(RESAMPLES * 975).div_ceil(1000) - 1],
        })
    }
}

/// How many times [`Latencies::change`] resamples the pairs.
pub const RESAMPLES: usize = 2_000;

/// Where the resampling starts: the same latencies give the same interval in every report.
const SEED: u64 = 0x1A7E_4C1E_5EED_0001;

/// A percentile's change between two sides, in per cent of the first side's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Change {
    /// As measured.
    pub measured: f64,
    /// The resampled changes' 2.5th percentile: with [`Change::high`], the middle 95 % of them.
    pub low: f64,
    /// Their 97.5th percentile.
    pub high: f64,
}

impl Change {
    /// Whether the middle 95 % of the resampled changes lie within `bound` per cent either way.
    pub fn within(&self, bound: f64) -> bool {
        self.low >= -bound && self.high <= bound
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:+.1} % ({:+.1} to {:+.1})",
            self.measured, self.low, self.high
        )
    }
}

/// The `p`th percentile of `values` by nearest rank, zero when there are none; reorders them.
fn nearest_rank(values: &mut [Duration], p: u32) -> Duration {
    let Some(last) = values.len().checked_sub(1) else {
        return Duration::ZERO;
    };
    let rank = (values.len() * p.min(100) as usize).div_ceil(100);
    *values
        .select_nth_unstable(rank.saturating_sub(1).min(last))
        .1
}

/// `changed` against `base`, in per cent.
fn percent(base: Duration, changed: Duration) -> f64 {
    (changed.as_secs_f64() / base.as_secs_f64() - 1.0) * 100.0
}

/// Pseudo-random indices (SplitMix64): reproducible, and good enough to pick pairs.
struct Draws(u64);

impl Draws {
    /// An index below `n` (`n` above zero).
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // The high half of a 128-bit product: an index with no modulo bias worth the name.
        ((u128::from(z) * n as u128) >> 64) as usize
    }
}

impl FromIterator<Duration> for Latencies {
    fn from_iter<I: IntoIterator<Item = Duration>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl Extend<Duration> for Latencies {
    fn extend<I: IntoIterator<Item = Duration>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

impl IntoIterator for Latencies {
    type Item = Duration;
    type IntoIter = std::vec::IntoIter<Duration>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[u64]) -> Latencies {
        values.iter().map(|&v| Duration::from_millis(v)).collect()
    }

    #[test]
    fn percentiles_are_nearest_ranks_of_the_sorted_latencies() {
        let hundred = ms(&(1..=100).rev().collect::<Vec<_>>());
        assert_eq!(hundred.percentile(50), Duration::from_millis(50));
        assert_eq!(hundred.percentile(99), Duration::from_millis(99));
        assert_eq!(hundred.percentile(100), Duration::from_millis(100));
        assert_eq!(hundred.percentile(0), Duration::from_millis(1));
        assert_eq!(hundred.max(), Duration::from_millis(100));
        let three = ms(&[30, 10, 20]);
        assert_eq!(three.percentile(50), Duration::from_millis(20));
        assert_eq!(three.percentile(99), Duration::from_millis(30));
        assert!((three.millis(50) - 20.0).abs() < 1e-9);
    }

    #[test]
    fn latencies_pool_into_one_another_in_order() {
        let mut pooled = ms(&[30, 10]);
        pooled.extend(ms(&[20, 40]));
        assert_eq!(pooled.len(), 4);
        assert_eq!(pooled.percentile(50), Duration::from_millis(20));
        assert_eq!(
            pooled.into_iter().collect::<Vec<_>>(),
            [30, 10, 20, 40].map(Duration::from_millis)
        );
    }

    #[test]
    fn a_change_without_noise_is_as_wide_as_nothing() {
        let base = ms(&(1..=1_000).collect::<Vec<_>>());
        let slower: Latencies = base.clone().into_iter().map(|l| l * 11 / 10).collect();
        let change = base.change(&slower, 99).unwrap();
        assert!((base.percent_change(&slower, 99) - 10.0).abs() < 1e-9);
        assert!((slower.percent_change(&base, 50) + 100.0 / 11.0).abs() < 1e-9);
        for bound in [change.measured, change.low, change.high] {
            assert!((bound - 10.0).abs() < 1e-9, "{change:?}");
        }
        assert!(!change.within(9.9) && change.within(10.1));
        assert_eq!(change.to_string(), "+10.0 % (+10.0 to +10.0)");
    }

    #[test]
    fn sides_that_differ_by_chance_straddle_zero_and_narrow_with_more_pairs() {
        // The same latencies on both sides, paired in the opposite order: equal percentiles,
        // and only resampling can tell how far apart they may be by chance.
        let interval = |n: u64| {
            let base = ms(&(1..=n).collect::<Vec<_>>());
            let other = ms(&(1..=n).rev().collect::<Vec<_>>());
            let change = base.change(&other, 99).unwrap();
            assert!(change.measured.abs() < 1e-9, "{change:?}");
            assert!(change.low < 0.0 && change.high > 0.0, "{change:?}");
            change.high - change.low
        };
        // Sixteen times the pairs: about a quarter of the width.
        let (few, many) = (interval(200), interval(3_200));
        assert!(
            many < few / 2.5,
            "200 pairs: {few:.2}, 3,200 pairs: {many:.2}"
        );
    }

    #[test]
    fn the_same_latencies_give_the_same_interval() {
        let base = ms(&[5, 3, 9, 4, 7, 6, 8, 2]);
        let other = ms(&[4, 6, 8, 3, 9, 5, 7, 2]);
        assert_eq!(base.change(&other, 50), base.change(&other, 50));
    }

    #[test]
    fn sides_of_other_lengths_or_none_have_no_change() {
        assert_eq!(ms(&[1, 2]).change(&ms(&[1]), 50), None);
        assert_eq!(Latencies::default().change(&Latencies::default(), 50), None);
    }

    #[test]
    fn nothing_measured_is_zero_not_a_panic() {
        let none = Latencies::default();
        assert!(none.is_empty());
        assert_eq!(none.percentile(99), Duration::ZERO);
        assert_eq!(none.max(), Duration::ZERO);
    }
}

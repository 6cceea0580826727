//! Latencies measured one by one, and their percentiles: what the benchmarks and the timing
//! scenarios report (never what a test asserts on: a noisy machine moves them).

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
        let mut sorted = self.0.clone();
        sorted.sort_unstable();
        let Some(last) = sorted.len().checked_sub(1) else {
            return Duration::ZERO;
        };
        let rank = (sorted.len() * p.min(100) as usize).div_ceil(100);
        sorted[rank.saturating_sub(1).min(last)]
    }

    /// The `p`th percentile in milliseconds, for tables.
    pub fn millis(&self, p: u32) -> f64 {
        self.percentile(p).as_secs_f64() * 1000.0
    }

    /// The slowest, zero when none was measured.
    pub fn max(&self) -> Duration {
        self.0.iter().copied().max().unwrap_or_default()
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
    fn nothing_measured_is_zero_not_a_panic() {
        let none = Latencies::default();
        assert!(none.is_empty());
        assert_eq!(none.percentile(99), Duration::ZERO);
        assert_eq!(none.max(), Duration::ZERO);
    }
}

//! Who got what: the distribution figures every table of the lab prints next to its timings.

use herdless_fixtures::jain;
use serde::Serialize;

/// The distribution of events (messages, connections, bytes) over the waiters of one run.
#[derive(Debug, Clone, Serialize)]
pub struct Distribution {
    /// Share of the busiest waiter (0..=1).
    pub max_share: f64,
    /// Busiest minus idlest.
    pub spread: u64,
    /// Jain's fairness index: 1 when even, 1/n when one waiter takes everything.
    pub jain: f64,
}

impl Distribution {
    pub fn of(counts: &[u64]) -> Distribution {
        let total: u64 = counts.iter().sum();
        let max = counts.iter().copied().max().unwrap_or(0);
        let min = counts.iter().copied().min().unwrap_or(0);
        Distribution {
            max_share: if total == 0 {
                0.0
            } else {
                max as f64 / total as f64
            },
            spread: max - min,
            jain: jain(counts),
        }
    }
}

/// A short text picture of a distribution: all counts when few, else a summary.
pub fn sketch(counts: &[u64]) -> String {
    if counts.len() <= 16 {
        format!("{counts:?}")
    } else {
        let mut sorted = counts.to_vec();
        sorted.sort_unstable();
        let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q) as usize];
        format!(
            "min {} p50 {} p90 {} max {} ({} waiters)",
            at(0.0),
            at(0.5),
            at(0.9),
            at(1.0),
            counts.len()
        )
    }
}

/// Mean, min and max of repeated figures.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Spread {
        let n = values.len().max(1) as f64;
        Spread {
            mean: values.iter().sum::<f64>() / n,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if (self.max - self.min).abs() < f64::EPSILON {
            write!(f, "{:.3}", self.mean)
        } else {
            write!(f, "{:.3} ({:.3}–{:.3})", self.mean, self.min, self.max)
        }
    }
}

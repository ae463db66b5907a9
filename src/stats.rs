//! Summaries of repeated measurements for the benchmarks: median and spread.

/// The median and the extremes of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// The middle sample.
    pub median: f64,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
}

impl Stats {
    /// Summarizes `samples` (at least one).
    pub fn of(mut samples: Vec<f64>) -> Stats {
        samples.sort_by(f64::total_cmp);
        Stats { median: samples[samples.len() / 2], min: samples[0], max: samples[samples.len() - 1] }
    }

    /// `self / other`, with the spread that the two spreads allow.
    pub fn ratio(&self, other: &Stats) -> Stats {
        Stats { median: self.median / other.median, min: self.min / other.max, max: self.max / other.min }
    }

    /// `{"median":…,"min":…,"max":…}`, the benchmarks' JSON of one cell.
    pub fn json(&self) -> String {
        format!("{{\"median\":{:.1},\"min\":{:.1},\"max\":{:.1}}}", self.median, self.min, self.max)
    }
}

//! Stream priorities. Lower numbers mean higher priority; the range is the device's
//! ([`cudaDeviceGetStreamPriorityRange`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)),
//! e.g. `0..=-5` on an H100 or H200. CUDA clamps an out-of-range request in silence; this crate
//! refuses it ([`Error::PriorityOutOfRange`](crate::Error::PriorityOutOfRange)) unless the caller
//! clamps explicitly with [`PriorityRange::clamp`].

use std::fmt;

/// A stream priority: lower is more urgent. `Priority::default()` is 0, CUDA's default and the
/// least urgent level on current GPUs.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Priority(pub i32);

impl Priority {
    /// The numeric value CUDA takes.
    pub fn value(self) -> i32 {
        self.0
    }
}

/// A device's priority range, from its least urgent priority (CUDA's `leastPriority`,
/// numerically the greatest, e.g. 0: the default) to its most urgent (CUDA's
/// `greatestPriority`, numerically the smallest, e.g. -5). CUDA's names read backwards to most
/// users ("least" is the larger number), so this type names the ends by what they mean.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct PriorityRange {
    least_urgent: i32,
    most_urgent: i32,
}

impl PriorityRange {
    /// The range from `least_urgent` (numerically greater or equal) to `most_urgent`, as
    /// `cudaDeviceGetStreamPriorityRange` reports them (`leastPriority`, `greatestPriority`).
    pub const fn new(least_urgent: i32, most_urgent: i32) -> PriorityRange {
        PriorityRange { least_urgent, most_urgent }
    }

    /// The most urgent priority on this device (numerically the smallest, e.g. -5).
    pub fn most_urgent(self) -> Priority {
        Priority(self.most_urgent)
    }

    /// The least urgent priority on this device (numerically the greatest, e.g. 0), which is
    /// also CUDA's default on current GPUs.
    pub fn least_urgent(self) -> Priority {
        Priority(self.least_urgent)
    }

    /// CUDA's default priority, 0, clamped into the range.
    pub fn default_priority(self) -> Priority {
        self.clamp(0)
    }

    /// Whether `priority` is inside the range.
    pub fn contains(self, priority: Priority) -> bool {
        (self.most_urgent..=self.least_urgent).contains(&priority.0)
    }

    /// The nearest priority inside the range: what CUDA would apply in silence.
    pub fn clamp(self, value: i32) -> Priority {
        Priority(value.clamp(self.most_urgent, self.least_urgent))
    }

    /// How many distinct levels the device has.
    pub fn levels(self) -> u32 {
        self.least_urgent.abs_diff(self.most_urgent) + 1
    }
}

impl fmt::Display for PriorityRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (least urgent) ..= {} (most urgent)", self.least_urgent, self.most_urgent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200: PriorityRange = PriorityRange::new(0, -5);

    #[test]
    fn lower_numbers_are_more_urgent() {
        assert_eq!(H200.most_urgent(), Priority(-5));
        assert_eq!(H200.least_urgent(), Priority(0));
        assert_eq!(H200.default_priority(), Priority(0));
        assert_eq!(H200.levels(), 6);
    }

    #[test]
    fn contains_and_clamp_agree_with_cuda() {
        assert!(H200.contains(Priority(-3)));
        assert!(!H200.contains(Priority(-6)));
        assert!(!H200.contains(Priority(1)));
        assert_eq!(H200.clamp(-15), Priority(-5));
        assert_eq!(H200.clamp(7), Priority(0));
    }
}

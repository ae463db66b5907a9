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

/// A device's priority range: `least` (numerically greatest, the default) to `greatest`
/// (numerically smallest, the most urgent).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct PriorityRange {
    /// The least urgent priority (CUDA's `leastPriority`, e.g. 0).
    pub least: i32,
    /// The most urgent priority (CUDA's `greatestPriority`, e.g. -5).
    pub greatest: i32,
}

impl PriorityRange {
    /// The most urgent priority on this device.
    pub fn highest(self) -> Priority {
        Priority(self.greatest)
    }

    /// The least urgent priority on this device.
    pub fn lowest(self) -> Priority {
        Priority(self.least)
    }

    /// CUDA's default priority, 0, clamped into the range.
    pub fn default_priority(self) -> Priority {
        self.clamp(0)
    }

    /// Whether `priority` is inside the range.
    pub fn contains(self, priority: Priority) -> bool {
        (self.greatest..=self.least).contains(&priority.0)
    }

    /// The nearest priority inside the range: what CUDA would apply in silence.
    pub fn clamp(self, value: i32) -> Priority {
        Priority(value.clamp(self.greatest, self.least))
    }

    /// How many distinct levels the device has.
    pub fn levels(self) -> u32 {
        self.least.abs_diff(self.greatest) + 1
    }
}

impl fmt::Display for PriorityRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (lowest) ..= {} (highest)", self.least, self.greatest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200: PriorityRange = PriorityRange { least: 0, greatest: -5 };

    #[test]
    fn lower_numbers_are_more_urgent() {
        assert_eq!(H200.highest(), Priority(-5));
        assert_eq!(H200.lowest(), Priority(0));
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

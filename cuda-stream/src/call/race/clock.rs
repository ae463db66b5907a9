//! Vector clocks: one counter per stream (index 0 is the host), each the number of that
//! stream's operations known to come before.

/// A vector clock over stream indices; missing entries are 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Clock(Vec<u64>);

impl Clock {
    /// The count of `stream`'s operations this clock knows of.
    pub(super) fn get(&self, stream: usize) -> u64 {
        self.0.get(stream).copied().unwrap_or(0)
    }

    /// Sets `stream`'s count.
    pub(super) fn set(&mut self, stream: usize, count: u64) {
        if self.0.len() <= stream {
            self.0.resize(stream + 1, 0);
        }
        self.0[stream] = count;
    }

    /// Counts one more operation of `stream`, and returns its number (its epoch).
    pub(super) fn tick(&mut self, stream: usize) -> u64 {
        let next = self.get(stream) + 1;
        self.set(stream, next);
        next
    }

    /// Takes in everything `other` knows of (the element-wise maximum).
    pub(super) fn join(&mut self, other: &Clock) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (mine, theirs) in self.0.iter_mut().zip(&other.0) {
            *mine = (*mine).max(*theirs);
        }
    }

    /// Whether operation `epoch` of `stream` comes before every operation with this clock.
    pub(super) fn covers(&self, stream: usize, epoch: u64) -> bool {
        self.get(stream) >= epoch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_takes_the_maximum_and_covers_compares_epochs() {
        let mut a = Clock::default();
        a.set(2, 5);
        let mut b = Clock::default();
        b.set(0, 1);
        b.set(2, 3);
        b.set(4, 7);
        a.join(&b);
        assert_eq!((a.get(0), a.get(1), a.get(2), a.get(4), a.get(9)), (1, 0, 5, 7, 0));
        assert!(a.covers(2, 5) && !a.covers(2, 6) && a.covers(1, 0));
        assert_eq!(a.tick(1), 1);
        assert_eq!(a.tick(1), 2);
    }
}

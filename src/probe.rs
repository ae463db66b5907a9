//! Drop flags for closures handed to CUDA: a [`Token`] owned by a closure records each run and
//! the closure's drop into its [`Probe`], and whether it ever ran after being dropped (which
//! would be a use after free).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

/// What happened to the closures holding this probe's tokens.
#[derive(Debug, Default)]
pub struct Probe {
    runs: AtomicU32,
    dropped: AtomicBool,
    ran_after_drop: AtomicBool,
}

impl Probe {
    /// How many times a token ran.
    pub fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }

    /// Whether a token was dropped.
    pub fn dropped(&self) -> bool {
        self.dropped.load(Ordering::SeqCst)
    }

    /// Whether a token ran after it was dropped: a use after free.
    pub fn ran_after_drop(&self) -> bool {
        self.ran_after_drop.load(Ordering::SeqCst)
    }

    /// Waits up to 10 s for a token's drop (CUDA frees some closures on its own thread).
    pub fn wait_dropped(&self) -> bool {
        crate::poll_until(Duration::from_secs(10), || self.dropped()).is_some()
    }
}

/// Owned by a closure: records each run, and the closure's drop.
#[derive(Debug)]
pub struct Token(pub Arc<Probe>);

impl Token {
    /// A token and the probe it reports to.
    pub fn new() -> (Token, Arc<Probe>) {
        let probe = Arc::new(Probe::default());
        (Token(Arc::clone(&probe)), probe)
    }

    /// Records a run.
    pub fn run(&self) {
        if self.0.dropped() {
            self.0.ran_after_drop.store(true, Ordering::SeqCst);
        }
        self.0.runs.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for Token {
    fn drop(&mut self) {
        self.0.dropped.store(true, Ordering::SeqCst);
    }
}

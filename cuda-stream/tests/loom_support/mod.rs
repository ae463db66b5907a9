//! What the loom models of the crate's protocols (`loom_fast_calls.rs`, `loom_record_state.rs`,
//! `loom_mode_switch.rs`, `loom_joins.rs`, `loom_reactor.rs`) share: a builder that explores the whole tree, what an exploration
//! saw (its executions, and the first that broke each property), and the run of a scenario with
//! a seeded bug, which loom must catch.

use loom::model::Builder;
use std::fmt::Debug;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// A builder of the whole tree, always: neither a time limit nor a cap on executions from the
/// environment cuts a check short.
pub fn builder(preemption_bound: Option<usize>) -> Builder {
    let mut builder = Builder::new();
    builder.preemption_bound = preemption_bound;
    builder.max_duration = None;
    builder.max_permutations = None;
    builder
}

/// The executions of an exploration, and those that broke a property: how many, and the first
/// that broke each (by the property's number), with what it broke. A violation is noted, not
/// panicked on (a panic while loom's objects are alive aborts the process); a run that must stop
/// at a property panics at the start of the next execution ([`Exploration::begin`]).
#[derive(Debug, Default)]
pub struct Exploration {
    executions: AtomicUsize,
    violations: AtomicUsize,
    first: Mutex<Vec<Option<(usize, String)>>>,
}

impl Exploration {
    /// Starts an execution; with `stop`, panics if an earlier one broke that property.
    pub fn begin(&self, stop: Option<usize>) {
        if let Some(property) = stop {
            self.stop_if_broken(property);
        }
        self.executions.fetch_add(1, Relaxed);
    }

    /// Panics if an execution broke `property`: "loom broke property N in execution E: what".
    pub fn stop_if_broken(&self, property: usize) {
        if let Some((execution, what)) = self.first_violation(property) {
            panic!("loom broke property {property} in execution {execution}: {what}");
        }
    }

    /// The execution in progress broke `property`.
    pub fn violated(&self, property: usize, what: impl Into<String>) {
        self.violations.fetch_add(1, Relaxed);
        let mut first = self.first.lock().unwrap();
        if first.len() <= property {
            first.resize(property + 1, None);
        }
        first[property].get_or_insert_with(|| (self.executions.load(Relaxed), what.into()));
    }

    pub fn executions(&self) -> usize {
        self.executions.load(Relaxed)
    }

    pub fn violations(&self) -> usize {
        self.violations.load(Relaxed)
    }

    fn first_violation(&self, property: usize) -> Option<(usize, String)> {
        self.first.lock().unwrap().get(property).cloned().flatten()
    }

    /// Panics, naming `scenario` and the first violations, if any execution broke a property.
    pub fn assert_unbroken(&self, scenario: &dyn Debug) {
        assert_eq!(self.violations(), 0, "{scenario:?}: {:?}", self.first.lock().unwrap());
    }
}

/// Runs `explore` (a scenario with a seeded bug, stopping at `property`): loom must find an
/// execution that breaks that property. Prints how soon, as `scenario` (the bug) said.
pub fn must_break(scenario: &dyn Debug, property: usize, exploration: &Exploration, explore: impl FnOnce()) {
    let start = std::time::Instant::now();
    let message = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(explore)) {
        Ok(()) => panic!("{scenario:?}: the seeded bug went unseen"),
        Err(payload) => {
            payload.downcast_ref::<String>().cloned().unwrap_or_else(|| "(a panic without a message)".to_string())
        }
    };
    let expected = format!("loom broke property {property} ");
    assert!(message.starts_with(&expected), "{scenario:?} failed otherwise: {message}");
    eprintln!("{scenario:?}: caught after {} executions, {:.2?}: {message}", exploration.executions(), start.elapsed());
}

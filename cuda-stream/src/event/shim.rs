//! What the record-state core ([`record_state_core`](super::record_state_core)) takes from
//! outside itself: atomics, the spin waits' yield, the wait for the reactor's pass in progress
//! and the crate's error type. Here they are std's and the crate's. The loom model
//! (`cuda-stream/tests/loom_record_state.rs`) compiles the core's same source beside a module of
//! this name with loom's atomics and yield, a stand-in error, and no reactor;
//! `cuda-stream/tests/loom_reactor.rs` does the same with the passes' core
//! ([`reactor_passes_core`](crate::call::reactor_passes_core)), whose wait this is.
//!
//! Only the core imports this module: the rest of the crate uses std directly.

pub(crate) use crate::call::reactor_passes::wait_for_pass;
pub(crate) use crate::ffi::error::{Error, Result};
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
pub(crate) use std::thread::yield_now;

//! What the fast-call core ([`fast_call_core`](super::fast_call_core)) and the mode switch's
//! core ([`mode_switch_core`](super::mode_switch_core)) take from outside themselves: atomics,
//! the lock, `Arc`, `Once`, thread-locals and their keys, statics, `const` constructors, the spin
//! wait's hints and the `membarrier` system call. Here they are std's and the kernel's. The loom
//! models (`cuda-stream/tests/loom_fast_calls.rs`, `loom_mode_switch.rs`) compile a core's same
//! source beside a module of this name with loom's: its statics live for one execution of the
//! model, its constructors are not `const` (loom's atomics are built at run time), and its
//! `membarrier` is a `SeqCst` fence on the fast side (where the crate's core has a compiler
//! fence).
//!
//! The capture-transition lock's core ([`transitions_core`](super::transitions_core)) takes its
//! `RwLock` and its guards from here too; its loom model is `cuda-stream/tests/loom_joins.rs`. So
//! does the reactor passes' core ([`reactor_passes_core`](super::reactor_passes_core)): its
//! atomics, the fence its pass and its waiter pair, and its statics; its loom model is
//! `cuda-stream/tests/loom_reactor.rs`.
//!
//! Only the cores import this module: the rest of the crate uses std directly.

pub(crate) use std::hint::spin_loop;
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering, compiler_fence, fence};
pub(crate) use std::sync::{Arc, Mutex, Once, PoisonError};
pub(crate) use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
pub(crate) use std::thread::{LocalKey, yield_now};
pub(crate) use std::thread_local;

/// Statics of the core, as written: each one of the process. (Under loom each is a lazy static
/// of one execution of the model.)
macro_rules! shared_statics {
    ($($(#[$attr:meta])* static $name:ident: $t:ty = $init:expr;)*) => {
        $($(#[$attr])* static $name: $t = $init;)*
    };
}
pub(crate) use shared_statics;

/// A constructor of a core, as written: `const`, so that its value can be a static. (Under loom,
/// whose atomics and locks are built at run time, the `const` is dropped.)
macro_rules! const_in_the_crate {
    ($(#[$attr:meta])* $vis:vis const fn $($rest:tt)*) => {
        $(#[$attr])* $vis const fn $($rest)*
    };
}
pub(crate) use const_in_the_crate;

pub(crate) const MEMBARRIER_CMD_PRIVATE_EXPEDITED: std::ffi::c_long = 1 << 3;
pub(crate) const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: std::ffi::c_long = 1 << 4;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
const SYS_MEMBARRIER: std::ffi::c_long = 324;
#[cfg(all(target_os = "linux", target_arch = "aarch64"))]
const SYS_MEMBARRIER: std::ffi::c_long = 283;

#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe extern "C" {
    /// glibc's `syscall`.
    fn syscall(number: std::ffi::c_long, ...) -> std::ffi::c_long;
}

/// `membarrier(command, 0)`; whether it succeeded.
#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) fn membarrier(command: std::ffi::c_long) -> bool {
    // SAFETY: the membarrier system call with a command and zero flags touches no memory of ours.
    unsafe { syscall(SYS_MEMBARRIER, command, 0 as std::ffi::c_long) == 0 }
}

/// No `membarrier` known for this target: the fast path fences itself.
#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
pub(crate) fn membarrier(_command: std::ffi::c_long) -> bool {
    false
}

//! **Layer 2, the call context:** what a call consults before it reaches CUDA, beyond the
//! host-function rule of the floor ([`ffi`](crate::ffi)): the captures in progress and the calls
//! they forbid ([`live_captures`]: counted captures, the foreign-handle mark), the
//! capture-transition lock and its nesting holds ([`transitions`]; their host-side core, which a
//! loom model checks from the same source, is [`transitions_core`]), the capture modes and the
//! thread's capture-interaction mode ([`capture_mode`]), the reactor's polling passes that a record
//! into a capture waits out ([`reactor_passes`]; their host-side core, which a loom model checks
//! from the same source, is [`reactor_passes_core`]), the calling thread's identity ([`thread`]), the
//! counts of live handles ([`live`]), the fast calls a capture's begin waits for
//! ([`uncaptured_calls`]; their host-side core, which a loom model checks from the same source, is
//! [`fast_call_core`], over the std primitives of [`shim`]), and the sync-debug mode that calls
//! waiting for the device consult ([`sync_debug`]), and the race detector's model of what is
//! enqueued ([`race`]), whose modes and scopes are one switch ([`mode_switch`]).
//!
//! Uses only the floor. Knows devices by ordinal, streams and events not at all: each layer
//! above asks here and decides.

pub(crate) mod capture_mode;
pub(crate) mod fast_call_core;
pub(crate) mod live;
pub(crate) mod live_captures;
pub(crate) mod mode_switch;
pub(crate) mod mode_switch_core;
pub mod race;
pub(crate) mod reactor_passes;
pub(crate) mod reactor_passes_core;
pub(crate) mod shim;
pub mod sync_debug;
pub(crate) mod thread;
pub(crate) mod transitions;
pub(crate) mod transitions_core;
pub(crate) mod uncaptured_calls;

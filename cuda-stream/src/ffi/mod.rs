//! **Layer 1, the floor:** how a call reaches CUDA. The driver's entry points for the hot calls
//! ([`driver`]); CUDA's codes and this crate's typed [`Error`](crate::Error), with the checks
//! every call's result goes through ([`error`]); the priority values errors carry
//! ([`priority`]); the one rule every CUDA call obeys, none from inside a host function
//! ([`inside_host_fn`], which also runs every closure CUDA calls: flagged, panics caught); and
//! what is installed ([`installation`]: driver and runtime versions, why no GPU can be used);
//! what the race detector reports, which an error can carry ([`race_report`]).
//!
//! The host-function rule is here, not with the call context above, because the floor needs
//! it: telling "no driver" from "old driver" asks the driver's version, which is refused
//! inside a host function. Uses nothing of the crate above it.

pub(crate) mod driver;
pub(crate) mod error;
pub(crate) mod inside_host_fn;
pub(crate) mod installation;
pub(crate) mod priority;
pub(crate) mod race_report;

//! Safe CUDA streams for Rust.
//!
//! ```no_run
//! use cuda_stream::{Device, Stream, StreamOptions};
//!
//! // Kernels of your `.cu` files (built by `cuda-stream-build`), declared once.
//! cuda_stream::kernel! {
//!     static SCALE = fn scale(x: *mut f32, by: f32, n: u32);
//! }
//!
//! # fn main() -> cuda_stream::Result<()> {
//! let device = Device::new(0)?;
//! let range = device.priority_range()?;
//! let urgent = Stream::new(device, StreamOptions::non_blocking().with_priority(range.most_urgent()))?;
//! let batch = Stream::new(device, StreamOptions::non_blocking())?;
//! // ... enqueue work on `batch`: `unsafe { SCALE.launch(&batch, &config, (x, 2.0, n)) }` ...
//! urgent.wait_stream(&batch)?; // later work on `urgent` waits for `batch`'s work so far
//! urgent.launch_host_fn(|| println!("both streams' work so far is done"))?;
//! urgent.synchronize()?;
//! # Ok(())
//! # }
//! ```
//!
//! # Ownership
//! Ownership is in the types, the way std models file descriptors (`OwnedFd`, `BorrowedFd<'fd>`):
//!
//! * [`Stream`]: created by [`Stream::new`] (or handed over with the unsafe
//!   [`Stream::from_raw_owned`]); destroyed when it drops. [`Stream::into_raw`] gives the handle away
//!   without destroying it; [`Stream::destroy`] reports the errors drop hides.
//! * [`BorrowedStream<'a>`](BorrowedStream): a foreign handle (C, cudarc, PyTorch) wrapped with
//!   the unsafe [`BorrowedStream::borrow_raw`] for a lifetime the caller picks; never destroyed
//!   here. Wrapping makes no CUDA call, so a stream someone is capturing stays captured.
//! * [`BuiltinStream`]: CUDA's default streams, never destroyed: [`BuiltinStream::null`]
//!   (handle 0), [`BuiltinStream::legacy`] (0x1) and [`BuiltinStream::per_thread`] (0x2).
//!
//! All three deref to [`StreamRef`], which carries every operation. Functions that take a
//! stream take an `impl` [`AsStream`] (as std's `AsFd`): any of these, a reference, `Box`,
//! `Rc` or `Arc` of one, a pool lease, or your own type; (feature `cudarc`) cudarc's
//! `CudaStream` through the unsafe `BorrowedStream::from_cudarc`. A `StreamRef` is never handed out by value, so nothing reachable from safe code
//! holds a stream without a lifetime or an ownership that keeps it alive: not a thread-local,
//! not a guard that `mem::forget` could leak.
//!
//! A foreign handle comes in with [`BorrowedStream::borrow_raw`], which reads its device from
//! the driver without disturbing a capture of it, or [`BorrowedStream::borrow_raw_on`], which
//! checks the device it is given.
//!
//! # Legacy and per-thread default streams
//! The legacy stream waits for all earlier work on its device's blocking streams, and they wait
//! for it; non-blocking streams ([`StreamOptions::non_blocking`]) do neither. The per-thread
//! default stream is a different, ordinary stream on each host thread; a `BuiltinStream` of it
//! works only on the thread that made it ([`Error::WrongThread`] elsewhere, by a thread identity
//! that is never reused). Which one handle 0 means is fixed when `cuda-stream-sys` is built:
//! the legacy stream, or with the `per-thread-default-stream` feature the per-thread stream
//! ([`NULL_STREAM_IS_PER_THREAD`]).
//!
//! # Priorities
//! Lower numbers are more urgent; [`Device::priority_range`] says the device's range (0 to -5
//! on an H100 or H200). A priority outside it is an [`Error::PriorityOutOfRange`], not CUDA's
//! silent clamp; [`PriorityRange::clamp`] clamps for those who want it.
//!
//! # Beyond the stream itself
//! * Host functions: [`StreamRef::launch_host_fn`] runs a `FnOnce` after the work before it,
//!   [`StreamRef::launch_host_callback`] one that gets the stream's status; the rules (boxing,
//!   faults, panics, CUDA calls inside, capture) are in [`host_fn`].
//! * [`StreamRef::completion`] and [`Event::completion`]: `Future`s that resolve when the work
//!   so far is done (or with the sticky error after a fault), with no async runtime. One
//!   reactor thread per process polls their events (`cuEventQuery`), hot for a short window
//!   after each arrival, then backing off, and idle at no CPU cost; see [`completion`].
//! * Graph capture: [`StreamRef::begin_capture`] → [`Capture::end`] → [`Graph::instantiate`] →
//!   [`GraphExec::launch`] on any stream. The mode is a type ([`capture::Global`],
//!   [`capture::ThreadLocal`], [`capture::Relaxed`]); only a Relaxed capture may change threads.
//!   Graph host functions live as long as CUDA needs them (user objects the graph owns).
//! * The current stream, per thread and device: [`StreamRef::as_current`] runs a closure with
//!   the stream current ([`StreamRef::as_current_with_device`] makes its device current too);
//!   [`StreamRef::with_current`] reads it (default: the null stream), and
//!   [`StreamRef::current`] returns it as a [`CurrentStream`] value, checked on every use.
//! * Events ([`Event`]): `Eq + Hash`, IPC, [`StreamRef::record_event_with`] (flags in one call;
//!   an external record in a capture becomes a graph node the graph keeps alive).
//! * Graphs beyond capture: [`Graph::instantiate_with`], [`GraphExec::update`],
//!   [`StreamRef::begin_capture_into`], [`capture::with_thread_mode`]; calls that would break a
//!   capture begun here are refused (see [`capture`]).
//! * Stream attributes ([`attributes`]): synchronization policy, L2 access-policy window.
//!   Hardware queues: [`Device::hardware_queues`], [`StreamPool::with_hardware_queues`].
//! * [`StreamPool`]: exclusive leases, never one stream to two holders.
//! * The race detector ([`race`]): two accesses of the same memory on different streams that
//!   nothing orders are reported ([`race_scope`], [`set_race_mode`]) with both operations and
//!   the missing edge; off, one relaxed load per operation.
//! * [`Device::make_current`]: makes the device's primary context current, pushed over
//!   another context and popped by its guard.
//!
//! # Contexts, foreign captures and captured events
//! What this crate guarantees whatever other code (cudarc, PyTorch, raw FFI) does beside it:
//! * **One context per device.** Every handle this crate creates or caches (streams, events,
//!   pool slots, the completion reactor's and `wait_stream`'s internal events) lives in its
//!   device's primary context, whatever context is current: [`Device::make_current`] pushes
//!   the primary context over another one and pops it after. Foreign streams of another
//!   context are refused ([`Error::ForeignContext`]), so no handle of a context someone else
//!   may destroy is ever kept. A sticky fault poisons the futures of its primary context.
//! * **Captured events are graph nodes.** An event last recorded inside a capture is refused by
//!   every call that would query it ([`Error::CaptureMisuse`]), and the reactor never queries
//!   it: CUDA would invalidate the capture, and a query racing the capture's end crashed
//!   libcuda.
//! * **Capture transitions.** Captures begun through this crate never begin or end while the
//!   crate enqueues a host function, attaches an object to a capture's graph, records a
//!   possibly captured event, or queries during a capture (CUDA 13.0 crashed on each race).
//!   (`Capture::launch_host_fn` holds no lock: its own capture cannot end meanwhile; a record
//!   whose check came before a capture began is a window listed in the capture docs.)
//!   Foreign code's transitions cannot be seen: the unsafe entry points for foreign streams
//!   ([`BorrowedStream::borrow_raw`], `borrow_raw_on`, [`Stream::from_raw_owned`],
//!   `BorrowedStream::from_cudarc`, `StreamRef::to_cudarc`)
//!   make the caller promise they do not overlap this crate's calls on the stream.
//! * **Reads leave captures intact.** Identity, device, priority, flags and capture status are
//!   read by calls CUDA allows during any capture, or known from creation; a read that CUDA
//!   would answer by invalidating a capture is refused instead.
//! * **Pools never lend a capturing stream**: a lease returned capturing is quarantined.
//! * **Other threads' Global captures do not forbid this crate's queries**: a thread still in
//!   CUDA's default capture interaction mode is moved to ThreadLocal before its first query or
//!   synchronize, so a foreign Global capture is neither invalidated nor raced into a crash.
//!
//! * **A wait in CUDA is never joined by a captured record of its event**: `Event::synchronize`
//!   waits in `cudaEventSynchronize` (as C++ does) while no stream may be capturing, and a
//!   record of that event into a capture meanwhile is refused; while streams may be capturing
//!   it polls counted queries. See the [capture docs](capture#calls-refused-during-a-capture).
//!
//! # Layers
//! The source is cut into layers, each importing only from those before it (in the repository:
//! the map, the invariants each establishes and where they are enforced, `docs/architecture.md`;
//! the gate, `scripts/check-layers.py`):
//! 1. `ffi/`, the floor: driver entry points, CUDA codes and [`Error`], the host-function rule
//!    ([`Error::InsideHostFn`]), versions.
//! 2. `call/`, the call context: captures in progress and the calls they forbid, capture
//!    modes ([`capture::with_thread_mode`]), the reactor's passes, thread identity, live counts.
//! 3. `device/`: [`Device`], its primary context ([`DeviceGuard`]), values a graph owns.
//! 4. `event/`: [`Event`], and where its last record went.
//! 5. `stream/`: [`StreamRef`] and its owners, [`AsStream`], records and waits, capture status,
//!    the current stream, the pool, [`attributes`], launches.
//! 6. [`host_fn`]: host functions.
//! 7. `graph/`: [`Graph`], [`GraphExec`], [`capture`].
//! 8. [`completion`]: the reactor and its futures.
//! 9. `cudarc.rs`: cudarc interop (feature `cudarc`).
//! 10. [`memory`]: [`DeviceBuffer`] and its views, the order of their uses across streams,
//!     pinned and registered host memory, pools, stream memory operations
//!     ([`memory::mem_ops`]).
//! 11. [`kernel`](mod@kernel): typed launches ([`kernel!`](crate::kernel!)), buffers and views as their
//!     arguments.
//! 12. [`profiling`]: the profiler's range, NVTX.
//!
//! # Errors
//! Every CUDA failure is an [`Error::Cuda`] with the API's name and the [`CudaCode`] (name,
//! description, [`CudaCode::is_sticky`]). `cudaErrorNotReady` is not an error: queries return
//! `Ok(false)`.
//!
//! # Bad input and what it gets
//! Each row is a test in the workspace; in every case nothing leaks ([`live_streams`],
//! [`live_events`], [`live_host_fns`] return to where they were) and nothing panics.
//!
//! | input | result |
//! |---|---|
//! | `Device::new(-1)`, `Device::new(count)`, `Device::new(i32::MAX)` | [`Error::InvalidDevice`] with the count |
//! | a priority less urgent than `least_urgent()` or more urgent than `most_urgent()` | [`Error::PriorityOutOfRange`] with the range |
//! | recording an event of device 1 on a stream of device 0 | [`Error::DeviceMismatch`] |
//! | `elapsed` with an event created without timing | [`Error::TimingDisabled`] |
//! | `elapsed` with an event never recorded | [`Error::EventNotRecorded`] |
//! | `elapsed` before the events completed | `Ok(None)` |
//! | `ipc_handle` of an event without [`EventFlags::interprocess`] | [`Error::NotInterprocess`] |
//! | interprocess together with timing | [`Error::Cuda`] `cudaErrorInvalidValue` |
//! | `BorrowedStream::borrow_raw(null)` | the current device's null stream, [`Ownership::Builtin`]`(`[`Builtin::Null`]`)`: handle 0 *is* a stream |
//! | `BorrowedStream::borrow_raw_on` or `Stream::from_raw_owned` of a handle of another device | [`Error::DeviceMismatch`]; nothing is taken |
//! | `elapsed` between events of two devices | [`Error::DeviceMismatch`] |
//! | a [`CurrentStream`] used after its `as_current` scope ended | [`Error::NotCurrent`] |
//! | `Stream::from_raw_owned` of 0, 0x1 or 0x2 | [`Error::BuiltinNotOwnable`] |
//! | the per-thread stream used from another thread | [`Error::WrongThread`] |
//! | `elapsed` where the end completed before the start | [`Error::NegativeElapsed`] with the amount |
//! | `begin_capture` on the legacy stream | [`Error::CaptureMisuse`] |
//! | `begin_capture` on a stream already capturing | [`Error::Cuda`] `cudaErrorIllegalState` |
//! | `synchronize` / `query` of a capturing stream | [`Error::CaptureMisuse`] before CUDA sees the call; the capture stays valid (the [rules](capture#calls-refused-during-a-capture)) |
//! | `end` of an invalidated capture | [`Error::Cuda`] `cudaErrorStreamCaptureInvalidated` |
//! | a `FnOnce` host function on a capturing stream | [`Error::CaptureMisuse`]; the closure is dropped, never run; the capture stays valid |
//! | a capture's host function on a stream outside that capture | [`Error::CaptureMisuse`]; the closure is dropped, never run |
//! | `wait_stream` between streams of two different captures | [`Error::CaptureMisuse`]; both captures stay valid |
//! | a host function that cannot be enqueued | CUDA's error; the closure is dropped, never run |
//! | a `FnOnce` host function after a fault | dropped without running; a host callback gets the error |
//! | any call of this crate that reaches CUDA, inside a host function | [`Error::InsideHostFn`]; drops destroy on another thread |
//! | a host function that panics | caught, printed, queued for [`take_host_fn_panics`]; the stream goes on |
//! | [`StreamPool::acquire`] with every stream leased | [`Error::PoolExhausted`] (it never waits or shares) |
//! | a kernel that faults (illegal address) | [`Error::Cuda`] with [`CudaCode::is_sticky`]; every later call reports the same code; completion futures resolve with it |
//! | a handle destroyed by its owner while borrowed | undefined behaviour (CUDA may crash): [`BorrowedStream::borrow_raw`] is `unsafe` for this reason |
//! | no driver, an old driver, no device | [`Error::Cuda`] from `Device::count`/`new`/`current`; [`Error::gpu_unavailable`] says which |
//!
//! # Features
//! * `per-thread-default-stream`: handle 0 means the per-thread default stream.
//! * `dynamic-linking`: link the shared `libcudart` instead of the static one.
//! * `cudarc`: `BorrowedStream::from_cudarc` borrows cudarc's `CudaStream`;
//!   `StreamRef::to_cudarc` lends ours (both `unsafe`, primary contexts only). Needs Rust 1.88
//!   (cudarc 0.19's dependency libloading 0.9 does), where the crate needs 1.85.
//! * `testing`: `cuda_stream::testing`, the GPU gate for tests of your own kernels.

#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use cuda_stream_sys as sys;

// The layers (rustfmt lists the modules alphabetically; bottom to top they are ffi, call,
// device, event, stream, host_fn, graph, completion, cudarc, memory, kernel, profiling): each
// imports only from the ones before it (see docs/architecture.md for the map, the invariants
// each establishes and where).
mod call;
pub mod completion;
#[cfg(feature = "cudarc")]
mod cudarc;
mod device;
mod event;
mod ffi;
mod graph;
pub mod host_fn;
pub mod kernel;
pub mod memory;
pub mod profiling;
#[cfg(feature = "python")]
#[cfg_attr(docsrs, doc(cfg(feature = "python")))]
pub mod python;
mod stream;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
// Without the feature, the GPU gates say what they need (rustc's own note names the feature
// for the `testing` module, but not for an exported macro).
#[cfg(not(feature = "testing"))]
#[doc(hidden)]
#[macro_export]
macro_rules! gpu_or_skip {
    ($($any:tt)*) => {
        ::core::compile_error!(
            "`gpu_or_skip!` needs cuda-stream's `testing` feature: `cuda-stream = { version = \"0.1\", features = [\"testing\"] }` in [dev-dependencies]"
        )
    };
}
#[cfg(not(feature = "testing"))]
#[doc(hidden)]
#[macro_export]
macro_rules! gpus_or_skip {
    ($($any:tt)*) => {
        ::core::compile_error!(
            "`gpus_or_skip!` needs cuda-stream's `testing` feature: `cuda-stream = { version = \"0.1\", features = [\"testing\"] }` in [dev-dependencies]"
        )
    };
}

pub use call::capture_mode::CaptureMode;
pub use call::live::{live_events, live_streams};
pub use call::race::{self, Access, RaceMode, RaceReport, race_scope, set_race_mode};
pub use call::sync_debug::{self, SyncDebugMode, set_sync_debug_mode, sync_debug_scope};
pub use completion::Completion;
pub use device::{Device, DeviceFlags, DeviceGuard, DeviceProperties, GraphMemoryStats, MemoryInfo, Schedule};
pub use event::{Event, EventFlags, KnownEventFlags, SYNCHRONIZE_HOT_WINDOW};
pub use ffi::error::{CudaCode, Error, GraphExecUpdateResult, GraphInstantiateResult, Result, check};
pub use ffi::installation::{GpuUnavailable, driver_version, runtime_version};
pub use ffi::priority::{Priority, PriorityRange};
pub use graph::capture::{self, Capture};
pub use graph::conditional::{self, BuilderCapture, ConditionHandle, GraphBuilder, GraphCondition, GraphNode};
pub use graph::{Graph, GraphExec, InstantiateFlags, InstantiateOptions};
pub use host_fn::{HostFnPanic, live_host_fns, take_host_fn_panics};
pub use kernel::{
    Dim3, Kernel, KernelArg, KernelArgs, KernelAttributes, LaunchArg, LaunchArgs, LaunchConfig, MemSyncDomain,
};
pub use memory::{
    ArgUse, CaptureBuffer, CaptureMemory, CaptureUses, ChunksMut, DeviceBuffer, DeviceCopy, DeviceSlice,
    DeviceSliceMut, GraphBuffer, GraphOutput, MemPool, MemPoolStats, PageLockedMemory, PinnedBuffer, PinnedGuard,
    PinnedPool, PinnedPoolStats, PinnedSliceMut, PoolAccess, RegisteredSlice, ReusePolicy, SharedPinned, register_host,
};
pub use memory::{BarrierScope, Condition, DeviceWords, MappedWords, MemOp, MemOpSupport, WaitValue, Word, live_words};
pub use stream::attributes::{self, AccessPolicyWindow, AccessProperty, SyncPolicy};
pub use stream::capture_status::{CaptureInfo, CaptureStatus};
pub use stream::current::CurrentStream;
pub use stream::partition::SmPartition;
pub use stream::pool::{StreamLease, StreamPool};
pub use stream::record::RecordFlags;
pub use stream::{AsStream, BorrowedStream, Builtin, BuiltinStream, Ownership, Stream, StreamOptions, StreamRef};

/// Whether handle 0 (the null stream) means the per-thread default stream in this build
/// (`cuda-stream-sys`'s `per-thread-default-stream` feature) rather than the legacy stream.
pub const NULL_STREAM_IS_PER_THREAD: bool = sys::PER_THREAD_DEFAULT_STREAM;

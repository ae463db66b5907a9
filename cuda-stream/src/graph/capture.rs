//! Stream capture: record a stream's work into a [`Graph`] once, then replay it
//! ([stream capture](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
//!
//! The capture mode is a type ([`Global`], [`ThreadLocal`], [`Relaxed`]) because it decides who
//! may end the capture: CUDA ends a Global or ThreadLocal capture only on the thread that began
//! it (from another it fails with `cudaErrorStreamCaptureWrongThread` and the graph is lost), so
//! their [`Capture`] is `!Send`; a Relaxed capture may move to another thread.
//!
//! Nothing this crate does to identify, compare or make current a stream touches CUDA, so
//! wrapping a stream that someone else is capturing (`torch.cuda.graph`) leaves that capture
//! intact. A call that would otherwise break another thread's Global capture (a `cudaMalloc`,
//! say) can be made inside [`with_thread_mode`]`(`[`Relaxed`]`, ..)`, as PyTorch's and CCCL's
//! allocators do.
//!
//! # Calls refused during a capture
//! CUDA invalidates a capture when certain calls are made while it is in progress
//! ([prohibited and unhandled operations](https://docs.nvidia.com/cuda/cuda-programming-guide/04-special-topics/cuda-graphs.html#prohibited-and-unhandled-operations);
//! the "potentially unsafe API calls" of
//! [`cudaThreadExchangeStreamCaptureMode`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
//! While a capture begun through this crate is in progress, the calls of this crate that would
//! do so are refused with [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) before CUDA
//! sees them, and the capture goes on (it ends, and its graph replays):
//!
//! | while | refused |
//! |---|---|
//! | a capture of a device is in progress (any mode, any thread, of a blocking stream or not) | every operation on that device's legacy stream: [`BuiltinStream::legacy`], and [`BuiltinStream::null`] where handle 0 is the legacy stream; [`Device::synchronize`] of that device |
//! | this thread has a [`Global`] or [`ThreadLocal`] capture in progress | [`StreamRef::query`], [`StreamRef::synchronize`], [`Event::query`](crate::Event::query), [`Event::synchronize`](crate::Event::synchronize), [`Event::elapsed`](crate::Event::elapsed) and [`Device::synchronize`], on this thread; so are the calls that wait for a copy or allocate new memory (the table below marks them **refused by mode**) |
//! | any thread has a [`Global`] capture in progress | the same calls, on every thread |
//! | a stream is being captured | its own [`query`](StreamRef::query) and [`synchronize`](StreamRef::synchronize), on every thread; and for any capture the crate can see (its own, a foreign one once a foreign handle was wrapped, or one of the per-thread stream): [`launch_host_fn`](StreamRef::launch_host_fn) and [`launch_host_callback`](StreamRef::launch_host_callback), [`completion`](StreamRef::completion), attribute reads and writes, and [`id`](StreamRef::id) and [`is_non_blocking`](StreamRef::is_non_blocking) of a stream not created here; and, on a stream that may be captured, the allocations, copies from and to host memory and `use_on` of [`DeviceBuffer`](crate::DeviceBuffer) (its copies between buffers, fills and typed launches are captured: see [below](#what-a-captures-graph-holds-of-device-buffers)), [`DeviceWords::zeroed`](crate::DeviceWords::zeroed) and [`to_vec`](crate::DeviceWords::to_vec), and a [`Kernel::launch`](crate::Kernel::launch) with a completion event (the table below) |
//! | an event's last record went into a capture (any capture, this crate's or a foreign one seen through a borrowed stream) | its [`query`](crate::Event::query), [`synchronize`](crate::Event::synchronize), [`elapsed`](crate::Event::elapsed) and [`completion`](crate::Event::completion), on every thread, until it is recorded outside a capture again |
//! | this thread has a [`Global`] or [`ThreadLocal`] capture in progress (this crate's or another library's) | nothing of: [`PinnedBuffer::zeroed`](crate::PinnedBuffer::zeroed) and `from_slice` and its drop (`cudaHostAlloc`, `cudaFreeHost`), [`MemPool::new`](crate::MemPool::new), [`MemPool::trim_to`](crate::MemPool::trim_to) and its drop, [`Graph::new`], [`Graph::instantiate`], [`Graph::instantiate_with`] without an upload, the nodes and conditions a [`GraphBuilder`](crate::GraphBuilder) adds, the drops of [`Graph`] and [`GraphExec`](crate::GraphExec): CUDA counts them as "potentially unsafe", so this crate makes them in the [`Relaxed`] mode, in which no capture forbids them and none is invalidated (they enqueue nothing) |
//! | a stream is being captured | [`GraphExec::launch`](crate::GraphExec::launch) and [`GraphExec::upload`](crate::GraphExec::upload) onto it, and [`Graph::instantiate_with`] uploading to it (CUDA would invalidate the capture); checked under the capture-transition lock |
//!
//! The legacy stream is refused even while only non-blocking streams are captured, where CUDA
//! would accept it: a blocking stream may join the capture at any time (through
//! [`StreamRef::wait_stream`]), and from then on every use of the legacy stream invalidates it.
//!
//! A capture counts from just before CUDA begins it (under the capture-transition lock) until
//! its guard ends or drops (uncounted once, even when CUDA's end fails). When none is in progress, the checks cost each call one
//! relaxed atomic load. What they cannot see:
//! * Captures begun outside this crate (raw FFI, `torch.cuda.graph`, another library) are not
//!   counted: the calls they forbid reach CUDA, which refuses them and invalidates that capture.
//!   (A stream's own query and synchronize are checked against CUDA's capture status, but only
//!   while some capture of this crate is in progress.) What such a capture cannot do is make
//!   this crate query a captured event: once a foreign stream or event is wrapped
//!   ([`BorrowedStream::borrow_raw`](crate::BorrowedStream::borrow_raw), whose `# Safety` says
//!   which transitions must not overlap its calls), and on the per-thread stream always,
//!   records read the stream's capture status, so an event recorded into a foreign capture is
//!   known as captured. A capture begun through raw FFI on a stream of this crate
//!   ([`as_raw`](StreamRef::as_raw)), with no foreign handle ever wrapped, is not seen: records
//!   into it are not marked.
//! * A foreign **Global** capture (cudarc's safe `begin_capture` on a stream of its own,
//!   `torch.cuda.graph`) forbids "potentially unsafe" calls on every thread whose capture
//!   interaction mode is CUDA's default, Global: CUDA invalidates the capture to refuse one,
//!   and a query racing its end crashed libcuda (CUDA 13.0). Before its first query or
//!   synchronize on a thread, this crate moves a thread still in the default mode to
//!   ThreadLocal, which differs only in ignoring other threads' captures (the thread's own
//!   still forbid; a mode set through [`with_thread_mode`] or raw code is kept). Stream and
//!   event queries and synchronizes and `elapsed` then answer, and the foreign capture stays
//!   intact. A thread that sets Global mode again through raw code, or inside
//!   `with_thread_mode(Global, ..)`, gets CUDA's behaviour. Not covered:
//!   [`Device::synchronize`] waits for every stream of the device, so CUDA refuses it during
//!   another thread's Global capture on that device in every thread mode, and invalidates
//!   that capture (probed on CUDA 13.0); synchronize streams or events instead.
//! * An event's [`query`](crate::Event::query) and [`elapsed`](crate::Event::elapsed) are
//!   counted while they are in CUDA, and a record that may go into a capture marks the event
//!   captured and then waits for those counted calls: a call that checked the event just
//!   before the mark does not reach CUDA after the record. A record that found no capture in
//!   progress goes to CUDA with no lock, but announced on its thread: a capture of this crate
//!   does not begin until every such record has returned (`membarrier` makes this cost the
//!   record one thread-local store), so no real record of an event overlaps a captured record
//!   of it or the end of its capture, which crashed libcuda (CUDA 13.0). Records that may go
//!   into a capture take turns per event.
//! * Two threads recording one event at once, one record perhaps into a capture: which one
//!   CUDA takes last cannot be read back, so the event stays marked captured until a later
//!   record settles it (a refusal, never a query of a captured event).
//! * [`Event::synchronize`](crate::Event::synchronize) racing a record of its event into a
//!   capture: while no stream may be capturing it waits inside CUDA, counted, and a record of
//!   the event into a capture that sees the count is refused with
//!   [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) rather than made (it cannot wait: the
//!   work waited for may depend on the recording thread); one that marked the event first
//!   keeps the wait out of CUDA. While streams may be capturing, it polls with counted
//!   queries, so the record waits for the poll in CUDA and the next poll is refused.
//! * A call that passed its checks while no capture of this crate was in progress, then
//!   stalled (preempted) across another thread's whole Global capture: its thread's
//!   ThreadLocal mode keeps CUDA from refusing it for that capture's sake. If it names the
//!   stream being captured, or an event recorded into that capture, it is the window of the
//!   next bullet.
//! * A capture that another thread begins between a call's check and the call itself: the check
//!   passed, so CUDA refuses the call and invalidates that capture. Closing that window would
//!   take a lock around every call; order such calls and capture begins yourself.
//! * A thread that set its own capture interaction mode to Relaxed
//!   (`cudaThreadExchangeStreamCaptureMode`) is still refused what the default mode forbids.
//! * A guard leaked with `mem::forget` leaves its capture open in CUDA, and counted here: its
//!   refusals last for the rest of the process. So does one dropped where its stream cannot be
//!   used (inside a host function): CUDA's capture stays open.
//! * [`StreamRef::wait_event`] on a capturing stream, with an event recorded outside the
//!   capture: whether the event was recorded inside cannot be known without a CUDA call on it,
//!   so CUDA answers `cudaErrorStreamCaptureIsolation` and invalidates the capture.
//!   [`StreamRef::wait_stream`] handles that case (an external wait the graph keeps).
//!
//! # Every call's rule
//! Every public call of this crate that reaches CUDA, with what it does while a capture begun
//! through this crate is in progress. "On the capture": the call names a stream of the capture
//! (the capturing stream, or one that joined it) or an event whose last record went into it.
//! "Elsewhere": it names only streams and events outside the capture, or none. The rules:
//! * **captured**: made, and captured into the graph (each replay does it again).
//! * **allowed**: made now, not captured: CUDA permits it during the capture.
//! * **Relaxed**: one of CUDA's "potentially unsafe" calls that enqueues nothing, made in the
//!   [`Relaxed`] capture interaction mode: no capture forbids it or is invalidated by it.
//! * **refused**: [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) before CUDA sees it, in
//!   every mode, from every thread.
//! * **refused by mode**: [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) before CUDA on
//!   the thread of a [`Global`] or [`ThreadLocal`] capture, and on every thread while a
//!   [`Global`] capture is in progress; **allowed** otherwise (another thread's ThreadLocal
//!   capture, a [`Relaxed`] capture).
//! * **allowed or refused by mode**: **allowed** when no new memory is needed (a block from
//!   the crate's free list), else **refused by mode** (a `cudaMalloc` or `cudaHostAlloc`).
//! * **not refused**: reaches CUDA, which refuses it (see the limits above and the row).
//! * **—**: does not apply (the call takes no stream or event of a capture).
//!
//! Every call on the legacy stream is also refused while its device captures (the first row),
//! and a call on another thread's per-thread stream is refused with
//! [`Error::WrongThread`](crate::Error::WrongThread) whatever captures. `tests/call/capture_rules.rs`
//! makes each call of this table during a capture of each mode, from the capturing thread and
//! from another (the [`Capture`] guard's own calls from its thread), checks the rule, and checks
//! that the capture ends and its graph replays; it also checks that this table and its own
//! list of calls name the same calls with the same rules.
//!
//! | call | on the capture | elsewhere |
//! |---|---|---|
//! | `BuiltinStream::legacy`, every call | **—** | **refused** (a capture of its device in progress; also `BuiltinStream::null` where handle 0 is the legacy stream) |
//! | `Stream::new` | **—** | **allowed** |
//! | `Stream::destroy` | **—** | **allowed** (its check for pending work is skipped where a capture refuses the query) |
//! | `drop(Stream)` | **—** | **allowed** |
//! | `Stream::from_raw_owned` | **—** | **allowed** |
//! | `BorrowedStream::borrow_raw` | **allowed** | **allowed** |
//! | `BorrowedStream::borrow_raw_on` | **allowed** | **allowed** |
//! | `BorrowedStream::from_cudarc` | **allowed** | **allowed** |
//! | `StreamRef::to_cudarc` | **allowed** | **allowed** |
//! | `StreamRef::id` | **allowed** (a stream created here: its id was read at its creation) | **allowed** |
//! | `StreamRef::id`, of a borrowed stream | **refused** (`cudaStreamGetId` would invalidate the capture) | **allowed** |
//! | `StreamRef::is_non_blocking` | **allowed** (a stream created here: no CUDA call) | **allowed** |
//! | `StreamRef::is_non_blocking`, of a borrowed stream | **refused** (`cuStreamGetFlags` would invalidate the capture) | **allowed** |
//! | `StreamRef::priority` | **allowed** | **allowed** |
//! | `StreamRef::capture_status` | **allowed** | **allowed** |
//! | `StreamRef::capture_info` | **allowed** | **allowed** |
//! | `StreamRef::query` | **refused** | **refused by mode** |
//! | `StreamRef::synchronize` | **refused** | **refused by mode** |
//! | `StreamRef::fork` | **captured** (the new stream joins the capture: join it back before the end) | **allowed** |
//! | `StreamRef::record` | **captured** | **allowed** |
//! | `Event::record` | **captured** | **allowed** |
//! | `StreamRef::record_event` | **captured** | **allowed** |
//! | `StreamRef::record_with` | **captured** (external: a node the graph keeps) | **allowed** |
//! | `StreamRef::record_event_with` | **captured** | **allowed** |
//! | `StreamRef::wait_event` | **captured** (of an event recorded into the capture: the stream joins it) | **allowed** |
//! | `StreamRef::wait_event`, on a capturing stream, of an event recorded outside | **not refused** (`cudaErrorStreamCaptureIsolation`; use `wait_stream`) | **—** |
//! | `StreamRef::wait_stream` | **captured** (a join, or a wait on work outside: a node the graph keeps) | **allowed** |
//! | `StreamRef::wait_stream`, between streams of two captures | **refused** | **—** |
//! | `StreamRef::launch` | **captured** | **allowed** |
//! | `StreamRef::launch_host_fn` | **refused** (use `Capture::launch_host_fn`) | **allowed** |
//! | `StreamRef::launch_host_callback` | **refused** | **allowed** |
//! | `StreamRef::completion` | **refused** (the future resolves to the error) | **allowed** |
//! | `StreamRef::set_sync_policy` | **refused** | **allowed** |
//! | `StreamRef::sync_policy` | **refused** | **allowed** |
//! | `StreamRef::set_access_policy_window` | **refused** | **allowed** |
//! | `StreamRef::access_policy_window` | **refused** | **allowed** |
//! | `StreamRef::declare_accesses` | **allowed** (noted for the graph's replays) | **allowed** |
//! | `StreamRef::as_current_with_device` | **allowed** | **allowed** |
//! | `StreamRef::wait_value_raw` | **captured** | **allowed** |
//! | `StreamRef::write_value_raw` | **captured** | **allowed** |
//! | `StreamPool::acquire` | **—** | **allowed** |
//! | `drop(StreamLease)` | **—** | **allowed** (a lease whose stream is capturing is quarantined, never reused) |
//! | `Device::split_sms` | **—** | **allowed** |
//! | `SmPartition::stream` | **—** | **allowed** |
//! | `StreamRef::begin_capture` | **refused** (the stream is already part of a capture) | **allowed** (a capture of its own) |
//! | `StreamRef::begin_capture_into` | **refused** (as `begin_capture`) | **allowed** (a capture of its own) |
//! | `GraphBuilder::capture` | **refused** (as `begin_capture`) | **allowed** (a capture of its own) |
//! | `Capture::launch_host_fn` | **captured** (a host node the graph owns) | **refused** (a stream outside the capture) |
//! | `Capture::scratch` | **captured** (an allocation and a free of the graph) | **refused** (a stream outside the capture) |
//! | `Capture::alloc` | **captured** (an allocation of the graph) | **refused** (a stream outside the capture) |
//! | `Capture::free` | **captured** (a free of the graph, after the buffer's uses) | **refused** (a stream outside the capture) |
//! | `Capture::copy` | **captured** (a memcpy node; the graph holds the shared buffers) | **refused** (a stream outside the capture) |
//! | `Capture::fill_bytes` | **captured** (a memset node; the graph holds a shared buffer) | **refused** (a stream outside the capture) |
//! | `Capture::copy_from_pinned` | **captured** (a memcpy node; the graph holds the shared memory) | **refused** (a stream outside the capture) |
//! | `Capture::copy_to_pinned` | **captured** (a memcpy node; the graph holds the shared memory) | **refused** (a stream outside the capture) |
//! | `Capture::use_on` | **captured** (the graph holds a shared buffer) | **refused** (a stream outside the capture) |
//! | `Event::new` | **—** | **allowed** |
//! | `drop(Event)` | **—** | **allowed** |
//! | `Event::ipc_handle` | **—** | **allowed** |
//! | `Event::from_ipc_handle` | **—** | **allowed** |
//! | `Event::query` | **refused** | **refused by mode** |
//! | `Event::synchronize` | **refused** | **refused by mode** |
//! | `Event::elapsed` | **refused** | **refused by mode** |
//! | `Event::completion` | **refused** (the future resolves to the error) | **allowed** (the crate's reactor queries in Relaxed mode) |
//! | `Device::synchronize` | **—** | **refused** (a capture of its device in progress; else **refused by mode**) |
//! | `Device::count` | **—** | **allowed** |
//! | `Device::new` | **—** | **allowed** |
//! | `Device::current` | **—** | **allowed** |
//! | `Device::name` | **—** | **allowed** |
//! | `Device::attribute` | **—** | **allowed** |
//! | `Device::priority_range` | **—** | **allowed** |
//! | `Device::check_priority` | **—** | **allowed** |
//! | `Device::has_primary_context` | **—** | **allowed** |
//! | `Device::make_current` | **—** | **allowed** |
//! | `GraphExec::set_copy` | **—** | **Relaxed** |
//! | `GraphExec::set_fill_bytes` | **—** | **Relaxed** |
//! | `GraphExec::set_copy_from_pinned` | **—** | **Relaxed** |
//! | `GraphExec::set_copy_to_pinned` | **—** | **Relaxed** |
//! | `Device::graph_memory` | **—** | **Relaxed** |
//! | `Device::reset_graph_memory_peaks` | **—** | **Relaxed** |
//! | `Device::trim_graph_memory` | **—** | **Relaxed** |
//! | `driver_version` | **—** | **allowed** |
//! | `runtime_version` | **—** | **allowed** |
//! | `with_thread_mode` | **—** | **allowed** |
//! | `Graph::new` | **—** | **Relaxed** |
//! | `Graph::instantiate` | **—** | **Relaxed** |
//! | `Graph::instantiate_with` | **refused** (uploading to a capturing stream) | **Relaxed** (an upload, if any, is work on its stream) |
//! | `drop(Graph)` | **—** | **Relaxed** |
//! | `GraphExec::launch` | **refused** | **allowed** |
//! | `GraphExec::upload` | **refused** | **allowed** |
//! | `GraphExec::update` | **—** | **allowed** |
//! | `GraphExec::flags` | **—** | **allowed** |
//! | `drop(GraphExec)` | **—** | **Relaxed** |
//! | `GraphBuilder::leaves` | **—** | **allowed** |
//! | `GraphBuilder::add_empty_node` | **—** | **Relaxed** |
//! | `GraphBuilder::add_dependency` | **—** | **Relaxed** |
//! | `GraphBuilder::condition` | **—** | **Relaxed** |
//! | `GraphBuilder::add_if` | **—** | **Relaxed** |
//! | `GraphBuilder::add_if_else` | **—** | **Relaxed** |
//! | `GraphBuilder::add_while` | **—** | **Relaxed** |
//! | `GraphBuilder::add_switch` | **—** | **Relaxed** |
//! | `GraphBuilder::add_kernel` | **—** | **Relaxed** |
//! | `GraphBuilder::add_fill_bytes` | **—** | **Relaxed** |
//! | `GraphBuilder::add_copy` | **—** | **Relaxed** |
//! | `GraphBuilder::add_copy_from_pinned` | **—** | **Relaxed** |
//! | `GraphBuilder::add_copy_to_pinned` | **—** | **Relaxed** |
//! | `GraphBuilder::add_host_fn` | **—** | **Relaxed** |
//! | `GraphBuilder::adopt_node` | **—** | **Relaxed** |
//! | `GraphBuilder::node_count` | **—** | **allowed** |
//! | `Graph::node_count` | **—** | **allowed** |
//! | `Graph::try_clone` | **—** | **Relaxed** |
//! | `Kernel::launch` | **captured** (the graph holds the device buffers and views given as arguments) | **allowed** |
//! | `Kernel::launch`, with a completion event | **refused** (the graph would not keep the event) | **allowed** |
//! | `Kernel::attributes` | **—** | **allowed** |
//! | `Kernel::max_cooperative_blocks` | **—** | **allowed** |
//! | `DeviceBuffer::new` | **refused** | **allowed** (`cudaMallocAsync` on a stream outside the capture) |
//! | `DeviceBuffer::new_in` | **refused** | **allowed** |
//! | `DeviceBuffer::zeroed` | **refused** | **allowed** |
//! | `DeviceBuffer::from_slice` | **refused** | **refused by mode** (it waits for its copy from pageable memory) |
//! | `DeviceBuffer::copy_from_slice` | **refused** | **refused by mode** (it waits for its copy) |
//! | `DeviceBuffer::copy_to_slice` | **refused** | **refused by mode** (it waits for its copy) |
//! | `DeviceBuffer::to_vec` | **refused** | **refused by mode** (it waits for its copy) |
//! | `GraphOutput::take` | **refused** | **allowed** |
//! | `GraphOutput::to_vec` | **refused** | **refused by mode** (it waits for the launch and for its copy) |
//! | `GraphOutput::copy_to_slice` | **refused** | **refused by mode** (it waits for the launch and for its copy) |
//! | `DeviceBuffer::copy_from_pinned` | **refused** | **allowed** |
//! | `DeviceBuffer::copy_to_pinned` | **refused** | **allowed** |
//! | `DeviceBuffer::copy_from` | **captured** (the graph holds both buffers; see [its memory](#what-a-captures-graph-holds-of-device-buffers)) | **allowed** |
//! | `DeviceBuffer::fill_bytes` | **captured** (the graph holds the buffer) | **allowed** |
//! | `DeviceBuffer::use_on` | **refused** | **allowed** |
//! | `drop(DeviceBuffer)` | **allowed** (its home stream capturing: nothing is freed, the memory leaks; its memory held by a graph: the last holder frees it) | **allowed** |
//! | `PinnedBuffer::zeroed` | **—** | **Relaxed** |
//! | `PinnedBuffer::from_slice` | **—** | **Relaxed** |
//! | `PinnedBuffer::as_slice` | **—** | **allowed** (no copy in flight; with copies in flight it waits for them: **refused by mode**) |
//! | `PinnedBuffer::as_mut_slice` | **—** | **allowed** (as `as_slice`) |
//! | `drop(PinnedBuffer)` | **—** | **Relaxed** (with copies in flight where the mode refuses the wait: leaked) |
//! | `MemPool::new` | **—** | **Relaxed** |
//! | `MemPool::device_default` | **—** | **allowed** |
//! | `MemPool::set_release_threshold` | **—** | **allowed** |
//! | `MemPool::release_threshold` | **—** | **allowed** |
//! | `MemPool::set_reuse` | **—** | **allowed** |
//! | `MemPool::reuse` | **—** | **allowed** |
//! | `MemPool::stats` | **—** | **allowed** |
//! | `MemPool::reset_peaks` | **—** | **allowed** |
//! | `MemPool::trim_to` | **—** | **Relaxed** |
//! | `drop(MemPool)` | **—** | **Relaxed** |
//! | `MemOpSupport::of` | **—** | **allowed** |
//! | `MappedWords::new` | **—** | **allowed or refused by mode** |
//! | `MappedWords::wait_value` | **captured** (the graph keeps the words) | **allowed** |
//! | `MappedWords::write_value` | **captured** | **allowed** |
//! | `MappedWords::mem_ops` | **captured** | **allowed** |
//! | `MappedWords::use_on` | **captured** | **allowed** |
//! | `DeviceWords::zeroed` | **refused** | **allowed or refused by mode** |
//! | `DeviceWords::wait_value` | **captured** (the graph keeps the words) | **allowed** |
//! | `DeviceWords::write_value` | **captured** | **allowed** |
//! | `DeviceWords::mem_ops` | **captured** | **allowed** |
//! | `DeviceWords::use_on` | **captured** | **allowed** |
//! | `DeviceWords::to_vec` | **refused** | **refused by mode** (it waits for its copy) |
//!
//! # Who is in a capture: begins, ends and joins are transitions
//! A stream becomes part of a capture in two ways: a capture begins on it, or it **joins** one
//! by waiting on captured work (CUDA's fork: [`wait_stream`](StreamRef::wait_stream) on a
//! capturing stream, [`wait_event`](StreamRef::wait_event) on an event recorded into a
//! capture). It leaves when the capture ends. Each of these is a capture transition, made
//! under the write side of one process-wide lock; every call that reads a stream's capture
//! status and then acts on what it read (a record, an external record, a completion, an
//! allocation, a copy, a free, a graph launch, a host function) holds the read side from its
//! check to its call. So no stream begins, ends or joins a capture between a check and its call,
//! whatever other threads do: a join cannot turn a real record into a node of a graph that does
//! not keep its event, a copy that returned into one a replay makes later, or an allocation into
//! a graph's.
//!
//! The cost is paid only while captures may exist: a wait takes the write side only while a
//! capture of this crate is in progress, a foreign handle was ever wrapped, the waited stream is
//! a per-thread stream, or the waited event's last record went into a capture; otherwise it is
//! the one CUDA call it was. A join of a capture that no begin of this crate counted (another
//! library's capture of its thread's per-thread stream) first switches the process to the mode
//! of [`BorrowedStream::borrow_raw`](crate::BorrowedStream::borrow_raw): from then on records
//! read the stream's capture status. Joins made by foreign code (a raw `cudaStreamWaitEvent`
//! on one of this crate's handles, PyTorch's `wait_stream` on a stream it borrowed) are not
//! transitions of this crate; the `# Safety` of the calls that lend handles says that they must
//! not overlap this crate's calls on the stream.
//!
//! Work of this crate that goes into a capture (a launch, raw or typed, a copy, a fill, a
//! record, a wait) is made under the read side and, while a capture of this crate exists and
//! the stream is capturing, under the graph-mutation lock too: a capture's graph is not
//! internally synchronized, and the capturing thread and a thread working on a stream it joined
//! to the capture add to it at once. So a raw launcher ([`StreamRef::launch`]) runs inside the
//! hold; it must launch and return (a capture transition inside it is refused with
//! [`Error::CaptureMisuse`](crate::Error::CaptureMisuse); waiting there for another thread or
//! a completion can wait forever: see `launch`).
//!
//! PyTorch's idiom `side.wait_stream(capturing)` inside a capture, then
//! `capturing.wait_stream(side)` before the end, works as in CUDA: both are transitions.
//!
//! A stream of an [`SmPartition`](crate::SmPartition) that begins or joins a capture gives the
//! capture's graph a reference of its green context (a CUDA user object): the graph's kernel
//! nodes run on that context, which then lives as long as the graph and every executable made
//! from it, whatever is dropped first.
//!
//! # What a capture's graph keeps, and how it gets there
//! A host function of [`Capture::launch_host_fn`], the event of an external record
//! ([`RecordFlags::external`](crate::RecordFlags::external)) and the event of a `wait_stream`
//! on work outside the capture are owned by the capture's graph (a CUDA user object) and are
//! reachable only from it: each goes into the graph that `cudaStreamGetCaptureInfo` names as a
//! node added by hand (`cudaGraphAddHostNode`, `cudaGraphAddEventRecordNode`,
//! `cudaGraphAddEventWaitNode`), after the dependencies CUDA reports for the stream, and the node
//! then becomes the stream's dependency (`cudaStreamUpdateCaptureDependencies`), so the
//! stream's next captured work comes after it. Nothing a graph owns is enqueued
//! stream-ordered: a capture that code outside this crate ends in the middle (cudarc's
//! `end_capture`, `torch.cuda.graph`) leaves at worst a node of the graph that nothing depends
//! on, never a host function that runs for real with an object the graph frees. Every step
//! holds one process-wide lock (CUDA's dependency array is one buffer per stream, rewritten by
//! the next query of it, and a graph must not be changed from two threads at once), and the
//! write side of the capture-transition lock: no capture of this crate begins, ends or is joined
//! meanwhile, and no call of this crate captures work into the graph meanwhile (records, waits
//! and launches hold the read side while a capture may exist; a captured launch beside a node
//! added by hand crashed libcuda). Raw work of yours that bypasses the crate (FFI on
//! [`as_raw`](StreamRef::as_raw)) onto a stream of the capture, made at the same time from
//! another thread, is the remaining race (`capture_node` has the details and the limits). What
//! stays a
//! contract: a foreign end racing the node's insertion changes the graph from two threads at
//! once; the entry points that let foreign code begin or end captures on this crate's streams
//! are `unsafe` and say so.
//!
//! A per-thread default stream cannot be captured in [`Relaxed`] mode: a Relaxed capture may
//! end on another thread, where that handle names another stream.
//!
//! # What a capture's graph holds of device buffers
//! A buffer's copy from another buffer ([`DeviceBuffer::copy_from`](crate::DeviceBuffer::copy_from),
//! and a view's), its [`fill_bytes`](crate::DeviceBuffer::fill_bytes), and a typed
//! [`Kernel::launch`](crate::Kernel::launch) with buffers or views as arguments, made on any
//! stream of a capture begun with [`StreamRef::begin_capture`] or
//! [`StreamRef::begin_capture_into`] (the captured stream, or one that joined it, on any
//! thread), are captured: they become nodes of its graph, which holds the buffers' memory as
//! [`Capture::copy`] and the graphs built node by node do (see
//! [the memory docs](crate::memory#graphs)). Each launch of an executable made from it is
//! ordered with the buffers' other uses; the owners may go first, and the last holder frees
//! the memory. The check that the stream is part of the capture, the hold and the enqueue are
//! made under one capture-transition hold, which the capture's end waits for.
//!
//! A buffer whose home is the captured stream itself, with uses there not yet marked, is marked
//! once the capture has ended, before [`Capture::end`] hands out the graph (no event can be
//! recorded on a stream while it is captured): `end` fails if that mark cannot be made (the
//! stream began another capture meanwhile), and the graph is discarded; if the buffer's owner
//! was dropped during the capture (its home being captured, the memory leaks), the graph is
//! handed out and its launches are refused. One whose home is another stream being captured,
//! with uses not yet marked, is refused. A graph holds at most 12 device buffers
//! ([`Error::Size`](crate::Error::Size) for the 13th, before anything is captured), all of
//! the captured stream's device: a copy between devices, or a kernel given a peer's buffer, is
//! refused in a capture. A capture whose end could not be made (inside a host function) stays open in
//! CUDA and keeps what its streams' calls hold from then on, for good.
//!
//! Still refused on a captured stream, with [`Error::CaptureMisuse`](crate::Error::CaptureMisuse):
//! allocations and copies from and to host memory (a replay would outlive the slice, and
//! page-locked memory is held only through [`Capture::copy_from_pinned`] and
//! [`Capture::copy_to_pinned`]), [`DeviceBuffer::use_on`](crate::DeviceBuffer::use_on) (its
//! closure runs outside the crate's hold: the capture could end before the work is enqueued;
//! [`Capture::use_on`] holds the buffer), memory another library lent, a capture that holds
//! nothing of its own (another library's, or one into a
//! [`GraphBuilder`](crate::GraphBuilder)'s level), and a buffer whose address was handed out
//! ([`Error::GraphMisuse`](crate::Error::GraphMisuse)).
//!
//! [`BuiltinStream::legacy`]: crate::BuiltinStream::legacy
//! [`BuiltinStream::null`]: crate::BuiltinStream::null
//! [`Device::synchronize`]: crate::Device::synchronize

pub use crate::call::capture_mode::{CaptureMode, Global, Relaxed, ThreadLocal, with_thread_mode};
pub use crate::stream::capture_status::{CaptureInfo, CaptureStatus};

use super::held::{self, CaptureHolds};
use super::{Graph, leaves_of};
use crate::call::live_captures;
use crate::call::race;
use crate::call::race::model::Use;
use crate::call::transitions::{Transition, capture_transition};
use crate::call::uncaptured_calls;
use crate::device::same_device;
use crate::ffi::error::{Error, Result, check};
use crate::ffi::inside_host_fn::refuse_inside_host_fn;
use crate::ffi::inside_host_fn::run_guarded;
use crate::host_fn::Counted;
use crate::stream::AsStream;
use crate::stream::StreamRef;
use crate::stream::capture_node::{Added, CaptureNode, add_to_capture, dependency_pointer};
use crate::stream::capture_status::{capture_state, refuse_legacy};
use crate::stream::enqueue::{InCapture, Via, Work};
use crate::sys;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;

impl StreamRef {
    /// Starts capturing this stream's work into a graph
    /// ([`cudaStreamBeginCapture`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    /// Work enqueued until [`Capture::end`] is recorded, not run; streams that wait on this
    /// one join the capture. Dropping the guard without `end` ends the capture and discards
    /// the graph. Until then the calls that would invalidate the capture are refused (see the
    /// [module docs](crate::capture#calls-refused-during-a-capture)).
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) on the legacy stream (CUDA cannot capture it), on a
    /// stream already part of a capture (CUDA would answer `cudaErrorIllegalState`).
    pub fn begin_capture<M: CaptureMode>(&self, _mode: M) -> Result<Capture<'_, M>> {
        self.start_capture(None)
    }

    /// Starts capturing this stream's work into `graph`, after everything already in it
    /// ([`cudaStreamBeginCaptureToGraph`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html),
    /// CUDA 12.3 or newer): the first captured work depends on the graph's leaf nodes (those no
    /// node depends on), so a replay runs the graph's earlier nodes first. [`Capture::end`]
    /// returns this same graph, grown.
    ///
    /// The capture owns `graph` until it ends, so nothing else can use the graph while CUDA
    /// writes to it, and a capture leaked with `mem::forget` leaks the graph rather than freeing
    /// it under CUDA. Dropping the guard without `end` ends the capture and destroys the graph.
    /// If ending fails (an invalidated or unjoined capture), the graph is leaked, not destroyed:
    /// NVIDIA does not document what a failed capture leaves of a graph it was capturing into.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) for a graph of another device;
    /// [`Error::GraphMisuse`](crate::Error::GraphMisuse) for a graph that a capture leaked
    /// with `mem::forget` still writes into (see [`GraphBuilder::capture`](crate::GraphBuilder::capture));
    /// the errors of [`StreamRef::begin_capture`]. On every error `graph` is dropped.
    pub fn begin_capture_into<M: CaptureMode>(&self, graph: Graph, _mode: M) -> Result<Capture<'_, M>> {
        same_device("a stream captures into a graph of its own device", self.device(), graph.device())?;
        graph.tree().refuse_capturing()?;
        self.start_capture(Some(Target::Owned(graph)))
    }

    /// Begins a capture into CUDA's own new graph, or into `into` after its leaf nodes.
    pub(super) fn start_capture<M: CaptureMode>(&self, into: Option<Target>) -> Result<Capture<'_, M>> {
        refuse_legacy(self, "the legacy default stream cannot be captured")?;
        if M::RAW == Relaxed::RAW && self.is_thread_bound() {
            // A Relaxed capture may end on another thread, where this handle is another stream.
            return Err(Error::CaptureMisuse(
                "a per-thread default stream cannot be captured in Relaxed mode (it could end on another thread)",
            ));
        }
        let _current = self.enter_runtime()?;
        let leaves = match &into {
            None => Vec::new(),
            Some(Target::Owned(graph)) => graph.leaves()?,
            // SAFETY: a live graph (the caller of `Target::Borrowed`'s contract) that nothing
            // else uses meanwhile.
            Some(Target::Borrowed(graph)) => unsafe { leaves_of(*graph as sys::cudaGraph_t)? },
        };
        let transition = capture_transition()?;
        // A stream already in a capture (begun here, or joined): CUDA answers
        // cudaErrorIllegalState; refused before it sees the call.
        if self.may_be_capturing()? {
            return Err(Error::CaptureMisuse("the stream is already part of a capture"));
        }
        // Counted before CUDA begins it: a call that CUDA orders after the begin (a record that
        // goes into the capture) then sees the count (`live_captures::may_capture`).
        let mut counted = live_captures::begun(self.device().ordinal(), M::RAW);
        // Fast calls that read no capture in progress have returned before CUDA begins it.
        uncaptured_calls::wait_for_uncaptured_calls();
        let (code, api) = match &into {
            // SAFETY: a live stream; the mode is a valid constant.
            None => (unsafe { sys::cudaStreamBeginCapture(self.as_raw(), M::RAW) }, "cudaStreamBeginCapture"),
            Some(target) => {
                let dependencies = dependency_pointer(&leaves);
                // SAFETY: a live stream; a live graph that nothing else uses (one we own, or
                // the caller of `Target::Borrowed`'s); `leaves` are `leaves.len()` of its nodes
                // (or null for none); no edge data means default edges; the mode is a valid
                // constant.
                let code = unsafe {
                    sys::cudaStreamBeginCaptureToGraph(
                        self.as_raw(),
                        target.as_raw(),
                        dependencies,
                        std::ptr::null(),
                        leaves.len(),
                        M::RAW,
                    )
                };
                (code, "cudaStreamBeginCaptureToGraph")
            }
        };
        if let Err(error) = check(code, api) {
            live_captures::ended(counted);
            return Err(error);
        }
        // Still under the transition: the capture is known by its id before any stream can
        // join it (a join tells this crate's captures from foreign ones by it), and no other
        // thread captures into the new graph while a partition's stream gives it its green
        // context (kept as long as the graph).
        let state = capture_state(self).and_then(|state| self.keep_partition_in(state.graph).map(|()| state));
        // Capturing into a graph that holds memory already: the capture's memory grows from it.
        let holds = Arc::new(CaptureHolds::new(
            self,
            match &into {
                Some(Target::Owned(graph)) => graph.tree().memory.borrow().clone(),
                _ => None,
            },
        ));
        if let Ok(state) = &state {
            counted = live_captures::identified(counted, state.info.id);
            // Known by its id before any call on one of its streams can ask (a buffer's own
            // calls hold what they use for its graph); a capture into a builder's level holds
            // nothing of its own: those calls stay refused there.
            if !matches!(into, Some(Target::Borrowed(_))) {
                held::register(state.info.id, &holds);
            }
        }
        drop(transition);
        let mut capture = Capture { stream: self, id: 0, counted, ended: false, into, holds, _mode: PhantomData };
        // If this fails, `capture` drops and ends the capture.
        capture.id = state?.info.id;
        Ok(capture)
    }
}

/// An active capture of one stream. [`Capture::end`] returns the graph; dropping the guard
/// ends the capture and discards it. `!Send` unless the mode is [`Relaxed`].
#[derive(Debug)]
#[must_use = "dropping the capture discards the graph"]
pub struct Capture<'a, M: CaptureMode> {
    stream: &'a StreamRef,
    id: u64,
    /// This capture's entry in the captures in progress, uncounted when it ends.
    counted: live_captures::Entry,
    ended: bool,
    /// The graph of [`StreamRef::begin_capture_into`], or a graph of a
    /// [`GraphBuilder`](crate::GraphBuilder); `None` when CUDA captures into a graph of its
    /// own.
    into: Option<Target>,
    /// The memory the capture's memcpy, memset and `use_on` work and the buffers' own calls
    /// on its streams use, held for the graph (see [`held`](super::held)), and the marks to
    /// make once it has ended: handed to the graph by `end`, dropped with a graph the drop
    /// discards, and leaked when the capture fails (another library may have ended it, and
    /// kept a graph that uses it).
    holds: Arc<CaptureHolds>,
    _mode: PhantomData<(M, M::Thread)>,
}

/// The graph a capture writes into.
#[derive(Debug)]
pub(super) enum Target {
    /// A graph the capture owns, held only to be handed back by [`Capture::end`].
    Owned(Graph),
    /// The handle (as an address: it stays `Send`) of a graph that something else owns and
    /// keeps alive, unused by anything else, until the capture has ended in CUDA (a level of a
    /// [`GraphBuilder`](crate::GraphBuilder), which the capture's wrapper borrows mutably).
    /// Never destroyed here, on any path.
    Borrowed(usize),
}

impl Target {
    fn as_raw(&self) -> sys::cudaGraph_t {
        match self {
            Target::Owned(graph) => graph.as_raw(),
            Target::Borrowed(graph) => *graph as sys::cudaGraph_t,
        }
    }
}

// SAFETY: no `&self` method of `Capture` makes a CUDA call on the graph (only `end`, by value,
// and `drop` do; the derived `Debug` reads the handle's value and its device, no CUDA call), so
// sharing a `&Capture` between threads never overlaps graph calls, which is all `Graph`'s
// `!Sync` guards against.
unsafe impl Sync for Target {}

/// The C entry point for a repeatable host function of a graph.
///
/// # Safety
/// `data` must point to a `Counted<F>` that outlives every run (a user object the graph holds).
pub(super) unsafe extern "C" fn run_repeatable<F: Fn() + Send + Sync + 'static>(data: *mut c_void) {
    // SAFETY: the caller's contract: `data` points to a live Counted<F>, shared, never mutated.
    let counted = unsafe { &*data.cast::<Counted<F>>().cast_const() };
    if let Some(f) = &counted.f {
        run_guarded(None, f);
    }
}

impl<'a, M: CaptureMode> Capture<'a, M> {
    /// The captured stream.
    pub fn stream(&self) -> &'a StreamRef {
        self.stream
    }

    /// The capture's id, unique in the process (as [`StreamRef::capture_info`] reports it for
    /// every stream in this capture).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Adds a host function to the graph on `stream`: the captured stream, or one that joined
    /// this capture. It becomes a host node of the capture's graph after the stream's work so
    /// far, which the stream's next captured work depends on
    /// ([`cudaGraphAddHostNode`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html),
    /// `cudaStreamUpdateCaptureDependencies`; see the
    /// [module docs](crate::capture#what-a-captures-graph-keeps-and-how-it-gets-there)).
    /// It runs at every replay, so it is `Fn`; it is `Sync` because executables made from one
    /// graph may run at the same time. The graph owns it through a CUDA user object
    /// ([`cudaUserObjectCreate`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html),
    /// `cudaGraphRetainUserObject` with move semantics): CUDA drops it once no graph, clone or
    /// executable needs it and their launches have completed.
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) for a stream that is not part of this capture (not capturing,
    /// or in another capture): `f` is dropped, never run. CUDA's errors.
    pub fn launch_host_fn<F: Fn() + Send + Sync + 'static>(&mut self, stream: impl AsStream, f: F) -> Result<()> {
        let stream = &*stream.as_stream();
        refuse_legacy(stream, "the legacy default stream cannot be part of a capture")?;
        refuse_inside_host_fn()?;
        // A host node added to the capture's graph, never a stream-ordered enqueue: the
        // function is reachable only from the graph that owns it (see `capture_node`).
        let host = CaptureNode::Host(run_repeatable::<F>);
        // Declared before the lock: a closure the graph did not take drops after it.
        let mut f = Some(Counted::boxed(f));
        let transition = capture_transition()?;
        match add_to_capture(stream, Some(self.id), &mut f, host, &transition)? {
            Added::Node => Ok(()),
            Added::NotCapturing => Err(Error::CaptureMisuse("the host function's stream is not part of this capture")),
        }
    }

    /// Ends the capture and returns the graph
    /// ([`cudaStreamEndCapture`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    /// A capture begun with [`StreamRef::begin_capture_into`] returns the graph it was given.
    ///
    /// # Errors
    /// `cudaErrorStreamCaptureInvalidated` if the capture broke; `cudaErrorStreamCaptureUnjoined`
    /// if a forked stream was not joined back. A graph given to `begin_capture_into` is then
    /// leaked (see there). [`Error::InsideHostFn`](crate::Error::InsideHostFn) inside a host
    /// function, and [`Error::CaptureMisuse`](crate::Error::CaptureMisuse) inside a raw
    /// launcher ([`StreamRef::launch`]), where an end would wait for the launch itself: the
    /// capture then stays open in CUDA and counted, as a leaked one (the same for a drop there).
    pub fn end(mut self) -> Result<Graph> {
        let (ended, race_accesses) = self.finish();
        let (memory, after_end) = self.holds.take();
        let ended = match ended {
            Ended::Graph(Ok(graph)) => {
                // The marks of home uses that could not be recorded on the captured stream
                // while it was captured, before any launch can need them (a failed one leaves
                // the buffer's home uses unmarked: the graph's launches are refused).
                after_end.into_iter().try_for_each(|work| work(self.stream))?;
                if memory.is_some() {
                    *graph.tree().memory.borrow_mut() = memory;
                }
                return Ok(graph.with_race_accesses(race_accesses));
            }
            Ended::Graph(Err(error)) | Ended::StillOpen(error) | Ended::Foreign(error) => Err(error),
            // Captures into a borrowed graph are never handed out as a `Capture`.
            Ended::Borrowed(_) => Err(Error::CaptureMisuse("this capture wrote into a graph it does not own")),
        };
        // The capture failed, or stays open: another library may have ended it and kept a
        // graph that uses the memory.
        std::mem::forget((memory, after_end));
        ended
    }

    /// Ends the capture in CUDA and uncounts it, exactly once (`end`, or else the drop), and
    /// returns the accesses declared to the race detector in it: taken once CUDA's end has
    /// returned under the transition, so that none another thread declared meanwhile (under
    /// the hold, before the end) is lost. When the stream cannot be used here (inside a host
    /// function, or inside a call that holds the enqueue path's hold: a raw launcher), CUDA's
    /// capture stays open: it stays counted, as a leaked capture does, and a graph it captures
    /// into is leaked with it.
    pub(super) fn finish(&mut self) -> (Ended, Option<std::sync::Arc<race::CapturedAccesses>>) {
        self.ended = true;
        let into = self.into.take();
        // Neither inside a host function nor inside a call that holds the transition lock can
        // the end be made.
        let entered = self.stream.enter_runtime().and_then(|current| Ok((current, capture_transition()?)));
        let (current, transition) = match entered {
            Ok(entered) => entered,
            Err(error) => {
                std::mem::forget(into);
                return (Ended::StillOpen(error), None);
            }
        };
        // Under the transition: no call of this crate adds to its holds from now on (one that
        // asked before has added under its hold, which the transition waited for). A capture
        // that stays open stays registered, and keeps what is added to it for good.
        held::unregister(self.id);
        // The stream's capture is still this one (not ended outside this crate, and no other
        // begun since): else an end here would end another's capture, and hand back its graph.
        // (An invalidated capture reports no id of its own (CUDA 13.0), and one whose status
        // cannot be read is ended as before: CUDA's end then says what it is.)
        let ended = match capture_state(self.stream) {
            Ok(state)
                if state.info.status == CaptureStatus::None
                    || (state.info.status == CaptureStatus::Active && state.info.id != self.id) =>
            {
                drop(transition);
                // Its graph, and a graph it captured into, may be another library's now.
                std::mem::forget(into);
                Ended::Foreign(Error::CaptureMisuse(ENDED_ELSEWHERE))
            }
            _ => end_capture(self.stream, into, transition),
        };
        drop(current);
        // Accesses declared into a capture whose graph does not keep them (a capture dropped,
        // or one that failed) are not replayed: the caller forgets them.
        let accesses = race::take_captured(self.id);
        live_captures::ended(self.counted);
        (ended, accesses)
    }

    /// Whether `end` or the drop has run (see [`Capture::finish`]).
    pub(super) fn has_ended(&self) -> bool {
        self.ended
    }

    /// What the capture holds for its graph (see [`held`](super::held)).
    pub(crate) fn holds(&self) -> &CaptureHolds {
        &self.holds
    }

    /// Enqueues `work` on `stream`, which must be part of this capture: CUDA captures it into
    /// the capture's graph. The membership is checked under the enqueue path's hold, where no
    /// capture of this crate begins, ends or is joined.
    ///
    /// # Errors
    /// [`Error::CaptureMisuse`] for a stream that is not part of this capture (nothing is
    /// enqueued); the errors of the enqueue path and of `call`.
    pub(crate) fn enqueue_captured<R, U: FnOnce() -> Vec<Use>>(
        &self,
        stream: &StreamRef,
        work: Work<U>,
        call: impl FnOnce(Via) -> Result<R>,
    ) -> Result<R> {
        // The check, then the enqueue inside the same hold (which the enqueue's nests in):
        // the race detector notes the work for this capture's launches only.
        stream.outside_transitions(InCapture::Captured, || {
            self.refuse_outside(stream)?;
            stream.enqueue(work, call)
        })
    }

    /// [`Error::CaptureMisuse`] unless `stream` is part of this capture now. Under the enqueue
    /// path's hold, that stays true until the hold ends, except for an end by another library.
    pub(crate) fn refuse_outside(&self, stream: &StreamRef) -> Result<()> {
        // Never asked of the legacy stream, which is part of no capture (CUDA answers
        // `cudaErrorStreamCaptureImplicit` during a Global one).
        refuse_legacy(stream, "the legacy default stream is not part of any capture")?;
        let info = stream.capture_info()?;
        if info.status != CaptureStatus::Active || info.id != self.id {
            return Err(Error::CaptureMisuse("the stream is not part of this capture"));
        }
        Ok(())
    }
}

/// How [`Capture::finish`] went.
pub(super) enum Ended {
    /// The capture ended in CUDA; the graph it wrote into (its own, or the one it owned), or
    /// why ending failed.
    Graph(Result<Graph>),
    /// The capture into a [`Target::Borrowed`] graph ended in CUDA; or why ending failed.
    Borrowed(Result<()>),
    /// The capture could not be ended here: it stays open in CUDA.
    StillOpen(Error),
    /// The capture had ended outside this crate (another library's end on one of its
    /// streams): nothing was ended here, and what it captured into is leaked.
    Foreign(Error),
}

/// Why a capture that another library ended gives no graph.
const ENDED_ELSEWHERE: &str =
    "the capture was ended outside this crate (its graph, and the memory it uses, are left to whoever ended it)";

/// Ends the capture of `stream` under `transition`, which it releases once CUDA has: its graph is
/// `into`, the graph it captured into, or CUDA's own new graph.
fn end_capture(stream: &StreamRef, into: Option<Target>, transition: Transition) -> Ended {
    // Until the capture has ended CUDA may still write to `into`: every failure leaks it.
    let into = ManuallyDrop::new(into);
    let mut raw: sys::cudaGraph_t = std::ptr::null_mut();
    // SAFETY: a live, capturing stream; `raw` is a valid out-pointer.
    let code = unsafe { sys::cudaStreamEndCapture(stream.as_raw(), &mut raw) };
    drop(transition);
    let ended = check(code, "cudaStreamEndCapture");
    Ended::Graph(match (ManuallyDrop::into_inner(into), ended) {
        // `raw` is that same graph, never ours to destroy.
        (Some(Target::Borrowed(_)), ended) => return Ended::Borrowed(ended),
        (Some(Target::Owned(graph)), Ok(())) => Ok(graph),
        (Some(Target::Owned(graph)), Err(error)) => {
            std::mem::forget(graph);
            Err(error)
        }
        (None, Ok(())) => Ok(Graph::from_captured(raw, stream.device())),
        (None, Err(error)) => {
            if !raw.is_null() {
                // A graph of CUDA's that the failed end still handed us: ours to destroy, once.
                drop(Graph::from_captured(raw, stream.device()));
            }
            Err(error)
        }
    })
}

impl<M: CaptureMode> Drop for Capture<'_, M> {
    fn drop(&mut self) {
        if !self.ended {
            // The graph, if the capture ended, is discarded here, and the memory it used with
            // it; if the end failed or could not be made, the memory is leaked (another library
            // may have ended the capture and kept its graph).
            if !matches!(self.finish().0, Ended::Graph(Ok(_))) {
                std::mem::forget(self.holds.take());
            }
        }
    }
}

//! Shared by the integration tests, examples and benchmarks of the workspace: safe-enough Rust
//! launchers for the nvcc-built kernels in `kernels/`, mapped host memory for their logs and
//! flags, and the gate that skips GPU tests loudly (or fails them under
//! `CUDA_STREAM_REQUIRE_GPU=1`).

use cuda_stream::{
    BorrowedStream, BuiltinStream, Device, Result, Stream, StreamLease, StreamOptions, StreamRef, check, sys,
};
use std::ffi::c_void;
use std::time::Duration;

pub mod bench;
pub mod gpu;
mod rng;
mod stats;

/// Whether `kernels/*.cu` were compiled (the toolkit had nvcc). Without them every GPU test
/// skips, saying why.
pub const KERNELS_BUILT: bool = !cfg!(kernels_missing);
pub mod mapped;
pub mod nccl;
pub mod probe;

pub use mapped::{FlagOutcome, MappedFlag, TagEntry, TagLog};
pub use rng::Rng;
pub use stats::Stats;

/// The raw C ABI of `kernels/`.
pub mod ffi {
    use cuda_stream::sys::{cudaError_t, cudaStream_t};

    /// The C layout of the device-side log; see `kernels/test_kernels.h`.
    #[repr(C)]
    #[derive(Debug)]
    pub struct cs_tag_log {
        /// Entries written so far (may exceed `capacity`; extra entries are dropped).
        pub count: u32,
        /// Entries the log has room for.
        pub capacity: u32,
        /// The entries (a flexible array member in C).
        pub entries: [super::TagEntry; 0],
    }

    unsafe extern "C" {
        pub fn cs_launch_spin(stream: cudaStream_t, ns: u64, blocks: u32, threads: u32) -> cudaError_t;
        pub fn cs_launch_tag(stream: cudaStream_t, log: *mut cs_tag_log, tag: u32, spin_ns: u64) -> cudaError_t;
        pub fn cs_launch_wait_flag(
            stream: cudaStream_t,
            flag: *const u32,
            timeout_ns: u64,
            outcome: *mut u32,
        ) -> cudaError_t;
        pub fn cs_launch_spin_copy(
            stream: cudaStream_t,
            src: *const u32,
            dst: *mut u32,
            n: u64,
            spin_ns: u64,
        ) -> cudaError_t;
        pub fn cs_launch_empty(stream: cudaStream_t) -> cudaError_t;
        pub fn cs_launch_fault(stream: cudaStream_t) -> cudaError_t;
        pub fn cs_preload_kernels() -> cudaError_t;
        pub fn cs_foreign_stream_create(stream: *mut cudaStream_t) -> cudaError_t;
        pub fn cs_foreign_stream_destroy(stream: cudaStream_t) -> cudaError_t;
        pub fn cs_foreign_stream_tag(stream: cudaStream_t, log: *mut cs_tag_log, tag: u32) -> cudaError_t;

        pub static cs_header_stream_legacy: usize;
        pub static cs_header_stream_per_thread: usize;
        pub static cs_header_cudart_version: i32;
        pub static cs_header_error_size: u32;
        pub static cs_header_error_pairs: [[i32; 2]; 35];
        pub static cs_header_error_pair_count: u32;
    }
}

/// Anything that names a stream to launch on: a [`Stream`] or a raw handle.
pub trait LaunchStream {
    /// The handle the launcher passes to the kernel launch.
    fn launch_handle(&self) -> sys::cudaStream_t;

    /// The crate's stream behind it: the launchers then launch through
    /// [`StreamRef::launch`], the crate's enqueue path, as a user's code would (a raw launch
    /// beside it races the crate's capture transitions: in the API fuzzer, a raw launch onto a
    /// stream joined to another thread's capture crashed libcuda). `None` for a raw handle,
    /// launched on directly.
    fn crate_stream(&self) -> Option<&StreamRef> {
        None
    }
}

impl LaunchStream for StreamRef {
    fn launch_handle(&self) -> sys::cudaStream_t {
        self.as_raw()
    }

    fn crate_stream(&self) -> Option<&StreamRef> {
        Some(self)
    }
}

/// The owners of a [`StreamRef`] launch on it.
macro_rules! launch_through_deref {
    ($($owner:ty),*) => {$(
        impl LaunchStream for $owner {
            fn launch_handle(&self) -> sys::cudaStream_t {
                self.as_raw()
            }

            fn crate_stream(&self) -> Option<&StreamRef> {
                Some(self)
            }
        }
    )*};
}

launch_through_deref!(Stream, BuiltinStream, BorrowedStream<'_>, StreamLease<'_>, HeldStream);

/// An owned or a built-in stream, for tests that keep streams of both kinds in one `Vec`.
#[derive(Debug)]
pub enum HeldStream {
    /// Created here, destroyed on drop.
    Owned(Stream),
    /// One of CUDA's default streams.
    Builtin(BuiltinStream),
}

impl std::ops::Deref for HeldStream {
    type Target = StreamRef;

    fn deref(&self) -> &StreamRef {
        match self {
            HeldStream::Owned(stream) => stream,
            HeldStream::Builtin(stream) => stream,
        }
    }
}

/// A type of the user's own that holds a stream: it lends it through `AsStream` (what
/// `wait_stream`, `record` and the graph launches take).
impl cuda_stream::AsStream for HeldStream {
    fn as_stream(&self) -> BorrowedStream<'_> {
        (**self).as_stream()
    }
}

/// Calls the C launcher `launch` with the stream's handle and checks the returned launch error
/// under the launcher's `name`: through [`StreamRef::launch`] (its device current) for a stream
/// of the crate, on whatever device is current for a raw handle.
fn launch(
    stream: &impl LaunchStream,
    name: &'static str,
    launch: impl FnOnce(sys::cudaStream_t) -> sys::cudaError_t,
) -> Result<()> {
    match stream.crate_stream() {
        Some(stream) => stream.launch(name, launch),
        None => check(launch(stream.launch_handle()), name),
    }
}

impl LaunchStream for sys::cudaStream_t {
    fn launch_handle(&self) -> sys::cudaStream_t {
        *self
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Launches a kernel of `blocks` × `threads` that spins for `duration` (`%globaltimer`).
///
/// # Errors
/// The launch error.
pub fn spin_grid(stream: &impl LaunchStream, duration: Duration, blocks: u32, threads: u32) -> Result<()> {
    // SAFETY: the launcher only reads its value arguments; the handle is the caller's live stream.
    launch(stream, "cs_launch_spin", |raw| unsafe { ffi::cs_launch_spin(raw, nanos(duration), blocks, threads) })
}

/// Launches one small block that spins for `duration`.
///
/// # Errors
/// The launch error.
pub fn spin(stream: &impl LaunchStream, duration: Duration) -> Result<()> {
    spin_grid(stream, duration, 1, 32)
}

/// Launches a kernel that spins for `spin`, then copies `n` `u32`s from `source` to
/// `destination` (device addresses).
///
/// # Errors
/// The launch error.
///
/// # Safety
/// `source` and `destination` must be device addresses of `n` `u32`s each on the stream's
/// device, valid until the kernel has run.
pub unsafe fn spin_copy(
    stream: &impl LaunchStream,
    source: *const u32,
    destination: *mut u32,
    n: usize,
    spin: Duration,
) -> Result<()> {
    // SAFETY: the caller's contract for the addresses; the handle is the caller's live stream.
    launch(stream, "cs_launch_spin_copy", |raw| unsafe {
        ffi::cs_launch_spin_copy(raw, source, destination, n as u64, nanos(spin))
    })
}

/// Launches a one-thread kernel that spins for `spin`, then appends `tag` to `log` with its start
/// and end times.
///
/// # Errors
/// The launch error.
pub fn tag(stream: &impl LaunchStream, log: &TagLog, tag: u32, spin: Duration) -> Result<()> {
    // SAFETY: `log.device_ptr()` is mapped memory that lives as long as `log`; callers
    // synchronize before `log` drops (TagLog's drop also synchronizes the device).
    launch(stream, "cs_launch_tag", |raw| unsafe { ffi::cs_launch_tag(raw, log.device_ptr(), tag, nanos(spin)) })
}

/// Launches a one-thread kernel that waits until `flag` is set from the host, or `timeout`.
///
/// # Errors
/// The launch error.
pub fn wait_flag(stream: &impl LaunchStream, flag: &MappedFlag, timeout: Duration) -> Result<()> {
    let (flag_ptr, outcome_ptr) = flag.device_ptrs();
    // SAFETY: both pointers are mapped memory owned by `flag`, which outlives the kernel
    // (MappedFlag's drop synchronizes the device first).
    launch(stream, "cs_launch_wait_flag", |raw| unsafe {
        ffi::cs_launch_wait_flag(raw, flag_ptr, nanos(timeout), outcome_ptr)
    })
}

/// Launches an empty kernel.
///
/// # Errors
/// The launch error.
pub fn empty(stream: &impl LaunchStream) -> Result<()> {
    // SAFETY: no arguments but the stream.
    launch(stream, "cs_launch_empty", |raw| unsafe { ffi::cs_launch_empty(raw) })
}

/// Launches a kernel that writes to an illegal address: it poisons the CUDA context of the
/// whole process. Only ever in a child process.
///
/// # Errors
/// The launch error (the fault itself arrives later, asynchronously).
pub fn fault(stream: &impl LaunchStream) -> Result<()> {
    // SAFETY: the kernel faults on the device; the host memory of this process is not touched.
    launch(stream, "cs_launch_fault", |raw| unsafe { ffi::cs_launch_fault(raw) })
}

/// Loads every test kernel on `device` now, so that no launch later has to load one lazily
/// (which can wait for kernels already running there: see `kernels/test_kernels.cu`). The GPU
/// gates call it for each device they hand out.
///
/// # Errors
/// CUDA's errors.
pub fn preload_kernels(device: Device) -> Result<()> {
    let _current = device.make_current()?;
    // SAFETY: no arguments; loads kernels into the current context.
    check(unsafe { ffi::cs_preload_kernels() }, "cs_preload_kernels")
}

/// A stream created, used and destroyed by the C library in `kernels/foreign_stream.cu`.
#[derive(Debug)]
pub struct ForeignStream {
    raw: sys::cudaStream_t,
}

impl ForeignStream {
    /// Asks the C library for a new non-blocking stream on the current device.
    ///
    /// # Errors
    /// Its creation error.
    pub fn create() -> Result<ForeignStream> {
        let mut raw: sys::cudaStream_t = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        check(unsafe { ffi::cs_foreign_stream_create(&mut raw) }, "cs_foreign_stream_create")?;
        Ok(ForeignStream { raw })
    }

    /// The handle, for Rust to use (not to destroy).
    pub fn raw(&self) -> sys::cudaStream_t {
        self.raw
    }

    /// Has the C library enqueue a tag kernel on `stream` (any handle, ours included).
    ///
    /// # Errors
    /// The launch error.
    pub fn c_tag(stream: &impl LaunchStream, log: &TagLog, tag: u32) -> Result<()> {
        // SAFETY: as in [`tag`].
        check(
            unsafe { ffi::cs_foreign_stream_tag(stream.launch_handle(), log.device_ptr(), tag) },
            "cs_foreign_stream_tag",
        )
    }

    /// Has the C library destroy its stream.
    ///
    /// # Errors
    /// The destroy error.
    pub fn destroy(self) -> Result<()> {
        // SAFETY: the C library created `raw`; nothing uses it after this.
        check(unsafe { ffi::cs_foreign_stream_destroy(self.raw) }, "cs_foreign_stream_destroy")
    }
}

/// Spin kernel duration that keeps a GPU busy long enough for host-side checks to be far from
/// the edge, without making the suite slow.
pub const LONG_SPIN: Duration = Duration::from_millis(200);

/// The number of SMs of `device`, to size kernels that fill it.
///
/// # Errors
/// CUDA's errors.
pub fn sm_count(device: Device) -> Result<u32> {
    let count = device.attribute(sys::cudaDeviceAttr::cudaDevAttrMultiProcessorCount)?;
    Ok(u32::try_from(count).unwrap_or(1))
}

/// Polls `done` until it returns true or `timeout` passes; returns how long it took.
pub fn poll_until(timeout: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let start = std::time::Instant::now();
    while start.elapsed() < timeout {
        if done() {
            return Some(start.elapsed());
        }
        std::hint::spin_loop();
    }
    None
}

/// The CPU time, user and system, that the thread of this process named `name` has used so
/// far, in clock ticks (`sysconf(_SC_CLK_TCK)` per second, 100 on Linux), from
/// `/proc/self/task/<tid>/stat`; `None` if no thread has that name (or there is no `/proc`).
pub fn thread_cpu_ticks(name: &str) -> Option<u64> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
        // After the parenthesized name come fields 3 (state) onwards; utime and stime are
        // fields 14 and 15 (proc(5)).
        let fields: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
        let field = |number: usize| fields.get(number - 3)?.parse::<u64>().ok();
        return Some(field(14)? + field(15)?);
    }
    None
}

/// The name of the thread [`waiting_thread_ticks`] runs its wait on.
pub const WAITER_THREAD: &str = "cs-waiter";

/// Clock ticks of a thread that ran all of `held` (the unit of [`thread_cpu_ticks`]).
pub fn ticks_in(held: Duration) -> u64 {
    (held.as_secs_f64() * clock_ticks_per_second()) as u64
}

/// How much CPU a thread spends waiting for the GPU: launches a kernel on `stream` that waits
/// for a flag, runs `prepare` (to enqueue what the wait waits for after that kernel), runs
/// `wait` on a thread named [`WAITER_THREAD`], counts that thread's clock ticks over 400 ms,
/// then sets the flag and joins it. Returns the ticks it ran, the ticks of a thread that ran
/// all that time, and what `wait` returned.
///
/// # Panics
/// If the kernel cannot be launched, or the waiting thread cannot be found or panics.
pub fn waiting_thread_ticks<R: Send>(
    stream: &impl LaunchStream,
    prepare: impl FnOnce(),
    wait: impl FnOnce() -> R + Send,
) -> (u64, u64, R) {
    let flag = MappedFlag::new().unwrap();
    wait_flag(stream, &flag, Duration::from_secs(10)).unwrap();
    prepare();
    std::thread::scope(|scope| {
        let waiter = std::thread::Builder::new().name(WAITER_THREAD.into()).spawn_scoped(scope, wait).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let held = Duration::from_millis(400);
        let before = thread_cpu_ticks(WAITER_THREAD).expect("the waiter waits");
        std::thread::sleep(held);
        let spent = thread_cpu_ticks(WAITER_THREAD).expect("the waiter waits") - before;
        flag.set();
        (spent, ticks_in(held), waiter.join().unwrap())
    })
}

/// The scheduling flag of the calling thread's current device (`cudaGetDeviceFlags`, masked
/// with `cudaDeviceScheduleMask`): how its synchronize waits, and so how the completion reactor
/// waits by default.
///
/// # Panics
/// If CUDA cannot report it.
pub fn device_schedule_flag() -> u32 {
    let mut flags = 0;
    // SAFETY: a valid out-pointer.
    let code = unsafe { cuda_stream::sys::cudaGetDeviceFlags(&mut flags) };
    cuda_stream::check(code, "cudaGetDeviceFlags").unwrap();
    flags & cuda_stream::sys::cudaDeviceScheduleMask
}

/// Clock ticks per second, the unit of [`thread_cpu_ticks`] (`sysconf(_SC_CLK_TCK)`; 100 if
/// it cannot be read).
pub fn clock_ticks_per_second() -> f64 {
    // SAFETY: a plain query of a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// Reads a value the host must see after the device wrote it.
pub(crate) fn volatile_read<T: Copy>(ptr: *const T) -> T {
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    // SAFETY: callers pass pointers into live mapped allocations they own.
    unsafe { std::ptr::read_volatile(ptr) }
}

/// A null `*mut c_void`, for allocation out-pointers.
pub(crate) fn null() -> *mut c_void {
    std::ptr::null_mut()
}

/// Starts this test binary again in a child process, running only the `#[ignore]`d test
/// `test` with `env` set, its stdout piped: for what must not happen in the parent (a poisoned
/// context) or needs a second process (IPC).
///
/// # Panics
/// If the binary cannot be started.
pub fn spawn_child_test(test: &str, env: &[(&str, String)]) -> std::process::Child {
    let exe = std::env::current_exe().expect("the test binary knows its path");
    let mut command = std::process::Command::new(exe);
    command
        .args(["--ignored", "--exact", test, "--nocapture", "--test-threads=1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    command.spawn().expect("the test binary can start itself")
}

/// Runs the `#[ignore]`d test `test` of this binary in a child process (see
/// [`spawn_child_test`]) and checks that it exits cleanly having printed a line containing
/// each of `expected`.
///
/// # Panics
/// If the child fails or a line is missing: that is the test's failure.
pub fn child_test_prints(test: &str, expected: &[&str]) {
    child_test_prints_with(test, &[], expected);
}

/// [`child_test_prints`] with `env` set in the child's environment.
///
/// # Panics
/// As [`child_test_prints`].
pub fn child_test_prints_with(test: &str, env: &[(&str, String)], expected: &[&str]) {
    let mut child = spawn_child_test(test, env);
    // Read while the child runs (a full pipe would stall it), and give up after a while: a
    // child that hangs fails its test instead of holding the whole binary.
    let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let stdout = read(child.stdout.take().map(|pipe| Box::new(pipe) as _));
    let stderr = read(child.stderr.take().map(|pipe| Box::new(pipe) as _));
    let limit = Duration::from_secs(if under_sanitizer() { 1800 } else { 300 });
    let start = std::time::Instant::now();
    let mut waited = None;
    while start.elapsed() < limit {
        if child.try_wait().ok().flatten().is_some() {
            waited = Some(start.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if waited.is_none() {
        let _ = child.kill();
    }
    let status = child.wait().expect("the child test runs");
    let (stdout, stderr) = (stdout.join().unwrap_or_default(), stderr.join().unwrap_or_default());
    assert!(waited.is_some(), "the child {test} hung for {limit:?} and was killed: {stdout}\n{stderr}");
    assert!(status.success(), "the child {test} failed: {stdout}\n{stderr}");
    for line in expected {
        assert!(stdout.lines().any(|printed| printed.contains(line)), "missing `{line}` in:\n{stdout}\n{stderr}");
    }
}

/// [`child_test_prints`] for a child that faults the GPU on purpose, skipped (and said so)
/// under compute-sanitizer, which rightly reports the fault.
///
/// # Panics
/// As [`child_test_prints`].
pub fn faulting_child_test_prints(test: &str, expected: &[&str]) {
    if under_sanitizer() {
        eprintln!("SKIPPED under compute-sanitizer: the fault is deliberate");
        return;
    }
    child_test_prints(test, expected);
}

/// Whether `test` skips because it runs under compute-sanitizer, which cannot run what it does
/// (`why`): says so on stderr, loudly, and returns `true` there; `false` elsewhere.
pub fn skipped_under_sanitizer(test: &str, why: &str) -> bool {
    if under_sanitizer() {
        eprintln!("SKIPPED {test} under compute-sanitizer: {why}");
        return true;
    }
    false
}

/// Whether the suite runs under compute-sanitizer (`run.sh --sanitize` sets this): tests that
/// fault on purpose skip themselves then, since the sanitizer rightly reports their fault.
pub fn under_sanitizer() -> bool {
    std::env::var_os("CUDA_STREAM_SANITIZER").is_some()
}

/// A new non-blocking stream on `device`, the stream most tests work on.
///
/// # Panics
/// If CUDA cannot create it.
pub fn non_blocking_stream(device: Device) -> Stream {
    Stream::new(device, StreamOptions::non_blocking()).expect("a non-blocking stream")
}

/// Reads and resets the calling thread's runtime last error (`cudaGetLastError`).
pub fn take_last_error() -> sys::cudaError_t {
    // SAFETY: no arguments.
    unsafe { sys::cudaGetLastError() }
}

/// Launch on the calling thread's current stream of its current device
/// ([`StreamRef::with_current`]): what the launchers use when not given a stream.
#[derive(Copy, Clone, Debug, Default)]
pub struct Current;

impl LaunchStream for Current {
    fn launch_handle(&self) -> sys::cudaStream_t {
        Device::current()
            .map(|device| StreamRef::with_current(device, StreamRef::as_raw))
            .unwrap_or(std::ptr::null_mut())
    }
}

/// Sets its flag when dropped: racer threads in a `thread::scope` loop until the flag is set,
/// and a scope joins its threads before it passes a panic on, so a test that fails between
/// spawning and stopping its racers would otherwise hang instead of failing.
#[derive(Debug)]
pub struct StopOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Runs a future to completion on this thread: the smallest executor, for tests and examples
/// of [`cuda_stream::Completion`] (the crate itself needs no runtime).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::park();
    }
}

pub mod ordering_model;

/// Whether kernels of different streams can be seen running at the same time. compute-sanitizer
/// serializes kernel execution, so under it (see [`under_sanitizer`]) the assertions that need
/// concurrency (a non-blocking stream not waiting, two per-thread streams overlapping, priority
/// scheduling, timings) are skipped, loudly; everything else in those tests still runs.
pub fn concurrency_visible() -> bool {
    if under_sanitizer() {
        let test = std::thread::current().name().unwrap_or("this test").to_string();
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("SKIPPED {test}: compute-sanitizer serializes kernels, so concurrency cannot be observed\n")
                .as_bytes(),
        );
        return false;
    }
    true
}

/// `normal`, or `reduced` under compute-sanitizer (whose instrumentation is slow).
pub fn scaled(normal: usize, reduced: usize) -> usize {
    if under_sanitizer() { reduced } else { normal }
}

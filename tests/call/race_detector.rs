//! The race detector on the GPU (`cuda_stream::race`): each race class with a kernel that
//! shows the race is real, the same program with the missing edge added passing silently, the
//! refusal under `RaceMode::Fail` (nothing enqueued), and the cross-check against the ordering
//! model: over random programs of streams, events, waits, host functions, synchronizes and
//! declared accesses, the detector reports exactly the conflicting pairs the model says CUDA
//! may reorder.
//!
//! `CUDA_STREAM_MODEL_PROGRAMS` (default 1000) programs for the cross-check.

use cuda_stream::race::{Access, AccessKind, RaceKind, RaceMode, RaceReport, race_scope};
use cuda_stream::{DeviceBuffer, Error, LaunchConfig, PinnedBuffer, StreamRef};
use cuda_stream_tests::ordering_model::Program;
use cuda_stream_tests::{gpu_or_skip, non_blocking_stream, spin_copy};
use std::collections::BTreeSet;
use std::time::Duration;

const N: usize = 1 << 16;
const SPIN: Duration = Duration::from_millis(50);

cuda_stream::kernel! {
    /// `y = a * x + y` over `n` elements.
    static SAXPY = fn cs_saxpy(a: f32, x: *const f32, y: *mut f32, n: u32);
}

/// Launches a kernel on `stream` that spins for [`SPIN`], then copies `source` into
/// `destination`, declaring both accesses to the detector.
fn slow_copy(stream: &StreamRef, source: *const u32, destination: *mut u32) -> cuda_stream::Result<()> {
    stream.declare_accesses("slow copy", &[Access::read(source, N), Access::write(destination, N)])?;
    // SAFETY: both are device (or mapped pinned) addresses of N u32s that outlive the kernel:
    // every test synchronizes before they drop.
    unsafe { spin_copy(stream, source, destination, N, SPIN) }
}

fn kinds(reports: &[RaceReport]) -> Vec<RaceKind> {
    reports.iter().map(|report| report.kind).collect()
}

/// Asserts that `reports` holds one race, of `kind`, between operations `earlier` and `later`.
fn assert_one_race(reports: &[RaceReport], kind: RaceKind, earlier: &str, later: &str) {
    assert_eq!(kinds(reports), [kind], "{reports:#?}");
    let names = (reports[0].earlier.operation.as_str(), reports[0].later.operation.as_str());
    assert_eq!(names, (earlier, later), "{reports:#?}");
}

#[test]
fn a_read_on_another_stream_races_a_kernel_still_writing_and_wait_stream_orders_it() {
    let device = gpu_or_skip!();
    let (home, writer, reader) =
        (non_blocking_stream(device), non_blocking_stream(device), non_blocking_stream(device));
    let scope = race_scope(RaceMode::Report);
    let source = DeviceBuffer::from_slice(&home, &vec![7u32; N]).unwrap();
    let mut target = DeviceBuffer::<u32, _>::zeroed(&home, N).unwrap();
    home.synchronize().unwrap();
    // The writer stream is one the buffer does not know: its kernel gets a raw pointer.
    slow_copy(&writer, source.as_ptr(), target.as_mut_ptr()).unwrap();
    let mut seen = vec![0u32; N];
    target.copy_to_slice(&reader, &mut seen).unwrap();
    let reports = scope.take_reports();
    // Before any assertion: the kernel writes memory that a panic's drops would free.
    writer.synchronize().unwrap();
    assert_one_race(&reports, RaceKind::WriteRead, "slow copy", "cudaMemcpyAsync");
    let report = &reports[0];
    assert!(report.missing_edge.contains("wait_stream"), "{}", report.missing_edge);
    assert_eq!(report.allocation.as_ref().map(|a| a.operation.as_str()), Some("cudaMallocAsync"));
    if cuda_stream_tests::concurrency_visible() {
        // The race is real: the copy read the target before the kernel wrote it.
        assert!(seen.iter().all(|&v| v == 0), "the unordered copy ran first");
    }

    // The same with the edge: silent, and the copy sees the kernel's writes.
    target.fill_bytes(&home, 0).unwrap();
    home.synchronize().unwrap();
    slow_copy(&writer, source.as_ptr(), target.as_mut_ptr()).unwrap();
    reader.wait_stream(&writer).unwrap();
    target.copy_to_slice(&reader, &mut seen).unwrap();
    assert_eq!(scope.take_reports(), []);
    assert!(seen.iter().all(|&v| v == 7));
}

#[test]
fn a_pool_lease_is_its_stream_two_leases_race_and_a_returned_stream_keeps_its_order() {
    let device = gpu_or_skip!();
    let home = non_blocking_stream(device);
    let pool = cuda_stream::StreamPool::new(device, cuda_stream::StreamOptions::non_blocking(), 2).unwrap();
    let scope = race_scope(RaceMode::Report);
    let source = DeviceBuffer::from_slice(&home, &vec![7u32; N]).unwrap();
    let mut target = DeviceBuffer::<u32, _>::zeroed(&home, N).unwrap();
    home.synchronize().unwrap();
    let (writer, reader) = (pool.acquire().unwrap(), pool.acquire().unwrap());
    slow_copy(&writer, source.as_ptr(), target.as_mut_ptr()).unwrap();
    let mut seen = vec![0u32; N];
    target.copy_to_slice(&reader, &mut seen).unwrap();
    let reports = scope.take_reports();
    writer.synchronize().unwrap();
    assert_eq!(kinds(&reports), [RaceKind::WriteRead], "two leases are two streams: {reports:#?}");
    if cuda_stream_tests::concurrency_visible() {
        assert!(seen.iter().all(|&v| v == 0), "the other lease's copy ran before the kernel wrote");
    }

    // The writer's stream goes back to the pool and comes out again (this thread's shard, last
    // in first out): its new holder's work comes after the old holder's, with no edge.
    target.fill_bytes(&home, 0).unwrap();
    home.synchronize().unwrap();
    slow_copy(&writer, source.as_ptr(), target.as_mut_ptr()).unwrap();
    let written_on = writer.as_raw();
    drop(writer);
    let next = pool.acquire().unwrap();
    assert_eq!(next.as_raw(), written_on, "the same stream, leased again");
    target.copy_to_slice(&next, &mut seen).unwrap();
    assert_eq!(scope.take_reports(), []);
    assert!(seen.iter().all(|&v| v == 7), "stream order: the copy saw the kernel's writes");
}

#[test]
fn fail_mode_refuses_the_racing_operation_before_it_is_enqueued() {
    let device = gpu_or_skip!();
    let (home, writer) = (non_blocking_stream(device), non_blocking_stream(device));
    let source = DeviceBuffer::from_slice(&home, &vec![3u32; N]).unwrap();
    let mut target = DeviceBuffer::<u32, _>::zeroed(&home, N).unwrap();
    home.synchronize().unwrap();
    let scope = race_scope(RaceMode::Fail);
    slow_copy(&writer, source.as_ptr(), target.as_mut_ptr()).unwrap();
    // A fill on the home stream would overwrite the kernel's output at any moment.
    match target.fill_bytes(&home, 0xff) {
        Err(Error::Race(report)) => {
            assert_eq!(report.kind, RaceKind::WriteWrite);
            assert!(report.to_string().contains("slow copy"), "{report}");
        }
        other => panic!("expected Error::Race, got {other:?}"),
    }
    writer.synchronize().unwrap();
    // Refused before CUDA saw it: the kernel's 3s are all there.
    home.wait_stream(&writer).unwrap();
    assert!(target.to_vec().unwrap().iter().all(|&v| v == 3));
    // Ordered now (the host synchronized the writer): allowed.
    target.fill_bytes(&home, 0).unwrap();
    drop(scope);
}

#[test]
fn a_typed_launch_declares_what_it_reads_and_writes() {
    let device = gpu_or_skip!();
    let (home, other) = (non_blocking_stream(device), non_blocking_stream(device));
    let mut x = DeviceBuffer::from_slice(&home, &vec![1.0f32; N]).unwrap();
    let mut y = DeviceBuffer::from_slice(&home, &vec![2.0f32; N]).unwrap();
    home.synchronize().unwrap();
    let scope = race_scope(RaceMode::Report);
    x.fill_bytes(&home, 0).unwrap();
    let accesses = [x.read_access(), y.write_access()];
    let config = LaunchConfig::new((N as u32).div_ceil(256), 256).accesses(&accesses);
    // SAFETY: x and y are N floats of the device, alive until the synchronize below.
    unsafe { SAXPY.launch(&other, &config, (2.0, x.as_ptr(), y.as_mut_ptr(), N as u32)) }.unwrap();
    let reports = scope.take_reports();
    assert_eq!(kinds(&reports), [RaceKind::WriteRead], "the fill of x on home, the read of x on other: {reports:#?}");
    assert_eq!(reports[0].later.operation, "cs_saxpy");
    other.synchronize().unwrap();
    x.fill_bytes(&home, 0).unwrap();
    other.wait_stream(&home).unwrap();
    // SAFETY: as above.
    unsafe { SAXPY.launch(&other, &config, (2.0, x.as_ptr(), y.as_mut_ptr(), N as u32)) }.unwrap();
    assert_eq!(scope.take_reports(), []);
    other.synchronize().unwrap();
}

/// Buffers as launch arguments: the launch orders them (no report, though nothing was
/// declared), and tells the detector what it wrote: a raw launch on a third stream that reads
/// `y` without an edge is reported against the typed launch.
#[test]
fn buffer_arguments_are_ordered_and_told_to_the_detector() {
    let device = gpu_or_skip!();
    let (home, other, third) = (non_blocking_stream(device), non_blocking_stream(device), non_blocking_stream(device));
    let mut x = DeviceBuffer::from_slice(&home, &vec![1.0f32; N]).unwrap();
    let mut y = DeviceBuffer::from_slice(&home, &vec![2.0f32; N]).unwrap();
    let mut copy = DeviceBuffer::<f32, _>::zeroed(&third, N).unwrap();
    home.synchronize().unwrap();
    third.synchronize().unwrap();
    let scope = race_scope(RaceMode::Report);
    x.fill_bytes(&home, 0).unwrap();
    let config = LaunchConfig::new((N as u32).div_ceil(256), 256);
    // SAFETY: the kernel reads N floats of `x` and writes N of `y`.
    unsafe { SAXPY.launch(&other, &config, (2.0, &x, &mut y, N as u32)) }.unwrap();
    assert_eq!(scope.take_reports(), [], "the launch waited for the fill of x");
    let (from, to) = (y.as_ptr(), copy.as_mut_ptr());
    let raw_read = [Access::read(from, N), Access::write(to, N)];
    // SAFETY: N floats at both addresses, alive until the synchronizes below; nothing orders
    // the read of `y` after the typed launch: the race the detector must report.
    unsafe {
        SAXPY.launch(
            &third,
            &LaunchConfig::new((N as u32).div_ceil(256), 256).accesses(&raw_read),
            (1.0, from, to, N as u32),
        )
    }
    .unwrap();
    let reports = scope.take_reports();
    other.synchronize().unwrap();
    third.synchronize().unwrap();
    assert_eq!(kinds(&reports), [RaceKind::WriteRead], "{reports:#?}");
    assert_eq!((reports[0].earlier.operation.as_str(), reports[0].later.operation.as_str()), ("cs_saxpy", "cs_saxpy"));
    assert_eq!(y.to_vec().unwrap(), vec![2.0; N], "0 * 2 + 2: the typed launch read the filled x");
}

#[test]
fn a_graph_launch_replays_the_accesses_its_capture_declared() {
    let device = gpu_or_skip!();
    let (capturing, other) = (non_blocking_stream(device), non_blocking_stream(device));
    let scope = race_scope(RaceMode::Report);
    let x = DeviceBuffer::from_slice(&other, &vec![1.0f32; N]).unwrap();
    let mut y = DeviceBuffer::from_slice(&other, &vec![2.0f32; N]).unwrap();
    other.synchronize().unwrap();
    let accesses = [x.read_access(), y.write_access()];
    let config = LaunchConfig::new((N as u32).div_ceil(256), 256).accesses(&accesses);
    let capture = capturing.begin_capture(cuda_stream::capture::ThreadLocal).unwrap();
    // SAFETY: x and y are N floats of the device, alive until every launch below synchronized.
    unsafe { SAXPY.launch(&capturing, &config, (2.0, x.as_ptr(), y.as_mut_ptr(), N as u32)) }.unwrap();
    let graph = capture.end().unwrap();
    assert_eq!(scope.take_reports(), [], "captured work runs at the graph's launches, not at its capture");
    let exec = graph.instantiate().unwrap();
    y.fill_bytes(&other, 0).unwrap();
    exec.launch(&capturing).unwrap();
    let reports = scope.take_reports();
    capturing.synchronize().unwrap();
    assert_eq!(kinds(&reports), [RaceKind::WriteWrite], "the fill of y, the replayed write of y: {reports:#?}");
    assert!(reports[0].later.operation.starts_with("cudaGraphLaunch (captured: cs_saxpy"), "{}", reports[0]);

    // With the edge: silent.
    y.fill_bytes(&other, 0).unwrap();
    capturing.wait_stream(&other).unwrap();
    exec.launch(&capturing).unwrap();
    assert_eq!(scope.take_reports(), []);
    capturing.synchronize().unwrap();
    assert!(y.to_vec().unwrap().iter().all(|&v| v == 2.0), "y = 2 x + 0");
}

#[test]
fn a_built_graph_replays_its_kernel_nodes_and_builder_captures_accesses() {
    let device = gpu_or_skip!();
    let (capturing, other) = (non_blocking_stream(device), non_blocking_stream(device));
    let scope = race_scope(RaceMode::Report);
    let x = DeviceBuffer::from_slice(&other, &vec![1.0f32; N]).unwrap();
    let mut y = DeviceBuffer::from_slice(&other, &vec![2.0f32; N]).unwrap();
    let mut z = DeviceBuffer::from_slice(&other, &vec![2.0f32; N]).unwrap();
    other.synchronize().unwrap();
    let (node_accesses, captured_accesses) = ([x.read_access(), y.write_access()], [x.read_access(), z.write_access()]);
    let blocks = (N as u32).div_ceil(256);
    let mut graph = cuda_stream::Graph::new(device).unwrap();
    let mut builder = graph.builder();
    // SAFETY: x, y and z are N floats of the device, alive until every launch below synchronized.
    let node = unsafe {
        builder.add_kernel(
            &SAXPY,
            &LaunchConfig::new(blocks, 256).accesses(&node_accesses),
            (2.0, x.as_ptr(), y.as_mut_ptr(), N as u32),
            &[],
        )
    }
    .unwrap();
    let capture = builder.capture(&capturing, cuda_stream::capture::ThreadLocal).unwrap();
    let config = LaunchConfig::new(blocks, 256).accesses(&captured_accesses);
    // SAFETY: as above.
    unsafe { SAXPY.launch(&capturing, &config, (3.0, x.as_ptr(), z.as_mut_ptr(), N as u32)) }.unwrap();
    capture.end().unwrap();
    assert_eq!(builder.leaves().unwrap().len(), 1, "the captured kernel runs after the node {node:?}");
    drop(builder);
    assert_eq!(scope.take_reports(), [], "built and captured work runs at the graph's launches");
    let exec = graph.instantiate().unwrap();
    y.fill_bytes(&other, 0).unwrap();
    z.fill_bytes(&other, 0).unwrap();
    exec.launch(&capturing).unwrap();
    let reports = scope.take_reports();
    capturing.synchronize().unwrap();
    let written: BTreeSet<u64> = reports.iter().map(|report| report.later.address).collect();
    assert_eq!(kinds(&reports), [RaceKind::WriteWrite; 2], "the fills of y and z, the replayed writes: {reports:#?}");
    assert_eq!(written, BTreeSet::from([y.as_ptr() as u64, z.as_ptr() as u64]), "{reports:#?}");
    assert!(reports.iter().all(|report| report.later.operation.contains("cs_saxpy")), "{reports:#?}");

    // With the edge: silent, and both kernels ran.
    y.fill_bytes(&other, 0).unwrap();
    z.fill_bytes(&other, 0).unwrap();
    capturing.wait_stream(&other).unwrap();
    exec.launch(&capturing).unwrap();
    assert_eq!(scope.take_reports(), []);
    capturing.synchronize().unwrap();
    assert!(y.to_vec().unwrap().iter().all(|&v| v == 2.0), "y = 2 x + 0");
    assert!(z.to_vec().unwrap().iter().all(|&v| v == 3.0), "z = 3 x + 0");
}

#[test]
fn two_streams_writing_one_buffer_race_and_the_kernel_that_runs_last_wins() {
    let device = gpu_or_skip!();
    let (home, writer, other) = (non_blocking_stream(device), non_blocking_stream(device), non_blocking_stream(device));
    let scope = race_scope(RaceMode::Report);
    let source = DeviceBuffer::from_slice(&home, &vec![7u32; N]).unwrap();
    let mut target = DeviceBuffer::<u32, _>::zeroed(&home, N).unwrap();
    home.synchronize().unwrap();
    let zeros = vec![0u32; N];
    // The kernel writes 7s, 50 ms from now; the copy of zeros, enqueued after it, is meant to
    // be the last word.
    slow_copy(&writer, source.as_ptr(), target.as_mut_ptr()).unwrap();
    target.copy_from_slice(&other, &zeros).unwrap();
    let reports = scope.take_reports();
    writer.synchronize().unwrap();
    assert_one_race(&reports, RaceKind::WriteWrite, "slow copy", "cudaMemcpyAsync");
    if cuda_stream_tests::concurrency_visible() {
        // The race is real: the zeros landed first, and the kernel overwrote them.
        assert!(target.to_vec().unwrap().iter().all(|&v| v == 7), "the kernel ran last");
    }

    // With the edge: silent, and the zeros are the last word.
    device.synchronize().unwrap();
    slow_copy(&writer, source.as_ptr(), target.as_mut_ptr()).unwrap();
    other.wait_stream(&writer).unwrap();
    target.copy_from_slice(&other, &zeros).unwrap();
    assert_eq!(scope.take_reports(), []);
    assert!(target.to_vec().unwrap().iter().all(|&v| v == 0));
}

#[test]
fn a_write_on_another_stream_races_a_kernel_still_reading() {
    let device = gpu_or_skip!();
    let (home, reader, other) = (non_blocking_stream(device), non_blocking_stream(device), non_blocking_stream(device));
    let scope = race_scope(RaceMode::Report);
    let (sevens, nines) = (vec![7u32; N], vec![9u32; N]);
    let mut source = DeviceBuffer::from_slice(&home, &sevens).unwrap();
    let mut out = DeviceBuffer::<u32, _>::zeroed(&reader, N).unwrap();
    home.synchronize().unwrap();
    // The kernel reads the 7s, 50 ms from now; the 9s are meant to come after that read.
    slow_copy(&reader, source.as_ptr(), out.as_mut_ptr()).unwrap();
    source.copy_from_slice(&other, &nines).unwrap();
    let reports = scope.take_reports();
    reader.synchronize().unwrap();
    assert_one_race(&reports, RaceKind::ReadWrite, "slow copy", "cudaMemcpyAsync");
    if cuda_stream_tests::concurrency_visible() {
        // The race is real: the kernel read the 9s written after it was enqueued.
        assert!(out.to_vec().unwrap().iter().all(|&v| v == 9), "the write overtook the read");
    }

    // With the edge: silent, and the kernel reads the 7s.
    device.synchronize().unwrap();
    source.copy_from_slice(&home, &sevens).unwrap();
    slow_copy(&reader, source.as_ptr(), out.as_mut_ptr()).unwrap();
    other.wait_stream(&reader).unwrap();
    source.copy_from_slice(&other, &nines).unwrap();
    assert_eq!(scope.take_reports(), []);
    reader.synchronize().unwrap();
    assert!(out.to_vec().unwrap().iter().all(|&v| v == 7));
}

#[test]
fn a_free_while_another_stream_may_use_the_memory_is_reported() {
    let device = gpu_or_skip!();
    let (home, user) = (non_blocking_stream(device), non_blocking_stream(device));
    let scope = race_scope(RaceMode::Report);
    let source = DeviceBuffer::from_slice(&home, &vec![7u32; N]).unwrap();
    let mut seen = DeviceBuffer::<u32, _>::zeroed(&user, N).unwrap();
    home.synchronize().unwrap();
    // A kernel on `user` reads `source` through a raw pointer, 50 ms from now.
    slow_copy(&user, source.as_ptr(), seen.as_mut_ptr()).unwrap();
    let freed = source.as_ptr() as usize;
    // The drop frees `source` on its home stream, which never waited for that kernel; the next
    // allocation there may get the memory at once, and its bytes are copied in.
    drop(source);
    let mut next = DeviceBuffer::<u32, _>::new(&home, N).unwrap();
    next.copy_from_slice(&home, &vec![0xabab_abab; N]).unwrap();
    let reports = scope.take_reports();
    user.synchronize().unwrap();
    assert_one_race(&reports, RaceKind::FreeInUse, "slow copy", "cudaFreeAsync");
    assert_eq!(next.as_ptr() as usize, freed, "the pool hands the freed block to the next allocation on the stream");
    if cuda_stream_tests::concurrency_visible() {
        // The race is real: the kernel read the next allocation's bytes, not the freed data.
        assert!(seen.to_vec().unwrap().iter().all(|&v| v == 0xabab_abab), "the kernel read reused memory");
    }
    drop(next);
    home.synchronize().unwrap();

    // With the edge: silent.
    let source = DeviceBuffer::<u32, _>::zeroed(&home, N).unwrap();
    user.wait_stream(&home).unwrap();
    user.declare_accesses("reads source", &[source.read_access()]).unwrap();
    home.wait_stream(&user).unwrap();
    drop(source);
    assert_eq!(scope.take_reports(), []);
    home.synchronize().unwrap();
}

#[test]
fn a_host_access_while_a_copy_into_pinned_memory_is_in_flight_is_reported() {
    let device = gpu_or_skip!();
    let stream = non_blocking_stream(device);
    let source = DeviceBuffer::from_slice(&stream, &vec![9u32; N]).unwrap();
    let mut pinned = PinnedBuffer::<u32>::zeroed(N).unwrap();
    stream.synchronize().unwrap();
    let scope = race_scope(RaceMode::Report);
    let host = pinned.as_mut_slice().unwrap().as_mut_ptr();
    // A kernel writes the pinned memory through its mapped address, 50 ms from now.
    slow_copy(&stream, source.as_ptr(), host).unwrap();
    let bytes = N * size_of::<u32>();
    let read = cuda_stream::race::HostAccess { address: host.cast_const().cast(), bytes, kind: AccessKind::Read };
    cuda_stream::race::host_access("reading the results", &[read]).unwrap();
    let reports = scope.take_reports();
    assert_eq!(kinds(&reports), [RaceKind::HostInFlight], "{reports:#?}");
    assert!(reports[0].missing_edge.contains("the host must wait"), "{}", reports[0].missing_edge);
    if cuda_stream_tests::concurrency_visible() {
        // SAFETY: pinned memory of N u32s; the kernel may be writing it: a racy read, the
        // point of the test.
        let early = unsafe { std::ptr::read_volatile(host) };
        assert_eq!(early, 0, "the race is real: the host read before the kernel wrote");
    }
    stream.synchronize().unwrap();
    cuda_stream::race::host_access("reading the results", &[read]).unwrap();
    assert_eq!(scope.take_reports(), []);
    assert!(pinned.as_slice().unwrap().iter().all(|&v| v == 9));
}

#[test]
fn the_detector_reports_exactly_the_pairs_the_ordering_model_leaves_unordered() {
    let device = gpu_or_skip!();
    let programs = std::env::var("CUDA_STREAM_MODEL_PROGRAMS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(cuda_stream_tests::scaled(1000, 50) as u64);
    let scope = race_scope(RaceMode::Report);
    let (mut expected_total, mut ordered_total) = (0, 0);
    for seed in 0..programs {
        let program = Program::generate(seed);
        let base = 0x7e00_0000_0000 + seed * 0x10_0000;
        program.run_declared(device, base).unwrap_or_else(|error| panic!("seed {seed}: {error}\n{program}"));
        let step = |name: &str| name.strip_prefix("step ").and_then(|n| n.parse::<usize>().ok());
        let reported: BTreeSet<(usize, usize)> = scope
            .take_reports()
            .iter()
            .map(|r| (step(&r.earlier.operation).expect("a step"), step(&r.later.operation).expect("a step")))
            .collect();
        let expected = program.unordered_conflicts();
        assert_eq!(reported, expected, "seed {seed}: reported pairs against the model's\n{program}");
        expected_total += expected.len();
        let accesses = program.accesses().iter().filter(|a| a.is_some()).count();
        ordered_total += accesses * accesses.saturating_sub(1) / 2 - expected.len();
    }
    eprintln!(
        "{programs} random programs: {expected_total} unordered conflicting pairs reported, none else \
         (of {ordered_total} other access pairs): 0 false positives, 0 false negatives"
    );
    assert!(expected_total > programs as usize / 2, "the programs make enough races to test something");
}

#[test]
fn a_built_graphs_memory_nodes_are_replayed_and_their_launch_is_ordered_with_the_buffers_uses() {
    let device = gpu_or_skip!();
    let home = std::sync::Arc::new(non_blocking_stream(device));
    let (launches, raw) = (non_blocking_stream(device), non_blocking_stream(device));
    let scope = race_scope(RaceMode::Report);
    let target = std::sync::Arc::new(DeviceBuffer::<u32, _>::zeroed(std::sync::Arc::clone(&home), N).unwrap());
    let mut sink = DeviceBuffer::<u32, _>::zeroed(&*home, N).unwrap();
    home.synchronize().unwrap();
    let mut graph = cuda_stream::Graph::new(device).unwrap();
    graph.builder().add_fill_bytes(&target, .., 0x11, &[]).unwrap();
    let exec = graph.instantiate().unwrap();
    assert_eq!(scope.take_reports(), [], "built nodes run at the graph's launches");
    exec.launch(&launches).unwrap();
    // A raw kernel reads the target on a stream the buffer does not know: unordered.
    slow_copy(&raw, target.as_ptr(), sink.as_mut_ptr()).unwrap();
    let reports = scope.take_reports();
    raw.synchronize().unwrap();
    assert_eq!(kinds(&reports), [RaceKind::WriteRead], "the memset node's write, the raw read: {reports:#?}");
    assert!(reports[0].earlier.operation.contains("cudaGraphAddMemsetNode"), "{}", reports[0]);
    assert_eq!(reports[0].later.operation, "slow copy");

    // A read through the buffer is ordered after the launch by the buffer itself: silent, and
    // it sees the memset.
    exec.launch(&launches).unwrap();
    assert_eq!(target.to_vec().unwrap(), vec![0x1111_1111; N]);
    assert_eq!(scope.take_reports(), []);
}

#[test]
fn a_graphs_own_memory_is_not_reported_across_launches_on_two_streams() {
    let device = gpu_or_skip!();
    let home = std::sync::Arc::new(non_blocking_stream(device));
    let (capturing, first, second) =
        (non_blocking_stream(device), non_blocking_stream(device), non_blocking_stream(device));
    let scope = race_scope(RaceMode::Report);
    let out = std::sync::Arc::new(DeviceBuffer::<u32, _>::zeroed(std::sync::Arc::clone(&home), N).unwrap());
    home.synchronize().unwrap();
    let mut capture = capturing.begin_capture(cuda_stream::capture::ThreadLocal).unwrap();
    let mut block = capture.alloc::<u32>(&capturing, N).unwrap();
    capture.fill_bytes(&capturing, &block, .., 0x21).unwrap();
    capture.copy(&capturing, (&out, ..), (&block, ..)).unwrap();
    capture.free(&capturing, &mut block).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    // CUDA orders an executable's launches; the shared buffer's uses order them here too. The
    // graph's own block (the same address at both launches) is not declared.
    exec.launch(&first).unwrap();
    exec.launch(&second).unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![0x2121_2121; N]);
    assert_eq!(scope.take_reports(), []);
}

#[test]
fn an_executables_launches_on_two_streams_are_ordered_as_cuda_orders_them() {
    let device = gpu_or_skip!();
    let (home, capturing) = (non_blocking_stream(device), non_blocking_stream(device));
    let (first, second, other) =
        (non_blocking_stream(device), non_blocking_stream(device), non_blocking_stream(device));
    let scope = race_scope(RaceMode::Report);
    let source = DeviceBuffer::from_slice(&home, &vec![7u32; N]).unwrap();
    let mut target = DeviceBuffer::<u32, _>::zeroed(&home, N).unwrap();
    let mut sink = DeviceBuffer::<u32, _>::zeroed(&home, N).unwrap();
    home.synchronize().unwrap();
    let capture = capturing.begin_capture(cuda_stream::capture::ThreadLocal).unwrap();
    slow_copy(&capturing, source.as_ptr(), target.as_mut_ptr()).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    // Two launches on two streams, nothing between them: CUDA runs the second after the first.
    exec.launch(&first).unwrap();
    exec.launch(&second).unwrap();
    assert_eq!(scope.take_reports(), [], "CUDA orders one executable's launches");
    // A raw read of the target on a third stream is ordered after neither.
    slow_copy(&other, target.as_ptr(), sink.as_mut_ptr()).unwrap();
    let reports = scope.take_reports();
    for stream in [&first, &second, &other] {
        stream.synchronize().unwrap();
    }
    // The read is ordered after neither launch: one report against each replayed write.
    assert_eq!(kinds(&reports), [RaceKind::WriteRead; 2], "the replayed writes, the raw read: {reports:#?}");
    for report in &reports {
        assert!(report.earlier.operation.starts_with("cudaGraphLaunch (captured: slow copy"), "{report}");
        assert_eq!(report.later.operation, "slow copy");
    }
}

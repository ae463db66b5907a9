//! Graphs built node by node that hold memory work, on a GPU: memcpy nodes between device
//! buffers and between a buffer and page-locked memory, memset nodes, host-function nodes,
//! adopted raw nodes, node counts and clones (`GraphBuilder::add_copy`, `add_fill_bytes`, ...).
//! Each test observes the GPU: the bytes a launch left, read back through the crate's ordered
//! copies or the page-locked buffer's host access, a host function's runs and drop, a pool's
//! used bytes. A spin kernel captured before the memory nodes makes every launch slow, so a
//! read that were not ordered after it would see the bytes from before.

use cuda_stream::capture::{CaptureMode, ThreadLocal};
use cuda_stream::conditional::{GraphBuilder, GraphNode};
use cuda_stream::{
    Capture, CaptureMemory, DeviceBuffer, Error, Graph, GraphBuffer, GraphExec, InstantiateOptions, MemPool,
    PinnedBuffer, SharedPinned, Stream, StreamRef, check, sys,
};
use cuda_stream_tests::probe::{Probe, Token};
use cuda_stream_tests::{FlagOutcome, MappedFlag, TagEntry, TagLog, gpu_or_skip, non_blocking_stream, spin, wait_flag};
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long each launch spins before its memory nodes run.
const SLOW: Duration = Duration::from_millis(40);

const N: usize = 1024;

type Buffer = Arc<DeviceBuffer<u32, Arc<Stream>>>;
type Pinned = Arc<SharedPinned<u32>>;

/// One test at a time that uses CUDA's graph allocator, whose counters are the device's.
fn graph_memory_alone() -> std::sync::MutexGuard<'static, ()> {
    static ALONE: Mutex<()> = Mutex::new(());
    ALONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn home(stream: &Arc<Stream>) -> Arc<Stream> {
    Arc::clone(stream)
}

fn pinned(values: &[u32]) -> Pinned {
    Arc::new(SharedPinned::new(PinnedBuffer::from_slice(values).unwrap()))
}

/// Fills the builder's level, by capture of `stream`, with one spin kernel of `SLOW`; returns
/// it as the node later nodes depend on.
fn slow_start(builder: &mut GraphBuilder<'_>, stream: &StreamRef) -> Vec<GraphNode> {
    let capture = builder.capture(stream, ThreadLocal).unwrap();
    spin(stream, SLOW).unwrap();
    capture.end().unwrap();
    builder.leaves().unwrap()
}

/// Captures a kernel that spins `SLOW`, then copies `source` into `target` (N u32s each), on
/// `capturing`, through the capture's `use_on`: the graph holds both.
fn capture_slow_copy<M: CaptureMode>(
    capture: &mut Capture<'_, M>,
    capturing: &StreamRef,
    source: &impl CaptureMemory<Element = u32>,
    target: &impl CaptureMemory<Element = u32>,
) {
    let read = capture.use_on(capturing, source, |_, source| source.cast_const()).unwrap();
    capture
        .use_on(capturing, target, |stream, target| {
            // SAFETY: N u32s each, in memory the graph holds for every launch.
            unsafe { cuda_stream_tests::spin_copy(stream, read, target, N, SLOW) }
        })
        .unwrap()
        .unwrap();
}

/// The values the host writes into the input before launch `round`.
fn input(round: u32) -> Vec<u32> {
    (0..N as u32).map(|i| i * 3 + round).collect()
}

/// The values a launch leaves in the output from `input`: its first half copied to the second
/// half, the first half set to bytes 0x01.
fn expected(input: &[u32]) -> Vec<u32> {
    let mut out = vec![0x0101_0101; N];
    out[N / 2..].copy_from_slice(&input[..N / 2]);
    out
}

#[test]
fn a_built_graph_copies_in_computes_and_copies_out_at_every_launch_and_holds_its_memory() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let (host_in, host_out) = (pinned(&input(0)), pinned(&[0; N]));
    let probe = Arc::new(Probe::default());
    let exec = {
        let staged: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
        let out: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
        let mut graph = Graph::new(device).unwrap();
        let mut builder = graph.builder();
        let start = slow_start(&mut builder, &stream);
        let copy_in = builder.add_copy_from_pinned(&staged, .., &host_in, .., &start).unwrap();
        let halves = builder.add_copy(&out, N / 2.., &staged, ..N / 2, &[copy_in]).unwrap();
        let fill = builder.add_fill_bytes(&out, ..N / 2, 0x01, &[copy_in]).unwrap();
        let copy_out = builder.add_copy_to_pinned(&host_out, .., &out, .., &[halves, fill]).unwrap();
        let token = Token(Arc::clone(&probe));
        builder.add_host_fn(move || token.run(), &[copy_out]).unwrap();
        assert_eq!(builder.node_count().unwrap(), 6, "spin, copy in, copy, fill, copy out, host function");
        assert_eq!(graph.node_count().unwrap(), 6);
        // The graph is all that holds the device buffers from here on.
        drop((staged, out));
        let exec = graph.instantiate().unwrap();
        drop(graph);
        exec
    };
    for round in 1..=3u32 {
        // The host's write waits for the previous launch's copy out of the input.
        host_in.lock().as_mut_slice().unwrap().copy_from_slice(&input(round));
        exec.launch(&*stream).unwrap();
        // The host's read waits for this launch's copy into the output: the spin before it
        // makes an unordered read see the previous round's bytes.
        let seen = host_out.lock().as_slice().unwrap().to_vec();
        assert_eq!(seen, expected(&input(round)), "round {round}");
    }
    stream.synchronize().unwrap();
    assert_eq!(probe.runs(), 3, "the host function ran once per launch");
    drop(exec);
    assert!(probe.wait_dropped(), "the closure is dropped once no graph or executable holds it");
    assert!(!probe.ran_after_drop());
}

#[test]
fn a_launch_waits_for_the_buffers_earlier_uses_elsewhere_and_later_uses_wait_for_it() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let (other, launches) = (non_blocking_stream(device), non_blocking_stream(device));
    // An earlier write on another stream, asynchronous and slower than the launch's own spin:
    // still running when the graph that reads the buffer launches.
    let values: Vec<u32> = (0..N as u32).map(|i| i ^ 0x5a5a).collect();
    let mut staged = PinnedBuffer::from_slice(&values).unwrap();
    let mut source = DeviceBuffer::<u32, _>::zeroed(home(&stream), N).unwrap();
    spin(&other, SLOW * 3).unwrap();
    source.copy_from_pinned(&other, &mut staged).unwrap();
    let source: Buffer = Arc::new(source);
    let target: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
    let mut graph = Graph::new(device).unwrap();
    let mut builder = graph.builder();
    let start = slow_start(&mut builder, &launches);
    builder.add_copy(&target, .., &source, .., &start).unwrap();
    let exec = graph.instantiate().unwrap();
    exec.launch(&launches).unwrap();
    // A read on the home stream, at once: it waits for the launch's write of `target`, which
    // waited for the write on `other`.
    assert_eq!(target.to_vec().unwrap(), values, "the launch saw the earlier write, and the read saw the launch's");
}

#[test]
fn a_buffer_the_graph_holds_is_freed_after_the_last_launch_of_its_last_holder() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let pool = MemPool::new(device).unwrap();
    let host_out = pinned(&[0; N]);
    let exec = {
        let buffer: Buffer = Arc::new(DeviceBuffer::new_in(&pool, home(&stream), N).unwrap());
        let mut graph = Graph::new(device).unwrap();
        let mut builder = graph.builder();
        let start = slow_start(&mut builder, &stream);
        let fill = builder.add_fill_bytes(&buffer, .., 0x7f, &start).unwrap();
        builder.add_copy_to_pinned(&host_out, .., &buffer, .., &[fill]).unwrap();
        let exec = graph.instantiate().unwrap();
        drop((graph, buffer));
        exec
    };
    stream.synchronize().unwrap();
    assert!(pool.stats().unwrap().used_current > 0, "the executable holds the buffer");
    let launches = non_blocking_stream(device);
    for _ in 0..3 {
        exec.launch(&launches).unwrap();
    }
    // The last holder goes while its launches run: the free waits for them on the home stream.
    drop(exec);
    assert_eq!(host_out.lock().as_slice().unwrap(), vec![0x7f7f_7f7f; N], "the launches ran");
    stream.synchronize().unwrap();
    assert_eq!(pool.stats().unwrap().used_current, 0, "the buffer was freed after the launches");
}

#[test]
fn a_clone_replays_the_same_nodes_and_holds_the_memory_after_the_original_is_gone() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let host_out = pinned(&[0; N]);
    let clone = {
        let buffer: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
        let mut graph = Graph::new(device).unwrap();
        let mut builder = graph.builder();
        let start = slow_start(&mut builder, &stream);
        let fill = builder.add_fill_bytes(&buffer, 1..N - 1, 0x22, &start).unwrap();
        builder.add_copy_to_pinned(&host_out, .., &buffer, .., &[fill]).unwrap();
        let clone = graph.try_clone().unwrap();
        assert_eq!(clone.node_count().unwrap(), graph.node_count().unwrap());
        clone
    };
    let exec = clone.instantiate().unwrap();
    drop(clone);
    exec.launch(&*stream).unwrap();
    let seen = host_out.lock().as_slice().unwrap().to_vec();
    assert_eq!((seen[0], seen[1], seen[N - 2], seen[N - 1]), (0, 0x2222_2222, 0x2222_2222, 0));
}

#[test]
fn a_locked_page_locked_buffer_refuses_the_launch_and_nothing_runs_then_the_next_launch_copies_the_hosts_write() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let host_in = pinned(&input(7));
    let probe = Arc::new(Probe::default());
    let buffer: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
    let mut graph = Graph::new(device).unwrap();
    let mut builder = graph.builder();
    let copy = builder.add_copy_from_pinned(&buffer, .., &host_in, .., &[]).unwrap();
    let token = Token(Arc::clone(&probe));
    builder.add_host_fn(move || token.run(), &[copy]).unwrap();
    let exec = graph.instantiate().unwrap();
    {
        let mut host = host_in.lock();
        assert!(matches!(exec.launch(&*stream), Err(Error::GraphMisuse(_))), "refused while the host holds the lock");
        let mut other = Graph::new(device).unwrap();
        let refused = other.builder().add_copy_from_pinned(&buffer, .., &host_in, .., &[]);
        assert!(matches!(refused, Err(Error::GraphMisuse(_))), "no node is added under the host's lock either");
        assert!(host_in.try_lock().is_none(), "one guard at a time");
        // The guard writes the elements (the buffer itself is out of its reach).
        host.as_mut_slice().unwrap().copy_from_slice(&input(8));
    }
    stream.synchronize().unwrap();
    assert_eq!(probe.runs(), 0, "no refused launch ran");
    assert_eq!(buffer.to_vec().unwrap(), vec![0; N]);
    exec.launch(&*stream).unwrap();
    assert_eq!(buffer.to_vec().unwrap(), input(8), "the launch copied the host's write");
    assert_eq!(host_in.len(), N);
}

#[test]
fn bad_nodes_are_refused_before_cuda() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let buffer: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
    let short: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N / 2).unwrap());
    let mut graph = Graph::new(device).unwrap();
    let mut builder = graph.builder();
    let size = |result: cuda_stream::Result<GraphNode>| matches!(result, Err(Error::Size(_)));
    assert!(size(builder.add_fill_bytes(&buffer, N..N + 1, 0, &[])), "outside the buffer");
    assert!(size(builder.add_copy(&short, .., &buffer, .., &[])), "different lengths");
    assert!(size(builder.add_copy(&buffer, 0..10, &buffer, 5..15, &[])), "overlapping ranges of one buffer");
    assert!(builder.add_copy(&buffer, 0..10, &buffer, 10..20, &[]).is_ok(), "disjoint ranges of one buffer");
    let many: Vec<Buffer> = (0..12).map(|_| Arc::new(DeviceBuffer::zeroed(home(&stream), 1).unwrap())).collect();
    for (i, one) in many.iter().enumerate() {
        let added = builder.add_fill_bytes(one, .., 0, &[]);
        assert_eq!(added.is_ok(), i < 11, "12 device buffers at most: buffer {i} after the first one");
    }
    assert_eq!(builder.node_count().unwrap(), 12);
    // A graph that holds buffers is not instantiated for device launch, nor does an
    // executable instantiated for it take such a graph's nodes by an update.
    let refused = graph.instantiate_with(InstantiateOptions::new().device_launch());
    assert!(matches!(refused, Err(Error::GraphMisuse(_))));
    // A kernel node (device launch takes kernel, memcpy and memset nodes).
    let mut plain = Graph::new(device).unwrap();
    let mut plain_builder = plain.builder();
    let capture = plain_builder.capture(&stream, ThreadLocal).unwrap();
    spin(&*stream, Duration::ZERO).unwrap();
    capture.end().unwrap();
    let mut exec = plain.instantiate_with(InstantiateOptions::new().device_launch()).unwrap();
    let mut holding = Graph::new(device).unwrap();
    holding.builder().add_fill_bytes(&buffer, .., 0, &[]).unwrap();
    assert!(matches!(exec.update(&holding), Err(Error::GraphMisuse(_))));
}

#[test]
fn adopted_raw_nodes_order_later_nodes_and_foreign_ones_are_refused() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let buffer: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
    let mut graph = Graph::new(device).unwrap();
    let mut other = Graph::new(device).unwrap();
    let raw_empty = |graph: sys::cudaGraph_t| {
        let mut node: sys::cudaGraphNode_t = std::ptr::null_mut();
        // SAFETY: a live graph of this thread's; no dependencies; a valid out-pointer.
        check(unsafe { sys::cudaGraphAddEmptyNode(&mut node, graph, std::ptr::null(), 0) }, "cudaGraphAddEmptyNode")
            .unwrap();
        node
    };
    let foreign = raw_empty(other.builder().as_raw());
    let mut builder = graph.builder();
    let mine = raw_empty(builder.as_raw());
    // SAFETY: an empty node uses nothing.
    assert!(matches!(unsafe { builder.adopt_node(foreign) }, Err(Error::GraphMisuse(_))));
    // SAFETY: as above.
    let adopted = unsafe { builder.adopt_node(mine) }.unwrap();
    let fill = builder.add_fill_bytes(&buffer, .., 0x33, &[adopted]).unwrap();
    assert_eq!(builder.leaves().unwrap(), vec![fill], "the fill depends on the adopted node");
    graph.instantiate().unwrap().launch(&*stream).unwrap();
    assert_eq!(buffer.to_vec().unwrap(), vec![0x3333_3333; N]);
}

#[test]
fn a_body_holds_no_host_function_and_a_conditional_graph_is_not_cloned() {
    let device = gpu_or_skip!();
    let mut graph = Graph::new(device).unwrap();
    let mut builder = graph.builder();
    let condition = builder.condition(Some(0)).unwrap();
    let (_node, mut body) = builder.add_if(&condition, &[]).unwrap();
    assert!(matches!(body.add_host_fn(|| {}, &[]), Err(Error::GraphMisuse(_))));
    assert!(matches!(graph.try_clone(), Err(Error::GraphMisuse(_))));
}

#[test]
fn the_graph_allocators_memory_is_counted_kept_by_the_executable_and_trimmed_once_it_is_gone() {
    let _alone = graph_memory_alone();
    let device = gpu_or_skip!();
    let stream = non_blocking_stream(device);
    const SCRATCH: usize = 64 << 20;
    device.trim_graph_memory().unwrap();
    device.reset_graph_memory_peaks().unwrap();
    let before = device.graph_memory().unwrap();
    let mut capture = stream.begin_capture(ThreadLocal).unwrap();
    capture.scratch::<u8, _>(&stream, SCRATCH, |stream, _| spin(stream, SLOW).unwrap()).unwrap();
    let graph = capture.end().unwrap();
    assert!(graph.try_clone().is_err(), "CUDA clones no graph with memory allocation nodes");
    let exec = graph.instantiate().unwrap();
    exec.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    let done = device.graph_memory().unwrap();
    assert!(done.reserved_current >= before.reserved_current + SCRATCH as u64, "{before:?} then {done:?}");
    assert!(done.used_high >= SCRATCH as u64, "the launch's allocation is the high watermark: {done:?}");
    assert!(
        done.used_current >= before.used_current + SCRATCH as u64,
        "the executable keeps its graph memory between launches (CUDA's rule): {done:?}"
    );
    drop((exec, graph));
    stream.synchronize().unwrap();
    device.trim_graph_memory().unwrap();
    let trimmed = device.graph_memory().unwrap();
    println!("graph memory: before {before:?}, after the launch {done:?}, trimmed {trimmed:?}");
    assert!(
        trimmed.reserved_current < done.reserved_current,
        "with its executable gone, trim gave the memory back: {done:?} then {trimmed:?}"
    );
    device.reset_graph_memory_peaks().unwrap();
    let reset = device.graph_memory().unwrap();
    assert!(reset.used_high < done.used_high && reset.reserved_high < done.reserved_high, "{reset:?}");
}

#[test]
fn an_update_moves_the_executables_copy_to_other_buffers_and_the_old_ones_go_after_its_launches() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let pool = MemPool::new(device).unwrap();
    let host_out = pinned(&[0; N]);
    // Two graphs of one shape: fill a buffer, copy it out. The first one's buffer comes from
    // `pool`, so that its free shows.
    let build = |buffer: &Buffer, byte: u8| {
        let mut graph = Graph::new(device).unwrap();
        let mut builder = graph.builder();
        let start = slow_start(&mut builder, &stream);
        let fill = builder.add_fill_bytes(buffer, .., byte, &start).unwrap();
        builder.add_copy_to_pinned(&host_out, .., buffer, .., &[fill]).unwrap();
        graph
    };
    let mut exec =
        build(&Arc::new(DeviceBuffer::new_in(&pool, home(&stream), N).unwrap()), 0x44).instantiate().unwrap();
    let new = build(&Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap()), 0x55);
    exec.launch(&*stream).unwrap();
    exec.update(&new).unwrap();
    drop(new);
    // The old buffer's last holder is gone; its free waits for the launch still running.
    assert_eq!(host_out.lock().as_slice().unwrap(), vec![0x4444_4444; N], "the launch before the update");
    stream.synchronize().unwrap();
    assert_eq!(pool.stats().unwrap().used_current, 0, "the old buffer was freed after its launch");
    exec.launch(&*stream).unwrap();
    assert_eq!(host_out.lock().as_slice().unwrap(), vec![0x5555_5555; N], "the updated copy");
}

#[test]
fn two_executables_with_temporaries_replayed_at_once_on_two_streams_never_alias() {
    let _alone = graph_memory_alone();
    let device = gpu_or_skip!();
    let home = non_blocking_stream(device);
    let capturing = non_blocking_stream(device);
    // Each graph copies its input into graph-owned scratch, spins, and copies the scratch out:
    // scratch shared with the other graph's while both run would mix the patterns.
    let graph_with_temporary = |input: &DeviceBuffer<u32, &Stream>, output: &mut DeviceBuffer<u32, &Stream>| {
        let mut capture = capturing.begin_capture(ThreadLocal).unwrap();
        let (source, destination) = (input.as_ptr(), output.as_mut_ptr());
        capture
            .scratch::<u32, _>(&capturing, N, |stream, scratch| {
                // SAFETY: the input, output and scratch hold N u32s of the device, alive for
                // every launch (the test synchronizes before dropping them).
                unsafe {
                    cuda_stream_tests::spin_copy(stream, source, scratch, N, Duration::ZERO).unwrap();
                    cuda_stream_tests::spin_copy(stream, scratch, destination, N, SLOW / 4).unwrap();
                }
            })
            .unwrap();
        capture.end().unwrap().instantiate().unwrap()
    };
    let patterns = [0xaaaa_0000u32, 0x0000_bbbb];
    let inputs: Vec<_> = patterns.iter().map(|&p| DeviceBuffer::from_slice(&home, &vec![p; N]).unwrap()).collect();
    let mut outputs: Vec<_> = (0..2).map(|_| DeviceBuffer::<u32, _>::zeroed(&home, N).unwrap()).collect();
    home.synchronize().unwrap();
    let execs: Vec<_> = inputs.iter().zip(&mut outputs).map(|(i, o)| graph_with_temporary(i, o)).collect();
    let streams = [non_blocking_stream(device), non_blocking_stream(device)];
    for _ in 0..8 {
        for (exec, stream) in execs.iter().zip(&streams) {
            exec.launch(stream).unwrap();
        }
    }
    for stream in &streams {
        stream.synchronize().unwrap();
    }
    for (output, pattern) in outputs.iter().zip(patterns) {
        assert_eq!(output.to_vec().unwrap(), vec![pattern; N], "each graph's temporary held its own pattern");
    }
}

#[test]
fn a_capture_copies_in_computes_and_copies_out_with_buffers_its_graph_holds() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let capturing = non_blocking_stream(device);
    let (host_in, host_out) = (pinned(&input(0)), pinned(&[0; N]));
    let exec = {
        let staged: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
        let out: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
        stream.synchronize().unwrap();
        let mut capture = capturing.begin_capture(ThreadLocal).unwrap();
        capture.copy_from_pinned(&capturing, (&staged, ..), (&host_in, ..)).unwrap();
        spin(&capturing, SLOW).unwrap();
        capture.copy(&capturing, (&out, N / 2..), (&staged, ..N / 2)).unwrap();
        capture.fill_bytes(&capturing, &out, ..N / 2, 0x01).unwrap();
        capture.copy_to_pinned(&capturing, (&host_out, ..), (&out, ..)).unwrap();
        let graph = capture.end().unwrap();
        assert_eq!(graph.node_count().unwrap(), 5, "copy in, spin, copy, fill, copy out");
        assert_eq!(Arc::strong_count(&staged), 2, "the graph holds the buffer");
        let exec = graph.instantiate().unwrap();
        // The executable is all that holds the device buffers from here on.
        let kept = Arc::downgrade(&staged);
        drop((staged, out, graph));
        (exec, kept)
    };
    let (exec, kept) = exec;
    for round in 1..=3u32 {
        host_in.lock().as_mut_slice().unwrap().copy_from_slice(&input(round));
        exec.launch(&*stream).unwrap();
        let seen = host_out.lock().as_slice().unwrap().to_vec();
        assert_eq!(seen, expected(&input(round)), "round {round}");
    }
    assert!(kept.upgrade().is_some(), "the executable holds the buffer");
    drop(exec);
    assert!(kept.upgrade().is_none(), "its last holder gone, the buffer is freed (after its launches)");
}

#[test]
fn a_captured_kernel_uses_buffers_through_use_on_and_its_launches_are_ordered_with_their_uses() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let (capturing, launches) = (non_blocking_stream(device), non_blocking_stream(device));
    let values: Vec<u32> = (0..N as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let source: Buffer = Arc::new(DeviceBuffer::from_slice(home(&stream), &values).unwrap());
    let target: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
    let mut capture = capturing.begin_capture(ThreadLocal).unwrap();
    capture_slow_copy(&mut capture, &capturing, &source, &target);
    let exec = capture.end().unwrap().instantiate().unwrap();
    // The source is the executable's alone now.
    let kept = Arc::downgrade(&source);
    drop(source);
    let source = kept;
    exec.launch(&launches).unwrap();
    // A read on the home stream at once: after the launch's slow write.
    assert_eq!(target.to_vec().unwrap(), values);
    assert!(source.upgrade().is_some(), "the executable holds the buffer its captured kernel reads");
    drop(exec);
    assert!(source.upgrade().is_none());
}

#[test]
fn a_captures_memory_work_off_the_capture_is_refused_a_dropped_capture_lets_go_and_a_failed_one_leaks() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let (capturing, idle) = (non_blocking_stream(device), non_blocking_stream(device));
    let buffer: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
    stream.synchronize().unwrap();
    let other_capturing = non_blocking_stream(device);
    let mut capture = capturing.begin_capture(ThreadLocal).unwrap();
    let other = other_capturing.begin_capture(ThreadLocal).unwrap();
    let misuse = |result: cuda_stream::Result<()>| matches!(result, Err(Error::CaptureMisuse(_)));
    assert!(misuse(capture.fill_bytes(&idle, &buffer, .., 1)), "a stream outside the capture");
    assert!(misuse(capture.fill_bytes(&other_capturing, &buffer, .., 1)), "a stream of another capture");
    let ran = std::cell::Cell::new(false);
    assert!(misuse(capture.use_on(&idle, &buffer, |_, _| ran.set(true))), "use_on too");
    assert!(!ran.get(), "a refused use_on does not run its closure");
    assert_eq!(Arc::strong_count(&buffer), 1, "nothing held for refused work");
    drop(other);
    capture.fill_bytes(&capturing, &buffer, .., 1).unwrap();
    assert_eq!(Arc::strong_count(&buffer), 2);
    drop(capture);
    assert_eq!(Arc::strong_count(&buffer), 1, "a dropped capture's graph is gone, and its hold with it");

    // A capture whose end fails (a forked stream never joined back) may have a graph that
    // someone else keeps: the memory is leaked, never freed.
    let mut capture = capturing.begin_capture(ThreadLocal).unwrap();
    capture.fill_bytes(&capturing, &buffer, .., 2).unwrap();
    let side = capturing.fork().unwrap();
    spin(&side, Duration::ZERO).unwrap();
    assert!(capture.end().is_err(), "an unjoined fork fails the end");
    assert_eq!(Arc::strong_count(&buffer), 2, "leaked, not freed");
    assert_eq!(buffer.to_vec().unwrap(), vec![0; N], "no captured work ran");
    drop(side);
}

#[test]
fn a_capture_into_a_graph_that_holds_memory_adds_to_what_it_holds() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let capturing = non_blocking_stream(device);
    let (built, captured): (Buffer, Buffer) = (
        Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap()),
        Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap()),
    );
    stream.synchronize().unwrap();
    let mut graph = Graph::new(device).unwrap();
    graph.builder().add_fill_bytes(&built, .., 0x66, &[]).unwrap();
    let mut capture = capturing.begin_capture_into(graph, ThreadLocal).unwrap();
    capture.fill_bytes(&capturing, &captured, .., 0x77).unwrap();
    let graph = capture.end().unwrap();
    assert_eq!((Arc::strong_count(&built), Arc::strong_count(&captured)), (2, 2), "the graph holds both");
    let exec = graph.instantiate().unwrap();
    drop(graph);
    let (built_weak, captured_weak) = (Arc::downgrade(&built), Arc::downgrade(&captured));
    exec.launch(&*stream).unwrap();
    assert_eq!(built.to_vec().unwrap(), vec![0x6666_6666; N]);
    assert_eq!(captured.to_vec().unwrap(), vec![0x7777_7777; N]);
    drop((built, captured));
    assert!(built_weak.upgrade().is_some() && captured_weak.upgrade().is_some(), "the executable holds both");
    drop(exec);
    assert!(built_weak.upgrade().is_none() && captured_weak.upgrade().is_none());
}

#[test]
fn a_capture_another_library_ended_never_ends_the_next_one_and_leaks_its_memory() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let capturing = non_blocking_stream(device);
    let buffer: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
    stream.synchronize().unwrap();
    let mut first = capturing.begin_capture(ThreadLocal).unwrap();
    first.fill_bytes(&capturing, &buffer, .., 0x12).unwrap();
    // Another library ends it (as cudarc's `end_capture` would) and keeps the graph.
    let mut foreign: sys::cudaGraph_t = std::ptr::null_mut();
    // SAFETY: the stream's capture, begun on this thread, ended once; a valid out-pointer.
    check(unsafe { sys::cudaStreamEndCapture(capturing.as_raw(), &mut foreign) }, "cudaStreamEndCapture").unwrap();
    let second = capturing.begin_capture(ThreadLocal).unwrap();
    spin(&capturing, Duration::ZERO).unwrap();
    // The first capture's end must not end the second, nor free what the foreign graph uses.
    assert!(matches!(first.end(), Err(Error::CaptureMisuse(_))), "ended elsewhere");
    assert_eq!(capturing.capture_info().unwrap().id, second.id(), "the second capture goes on");
    assert_eq!(second.end().unwrap().node_count().unwrap(), 1, "the second capture's own graph");
    assert_eq!(Arc::strong_count(&buffer), 2, "the first capture's hold is leaked, never freed");
    // The foreign graph still sets the buffer.
    let mut exec: sys::cudaGraphExec_t = std::ptr::null_mut();
    // SAFETY: the foreign graph, instantiated, launched, and both destroyed once, here.
    unsafe {
        check(sys::cudaGraphInstantiate(&mut exec, foreign, 0), "cudaGraphInstantiate").unwrap();
        check(sys::cudaGraphLaunch(exec, stream.as_raw()), "cudaGraphLaunch").unwrap();
    }
    stream.synchronize().unwrap();
    assert_eq!(buffer.to_vec().unwrap(), vec![0x1212_1212; N]);
    // SAFETY: as above.
    unsafe {
        check(sys::cudaGraphExecDestroy(exec), "cudaGraphExecDestroy").unwrap();
        check(sys::cudaGraphDestroy(foreign), "cudaGraphDestroy").unwrap();
    }
}

#[test]
fn an_executable_points_its_memory_nodes_at_other_buffers_of_the_same_kind_only() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let host_out = pinned(&[0; N]);
    let (first, second): (Buffer, Buffer) = (
        Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap()),
        Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap()),
    );
    let mut graph = Graph::new(device).unwrap();
    let mut builder = graph.builder();
    let start = slow_start(&mut builder, &stream);
    let fill = builder.add_fill_bytes(&first, .., 0x31, &start).unwrap();
    let out = builder.add_copy_to_pinned(&host_out, .., &first, .., &[fill]).unwrap();
    let mut exec = graph.instantiate().unwrap();
    exec.launch(&*stream).unwrap();
    // The change applies from the next launch on: the one enqueued still fills `first`.
    exec.set_fill_bytes(&graph, fill, &second, .., 0x32).unwrap();
    exec.set_copy_to_pinned(&graph, out, (&host_out, ..), (&second, ..)).unwrap();
    assert_eq!(host_out.lock().as_slice().unwrap(), vec![0x3131_3131; N], "the launch before the change");
    let kept = Arc::downgrade(&second);
    drop((first, second));
    exec.launch(&*stream).unwrap();
    assert_eq!(host_out.lock().as_slice().unwrap(), vec![0x3232_3232; N], "the changed nodes");
    assert!(kept.upgrade().is_some(), "the executable holds the new buffer");

    // Checked: a node of another kind, and a node of another graph, are refused before CUDA.
    let other: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
    let misuse = |result: cuda_stream::Result<()>| matches!(result, Err(Error::GraphMisuse(_)));
    assert!(
        misuse(exec.set_copy(&graph, fill, (&other, ..N / 2), (&other, N / 2..))),
        "a memset node is no memcpy node"
    );
    assert!(misuse(exec.set_fill_bytes(&graph, out, &other, .., 0)), "a memcpy node is no memset node");
    let mut foreign = Graph::new(device).unwrap();
    let foreign_fill = foreign.builder().add_fill_bytes(&other, .., 0, &[]).unwrap();
    assert!(misuse(exec.set_fill_bytes(&graph, foreign_fill, &other, .., 0)), "a node of another graph");
    assert!(misuse(exec.set_fill_bytes(&foreign, fill, &other, .., 0)), "another graph than the executable's own");
    // A clone's executable: the original's nodes are not the clone's.
    let clone = graph.try_clone().unwrap();
    let mut clone_exec = clone.instantiate().unwrap();
    assert!(
        misuse(clone_exec.set_fill_bytes(&clone, fill, &other, .., 0)),
        "the original's node in a clone's executable"
    );
    drop((exec, clone_exec, clone, graph));
    assert!(kept.upgrade().is_none());
}

#[test]
fn the_last_holders_drop_never_waits_for_the_copies_of_page_locked_memory_it_held() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let buffer: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
    // The launch begins with a kernel that waits for the host's flag: it cannot have ended
    // before the flag is set, however long the host's calls take on a busy machine.
    let gate = MappedFlag::new().unwrap();
    let exec = {
        let host_out = pinned(&[1; N]);
        let mut graph = Graph::new(device).unwrap();
        let mut builder = graph.builder();
        let capture = builder.capture(&stream, ThreadLocal).unwrap();
        wait_flag(&*stream, &gate, Duration::from_secs(30)).unwrap();
        capture.end().unwrap();
        let start = builder.leaves().unwrap();
        builder.add_copy_to_pinned(&host_out, .., &buffer, .., &start).unwrap();
        graph.instantiate().unwrap()
        // The graph and this scope's Arc of the page-locked memory drop here.
    };
    exec.launch(&*stream).unwrap();
    // The executable holds the last Arc: its drop frees the memory only once the launch's copy
    // into it has completed, and does not wait for that here (a drop that waited would never
    // return: the flag is set after it).
    drop(exec);
    assert!(!stream.query().unwrap(), "the launch ended before its gate opened");
    gate.set();
    stream.synchronize().unwrap();
    assert_eq!(gate.outcome(), FlagOutcome::Seen, "the launch's kernel saw the flag, not its timeout");
}

/// The pool's bytes in use once the device has run everything enqueued so far.
fn used_after_all(device: cuda_stream::Device, pool: &MemPool) -> u64 {
    device.synchronize().unwrap();
    pool.stats().unwrap().used_current
}

#[test]
fn a_borrowed_buffers_memory_outlives_its_owner_in_the_graph_and_goes_with_the_last_holder() {
    let device = gpu_or_skip!();
    let stream = non_blocking_stream(device);
    let launches = non_blocking_stream(device);
    let pool = MemPool::new(device).unwrap();
    let values: Vec<u32> = (0..N as u32).map(|i| i.wrapping_mul(40_503) ^ 0x00c0_ffee).collect();
    let host_out = pinned(&[0; N]);
    let exec = {
        // Borrowed buffers: their home is `&stream`, which no graph can keep.
        let mut source = DeviceBuffer::<u32, &Stream>::new_in(&pool, &stream, N).unwrap();
        source.copy_from_slice(&stream, &values).unwrap();
        let target = DeviceBuffer::<u32, &Stream>::new_in(&pool, &stream, N).unwrap();
        let mut graph = Graph::new(device).unwrap();
        let mut builder = graph.builder();
        let start = slow_start(&mut builder, &launches);
        let copy = builder.add_copy(&target, .., &source, .., &start).unwrap();
        builder.add_copy_to_pinned(&host_out, .., &target, .., &[copy]).unwrap();
        let exec = graph.instantiate().unwrap();
        drop(graph);
        // The owners go first: the memory stays the executable's.
        drop((source, target));
        exec
    };
    let held = used_after_all(device, &pool);
    assert!(held >= (2 * N * 4) as u64, "the executable holds both buffers' memory after their owners: {held} bytes");
    // New memory of the same size, tagged: were the held memory freed, it could be handed out
    // here, and the launches would overwrite the tags.
    let tagged: Vec<DeviceBuffer<u32, &Stream>> = (0..4)
        .map(|_| {
            let mut buffer = DeviceBuffer::new_in(&pool, &stream, N).unwrap();
            buffer.fill_bytes(&stream, 0xab).unwrap();
            buffer
        })
        .collect();
    for round in 0..3 {
        host_out.lock().as_mut_slice().unwrap().fill(0);
        exec.launch(&launches).unwrap();
        // After the launch's slow start: an unordered read would see the zeros.
        assert_eq!(host_out.lock().as_slice().unwrap(), values, "round {round}");
    }
    for buffer in &tagged {
        assert_eq!(buffer.to_vec().unwrap(), vec![0xabab_abab; N], "no launch wrote another allocation");
    }
    drop(tagged);
    // The last holder goes while a launch runs: the free waits for it, on a stream of its own.
    exec.launch(&launches).unwrap();
    drop(exec);
    assert_eq!(used_after_all(device, &pool), 0, "the last holder freed the memory after its launches");
    assert_eq!(host_out.lock().as_slice().unwrap(), values, "the last launch ran to its end");
}

#[test]
fn a_graph_dropped_before_the_borrowed_buffer_leaves_the_free_to_its_owner() {
    let device = gpu_or_skip!();
    let stream = non_blocking_stream(device);
    let pool = MemPool::new(device).unwrap();
    let host_out = pinned(&[0; N]);
    let buffer = DeviceBuffer::<u32, &Stream>::new_in(&pool, &stream, N).unwrap();
    {
        let mut graph = Graph::new(device).unwrap();
        let mut builder = graph.builder();
        let start = slow_start(&mut builder, &stream);
        let fill = builder.add_fill_bytes(&buffer, .., 0x3c, &start).unwrap();
        builder.add_copy_to_pinned(&host_out, .., &buffer, .., &[fill]).unwrap();
        graph.instantiate().unwrap().launch(&stream).unwrap();
    }
    // The owner's read is ordered after the launch, through the buffer's uses.
    assert_eq!(buffer.to_vec().unwrap(), vec![0x3c3c_3c3c; N]);
    assert!(used_after_all(device, &pool) > 0);
    drop(buffer);
    assert_eq!(used_after_all(device, &pool), 0, "the owner freed it, as any buffer");
}

#[test]
fn a_capture_holds_borrowed_buffers_and_their_owners_uses_are_ordered_with_its_launches() {
    let device = gpu_or_skip!();
    let stream = non_blocking_stream(device);
    let (capturing, launches, other) =
        (non_blocking_stream(device), non_blocking_stream(device), non_blocking_stream(device));
    let values: Vec<u32> = (0..N as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let source = DeviceBuffer::from_slice(&stream, &values).unwrap();
    let mut target = DeviceBuffer::<u32, _>::zeroed(&stream, N).unwrap();
    let mut capture = capturing.begin_capture(ThreadLocal).unwrap();
    capture_slow_copy(&mut capture, &capturing, &source, &target);
    capture.fill_bytes(&capturing, &target, ..1, 0xff).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    let mut expected = values.clone();
    expected[0] = u32::MAX;
    for round in 0..2 {
        exec.launch(&launches).unwrap();
        // The owner's read on the home stream at once: after the launch's slow write.
        assert_eq!(target.to_vec().unwrap(), expected, "round {round}");
        // The owner's write elsewhere: the next launch waits for it, and overwrites it.
        spin(&other, SLOW).unwrap();
        target.fill_bytes(&other, 0).unwrap();
    }
    exec.launch(&launches).unwrap();
    assert_eq!(target.to_vec().unwrap(), expected, "the launch came after the owner's write");
    // The owners go; the executable keeps replaying into memory that is its alone.
    drop((source, target));
    exec.launch(&launches).unwrap();
    launches.synchronize().unwrap();
}

#[test]
fn a_borrowed_buffer_is_refused_where_a_graph_could_not_be_ordered_with_its_home_work() {
    let device = gpu_or_skip!();
    let stream = non_blocking_stream(device);
    let (capturing, other) = (non_blocking_stream(device), non_blocking_stream(device));
    let graph_misuse = |result: cuda_stream::Result<GraphNode>| matches!(result, Err(Error::GraphMisuse(_)));
    // Its address handed out for home work the buffer does not see: no graph holds it.
    let exported = DeviceBuffer::<u32, _>::zeroed(&stream, N).unwrap();
    let _address = exported.as_ptr();
    let mut graph = Graph::new(device).unwrap();
    let mut builder = graph.builder();
    assert!(graph_misuse(builder.add_fill_bytes(&exported, .., 1, &[])));
    // Held first and handed out after: the launch is refused, and nothing runs.
    let buffer = DeviceBuffer::<u32, _>::zeroed(&stream, N).unwrap();
    builder.add_fill_bytes(&buffer, .., 1, &[]).unwrap();
    let exec = graph.instantiate().unwrap();
    let _address = buffer.as_ptr();
    assert!(matches!(exec.launch(&other), Err(Error::GraphMisuse(_))));
    other.synchronize().unwrap();
    assert_eq!(buffer.to_vec().unwrap(), vec![0; N], "the refused launch wrote nothing");

    // Homed on a stream another capture captures, with home work not yet marked: refused
    // (the mark would go into that capture). Used on another stream first, it has none left
    // to mark.
    let elsewhere = non_blocking_stream(device);
    let mut fresh = DeviceBuffer::<u32, _>::zeroed(&elsewhere, N).unwrap();
    elsewhere.synchronize().unwrap();
    let other_capture = elsewhere.begin_capture(ThreadLocal).unwrap();
    let mut capture = capturing.begin_capture(ThreadLocal).unwrap();
    assert!(matches!(capture.fill_bytes(&capturing, &fresh, .., 7), Err(Error::CaptureMisuse(_))));
    assert!(matches!(fresh.fill_bytes(&capturing, 7), Err(Error::CaptureMisuse(_))), "the buffer's own fill too");
    drop((capture, other_capture));
    fresh.use_on(&other, |_, _| ()).unwrap();
    let other_capture = elsewhere.begin_capture(ThreadLocal).unwrap();
    let mut capture = capturing.begin_capture(ThreadLocal).unwrap();
    capture.fill_bytes(&capturing, &fresh, .., 7).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    drop(other_capture);
    exec.launch(&other).unwrap();
    assert_eq!(fresh.to_vec().unwrap(), vec![0x0707_0707; N]);
}

#[test]
fn launches_on_another_thread_while_the_owner_goes_replay_into_memory_that_stays_the_graphs() {
    let device = gpu_or_skip!();
    let stream = non_blocking_stream(device);
    let host_out = pinned(&[0; N]);
    let values: Vec<u32> = (0..N as u32).map(|i| !i).collect();
    let source = DeviceBuffer::from_slice(&stream, &values).unwrap();
    let target = DeviceBuffer::<u32, _>::zeroed(&stream, N).unwrap();
    let mut graph = Graph::new(device).unwrap();
    let mut builder = graph.builder();
    let copy = builder.add_copy(&target, .., &source, .., &[]).unwrap();
    builder.add_copy_to_pinned(&host_out, .., &target, .., &[copy]).unwrap();
    let exec = graph.instantiate().unwrap();
    drop(graph);
    let (host_out, values) = (&host_out, &values);
    std::thread::scope(|scope| {
        let launcher = scope.spawn(move || {
            let launches = non_blocking_stream(device);
            for _ in 0..200 {
                host_out.lock().as_mut_slice().unwrap().fill(0);
                exec.launch(&launches).unwrap();
                assert_eq!(host_out.lock().as_slice().unwrap(), values.as_slice());
            }
        });
        std::thread::sleep(Duration::from_millis(2));
        drop((source, target));
        launcher.join().unwrap();
    });
}

#[test]
fn declared_accesses_export_nothing_and_an_owner_on_the_legacy_stream_detaches_under_sync_debug_refuse() {
    let device = gpu_or_skip!();
    let other = non_blocking_stream(device);
    let host_out = pinned(&[0; N]);
    let buffer = DeviceBuffer::<u32, _>::zeroed(cuda_stream::BuiltinStream::legacy(device), N).unwrap();
    let mut graph = Graph::new(device).unwrap();
    let mut builder = graph.builder();
    let fill = builder.add_fill_bytes(&buffer, .., 0x5a, &[]).unwrap();
    builder.add_copy_to_pinned(&host_out, .., &buffer, .., &[fill]).unwrap();
    let exec = graph.instantiate().unwrap();
    // Declarations for the race detector hand out no address for work: the graph still launches.
    let _declared = (buffer.read_access(), buffer.write_access(), buffer.slice(..).unwrap().read_access());
    {
        // The owner's drop records on its home, the legacy stream: reported, never refused, or
        // the memory would leak and the executable refuse its launches.
        let _refuse = cuda_stream::sync_debug_scope(cuda_stream::SyncDebugMode::Refuse);
        drop(buffer);
    }
    exec.launch(&other).unwrap();
    assert_eq!(host_out.lock().as_slice().unwrap(), vec![0x5a5a_5a5a; N]);
}

/// A buffer's own copies (whole and through views) on streams of a capture, the captured
/// stream and a stream forked from it and used on another thread, become nodes of its graph,
/// which holds the buffers: their owners go before the first launch, every launch is ordered
/// after its slow start, and the last holder frees the memory.
#[test]
fn a_buffers_own_copies_on_streams_of_a_capture_and_its_forks_on_other_threads_are_held_by_its_graph() {
    let device = gpu_or_skip!();
    let stream = non_blocking_stream(device);
    let (capturing, side, launches) =
        (non_blocking_stream(device), non_blocking_stream(device), non_blocking_stream(device));
    let pool = MemPool::new(device).unwrap();
    let values: Vec<u32> = (0..N as u32).map(|i| i.wrapping_mul(2_246_822_519) ^ 0x5eed).collect();
    let host_out = pinned(&[0; N]);
    let exec = {
        let mut source = DeviceBuffer::<u32, &Stream>::new_in(&pool, &stream, N).unwrap();
        source.copy_from_slice(&stream, &values).unwrap();
        let mut target = DeviceBuffer::<u32, &Stream>::new_in(&pool, &stream, N).unwrap();
        target.fill_bytes(&stream, 0).unwrap();
        let mut capture = capturing.begin_capture(ThreadLocal).unwrap();
        spin(&capturing, SLOW).unwrap();
        target.copy_from(&capturing, &source).unwrap();
        // A fork of the capture, used on another thread: its view copy is captured too.
        side.wait_stream(&capturing).unwrap();
        std::thread::scope(|scope| {
            scope
                .spawn(|| target.slice_mut(..N / 2).unwrap().copy_from(&side, &source.slice(N / 2..).unwrap()))
                .join()
                .unwrap()
        })
        .unwrap();
        capturing.wait_stream(&side).unwrap();
        capture.copy_to_pinned(&capturing, (&host_out, ..), (&target, ..)).unwrap();
        let graph = capture.end().unwrap();
        assert_eq!(graph.node_count().unwrap(), 4, "spin, copy, view copy, copy out");
        assert_eq!(target.to_vec().unwrap(), vec![0; N], "nothing captured ran");
        graph.instantiate().unwrap()
        // The owners go here, before any launch: the executable holds their memory.
    };
    assert!(used_after_all(device, &pool) >= (2 * N * 4) as u64, "the executable holds both buffers' memory");
    let mut expected = values.clone();
    expected.copy_within(N / 2.., 0);
    for round in 0..3 {
        host_out.lock().as_mut_slice().unwrap().fill(0);
        exec.launch(&launches).unwrap();
        assert_eq!(host_out.lock().as_slice().unwrap(), expected, "round {round}");
    }
    exec.launch(&launches).unwrap();
    drop(exec);
    assert_eq!(used_after_all(device, &pool), 0, "the last holder freed the memory after its launches");
}

/// A buffer homed on the captured stream itself, whose home work (a slow fill) is not yet
/// marked: its own copy in the capture is held, and that work is marked once the capture has
/// ended, so the first launch, on another stream, waits for it. Unordered, the launch would
/// copy the zeros from before the fill.
#[test]
fn a_buffer_homed_on_the_captured_stream_is_marked_once_the_capture_ends_and_the_launch_waits_for_its_home_work() {
    let device = gpu_or_skip!();
    let (stream, other, launches) =
        (non_blocking_stream(device), non_blocking_stream(device), non_blocking_stream(device));
    let mut buffer = DeviceBuffer::<u32, _>::zeroed(&stream, N).unwrap();
    let mut out = DeviceBuffer::<u32, _>::zeroed(&other, N).unwrap();
    let mut twice = DeviceBuffer::<u32, _>::zeroed(&stream, N).unwrap();
    stream.synchronize().unwrap();
    spin(&stream, SLOW).unwrap();
    buffer.fill_bytes(&stream, 0x11).unwrap();
    let mut capture = stream.begin_capture(ThreadLocal).unwrap();
    out.copy_from(&stream, &buffer).unwrap();
    // The capture's own call takes the same way.
    capture.fill_bytes(&stream, &twice, .., 0x22).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    exec.launch(&launches).unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![0x1111_1111; N], "the launch came after the home stream's slow fill");
    assert_eq!(twice.to_vec().unwrap(), vec![0x2222_2222; N]);
    // Home uses are marked from now on: the next launch waits for this one too.
    spin(&stream, SLOW).unwrap();
    buffer.fill_bytes(&stream, 0x33).unwrap();
    twice.fill_bytes(&stream, 0).unwrap();
    exec.launch(&launches).unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![0x3333_3333; N]);
    assert_eq!(twice.to_vec().unwrap(), vec![0x2222_2222; N]);
}

/// What no graph of this crate can hold stays refused on a captured stream, before CUDA sees
/// it: copies from and to host memory (a replay would outlive the slice), `use_on` (its
/// closure runs outside the crate's hold), a capture into a builder's level, a buffer whose
/// address was handed out. Nothing of it reaches the graph, and the buffers stay unchanged.
#[test]
fn a_buffers_own_calls_that_no_graph_can_hold_are_refused_on_a_captured_stream() {
    let device = gpu_or_skip!();
    let (stream, capturing) = (non_blocking_stream(device), non_blocking_stream(device));
    let mut buffer = DeviceBuffer::<u32, _>::zeroed(&stream, N).unwrap();
    let mut exported = DeviceBuffer::<u32, _>::zeroed(&stream, N).unwrap();
    let _address = exported.as_mut_ptr();
    stream.synchronize().unwrap();
    let misuse = |result: cuda_stream::Result<()>| matches!(result, Err(Error::CaptureMisuse(_)));
    let capture = capturing.begin_capture(ThreadLocal).unwrap();
    assert!(misuse(buffer.copy_from_slice(&capturing, &[1; N])), "a pageable copy in");
    assert!(misuse(buffer.copy_to_slice(&capturing, &mut [0; N])), "a pageable copy out");
    let ran = std::cell::Cell::new(false);
    assert!(misuse(buffer.use_on(&capturing, |_, _| ran.set(true))));
    assert!(!ran.get(), "a refused use_on does not run its closure");
    assert!(matches!(exported.fill_bytes(&capturing, 1), Err(Error::GraphMisuse(_))), "an exported buffer");
    let graph = capture.end().unwrap();
    assert_eq!(graph.node_count().unwrap(), 0, "nothing refused reached the graph");
    // A capture into a builder's level holds nothing of its own.
    let mut built = Graph::new(device).unwrap();
    let mut builder = built.builder();
    let level = builder.capture(&capturing, ThreadLocal).unwrap();
    assert!(misuse(buffer.fill_bytes(&capturing, 2)));
    level.end().unwrap();
    assert_eq!(built.node_count().unwrap(), 0);
    assert_eq!(buffer.to_vec().unwrap(), vec![0; N]);
}

/// An executable whose launch runs a tag kernel of `tag` (spinning `spin`), then fills each
/// of `fills` in turn (a buffer and its elements: writes, which the graph holds, in this order).
fn tag_then_fill<B: GraphBuffer<Element = u32>>(
    stream: &Arc<Stream>,
    fills: &[(&B, Range<usize>)],
    log: &TagLog,
    tag: u32,
    spin: Duration,
) -> GraphExec {
    let mut graph = Graph::new(stream.device()).unwrap();
    let mut builder = graph.builder();
    let capture = builder.capture(stream, ThreadLocal).unwrap();
    cuda_stream_tests::tag(&**stream, log, tag, spin).unwrap();
    capture.end().unwrap();
    let mut after = builder.leaves().unwrap();
    for (buffer, elements) in fills {
        after = vec![builder.add_fill_bytes(*buffer, elements.clone(), tag as u8, &after).unwrap()];
    }
    graph.instantiate().unwrap()
}

/// How many times each executable of [`launched_at_once_never_run_at_once`] is launched.
const ROUNDS: u32 = 150;

/// Launches each of the two executables (whose kernels log tags 1 and 2) `ROUNDS` times from a
/// thread of its own, on a stream of its own, both threads meeting at a barrier before each
/// round; then checks that every launch ran its kernel and that no two kernels of the two ran
/// at once.
fn launched_at_once_never_run_at_once(device: cuda_stream::Device, execs: [GraphExec; 2], log: &TagLog) {
    let start_line = std::sync::Barrier::new(2);
    std::thread::scope(|scope| {
        for exec in execs {
            let start_line = &start_line;
            scope.spawn(move || {
                let launches = non_blocking_stream(device);
                for _ in 0..ROUNDS {
                    start_line.wait();
                    exec.launch(&launches).unwrap();
                }
                launches.synchronize().unwrap();
            });
        }
    });
    assert_eq!(log.count(), 2 * ROUNDS, "every launch ran its kernel");
    let entries = log.entries();
    let (ones, twos): (Vec<&TagEntry>, Vec<&TagEntry>) = entries.iter().partition(|entry| entry.tag == 1);
    let at_once = ones
        .iter()
        .flat_map(|one| twos.iter().map(move |two| (one, two)))
        .filter(|(one, two)| one.start_ns < two.end_ns && two.start_ns < one.end_ns)
        .count();
    assert_eq!(at_once, 0, "kernels of the two executables ran at once: the launches were not ordered");
}

/// The two executables of [`launched_at_once_never_run_at_once`], made on `stream`: each a tag
/// kernel (tags 1 and 2, spinning 50 µs) and then the fills of its list; and their log.
fn tag_one_and_two<B: GraphBuffer<Element = u32>>(
    stream: &Arc<Stream>,
    fills: [&[(&B, Range<usize>)]; 2],
) -> ([GraphExec; 2], TagLog) {
    let log = TagLog::new(2 * ROUNDS).unwrap();
    let spin = Duration::from_micros(50);
    let [one, two] = fills;
    let execs = [tag_then_fill(stream, one, &log, 1, spin), tag_then_fill(stream, two, &log, 2, spin)];
    (execs, log)
}

/// Two executables that write one buffer, launched at the same moment from two threads on two
/// streams, round after round: each launch is ordered after the other's when their checks
/// overlap (a use in flight is waited for, not missed), so their kernels never run at once.
#[test]
fn two_executables_that_write_one_buffer_launched_at_once_from_two_threads_never_run_at_once() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let buffer: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
    let whole = [(&buffer, 0..N)];
    let (execs, log) = tag_one_and_two(&stream, [&whole, &whole]);
    drop(buffer);
    stream.synchronize().unwrap();
    launched_at_once_never_run_at_once(device, execs, &log);
}

/// Two executables that each write two buffers, one holding them in the opposite order of the
/// other's nodes, launched at the same moment from two threads, round after round: a use checks
/// its buffers in one order (by address), so neither launch waits for the other while the
/// other waits for it (no deadlock), and their kernels never run at once.
#[test]
fn two_executables_that_write_two_buffers_in_opposite_orders_launched_at_once_neither_deadlock_nor_overlap() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let zeroed = || -> Buffer { Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap()) };
    let (x, y) = (zeroed(), zeroed());
    let (execs, log) = tag_one_and_two(&stream, [&[(&x, 0..N), (&y, 0..N)], &[(&y, 0..N), (&x, 0..N)]]);
    drop((x, y));
    stream.synchronize().unwrap();
    launched_at_once_never_run_at_once(device, execs, &log);
}

/// Two executables that write one borrowed buffer's memory (which the graphs hold apart from
/// its owner: their launches cannot reach its home stream), launched at the same moment from two
/// threads on two streams, round after round, first beside the owner and then after it went:
/// their kernels never run at once.
#[test]
fn two_executables_that_write_one_borrowed_buffer_launched_at_once_never_run_at_once_before_or_after_its_owner_goes() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    for owner_goes_first in [false, true] {
        let buffer = DeviceBuffer::<u32, &Stream>::zeroed(&*stream, N).unwrap();
        let whole = [(&buffer, 0..N)];
        let (execs, log) = tag_one_and_two(&stream, [&whole, &whole]);
        stream.synchronize().unwrap();
        if owner_goes_first {
            drop(buffer);
            launched_at_once_never_run_at_once(device, execs, &log);
        } else {
            launched_at_once_never_run_at_once(device, execs, &log);
            let filled = buffer.to_vec().unwrap();
            assert!(
                filled.iter().all(|&word| word == 0x0101_0101) || filled.iter().all(|&word| word == 0x0202_0202),
                "the owner's read came after the last launch's fill"
            );
        }
    }
}

/// A launch of an executable that writes a buffer, made while another thread reads the
/// buffer into pageable host memory on another stream (a copy CUDA makes wait for its stream,
/// here behind a slow kernel): refused with `GraphMisuse`, before CUDA, and the copy reads the
/// bytes from before. Unordered, the launch's fill would land before the copy read.
#[test]
fn a_launch_beside_another_threads_pageable_copy_of_its_memory_is_refused_and_the_copy_reads_the_bytes_from_before() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let buffer: Buffer = Arc::new(DeviceBuffer::from_slice(home(&stream), &[7u32; N]).unwrap());
    let log = TagLog::new(4).unwrap();
    let exec = tag_then_fill(&stream, &[(&buffer, 0..N)], &log, 5, Duration::ZERO);
    let (copies, launches) = (non_blocking_stream(device), non_blocking_stream(device));
    let (calling, called) = std::sync::mpsc::channel::<()>();
    let read = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut host = vec![0u32; N];
            // The pageable copy waits for the spin: it is in progress all that time.
            spin(&copies, Duration::from_millis(500)).unwrap();
            calling.send(()).unwrap();
            buffer.copy_to_slice(&copies, &mut host).unwrap();
            host
        });
        called.recv().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        match exec.launch(&launches) {
            Err(Error::GraphMisuse(why)) => assert!(why.contains("may wait for the GPU"), "{why}"),
            other => panic!("a launch beside another thread's pageable copy was not refused: {other:?}"),
        }
        reader.join().unwrap()
    });
    assert_eq!(read, vec![7; N], "the copy read the bytes from before: no launch overlapped it");
    launches.synchronize().unwrap();
    assert_eq!(log.count(), 0, "the refused launch ran nothing");
    exec.launch(&launches).expect("once the copy has returned, the launch runs");
    assert_eq!(buffer.to_vec().unwrap(), vec![0x0505_0505; N], "the launch after it filled the buffer");
}

/// A graph that fills the first and the last quarter of a buffer holds the two parts apart:
/// its launch waits neither for a use of the middle on another stream (a kernel there that waits
/// for the host) nor is refused inside a use_on closure of the middle on another stream, and
/// the owner's read after it sees both quarters filled and the middle untouched.
#[test]
fn a_graph_that_touches_two_parts_of_a_buffer_is_ordered_with_those_parts_only() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let buffer: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
    let exec = {
        let mut graph = Graph::new(device).unwrap();
        let mut builder = graph.builder();
        let first = builder.add_fill_bytes(&buffer, ..N / 4, 1, &[]).unwrap();
        builder.add_fill_bytes(&buffer, 3 * N / 4.., 2, &[first]).unwrap();
        graph.instantiate().unwrap()
    };
    let (middle, launches) = (non_blocking_stream(device), non_blocking_stream(device));
    let gate = MappedFlag::new().unwrap();
    let view = buffer.slice(N / 4..3 * N / 4).unwrap();
    view.use_on(&middle, |on, _| wait_flag(on, &gate, Duration::from_secs(30))).unwrap().unwrap();
    exec.launch(&launches).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !launches.query().unwrap() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let done_before_the_gate = launches.query().unwrap();
    gate.set();
    assert!(done_before_the_gate, "the launch waited for a use of bytes its nodes do not touch");
    middle.synchronize().unwrap();
    assert_eq!(gate.outcome(), FlagOutcome::Seen);
    view.use_on(&middle, |_, _| exec.launch(&launches))
        .unwrap()
        .expect("a launch inside a use of bytes its nodes do not touch runs");
    let words = buffer.to_vec().unwrap();
    assert!(words[..N / 4].iter().all(|&word| word == 0x0101_0101), "the first quarter filled");
    assert!(words[N / 4..3 * N / 4].iter().all(|&word| word == 0), "the middle untouched");
    assert!(words[3 * N / 4..].iter().all(|&word| word == 0x0202_0202), "the last quarter filled");
}

/// Two executables that each fill the same two parts of one buffer, whose nodes hold them in
/// opposite orders, launched at the same moment from two threads, round after round: a use
/// checks its parts in one order (by buffer, then first byte), so neither launch holds one part
/// while waiting for the other's (no deadlock), and their kernels never run at once.
#[test]
fn two_executables_that_fill_two_parts_of_one_buffer_in_opposite_orders_neither_deadlock_nor_overlap() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let buffer: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
    let (first, last) = ((&buffer, 0..N / 4), (&buffer, 3 * N / 4..N));
    let (execs, log) = tag_one_and_two(&stream, [&[first.clone(), last.clone()], &[last, first]]);
    drop(buffer);
    stream.synchronize().unwrap();
    launched_at_once_never_run_at_once(device, execs, &log);
}

/// A launch of an executable that holds a buffer, inside a use of it on another stream (a
/// view's `use_on` closure) on this thread, or while another thread's closure runs: refused
/// with `GraphMisuse`, before CUDA (it could not be ordered after a use whose mark does not
/// exist yet), and nothing ran; on the closure's own stream, or once the closure has
/// returned, it runs.
#[test]
fn a_launch_inside_or_beside_a_use_on_closure_of_a_buffer_it_holds_is_refused_or_runs_on_its_stream() {
    let device = gpu_or_skip!();
    let stream = Arc::new(non_blocking_stream(device));
    let buffer: Buffer = Arc::new(DeviceBuffer::zeroed(home(&stream), N).unwrap());
    let log = TagLog::new(8).unwrap();
    let exec = tag_then_fill(&stream, &[(&buffer, 0..N)], &log, 3, Duration::ZERO);
    let (closures, launches) = (non_blocking_stream(device), non_blocking_stream(device));
    let refused = |result: cuda_stream::Result<()>| match result {
        Err(Error::GraphMisuse(why)) => why,
        other => panic!("not refused: {other:?}"),
    };
    let view = buffer.slice(..).unwrap();
    // On this thread.
    let (elsewhere, here) =
        view.use_on(&closures, |closure_stream, _| (exec.launch(&launches), exec.launch(closure_stream))).unwrap();
    assert!(refused(elsewhere).contains("on this thread"), "a launch on another stream inside the closure");
    here.expect("a launch on the closure's own stream is ordered by it");
    closures.synchronize().unwrap();
    assert_eq!(log.count(), 1, "only the launch on the closure's stream ran");
    // Beside another thread's closure, which waits until the launch was tried.
    let (tried, told) = std::sync::mpsc::channel::<()>();
    let (inside, entered) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let view = &view;
        let closures = &closures;
        scope.spawn(move || {
            view.use_on(closures, |_, _| {
                inside.send(()).unwrap();
                told.recv().unwrap();
            })
            .unwrap();
        });
        entered.recv().unwrap();
        let beside = exec.launch(&launches);
        tried.send(()).unwrap();
        assert!(refused(beside).contains("may wait for the GPU"), "a launch beside another thread's closure");
    });
    exec.launch(&launches).expect("once the closure has returned, the launch runs");
    launches.synchronize().unwrap();
    assert_eq!(log.count(), 2, "the refused launches ran nothing");
    assert!(buffer.to_vec().unwrap().iter().all(|&word| word == 0x0303_0303), "the launches filled the buffer");
}

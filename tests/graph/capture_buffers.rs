//! Memory a capture's graph allocates and frees (`Capture::alloc`, `Capture::free`), used on
//! forked streams of the capture, on a GPU: PyTorch's reclaim and `record_stream` graph tests
//! adapted. Each test observes the GPU: forked readers spin before they read a block, so a free
//! that did not wait for them would let the block's next owner overwrite it first; the graph's
//! allocator is seen to reuse the block (the same address), and the readers still read what was
//! there before.

use cuda_stream::capture::ThreadLocal;
use cuda_stream::{
    CaptureBuffer, DeviceBuffer, Error, GraphExec, InstantiateOptions, MappedWords, PinnedBuffer, SharedPinned, Stream,
    WaitValue,
};
use cuda_stream_tests::{gpu_or_skip, non_blocking_stream, spin};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const N: usize = 1 << 16;

/// How long the first forked reader spins before it reads; the others longer.
const SLOW: Duration = Duration::from_millis(30);

type Buffer = Arc<DeviceBuffer<u32, Arc<Stream>>>;

/// One test at a time that uses CUDA's graph allocator, which reuses blocks across graphs.
fn graph_memory_alone() -> std::sync::MutexGuard<'static, ()> {
    static ALONE: Mutex<()> = Mutex::new(());
    ALONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn output(home: &Arc<Stream>) -> Buffer {
    Arc::new(DeviceBuffer::zeroed(Arc::clone(home), N).unwrap())
}

/// The address a capture buffer has in the graph.
fn address_of(
    capture: &mut cuda_stream::Capture<'_, ThreadLocal>,
    stream: &Stream,
    buffer: &CaptureBuffer<u32>,
) -> usize {
    capture.use_on(stream, buffer, |_, address| address as usize).unwrap()
}

/// PyTorch's `test_graph_capture_reclaim_{2,4}_streams`, adapted: block `a`, filled with bytes
/// 0x11, is read by each of `readers` (forked from the capturing stream; each spins first, the
/// later ones longer) into its own output, and freed on the capturing stream before the join.
/// Block `b`, allocated after that free on the same stream, is filled with bytes 0x22 and
/// copied out. Returns the executable, and whether `b` got `a`'s address.
fn reclaim_graph(capturing: &Stream, readers: &[Stream], outputs: &[Buffer], b_out: &Buffer) -> (GraphExec, bool) {
    let mut capture = capturing.begin_capture(ThreadLocal).unwrap();
    let mut a = capture.alloc::<u32>(capturing, N).unwrap();
    capture.fill_bytes(capturing, &a, .., 0x11).unwrap();
    let a_address = address_of(&mut capture, capturing, &a);
    for ((reader, out), i) in readers.iter().zip(outputs).zip(1..) {
        reader.wait_stream(capturing).unwrap();
        spin(reader, SLOW * i).unwrap();
        capture.copy(reader, (out, ..), (&a, ..)).unwrap();
    }
    // Freed on the capturing stream while the readers still spin: the free waits for them.
    capture.free(capturing, &mut a).unwrap();
    let mut b = capture.alloc::<u32>(capturing, N).unwrap();
    let reused = address_of(&mut capture, capturing, &b) == a_address;
    capture.fill_bytes(capturing, &b, .., 0x22).unwrap();
    capture.copy(capturing, (b_out, ..), (&b, ..)).unwrap();
    capture.free(capturing, &mut b).unwrap();
    for reader in readers {
        capturing.wait_stream(reader).unwrap();
    }
    (capture.end().unwrap().instantiate().unwrap(), reused)
}

fn reclaim_after_forked_reads(readers: usize) {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let home = Arc::new(non_blocking_stream(device));
    let capturing = non_blocking_stream(device);
    let forked: Vec<Stream> = (0..readers).map(|_| non_blocking_stream(device)).collect();
    let outputs: Vec<Buffer> = (0..readers).map(|_| output(&home)).collect();
    let b_out = output(&home);
    let (exec, reused) = reclaim_graph(&capturing, &forked, &outputs, &b_out);
    assert!(reused, "the graph's allocator gave the freed block to the next allocation (else this test shows nothing)");
    for _ in 0..3 {
        exec.launch(&capturing).unwrap();
    }
    for (i, out) in outputs.iter().enumerate() {
        assert_eq!(out.to_vec().unwrap(), vec![0x1111_1111; N], "reader {i} read block a before b's fill took it");
    }
    assert_eq!(b_out.to_vec().unwrap(), vec![0x2222_2222; N], "block b held its own fill");
}

#[test]
fn a_block_read_on_a_forked_stream_is_reused_only_after_the_read_2_streams() {
    reclaim_after_forked_reads(1);
}

#[test]
fn a_block_read_on_three_forked_streams_is_reused_only_after_every_read_4_streams() {
    reclaim_after_forked_reads(3);
}

/// PyTorch's `test_graph_record_stream`, adapted: a buffer with a slow use pending on another
/// stream is dropped just before the capture (its free must not disturb it); inside the
/// capture a block cloned from a shared buffer is filled on a forked stream and freed there
/// (PyTorch's `record_stream` on the forked stream, then `del`), before the join.
#[test]
fn a_capture_buffer_freed_on_a_forked_stream_replays_and_a_pending_free_outside_does_not_break_the_capture() {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let home = Arc::new(non_blocking_stream(device));
    let (s0, s1, s2) = (non_blocking_stream(device), non_blocking_stream(device), non_blocking_stream(device));
    let values: Vec<u32> = (0..N as u32).collect();
    let a: Buffer = Arc::new(DeviceBuffer::from_slice(Arc::clone(&home), &values).unwrap());
    let (copied, filled) = (output(&home), output(&home));
    {
        let mut potential_problem = DeviceBuffer::<u32, _>::zeroed(&s0, N).unwrap();
        potential_problem.use_on(&s2, |stream, _| spin(stream, SLOW * 2).unwrap()).unwrap();
        potential_problem.fill_bytes(&s0, 0x01).unwrap();
    }
    let mut capture = s1.begin_capture(ThreadLocal).unwrap();
    let mut b = capture.alloc::<u32>(&s1, N).unwrap();
    capture.copy(&s1, (&b, ..), (&a, ..)).unwrap();
    capture.copy(&s1, (&copied, ..), (&b, ..)).unwrap();
    s2.wait_stream(&s1).unwrap();
    spin(&s2, SLOW).unwrap();
    capture.fill_bytes(&s2, &b, .., 0x01).unwrap();
    capture.copy(&s2, (&filled, ..), (&b, ..)).unwrap();
    capture.free(&s2, &mut b).unwrap();
    s1.wait_stream(&s2).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    for _ in 0..2 {
        exec.launch(&s1).unwrap();
    }
    // An allocation after the graph's frees (PyTorch's "dummy allocation").
    let after = DeviceBuffer::<u32, _>::zeroed(&s1, N).unwrap();
    assert_eq!(after.to_vec().unwrap(), vec![0; N]);
    assert_eq!(copied.to_vec().unwrap(), values, "the clone of the shared buffer");
    assert_eq!(filled.to_vec().unwrap(), vec![0x0101_0101; N], "the forked stream's fill");
}

/// A stream forked before the allocation waits for it before its use (else its memset would
/// run on memory the graph has not mapped yet).
#[test]
fn a_stream_forked_before_the_allocation_uses_the_block_after_it() {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let home = Arc::new(non_blocking_stream(device));
    let (s0, s1) = (non_blocking_stream(device), non_blocking_stream(device));
    let out = output(&home);
    let mut capture = s0.begin_capture(ThreadLocal).unwrap();
    s1.wait_stream(&s0).unwrap();
    spin(&s0, SLOW).unwrap();
    let mut block = capture.alloc::<u32>(&s0, N).unwrap();
    capture.fill_bytes(&s1, &block, .., 0x5a).unwrap();
    capture.copy(&s1, (&out, ..), (&block, ..)).unwrap();
    // Freed on the allocating stream: it waits for the forked stream's uses.
    capture.free(&s0, &mut block).unwrap();
    assert!(matches!(capture.fill_bytes(&s0, &block, .., 0), Err(Error::CaptureMisuse(_))), "a freed block");
    assert!(matches!(capture.free(&s0, &mut block), Err(Error::CaptureMisuse(_))), "freed once");
    s0.wait_stream(&s1).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    exec.launch(&s0).unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![0x5a5a_5a5a; N]);
}

#[test]
fn a_capture_buffer_is_refused_outside_its_capture_and_a_free_outside_the_capture_is_refused() {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let home = Arc::new(non_blocking_stream(device));
    let (s0, s1, outside) = (non_blocking_stream(device), non_blocking_stream(device), non_blocking_stream(device));
    let out = output(&home);
    let mut first = s0.begin_capture(ThreadLocal).unwrap();
    let mut second = s1.begin_capture(ThreadLocal).unwrap();
    assert!(matches!(first.alloc::<u32>(&outside, N), Err(Error::CaptureMisuse(_))), "a stream outside the capture");
    assert!(matches!(first.alloc::<u32>(&s0, 0), Err(Error::Size(_))));
    let mut block = first.alloc::<u32>(&s0, N).unwrap();
    let misuse = |result: cuda_stream::Result<()>| matches!(result, Err(Error::CaptureMisuse(_)));
    assert!(misuse(second.fill_bytes(&s1, &block, .., 0)), "another capture's memset");
    assert!(misuse(second.copy(&s1, (&out, ..), (&block, ..))), "another capture's memcpy");
    let mut ran = false;
    let refused = second.use_on(&s1, &block, |_, _| ran = true);
    assert!(matches!(refused, Err(Error::CaptureMisuse(_))) && !ran, "another capture's kernel never runs");
    assert!(misuse(first.fill_bytes(&s1, &block, .., 0)), "a stream of another capture");
    assert!(misuse(first.free(&outside, &mut block)), "a free outside the capture");
    assert!(misuse(second.free(&s1, &mut block)), "another capture's free");
    // Refused frees lose nothing: the block is still used and freed in its own capture.
    first.copy(&s0, (&out, ..), (&block, ..)).unwrap();
    first.free(&s0, &mut block).unwrap();
    // Neither capture was broken by the refusals.
    second.end().unwrap();
    first.end().unwrap();
}

/// A capture buffer never freed is CUDA's graph memory that outlives a launch: the executable's
/// second launch fails until something frees it, unless it frees the last launch's itself
/// (`auto_free_on_launch`).
#[test]
fn a_capture_buffer_never_freed_outlives_the_launch_and_only_auto_free_relaunches() {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let home = Arc::new(non_blocking_stream(device));
    let stream = non_blocking_stream(device);
    let out = output(&home);
    let mut capture = stream.begin_capture(ThreadLocal).unwrap();
    let kept = capture.alloc::<u32>(&stream, N).unwrap();
    capture.fill_bytes(&stream, &kept, .., 0x33).unwrap();
    capture.copy(&stream, (&out, ..), (&kept, ..)).unwrap();
    drop(kept);
    let graph = capture.end().unwrap();
    {
        let exec = graph.instantiate().unwrap();
        exec.launch(&stream).unwrap();
        let again = exec.launch(&stream);
        println!("second launch with the allocation outstanding: {again:?}");
        assert!(again.is_err(), "CUDA refuses to relaunch while the graph's allocation is outstanding");
        stream.synchronize().unwrap();
    }
    assert_eq!(out.to_vec().unwrap(), vec![0x3333_3333; N]);
    let exec = graph.instantiate_with(InstantiateOptions::new().auto_free_on_launch()).unwrap();
    for _ in 0..3 {
        exec.launch(&stream).unwrap();
    }
    stream.synchronize().unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![0x3333_3333; N]);
}

/// An executable is not updated from a graph with allocation nodes: CUDA would keep the
/// executable's allocation where it is mapped while the new memset names the new graph's block.
#[test]
fn an_executable_is_not_updated_from_a_graph_that_allocates() {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let home = Arc::new(non_blocking_stream(device));
    let stream = non_blocking_stream(device);
    let out = output(&home);
    let graph_with = |byte: u8| {
        let mut capture = stream.begin_capture(ThreadLocal).unwrap();
        let mut block = capture.alloc::<u32>(&stream, N).unwrap();
        capture.fill_bytes(&stream, &block, .., byte).unwrap();
        capture.copy(&stream, (&out, ..), (&block, ..)).unwrap();
        capture.free(&stream, &mut block).unwrap();
        capture.end().unwrap()
    };
    let (first, second) = (graph_with(0x44), graph_with(0x55));
    let mut exec = first.instantiate().unwrap();
    assert!(matches!(exec.update(&second), Err(Error::GraphMisuse(_))));
    exec.launch(&stream).unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![0x4444_4444; N], "the executable is unchanged");
}

/// A kernel launcher that unwinds inside `use_on` still leaves its use event: the free waits for
/// the kernel it enqueued before the panic, and the graph replays.
#[test]
fn a_use_that_unwinds_is_still_ordered_before_the_free() {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let home = Arc::new(non_blocking_stream(device));
    let (s0, s1) = (non_blocking_stream(device), non_blocking_stream(device));
    let out = output(&home);
    let mut capture = s0.begin_capture(ThreadLocal).unwrap();
    let mut block = capture.alloc::<u32>(&s0, N).unwrap();
    capture.fill_bytes(&s0, &block, .., 0x66).unwrap();
    let block_address = address_of(&mut capture, &s0, &block);
    s1.wait_stream(&s0).unwrap();
    let copy_then_panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        capture.use_on(&s1, &block, |stream, address| {
            // SAFETY: the block and the output hold N u32s of the device; the block until its
            // free (which waits for this kernel), the output for every launch (the test reads it
            // back before it drops).
            unsafe { cuda_stream_tests::spin_copy(stream, address, out.as_ptr().cast_mut(), N, SLOW) }.unwrap();
            panic!("the launcher fails after its kernel is in");
        })
    }));
    assert!(copy_then_panic.is_err());
    capture.free(&s0, &mut block).unwrap();
    let mut next = capture.alloc::<u32>(&s0, N).unwrap();
    assert_eq!(address_of(&mut capture, &s0, &next), block_address, "the block is reused (else this shows nothing)");
    capture.fill_bytes(&s0, &next, .., 0x77).unwrap();
    capture.free(&s0, &mut next).unwrap();
    s0.wait_stream(&s1).unwrap();
    let exec = capture.end().unwrap().instantiate().unwrap();
    exec.launch(&s0).unwrap();
    s0.synchronize().unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![0x6666_6666; N], "the unwound use read the block before its reuse");
}

/// A capture buffer dropped on another thread while its capture ends: its events, recorded into
/// the capture, are destroyed outside the end (a destroy racing an end crashed libcuda).
#[test]
fn capture_buffers_dropped_on_other_threads_while_their_capture_ends() {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let stream = non_blocking_stream(device);
    for _ in 0..200 {
        let mut capture = stream.begin_capture(cuda_stream::capture::Relaxed).unwrap();
        let mut blocks: Vec<CaptureBuffer<u32>> = (0..4).map(|_| capture.alloc::<u32>(&stream, 256).unwrap()).collect();
        for block in &mut blocks {
            capture.fill_bytes(&stream, &*block, .., 0).unwrap();
            capture.free(&stream, block).unwrap();
        }
        let dropper = std::thread::spawn(move || drop(blocks));
        let graph = capture.end().unwrap();
        dropper.join().unwrap();
        drop(graph);
    }
}

/// Captures a graph that fills a capture buffer with `byte` after a spin and keeps it: CUDA's
/// graph memory freed outside the graph.
fn output_graph(stream: &Stream, byte: u8) -> (cuda_stream::Graph, cuda_stream::GraphOutput<u32>) {
    let mut capture = stream.begin_capture(ThreadLocal).unwrap();
    let block = capture.alloc::<u32>(stream, N).unwrap();
    spin(stream, SLOW).unwrap();
    capture.fill_bytes(stream, &block, .., byte).unwrap();
    let output = capture.keep(block).unwrap();
    (capture.end().unwrap(), output)
}

#[test]
fn a_kept_capture_buffer_is_taken_after_each_launch_and_the_next_launch_waits_for_its_free() {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let (launching, home, relaunching) =
        (non_blocking_stream(device), non_blocking_stream(device), non_blocking_stream(device));
    let (graph, output) = output_graph(&launching, 0x11);
    let exec = graph.instantiate().unwrap();
    let misuse = |result: cuda_stream::Result<()>| matches!(result, Err(Error::GraphMisuse(_)));
    assert!(output.take(&home).is_err(), "no launch yet");
    exec.launch(&launching).unwrap();
    assert!(misuse(exec.launch(&launching)), "the first launch's output is not taken yet");
    let taken = output.take(&home).unwrap();
    assert!(output.take(&home).is_err(), "taken once");
    assert!(misuse(exec.launch(&launching)), "the taken buffer is alive");
    assert_eq!(taken.to_vec().unwrap(), vec![0x1111_1111; N], "home waited for the launch");
    // A slow read of the output on its home stream, then the drop frees it there: the next
    // launch, on a third stream, waits for that free (it writes the same address again).
    let mut seen = DeviceBuffer::<u32, _>::zeroed(&home, N).unwrap();
    let target = seen.as_mut_ptr();
    // SAFETY: both hold N u32s of the device; the output until its free, which the home stream
    // orders after this kernel; `seen` until the test reads it back.
    unsafe { cuda_stream_tests::spin_copy(&home, taken.as_ptr(), target, N, SLOW * 2) }.unwrap();
    drop(taken);
    exec.launch(&relaunching).unwrap();
    assert_eq!(seen.to_vec().unwrap(), vec![0x1111_1111; N], "the relaunch waited for the free after the read");
    let again = output.take(&home).unwrap();
    assert_eq!(again.to_vec().unwrap(), vec![0x1111_1111; N]);
    drop(again);
    exec.launch(&launching).unwrap();
    drop(output.take(&launching).unwrap());
}

#[test]
fn an_auto_free_executable_relaunches_and_never_hands_its_output_out() {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let stream = non_blocking_stream(device);
    let (graph, output) = output_graph(&stream, 0x22);
    let exec = graph.instantiate_with(InstantiateOptions::new().auto_free_on_launch()).unwrap();
    for _ in 0..3 {
        exec.launch(&stream).unwrap();
    }
    assert!(matches!(output.take(&stream), Err(Error::GraphMisuse(_))), "its next launch would free it");
    stream.synchronize().unwrap();
    drop(exec);
    // The next executable of the graph (one at a time), not auto-free: the auto-free
    // executable's last output outlived it (CUDA's rule); it is taken before a launch.
    let exec = graph.instantiate().unwrap();
    assert!(matches!(exec.launch(&stream), Err(Error::GraphMisuse(_))), "the last output is still allocated");
    assert_eq!(output.take(&stream).unwrap().to_vec().unwrap(), vec![0x2222_2222; N]);
    exec.launch(&stream).unwrap();
    assert_eq!(output.take(&stream).unwrap().to_vec().unwrap(), vec![0x2222_2222; N]);
}

/// An auto-free executable's output is read between its launches without being taken: copy
/// in (page-locked memory the host changes between launches), then the graph keeps the block,
/// and each read on another stream waits for the launch that made it (the graph spins before it
/// copies: a read that did not wait would see the last round's values, or none). The read
/// borrows the executable whose launches allocate the output, and refuses before a launch,
/// another executable, a wrong length and a capturing stream.
#[test]
fn an_auto_free_executables_output_is_read_between_its_launches() {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let (stream, reader, capturing) =
        (non_blocking_stream(device), non_blocking_stream(device), non_blocking_stream(device));
    let host_in = Arc::new(SharedPinned::new(PinnedBuffer::from_slice(&vec![0u32; N]).unwrap()));
    let mut capture = stream.begin_capture(ThreadLocal).unwrap();
    let block = capture.alloc::<u32>(&stream, N).unwrap();
    spin(&stream, SLOW).unwrap();
    capture.copy_from_pinned(&stream, (&block, ..), (&host_in, ..)).unwrap();
    let mut output = capture.keep(block).unwrap();
    let graph = capture.end().unwrap();
    let exec = graph.instantiate_with(InstantiateOptions::new().auto_free_on_launch()).unwrap();
    let misuse = |result: cuda_stream::Result<Vec<u32>>| matches!(result, Err(Error::GraphMisuse(_)));
    assert!(misuse(output.to_vec(&exec, &reader)), "no launch yet");
    let (other_graph, _) = output_graph(&stream, 0x44);
    let other = other_graph.instantiate().unwrap();
    for round in 1..=3u32 {
        host_in.lock().as_mut_slice().unwrap().fill(round);
        exec.launch(&stream).unwrap();
        assert!(misuse(output.to_vec(&other, &reader)), "round {round}: read with another graph's executable");
        assert_eq!(
            output.to_vec(&exec, &reader).unwrap(),
            vec![round; N],
            "round {round}: the read waited for the launch"
        );
    }
    let mut short = vec![0u32; N - 1];
    assert!(matches!(output.copy_to_slice(&exec, &reader, &mut short), Err(Error::Size(_))));
    let mut whole = vec![0u32; N];
    output.copy_to_slice(&exec, &reader, &mut whole).unwrap();
    assert_eq!(whole, vec![3; N], "read again, the same launch");
    assert!(matches!(output.take(&reader), Err(Error::GraphMisuse(_))), "an auto-free output is never taken");
    let capture = capturing.begin_capture(ThreadLocal).unwrap();
    assert!(matches!(output.to_vec(&exec, &capturing), Err(Error::CaptureMisuse(_))), "a capturing stream");
    capture.end().unwrap();
    exec.launch(&stream).unwrap();
    assert_eq!(output.to_vec(&exec, &reader).unwrap(), vec![3; N], "the executable relaunches after the reads");
}

/// A read of an output waits on the host for the launch that made it holding nothing of the
/// crate's enqueue path: another thread's capture begins and ends meanwhile, and only after it
/// does the host write the word the launch waits for (a read that waited under the enqueue
/// path's hold would keep the capture from beginning, and the word from being written: a
/// deadlock, which this test would see as a capture that never began).
#[test]
fn a_read_waiting_for_its_launch_holds_up_no_capture_begin() {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let (stream, reader, capturing) =
        (non_blocking_stream(device), non_blocking_stream(device), non_blocking_stream(device));
    let gate = MappedWords::<u32>::new(1).unwrap();
    let mut capture = stream.begin_capture(ThreadLocal).unwrap();
    gate.wait_value(&stream, 0, WaitValue::equal(1)).unwrap();
    let block = capture.alloc::<u32>(&stream, N).unwrap();
    capture.fill_bytes(&stream, &block, .., 0x5a).unwrap();
    let mut output = capture.keep(block).unwrap();
    let graph = capture.end().unwrap();
    let exec = graph.instantiate().unwrap();
    exec.launch(&stream).unwrap();
    let (began, begun) = std::sync::mpsc::channel();
    let (read, capture_began) = std::thread::scope(|scope| {
        let reader = &reader;
        let reading = scope.spawn(move || output.to_vec(&exec, reader));
        // Time for the read to reach its wait (the launch is held until the end).
        std::thread::sleep(Duration::from_millis(200));
        let capturing = &capturing;
        scope.spawn(move || {
            let capture = capturing.begin_capture(ThreadLocal).unwrap();
            began.send(()).unwrap();
            capture.end().unwrap();
        });
        let capture_began = begun.recv_timeout(Duration::from_secs(5)).is_ok();
        // Released either way: a failing test ends rather than hangs.
        gate.words()[0].store(1, std::sync::atomic::Ordering::Release);
        (reading.join().unwrap(), capture_began)
    });
    assert!(capture_began, "a capture could not begin while a read waited for its launch");
    assert_eq!(read.unwrap(), vec![0x5a5a_5a5a; N], "the read waited for the launch");
}

/// A graph that keeps an output is not cloned: the clone's executables would be a second
/// executable beside the graph's, sharing the output's state. The crate refuses it before CUDA,
/// and CUDA refuses to clone a graph with allocation nodes as well (a raw `cudaGraphClone`).
#[test]
fn a_graph_with_outputs_is_not_cloned() {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let stream = non_blocking_stream(device);
    let (graph, _output) = output_graph(&stream, 0x66);
    assert!(matches!(graph.try_clone(), Err(Error::GraphMisuse(_))), "refused before CUDA");
    let mut clone: cuda_stream::sys::cudaGraph_t = std::ptr::null_mut();
    // SAFETY: a live graph of this thread, complete; a valid out-pointer.
    let code = unsafe { cuda_stream::sys::cudaGraphClone(&mut clone, graph.as_raw()) };
    println!("cudaGraphClone of a graph with an allocation node: {code:?}");
    let _ = cuda_stream_tests::take_last_error();
    if !clone.is_null() {
        // SAFETY: the clone made above, used by nothing else.
        let destroyed = unsafe { cuda_stream::sys::cudaGraphDestroy(clone) };
        assert_eq!(destroyed, cuda_stream::sys::cudaError::cudaSuccess);
    }
    assert_ne!(code, cuda_stream::sys::cudaError::cudaSuccess, "CUDA cloned a graph with an allocation node");
}

/// An output is not taken on a stream being captured (the wait for the launch would break the
/// capture): refused, the capture intact, the output still there to take.
#[test]
fn an_output_is_not_taken_on_a_capturing_stream() {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let (stream, capturing) = (non_blocking_stream(device), non_blocking_stream(device));
    let (graph, output) = output_graph(&stream, 0x33);
    let exec = graph.instantiate().unwrap();
    exec.launch(&stream).unwrap();
    let capture = capturing.begin_capture(ThreadLocal).unwrap();
    assert!(matches!(output.take(&capturing), Err(Error::CaptureMisuse(_))));
    spin(&capturing, Duration::ZERO).unwrap();
    capture.end().unwrap().instantiate().unwrap().launch(&capturing).unwrap();
    assert_eq!(output.take(&capturing).unwrap().to_vec().unwrap(), vec![0x3333_3333; N]);
}

/// A home that lends one stream, then (once armed) another: the buffer's drop finds its home
/// changed and leaks the memory rather than free it where its uses were not ordered.
struct Switch<'s> {
    a: &'s Stream,
    b: &'s Stream,
    armed: std::rc::Rc<std::cell::Cell<bool>>,
}

impl cuda_stream::AsStream for Switch<'_> {
    fn as_stream(&self) -> cuda_stream::BorrowedStream<'_> {
        if self.armed.get() { self.b.as_stream() } else { self.a.as_stream() }
    }
}

/// A buffer taken from an output that leaks its memory (its home changed) leaves the output
/// allocated, perhaps in use: the graph is not launched again, by this executable or another.
#[test]
fn an_output_whose_buffer_leaked_is_never_allocated_again() {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let (launching, a, b) = (non_blocking_stream(device), non_blocking_stream(device), non_blocking_stream(device));
    let (graph, output) = output_graph(&launching, 0x44);
    let exec = graph.instantiate().unwrap();
    assert!(matches!(graph.instantiate(), Err(Error::GraphMisuse(_))), "one executable at a time");
    exec.launch(&launching).unwrap();
    let armed = std::rc::Rc::new(std::cell::Cell::new(false));
    let mut taken = output.take(Switch { a: &a, b: &b, armed: std::rc::Rc::clone(&armed) }).unwrap();
    taken.fill_bytes(&a, 0x55).unwrap();
    armed.set(true);
    drop(taken);
    assert!(matches!(exec.launch(&launching), Err(Error::GraphMisuse(_))), "the leaked output is still allocated");
    drop(exec);
    let other = graph.instantiate().unwrap();
    assert!(matches!(other.launch(&launching), Err(Error::GraphMisuse(_))), "nor by another executable");
    a.synchronize().unwrap();
}

/// One captured kernel uses a shared buffer and a capture buffer (`use_on` with a tuple): on a
/// forked stream it copies the shared input into the block (after the block's allocation), and
/// the block is copied out there; the block's free, on the capturing stream, waits for both, so
/// the next block (the same address) is filled only after; the graph holds the input, dropped
/// before the launch.
#[test]
fn one_captured_kernel_reads_a_shared_buffer_into_a_capture_buffer() {
    let device = gpu_or_skip!();
    let _alone = graph_memory_alone();
    let home = Arc::new(non_blocking_stream(device));
    let (s0, s1) = (non_blocking_stream(device), non_blocking_stream(device));
    let values: Vec<u32> = (0..N as u32).map(|i| i ^ 0x5555).collect();
    let out = output(&home);
    let exec = {
        let input: Buffer = Arc::new(DeviceBuffer::from_slice(Arc::clone(&home), &values).unwrap());
        let mut capture = s0.begin_capture(ThreadLocal).unwrap();
        let mut block = capture.alloc::<u32>(&s0, N).unwrap();
        let block_address = address_of(&mut capture, &s0, &block);
        s1.wait_stream(&s0).unwrap();
        capture
            .use_on(&s1, (&input, &block), |stream, (from, to)| {
                // SAFETY: both hold N u32s of the device: the input for every launch (the graph
                // holds it), the block until its free, which waits for this kernel.
                unsafe { cuda_stream_tests::spin_copy(stream, from, to, N, SLOW) }.unwrap();
            })
            .unwrap();
        capture.copy(&s1, (&out, ..), (&block, ..)).unwrap();
        capture.free(&s0, &mut block).unwrap();
        let mut next = capture.alloc::<u32>(&s0, N).unwrap();
        assert_eq!(address_of(&mut capture, &s0, &next), block_address, "the block is reused");
        capture.fill_bytes(&s0, &next, .., 0x99).unwrap();
        capture.free(&s0, &mut next).unwrap();
        s0.wait_stream(&s1).unwrap();
        capture.end().unwrap().instantiate().unwrap()
    };
    exec.launch(&s0).unwrap();
    assert_eq!(out.to_vec().unwrap(), values, "the kernel read the shared input; the block was reused only after");
}

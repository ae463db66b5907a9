//! Device memory whose lifetime follows its streams: stream-ordered buffers, their copies and
//! fills, the ordering of uses on other streams (a kernel reading a buffer that is freed
//! meanwhile on its home stream sees its data; the raw control shows the reuse it is saved
//! from), pinned copies that the host waits for, pools, captures, bad sizes.
//!
//! Ported peer tests, as this crate's model states them: PyTorch's `test_record_stream` (a
//! block freed while a side stream still uses it is not handed out under that use),
//! cuda.core's `Buffer`/`DeviceMemoryResource` stream tests (allocate, copy to and from, free
//! on a stream) and CuPy's `MemoryAsyncPool` tests (allocations on streams, used and reserved
//! figures, freeing back to the pool).

use cuda_stream::sys;
use cuda_stream::{DeviceBuffer, Error, MemPool, PinnedBuffer, ReusePolicy, Stream, StreamRef, capture};
use cuda_stream_tests::non_blocking_stream as stream;
use cuda_stream_tests::{FlagOutcome, MappedFlag, TagLog, gpu_or_skip, spin, spin_copy, wait_flag};
use std::sync::Arc;
use std::time::Duration;

const PATTERN: u32 = 0x1234_5678;
const CLOBBER: u8 = 0xAB;
const N: usize = 1 << 16;

#[test]
fn a_buffer_round_trips_through_slices_on_its_home_stream() {
    let device = gpu_or_skip!();
    let home = stream(device);
    let values: Vec<u32> = (0..N as u32).collect();
    let mut buffer = DeviceBuffer::from_slice(&home, &values).unwrap();
    assert_eq!(buffer.len(), N);
    assert_eq!(buffer.to_vec().unwrap(), values);
    let reversed: Vec<u32> = values.iter().rev().copied().collect();
    buffer.copy_from_slice(&home, &reversed).unwrap();
    let mut back = vec![0u32; N];
    buffer.copy_to_slice(&home, &mut back).unwrap();
    assert_eq!(back, reversed);
    let zeroed = DeviceBuffer::<f64, _>::zeroed(&home, 1000).unwrap();
    assert_eq!(zeroed.to_vec().unwrap(), vec![0.0; 1000]);
}

/// The test: a kernel on stream B reads a buffer that is dropped (freed on its home
/// stream A) while the kernel still waits to read it; a new allocation on A, filled with other
/// bytes, follows the free. The kernel sees the original data: the free waited for it.
#[test]
fn a_kernel_on_another_stream_reads_a_buffer_freed_meanwhile_on_its_home_stream() {
    let device = gpu_or_skip!();
    let (a, b) = (stream(device), stream(device));
    let mut buffer = DeviceBuffer::from_slice(&a, &vec![PATTERN; N]).unwrap();
    let mut seen = DeviceBuffer::<u32, _>::zeroed(&b, N).unwrap();
    let seen_ptr = seen.as_mut_ptr();
    buffer
        .use_on(&b, |stream, ptr| {
            // SAFETY: both addresses hold N u32s, ordered on `stream` (B is `seen`'s home,
            // and `use_on` orders `buffer` both ways).
            unsafe { spin_copy(stream, ptr, seen_ptr, N, Duration::from_millis(200)) }
        })
        .unwrap()
        .unwrap();
    let freed = buffer.as_ptr() as usize;
    drop(buffer);
    let mut next = DeviceBuffer::<u32, _>::new(&a, N).unwrap();
    next.fill_bytes(&a, CLOBBER).unwrap();
    assert_eq!(seen.to_vec().unwrap(), vec![PATTERN; N], "the kernel read the data, not the next allocation's");
    // The pool did hand the memory on, after the kernel: the ordering mattered.
    println!("next allocation reused the freed address: {}", next.as_ptr() as usize == freed);
    assert_eq!(next.to_vec().unwrap(), vec![u32::from_ne_bytes([CLOBBER; 4]); N]);
}

/// The control, in raw FFI: the same program without the ordering. The next allocation on A
/// gets the freed memory at once and the kernel on B reads the clobbered bytes.
#[test]
fn without_the_ordering_the_freed_memory_is_reused_under_the_kernel() {
    let device = gpu_or_skip!();
    let (a, b) = (stream(device), stream(device));
    let bytes = N * size_of::<u32>();
    let _current = device.make_current().unwrap();
    let (mut buffer, mut seen, mut next) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    let ok = sys::cudaError::cudaSuccess;
    // SAFETY: valid out-pointers and live streams; every address below is one of these
    // allocations, used within its size; the host vector outlives the synchronous copy.
    unsafe {
        assert_eq!(sys::cudaMallocAsync(&mut buffer, bytes, a.as_raw()), ok);
        assert_eq!(sys::cudaMallocAsync(&mut seen, bytes, b.as_raw()), ok);
        let pattern = vec![PATTERN; N];
        assert_eq!(
            sys::cudaMemcpy(buffer, pattern.as_ptr().cast(), bytes, sys::cudaMemcpyKind::cudaMemcpyHostToDevice),
            ok
        );
        assert_eq!(sys::cudaDeviceSynchronize(), ok);
        spin_copy(&*b, buffer.cast(), seen.cast(), N, Duration::from_millis(200)).unwrap();
        assert_eq!(sys::cudaFreeAsync(buffer, a.as_raw()), ok);
        assert_eq!(sys::cudaMallocAsync(&mut next, bytes, a.as_raw()), ok);
        assert_eq!(next, buffer, "the pool hands the freed block to the next allocation on the stream");
        assert_eq!(sys::cudaMemsetAsync(next, i32::from(CLOBBER), bytes, a.as_raw()), ok);
        assert_eq!(sys::cudaDeviceSynchronize(), ok);
        let mut out = vec![0u32; N];
        assert_eq!(
            sys::cudaMemcpy(out.as_mut_ptr().cast(), seen, bytes, sys::cudaMemcpyKind::cudaMemcpyDeviceToHost),
            ok
        );
        assert!(out.iter().all(|&word| word == u32::from_ne_bytes([CLOBBER; 4])), "the kernel read reused memory");
        assert_eq!(sys::cudaFreeAsync(next, a.as_raw()), ok);
        assert_eq!(sys::cudaFreeAsync(seen, b.as_raw()), ok);
        assert_eq!(sys::cudaDeviceSynchronize(), ok);
    }
}

/// A copy on another stream waits for the home stream's work first (the fill behind a spin).
#[test]
fn a_copy_on_another_stream_comes_after_the_home_streams_work() {
    let device = gpu_or_skip!();
    let (home, other) = (stream(device), stream(device));
    let mut buffer = DeviceBuffer::<u32, _>::zeroed(&home, N).unwrap();
    spin(&*home, Duration::from_millis(100)).unwrap();
    buffer.fill_bytes(&home, 7).unwrap();
    let mut seen = vec![0u32; N];
    buffer.copy_to_slice(&other, &mut seen).unwrap();
    assert!(seen.iter().all(|&word| word == 0x0707_0707), "the copy on the other stream ran before the fill");
}

/// Allocations go to the home stream's device and context whatever is current: on a fresh
/// thread with no context, and under a non-primary context (cudarc's) that is destroyed while
/// the buffer lives. Run in a child: memory of the destroyed context would crash the process.
#[test]
fn a_buffer_lives_in_its_streams_context_whatever_is_current() {
    let _device = gpu_or_skip!();
    cuda_stream_tests::child_test_prints("child_buffer_under_foreign_contexts", &["survived"]);
}

#[test]
#[ignore = "run by a_buffer_lives_in_its_streams_context_whatever_is_current in a child"]
fn child_buffer_under_foreign_contexts() {
    let device = cuda_stream::Device::new(0).unwrap();
    let home = Arc::new(stream(device));
    let on_fresh_thread = {
        let home = Arc::clone(&home);
        std::thread::spawn(move || {
            let buffer = DeviceBuffer::from_slice(home, &[5u32; 256]).unwrap();
            buffer.to_vec().unwrap()
        })
        .join()
        .unwrap()
    };
    assert_eq!(on_fresh_thread, [5u32; 256]);
    let context = cudarc::driver::CudaContext::new_non_primary(0, 0).expect("a non-primary context");
    let buffer = DeviceBuffer::from_slice(&*home, &[7u32; 256]).unwrap();
    let mut filled = DeviceBuffer::<u32, _>::new(&*home, 256).unwrap();
    filled.fill_bytes(&*home, 1).unwrap();
    drop(context);
    assert_eq!(buffer.to_vec().unwrap(), [7u32; 256]);
    assert_eq!(filled.to_vec().unwrap(), [0x0101_0101u32; 256]);
    drop((buffer, filled));
    home.synchronize().unwrap();
    println!("survived");
}

/// Uses on streams other than the home stream see each other: a slow write on B, then a read
/// on C, then a read on the home stream, each through the buffer, all see the write.
#[test]
fn uses_on_several_streams_are_ordered_through_the_buffer() {
    let device = gpu_or_skip!();
    let (home, b, c) = (stream(device), stream(device), stream(device));
    let source = DeviceBuffer::from_slice(&b, &vec![PATTERN; N]).unwrap();
    let mut buffer = DeviceBuffer::<u32, _>::zeroed(&home, N).unwrap();
    let from = source.as_ptr();
    buffer
        .use_on(&b, |stream, to| {
            // SAFETY: both hold N u32s; `source`'s home is B, `buffer` is ordered by `use_on`.
            unsafe { spin_copy(stream, from, to, N, Duration::from_millis(200)) }
        })
        .unwrap()
        .unwrap();
    let mut on_c = vec![0u32; N];
    buffer.copy_to_slice(&c, &mut on_c).unwrap();
    assert!(on_c.iter().all(|&word| word == PATTERN), "the read on C waited for the write on B");
    buffer.use_on(&b, |_, _| ()).unwrap();
    assert_eq!(buffer.to_vec().unwrap(), vec![PATTERN; N], "the home stream waited for the uses elsewhere");
}

/// Work on the home stream through an address handed out earlier is seen by later uses
/// elsewhere, also after a use elsewhere came in between.
#[test]
fn a_kernel_on_the_home_stream_through_a_handed_out_address_is_seen_elsewhere() {
    let device = gpu_or_skip!();
    let (home, other) = (stream(device), stream(device));
    let source = DeviceBuffer::from_slice(&home, &vec![PATTERN; N]).unwrap();
    let mut buffer = DeviceBuffer::<u32, _>::zeroed(&home, N).unwrap();
    let to = buffer.as_mut_ptr();
    buffer.fill_bytes(&other, 0).unwrap();
    // SAFETY: both hold N u32s; both buffers' home is `home`, where the kernel runs.
    unsafe { spin_copy(&*home, source.as_ptr(), to, N, Duration::from_millis(200)) }.unwrap();
    let mut seen = vec![0u32; N];
    buffer.copy_to_slice(&other, &mut seen).unwrap();
    assert!(seen.iter().all(|&word| word == PATTERN), "the copy elsewhere waited for the home stream's kernel");
}

/// A home that lends each thread's own per-thread stream: on another thread it is another
/// stream, refused (the buffer leaks rather than being freed out of order).
#[test]
fn a_per_thread_home_lent_on_another_thread_is_refused() {
    struct PerThread(cuda_stream::Device);
    impl cuda_stream::AsStream for PerThread {
        fn as_stream(&self) -> cuda_stream::BorrowedStream<'_> {
            cuda_stream::BuiltinStream::per_thread(self.0).into()
        }
    }
    let device = gpu_or_skip!();
    let buffer = DeviceBuffer::from_slice(PerThread(device), &[1u32, 2, 3]).unwrap();
    assert_eq!(buffer.to_vec().unwrap(), [1, 2, 3]);
    let elsewhere = std::thread::spawn(move || {
        let result = buffer.to_vec();
        drop(buffer);
        result
    })
    .join()
    .unwrap();
    assert!(matches!(elsewhere, Err(Error::HomeStreamChanged)), "{elsewhere:?}");
    cuda_stream::BuiltinStream::per_thread(device).synchronize().unwrap();
}

/// Racing owners: each thread owns buffers it uses on streams picked at random from a shared
/// set, with fills, in-place copies that spin first (a write that a later use must wait for),
/// reads, pinned round trips, drops and new allocations, while another thread begins and ends
/// captures of its own stream in every mode. Every call answers `Ok` or, where a capture
/// forbids it, `CaptureMisuse`; every read sees the owner's last fill, so each use waited for
/// the ones before it on whatever stream they ran.
#[test]
fn racing_owners_streams_and_captures_keep_every_buffer_consistent() {
    let device = gpu_or_skip!();
    let streams: Vec<Arc<Stream>> = (0..4).map(|_| Arc::new(stream(device))).collect();
    let rounds = cuda_stream_tests::scaled(300, 30);
    let done = &std::sync::atomic::AtomicBool::new(false);
    let words = 4096;
    std::thread::scope(|scope| {
        // A failed owner stops the capture thread too (the scope joins it before panicking).
        let _stop = cuda_stream_tests::StopOnDrop(done);
        let capturing = scope.spawn(move || {
            let own = stream(device);
            let mut captures = 0u32;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let graph = match captures % 3 {
                    0 => own.begin_capture(capture::Relaxed).and_then(|c| {
                        cuda_stream_tests::empty(&own)?;
                        c.end()
                    }),
                    1 => own.begin_capture(capture::ThreadLocal).and_then(|c| {
                        cuda_stream_tests::empty(&own)?;
                        c.end()
                    }),
                    _ => own.begin_capture(capture::Global).and_then(|c| {
                        cuda_stream_tests::empty(&own)?;
                        c.end()
                    }),
                };
                graph.expect("the capture thread's own captures stay intact");
                captures += 1;
            }
            captures
        });
        let owners: Vec<_> = (0..3u64)
            .map(|owner| {
                let streams = &streams;
                scope.spawn(move || {
                    let mut rng = cuda_stream_tests::Rng::new(0x5eed_0000 + owner);
                    let pick = |rng: &mut cuda_stream_tests::Rng| Arc::clone(&streams[rng.below(streams.len())]);
                    let mut buffer = DeviceBuffer::<u32, _>::zeroed(pick(&mut rng), words).unwrap();
                    let mut expected = 0u32;
                    let mut pinned = PinnedBuffer::<u32>::zeroed(words).unwrap();
                    let allowed =
                        |result: &cuda_stream::Result<()>| matches!(result, Ok(()) | Err(Error::CaptureMisuse(_)));
                    for _ in 0..rounds {
                        let on = pick(&mut rng);
                        match rng.below(6) {
                            0 => {
                                let byte = rng.below(256) as u8;
                                let filled = buffer.fill_bytes(&on, byte);
                                assert!(allowed(&filled), "{filled:?}");
                                if filled.is_ok() {
                                    expected = u32::from_ne_bytes([byte; 4]);
                                }
                            }
                            1 => {
                                let mut seen = vec![0u32; words];
                                let read = buffer.copy_to_slice(&on, &mut seen);
                                assert!(allowed(&read), "{read:?}");
                                if read.is_ok() {
                                    assert!(seen.iter().all(|&word| word == expected), "a read missed a use before it");
                                }
                            }
                            2 => {
                                let used = buffer.use_on(&on, |stream, ptr| {
                                    // SAFETY: `ptr` holds `words` u32s, used on `stream` inside
                                    // `use_on`; an in-place copy writes back what it reads.
                                    unsafe { spin_copy(stream, ptr, ptr, words, Duration::from_micros(300)) }
                                });
                                assert!(matches!(used, Ok(Ok(())) | Err(Error::CaptureMisuse(_))), "{used:?}");
                            }
                            3 => {
                                let copied = buffer.copy_to_pinned(&on, &mut pinned);
                                assert!(allowed(&copied), "{copied:?}");
                                if copied.is_ok() {
                                    match pinned.as_slice() {
                                        Ok(values) => assert!(values.iter().all(|&word| word == expected)),
                                        Err(error) => assert!(matches!(error, Error::CaptureMisuse(_)), "{error:?}"),
                                    }
                                }
                            }
                            4 => {
                                let byte = rng.below(256) as u8;
                                let fresh = DeviceBuffer::<u32, _>::new(Arc::clone(&on), words)
                                    .and_then(|mut fresh| fresh.fill_bytes(&on, byte).map(|()| fresh));
                                match fresh {
                                    Ok(fresh) => {
                                        buffer = fresh;
                                        expected = u32::from_ne_bytes([byte; 4]);
                                    }
                                    Err(error) => assert!(matches!(error, Error::CaptureMisuse(_)), "{error:?}"),
                                }
                            }
                            _ => spin(&*on, Duration::from_micros(200)).unwrap(),
                        }
                    }
                    let last = loop {
                        match buffer.to_vec() {
                            Err(Error::CaptureMisuse(_)) => std::thread::yield_now(),
                            other => break other.unwrap(),
                        }
                    };
                    assert!(last.iter().all(|&word| word == expected), "the last read missed a use");
                })
            })
            .collect();
        for owner in owners {
            owner.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        println!("captures meanwhile: {}", capturing.join().unwrap());
    });
    for stream in &streams {
        stream.synchronize().unwrap();
    }
}

/// A buffer held through an `Arc<Stream>` is `'static`, and moves to another thread with it.
#[test]
fn a_buffer_owning_its_stream_moves_to_another_thread() {
    let device = gpu_or_skip!();
    let home = Arc::new(stream(device));
    let buffer = DeviceBuffer::from_slice(Arc::clone(&home), &[1u64, 2, 3]).unwrap();
    let values = std::thread::spawn(move || buffer.to_vec().unwrap()).join().unwrap();
    assert_eq!(values, [1, 2, 3]);
}

/// Pinned copies return before the stream has run them; the pinned buffer's host access waits.
#[test]
fn pinned_copies_are_asynchronous_and_the_host_waits_for_them() {
    let device = gpu_or_skip!();
    let home = stream(device);
    let mut pinned = PinnedBuffer::from_slice(&vec![PATTERN; N]).unwrap();
    let mut buffer = DeviceBuffer::<u32, _>::new(&home, N).unwrap();
    spin(&*home, Duration::from_millis(200)).unwrap();
    buffer.copy_from_pinned(&home, &mut pinned).unwrap();
    assert!(!home.query().unwrap(), "the copy was enqueued behind the spin, not waited for");
    let mut back = PinnedBuffer::<u32>::zeroed(N).unwrap();
    buffer.copy_to_pinned(&home, &mut back).unwrap();
    assert!(!home.query().unwrap());
    assert!(back.as_slice().unwrap().iter().all(|&word| word == PATTERN), "as_slice waited for the copy");
    pinned.as_mut_slice().unwrap().fill(0);
    assert!(home.query().unwrap());
}

/// Two copies into one pinned buffer, from two device buffers on two streams: the first held
/// back by a spin, the second not. The pinned buffer shows the second: its copies land in the
/// order they were made (found by the racing-owners test, where a later copy was overwritten by
/// an earlier one still in flight).
#[test]
fn copies_into_one_pinned_buffer_land_in_the_order_they_were_made() {
    let device = gpu_or_skip!();
    let (slow, fast) = (stream(device), stream(device));
    let first = DeviceBuffer::from_slice(&slow, &vec![1u32; N]).unwrap();
    let second = DeviceBuffer::from_slice(&fast, &vec![2u32; N]).unwrap();
    let mut pinned = PinnedBuffer::<u32>::zeroed(N).unwrap();
    spin(&*slow, Duration::from_millis(200)).unwrap();
    first.copy_to_pinned(&slow, &mut pinned).unwrap();
    second.copy_to_pinned(&fast, &mut pinned).unwrap();
    assert!(!fast.query().unwrap(), "the order is the GPU's: the second copy waits for the first");
    assert!(pinned.as_slice().unwrap().iter().all(|&word| word == 2), "the earlier copy landed last");

    // A read of the pinned buffer (H2D, held back) then a write into it (D2H): the write waits.
    let mut uploaded = DeviceBuffer::<u32, _>::zeroed(&slow, N).unwrap();
    let mut source = PinnedBuffer::from_slice(&vec![7u32; N]).unwrap();
    spin(&*slow, Duration::from_millis(200)).unwrap();
    uploaded.copy_from_pinned(&slow, &mut source).unwrap();
    second.copy_to_pinned(&fast, &mut source).unwrap();
    assert!(!fast.query().unwrap());
    assert_eq!(uploaded.to_vec().unwrap(), vec![7u32; N], "the upload read the pinned data before it was overwritten");
    assert!(source.as_slice().unwrap().iter().all(|&word| word == 2));
}

/// Dropping a pinned buffer with a copy in flight waits for the copy (no free under DMA).
#[test]
fn a_pinned_buffer_dropped_with_a_copy_in_flight_waits_for_it() {
    let device = gpu_or_skip!();
    let home = stream(device);
    let mut pinned = PinnedBuffer::<u32>::zeroed(N).unwrap();
    let buffer = DeviceBuffer::from_slice(&home, &vec![PATTERN; N]).unwrap();
    spin(&*home, Duration::from_millis(200)).unwrap();
    buffer.copy_to_pinned(&home, &mut pinned).unwrap();
    assert!(!home.query().unwrap());
    drop(pinned);
    assert!(home.query().unwrap(), "the drop waited for the copy into it");
}

#[test]
fn bad_sizes_are_refused_and_nothing_is_lost() {
    let device = gpu_or_skip!();
    let home = stream(device);
    assert!(matches!(DeviceBuffer::<u32, _>::new(&home, 0), Err(Error::Size(_))));
    assert!(matches!(DeviceBuffer::<u64, _>::new(&home, usize::MAX / 4), Err(Error::Size(_))));
    assert!(matches!(PinnedBuffer::<u8>::zeroed(0), Err(Error::Size(_))));
    assert!(matches!(DeviceBuffer::<[u8; 0], _>::new(&home, 4), Err(Error::Size(_))), "zero-sized elements");
    let mut buffer = DeviceBuffer::from_slice(&home, &[1u32, 2, 3, 4]).unwrap();
    assert!(matches!(buffer.copy_from_slice(&home, &[9, 9, 9]), Err(Error::Size(_))));
    let mut short = [0u32; 5];
    assert!(matches!(buffer.copy_to_slice(&home, &mut short), Err(Error::Size(_))));
    let other = DeviceBuffer::<u32, _>::zeroed(&home, 2).unwrap();
    assert!(matches!(buffer.copy_from(&home, &other), Err(Error::Size(_))));
    assert_eq!(buffer.to_vec().unwrap(), [1, 2, 3, 4], "a refused copy changed nothing");
    // Out of memory: a typed CUDA error, and the pool still serves.
    let huge = DeviceBuffer::<u8, _>::new(&home, 1 << 50);
    match huge {
        Err(Error::Cuda { api, code }) => {
            assert_eq!(api, "cudaMallocAsync");
            assert_eq!(code.0, sys::cudaError::cudaErrorMemoryAllocation.0 as i32);
        }
        other => panic!("a petabyte allocation must fail with cudaErrorMemoryAllocation: {other:?}"),
    }
    let after = DeviceBuffer::from_slice(&home, &[5u16; 100]).unwrap();
    assert_eq!(after.to_vec().unwrap(), [5u16; 100]);
    home.synchronize().unwrap();
}

#[test]
fn a_pool_serves_streams_of_its_device_and_reports_its_usage() {
    let device = gpu_or_skip!();
    let (a, b) = (stream(device), stream(device));
    let pool = MemPool::new(device).unwrap();
    pool.set_release_threshold(u64::MAX).unwrap();
    assert_eq!(pool.release_threshold().unwrap(), u64::MAX);
    let strict = ReusePolicy {
        follow_event_dependencies: false,
        allow_opportunistic: false,
        allow_internal_dependencies: false,
    };
    pool.set_reuse(strict).unwrap();
    assert_eq!(pool.reuse().unwrap(), strict);
    let bytes = 4 << 20;
    let first = DeviceBuffer::<u8, _>::new_in(&pool, &a, bytes).unwrap();
    let second = DeviceBuffer::<u8, _>::new_in(&pool, &b, bytes).unwrap();
    let stats = pool.stats().unwrap();
    assert!(stats.used_current >= 2 * bytes as u64, "{stats:?}");
    assert!(stats.reserved_current >= stats.used_current);
    drop((first, second));
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    let stats = pool.stats().unwrap();
    assert_eq!(stats.used_current, 0, "{stats:?}");
    assert!(stats.reserved_current >= 2 * bytes as u64, "the threshold keeps the memory reserved: {stats:?}");
    assert!(stats.used_high >= 2 * bytes as u64);
    pool.trim_to(0).unwrap();
    assert_eq!(pool.stats().unwrap().reserved_current, 0, "trimmed");
    pool.reset_peaks().unwrap();
    assert_eq!(pool.stats().unwrap().used_high, 0);
    // The default pool is the device's, and outlives every handle to it.
    let default = MemPool::device_default(device).unwrap();
    let from_default = DeviceBuffer::<u8, _>::new_in(&default, &a, 1024).unwrap();
    drop(default);
    assert_eq!(from_default.to_vec().unwrap().len(), 1024);
}

#[test]
fn a_pool_dropped_before_its_buffers_keeps_them_valid() {
    let device = gpu_or_skip!();
    let home = stream(device);
    let pool = MemPool::new(device).unwrap();
    let buffer = DeviceBuffer::from_slice(&home, &[3u32; 64]).unwrap();
    let from_pool = {
        let mut from_pool = DeviceBuffer::<u32, _>::new_in(&pool, &home, 64).unwrap();
        from_pool.copy_from(&home, &buffer).unwrap();
        from_pool
    };
    drop(pool);
    assert_eq!(from_pool.to_vec().unwrap(), [3u32; 64]);
}

#[test]
fn allocations_host_copies_and_use_on_are_refused_during_a_capture_and_it_survives() {
    let device = gpu_or_skip!();
    let (captured, home) = (stream(device), stream(device));
    let mut buffer = DeviceBuffer::<u32, _>::zeroed(&home, 16).unwrap();
    home.synchronize().unwrap();
    let capture = captured.begin_capture(capture::Relaxed).unwrap();
    let misuse = |result: cuda_stream::Result<()>| matches!(result, Err(Error::CaptureMisuse(_)));
    assert!(misuse(DeviceBuffer::<u32, _>::new(&captured, 16).map(drop)));
    assert!(misuse(buffer.copy_from_slice(&captured, &[1; 16])));
    assert!(misuse(buffer.use_on(&captured, |_, _| ())));
    // A fill is captured: the graph holds the buffer (memory_nodes has its launches).
    buffer.fill_bytes(&captured, 1).unwrap();
    let graph = capture.end().unwrap();
    assert_eq!(node_count(&graph), 1, "the fill, and nothing of the refused calls");
    drop(graph);
    assert_eq!(buffer.to_vec().unwrap(), [0; 16], "nothing captured ran");

    // The home stream captured, the use on another stream: refused too (waiting on the home
    // stream would pull the other stream into the capture, and the copy with it).
    let capture = home.begin_capture(capture::Relaxed).unwrap();
    assert!(misuse(buffer.fill_bytes(&captured, 1)));
    assert!(misuse(buffer.use_on(&captured, |_, _| ())));
    let graph = capture.end().unwrap();
    assert_eq!(node_count(&graph), 0, "nothing of the refused uses went into the graph");
    assert_eq!(buffer.to_vec().unwrap(), [0; 16]);
}

/// An `AsStream` that lends another stream than the one the buffer was allocated on: every
/// later use is refused, and the buffer is leaked rather than freed on a stream its uses were
/// not ordered with.
#[test]
fn a_home_that_changes_its_stream_is_refused_and_the_buffer_leaked() {
    struct Fickle {
        streams: [Stream; 2],
        second: std::sync::atomic::AtomicBool,
    }
    impl cuda_stream::AsStream for Fickle {
        fn as_stream(&self) -> cuda_stream::BorrowedStream<'_> {
            let index = usize::from(self.second.load(std::sync::atomic::Ordering::Relaxed));
            self.streams[index].as_stream()
        }
    }
    let device = gpu_or_skip!();
    let pool = MemPool::new(device).unwrap();
    let fickle = Fickle { streams: [stream(device), stream(device)], second: false.into() };
    let buffer = DeviceBuffer::<u32, _>::new_in(&pool, &fickle, 1024).unwrap();
    fickle.second.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(matches!(buffer.to_vec(), Err(Error::HomeStreamChanged)));
    drop(buffer);
    fickle.streams[0].synchronize().unwrap();
    fickle.streams[1].synchronize().unwrap();
    assert!(pool.stats().unwrap().used_current >= 4096, "leaked, not freed on the wrong stream");
}

/// A buffer whose home stream is being captured when it drops is leaked, not freed into the
/// graph (a replay would free it again).
#[test]
fn a_buffer_dropped_while_its_home_stream_captures_is_leaked_not_captured() {
    let device = gpu_or_skip!();
    let home = stream(device);
    let pool = MemPool::new(device).unwrap();
    let buffer = DeviceBuffer::<u8, _>::new_in(&pool, &home, 1 << 20).unwrap();
    home.synchronize().unwrap();
    let capture = home.begin_capture(capture::ThreadLocal).unwrap();
    drop(buffer);
    let graph = capture.end().unwrap();
    assert_eq!(node_count(&graph), 0, "no free node went into the graph");
    home.synchronize().unwrap();
    assert!(pool.stats().unwrap().used_current >= 1 << 20, "leaked, not freed");
}

/// Scratch memory a graph owns: allocated and freed inside the capture (memory nodes), used by
/// the kernels between, at every launch of the executable.
#[test]
fn graph_scratch_memory_carries_data_between_kernels_at_every_launch() {
    let device = gpu_or_skip!();
    let (captured, buffers) = (stream(device), stream(device));
    let values: Vec<u32> = (0..N as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let source = DeviceBuffer::from_slice(&buffers, &values).unwrap();
    let mut target = DeviceBuffer::<u32, _>::zeroed(&buffers, N).unwrap();
    buffers.synchronize().unwrap();
    let (from, to) = (source.as_ptr(), target.as_mut_ptr());
    let mut capture = captured.begin_capture(capture::ThreadLocal).unwrap();
    capture
        .scratch::<u32, _>(&captured, N, |stream, scratch| {
            // SAFETY: `source` and `target` hold N u32s and outlive every launch below, which
            // the host orders with their home stream by synchronizing; `scratch` holds N u32s
            // between the graph's allocation and free around these two kernels.
            unsafe {
                spin_copy(stream, from, scratch, N, Duration::ZERO).unwrap();
                spin_copy(stream, scratch, to, N, Duration::ZERO).unwrap();
            }
        })
        .unwrap();
    let graph = capture.end().unwrap();
    assert_eq!(node_count(&graph), 4, "an allocation, two kernels, a free");
    let exec = graph.instantiate().unwrap();
    for _ in 0..2 {
        target.fill_bytes(&buffers, 0).unwrap();
        buffers.synchronize().unwrap();
        exec.launch(&captured).unwrap();
        captured.synchronize().unwrap();
        assert_eq!(target.to_vec().unwrap(), values, "the data went through the graph's scratch memory");
    }
    // Not part of the capture: refused, the capture intact.
    let mut capture = captured.begin_capture(capture::ThreadLocal).unwrap();
    let refused = capture.scratch::<u32, _>(&buffers, 16, |_, _| ());
    assert!(matches!(refused, Err(Error::CaptureMisuse(_))), "{refused:?}");
    assert!(matches!(capture.scratch::<u8, _>(&captured, 0, |_, _| ()), Err(Error::Size(_))));
    assert_eq!(node_count(&capture.end().unwrap()), 0);
}

/// How many nodes `graph` has.
fn node_count(graph: &cuda_stream::Graph) -> usize {
    let mut nodes = 0usize;
    // SAFETY: a live graph; a null node array asks only for the count.
    let code = unsafe { sys::cudaGraphGetNodes(graph.as_raw(), std::ptr::null_mut(), &mut nodes) };
    assert_eq!(code, sys::cudaError::cudaSuccess);
    nodes
}

fn _compile_checks(stream: &StreamRef, owned: Stream) {
    // A buffer borrows `&Stream` (it cannot outlive it) or owns an `Arc<Stream>`.
    let _borrowing: cuda_stream::Result<DeviceBuffer<u8, &StreamRef>> = DeviceBuffer::new(stream, 1);
    let _owning: cuda_stream::Result<DeviceBuffer<u8, Arc<Stream>>> = DeviceBuffer::new(Arc::new(owned), 1);
}

/// A copy between buffers of two GPUs (`cudaMemcpyPeerAsync`, on a stream of the target's
/// device) waits for the work before it on the source's home stream, on the other GPU; the
/// raw peer copy on the same stream, without that order, reads the source before that work
/// wrote it (the control).
#[test]
fn a_peer_copy_between_two_gpus_waits_for_the_source_streams_work() {
    let devices = cuda_stream_tests::gpus_or_skip!(2);
    let (gpu0, gpu1) = (devices[0], devices[1]);
    let (home0, home1) = (stream(gpu0), stream(gpu1));
    let fives = DeviceBuffer::from_slice(&home0, &vec![5u32; N]).unwrap();
    let mut source = DeviceBuffer::<u32, _>::zeroed(&home0, N).unwrap();
    let mut target = DeviceBuffer::<u32, _>::zeroed(&home1, N).unwrap();
    home0.synchronize().unwrap();
    // SAFETY: N u32s of GPU 0 each, alive until home0 is synchronized below.
    unsafe { spin_copy(&home0, fives.as_ptr(), source.as_mut_ptr(), N, Duration::from_millis(50)) }.unwrap();
    target.copy_from(&home1, &source).unwrap();
    assert!(target.to_vec().unwrap().iter().all(|&v| v == 5), "the peer copy ran after the kernel on GPU 0");
    home0.synchronize().unwrap();

    // The control: the same copy made raw, with no order between the two GPUs' streams.
    source.fill_bytes(&home0, 0).unwrap();
    target.fill_bytes(&home1, 0).unwrap();
    home0.synchronize().unwrap();
    home1.synchronize().unwrap();
    // SAFETY: as above.
    unsafe { spin_copy(&home0, fives.as_ptr(), source.as_mut_ptr(), N, Duration::from_millis(50)) }.unwrap();
    let bytes = N * size_of::<u32>();
    // SAFETY: two live allocations of `bytes` on GPUs 1 and 0; a live stream of GPU 1.
    let code = unsafe {
        sys::cudaMemcpyPeerAsync(
            target.as_mut_ptr().cast(),
            gpu1.ordinal(),
            source.as_ptr().cast(),
            gpu0.ordinal(),
            bytes,
            home1.as_raw(),
        )
    };
    assert_eq!(code, sys::cudaError::cudaSuccess);
    home1.synchronize().unwrap();
    let raw = target.to_vec().unwrap();
    home0.synchronize().unwrap();
    if cuda_stream_tests::concurrency_visible() {
        assert!(raw.iter().all(|&v| v == 0), "the raw copy read GPU 0's buffer before the kernel wrote it");
    }
}

#[test]
fn views_copy_one_element_and_a_range_in_and_out() {
    let device = gpu_or_skip!();
    let home = stream(device);
    let values: Vec<u32> = (0..1024).collect();
    let mut buffer = DeviceBuffer::from_slice(&home, &values).unwrap();
    // One element read back: the view's bytes, not the buffer's.
    assert_eq!(buffer.slice(5..6).unwrap().to_vec().unwrap(), vec![5]);
    assert_eq!(buffer.slice(1020..).unwrap().to_vec().unwrap(), vec![1020, 1021, 1022, 1023]);
    // A range written, the rest untouched.
    buffer.slice_mut(100..200).unwrap().copy_from_slice(&home, &[7; 100]).unwrap();
    let all = buffer.to_vec().unwrap();
    assert_eq!(&all[..100], &values[..100]);
    assert_eq!(&all[100..200], &[7; 100][..]);
    assert_eq!(&all[200..], &values[200..]);
    // Through pinned memory, on another stream (ordered after the home stream's write).
    let other = stream(device);
    let mut pinned = PinnedBuffer::<u32>::zeroed(100).unwrap();
    buffer.slice(100..200).unwrap().copy_to_pinned(&other, &mut pinned).unwrap();
    assert_eq!(pinned.as_slice().unwrap(), &[7; 100][..]);
    pinned.as_mut_slice().unwrap().copy_from_slice(&values[..100]);
    buffer.slice_mut(..100).unwrap().copy_from_pinned(&other, &mut pinned).unwrap();
    let mut back = vec![0; 100];
    buffer.slice(..100).unwrap().copy_to_slice(&home, &mut back).unwrap();
    assert_eq!(back, values[..100]);
    // A view copied into another view: of the same buffer (disjoint halves), on another
    // stream, and of another buffer.
    let (mut low, high) = buffer.slice_mut(..).unwrap().split_at_mut(512).unwrap();
    low.copy_from(&other, &high).unwrap();
    let all = buffer.to_vec().unwrap();
    assert_eq!(&all[..512], &all[512..], "the high half copied onto the low half");
    let mut small = DeviceBuffer::<u32, _>::zeroed(&other, 16).unwrap();
    small.slice_mut(4..8).unwrap().copy_from(&home, &buffer.slice(1020..).unwrap()).unwrap();
    assert_eq!(small.to_vec().unwrap()[4..8], values[1020..]);
    assert!(matches!(small.slice_mut(..4).unwrap().copy_from(&home, &buffer.slice(..5).unwrap()), Err(Error::Size(_))));
    // Sizes checked before CUDA.
    for error in [
        buffer.slice(0..0).err(),
        buffer.slice(..1025).err(),
        buffer.slice(1000..1030).err(),
        buffer.slice_mut(..).unwrap().split_at_mut(0).err(),
        buffer.slice_mut(..).unwrap().split_at_mut(1024).err(),
        buffer.chunks_mut(0).err(),
        buffer.slice_mut(0..10).unwrap().copy_from_slice(&home, &[1; 9]).err(),
        buffer.slice(0..10).unwrap().copy_to_slice(&home, &mut [0; 11]).err(),
    ] {
        assert!(matches!(error, Some(Error::Size(_))), "{error:?}");
    }
}

/// A pipeline's chunks: each chunk written on its own stream by a kernel that spins first, then
/// read back through pinned memory on the next chunk's stream. Each read must see its chunk's
/// write: the view's use on the second stream is ordered after the first.
#[test]
fn chunks_used_on_several_streams_are_ordered_with_each_other() {
    let device = gpu_or_skip!();
    let home = stream(device);
    let streams: Vec<Stream> = (0..4).map(|_| stream(device)).collect();
    let (chunk, chunks) = (1024, 4);
    let source: Vec<u32> = (0..(chunk * chunks) as u32).map(|i| i ^ PATTERN).collect();
    let source = DeviceBuffer::from_slice(&home, &source).unwrap();
    let mut buffer = DeviceBuffer::<u32, _>::zeroed(&home, chunk * chunks).unwrap();
    let mut outs: Vec<PinnedBuffer<u32>> = (0..chunks).map(|_| PinnedBuffer::zeroed(chunk).unwrap()).collect();
    for (index, mut view) in buffer.chunks_mut(chunk).unwrap().enumerate() {
        assert_eq!(view.range(), index * chunk..(index + 1) * chunk);
        let from = source.slice(view.range()).unwrap();
        let writer = &streams[index];
        from.use_on(writer, |_, from| {
            view.use_on(writer, |on, to| {
                // SAFETY: `chunk` u32s at both addresses, used on `on` through the views,
                // which order the uses and outlive the kernel (the buffers drop after the
                // reads below waited for it).
                unsafe { spin_copy(on, from, to, chunk, Duration::from_millis(20)) }
            })
        })
        .unwrap()
        .unwrap()
        .unwrap();
        let reader = &streams[(index + 1) % chunks];
        view.copy_to_pinned(reader, &mut outs[index]).unwrap();
    }
    for (index, out) in outs.iter().enumerate() {
        let expected: Vec<u32> = ((index * chunk) as u32..((index + 1) * chunk) as u32).map(|i| i ^ PATTERN).collect();
        assert_eq!(out.as_slice().unwrap(), &expected[..], "chunk {index} read after its write");
    }
}

/// The spans of the tags' kernels in `log`, by tag.
fn spans(log: &TagLog) -> std::collections::HashMap<u32, (u64, u64)> {
    log.entries().into_iter().map(|entry| (entry.tag, (entry.start_ns, entry.end_ns))).collect()
}

/// Two reads of one buffer on two streams run at once (each a kernel that spins 100 ms inside
/// a shared view's `use_on`); a write of the buffer on a third stream starts after both
/// ended; a read after the write starts after it. The old whole-buffer ordering serialized
/// the readers.
#[test]
fn readers_on_two_streams_overlap_and_a_writer_waits_for_both() {
    let device = gpu_or_skip!();
    let (home, a, b, w) = (stream(device), stream(device), stream(device), stream(device));
    let mut buffer = DeviceBuffer::from_slice(&home, &vec![PATTERN; N]).unwrap();
    let log = TagLog::new(8).unwrap();
    let spin = Duration::from_millis(100);
    for (tag, reader) in [(1, &a), (2, &b)] {
        buffer.slice(..).unwrap().use_on(reader, |on, _| cuda_stream_tests::tag(on, &log, tag, spin)).unwrap().unwrap();
    }
    buffer.use_on(&w, |on, _| cuda_stream_tests::tag(on, &log, 3, Duration::ZERO)).unwrap().unwrap();
    buffer.slice(..).unwrap().use_on(&a, |on, _| cuda_stream_tests::tag(on, &log, 4, Duration::ZERO)).unwrap().unwrap();
    for s in [&a, &b, &w] {
        s.synchronize().unwrap();
    }
    let spans = spans(&log);
    let (first, second, writer, reader) = (spans[&1], spans[&2], spans[&3], spans[&4]);
    assert!(writer.0 >= first.1 && writer.0 >= second.1, "the write waited for both reads: {spans:?}");
    assert!(reader.0 >= writer.1, "the read after the write waited for it: {spans:?}");
    if cuda_stream_tests::concurrency_visible() {
        assert!(first.0 < second.1 && second.0 < first.1, "the two reads ran at once: {spans:?}");
    }
}

/// A write on another stream (`w`) after a read waits for the read's 100 ms kernel, whatever the
/// reader's stream did in between: it was dropped, destroyed, given up with `into_raw`, began a
/// capture or joined one, or read the buffer 100 times more; a write that was refused fails the
/// test too. (A mark recorded lazily, at the write, would have to survive each of these.)
#[test]
fn a_write_after_a_read_waits_for_it_whatever_the_readers_stream_did_meanwhile() {
    let device = gpu_or_skip!();
    let home = stream(device);
    let cases = ["dropped", "destroyed", "into_raw", "begins a capture", "joins a capture", "read again 100 times"];
    for case in cases {
        let (reader, w) = (stream(device), stream(device));
        let mut buffer = DeviceBuffer::from_slice(&home, &vec![PATTERN; N]).unwrap();
        let log = TagLog::new(4).unwrap();
        let view = buffer.slice(..).unwrap();
        view.use_on(&reader, |on, _| cuda_stream_tests::tag(on, &log, 1, Duration::from_millis(100))).unwrap().unwrap();
        let write = |buffer: &mut DeviceBuffer<u32, _>| {
            buffer.use_on(&w, |on, _| cuda_stream_tests::tag(on, &log, 2, Duration::ZERO)).unwrap().unwrap();
        };
        match case {
            "dropped" => {
                drop(reader);
                write(&mut buffer);
            }
            "destroyed" => {
                reader.destroy().unwrap();
                write(&mut buffer);
            }
            "into_raw" => {
                let raw = reader.into_raw();
                write(&mut buffer);
                // SAFETY: the handle `into_raw` gave up, destroyed once; pending work completes.
                cuda_stream::check(unsafe { sys::cudaStreamDestroy(raw) }, "cudaStreamDestroy").unwrap();
            }
            "begins a capture" => {
                let capture = reader.begin_capture(capture::ThreadLocal).unwrap();
                write(&mut buffer);
                drop(capture.end().unwrap());
            }
            "joins a capture" => {
                let origin = stream(device);
                let capture = origin.begin_capture(capture::ThreadLocal).unwrap();
                reader.wait_stream(&origin).unwrap();
                write(&mut buffer);
                origin.wait_stream(&reader).unwrap();
                drop(capture.end().unwrap());
            }
            _ => {
                for _ in 0..100 {
                    view.use_on(&reader, |_, ptr| std::hint::black_box(ptr)).unwrap();
                }
                write(&mut buffer);
            }
        }
        w.synchronize().unwrap();
        home.synchronize().unwrap();
        let spans = spans(&log);
        let (read, written) = (spans[&1], spans[&2]);
        assert!(written.0 >= read.1, "{case}: the write waited for the read: {spans:?}");
    }
}

/// A write waits for the earlier read of its bytes, and for nothing the reader's stream did
/// after it: the read (20 ms) is followed on its stream by a 300 ms kernel on another buffer, and
/// the write of the first buffer on a third stream starts before that kernel ends. (A mark
/// recorded when the write comes, not right after the read, would hold the write behind the
/// unrelated kernel: double buffering would lose its overlap.)
#[test]
fn a_write_waits_for_the_read_and_not_for_the_readers_later_work() {
    let device = gpu_or_skip!();
    if !cuda_stream_tests::concurrency_visible() {
        return;
    }
    let (home, reader, w) = (stream(device), stream(device), stream(device));
    let mut x = DeviceBuffer::from_slice(&home, &vec![PATTERN; N]).unwrap();
    let mut y = DeviceBuffer::from_slice(&home, &vec![PATTERN; N]).unwrap();
    let log = TagLog::new(4).unwrap();
    let read = x.slice(..).unwrap();
    read.use_on(&reader, |on, _| cuda_stream_tests::tag(on, &log, 1, Duration::from_millis(20))).unwrap().unwrap();
    y.use_on(&reader, |on, _| cuda_stream_tests::tag(on, &log, 2, Duration::from_millis(300))).unwrap().unwrap();
    x.use_on(&w, |on, _| cuda_stream_tests::tag(on, &log, 3, Duration::ZERO)).unwrap().unwrap();
    for s in [&reader, &w] {
        s.synchronize().unwrap();
    }
    let spans = spans(&log);
    let (read, unrelated, written) = (spans[&1], spans[&2], spans[&3]);
    assert!(written.0 >= read.1, "the write waited for the read: {spans:?}");
    assert!(written.0 < unrelated.1, "the write did not wait for the reader's unrelated kernel: {spans:?}");
}

/// Disjoint exclusive views on two streams run at once, also when one of the streams is the
/// buffer's home (whose own work before the views, the allocation and a fill, is all the other
/// waits for); a write of the whole buffer waits for both.
#[test]
fn disjoint_views_on_two_streams_overlap_and_a_write_of_both_waits() {
    let device = gpu_or_skip!();
    let (home, b, c) = (stream(device), stream(device), stream(device));
    let mut buffer = DeviceBuffer::<u32, _>::zeroed(&home, N).unwrap();
    let log = TagLog::new(8).unwrap();
    let spin = Duration::from_millis(100);
    let (mut left, mut right) = buffer.slice_mut(..).unwrap().split_at_mut(N / 2).unwrap();
    left.use_on(&home, |on, _| cuda_stream_tests::tag(on, &log, 1, spin)).unwrap().unwrap();
    right.use_on(&b, |on, _| cuda_stream_tests::tag(on, &log, 2, spin)).unwrap().unwrap();
    buffer.use_on(&c, |on, _| cuda_stream_tests::tag(on, &log, 3, Duration::ZERO)).unwrap().unwrap();
    for s in [&home, &b, &c] {
        s.synchronize().unwrap();
    }
    let spans = spans(&log);
    let (first, second, whole) = (spans[&1], spans[&2], spans[&3]);
    assert!(whole.0 >= first.1 && whole.0 >= second.1, "the whole write waited for both views: {spans:?}");
    if cuda_stream_tests::concurrency_visible() {
        assert!(first.0 < second.1 && second.0 < first.1, "the disjoint views ran at once: {spans:?}");
    }
}

/// A free waits for every reader: two kernels on two streams read the buffer (200 ms spin,
/// then a copy out) while it is dropped on its home stream, and the next allocation there is
/// filled with other bytes. Both read the original data.
#[test]
fn a_free_waits_for_every_reader() {
    let device = gpu_or_skip!();
    let (home, a, b) = (stream(device), stream(device), stream(device));
    let buffer = DeviceBuffer::from_slice(&home, &vec![PATTERN; N]).unwrap();
    let mut outs = [DeviceBuffer::<u32, _>::zeroed(&a, N).unwrap(), DeviceBuffer::<u32, _>::zeroed(&b, N).unwrap()];
    for (out, reader) in outs.iter_mut().zip([&a, &b]) {
        let to = out.as_mut_ptr();
        buffer
            .slice(..)
            .unwrap()
            .use_on(reader, |on, from| {
                // SAFETY: N u32s at both addresses; `to` is `out`'s, whose home is `on`; the
                // view orders `from`'s use both ways.
                unsafe { spin_copy(on, from, to, N, Duration::from_millis(200)) }
            })
            .unwrap()
            .unwrap();
    }
    drop(buffer);
    let mut next = DeviceBuffer::<u32, _>::new(&home, N).unwrap();
    next.fill_bytes(&home, CLOBBER).unwrap();
    for out in &outs {
        assert_eq!(out.to_vec().unwrap(), vec![PATTERN; N], "each reader read the data, not the next allocation's");
    }
}

/// Many copies of one pinned buffer in flight, up and down, on one stream: each waits for
/// nothing but its stream, the events are recycled, and the data comes out in order.
#[test]
fn many_pinned_copies_in_flight_on_one_stream_keep_their_order() {
    let device = gpu_or_skip!();
    let home = stream(device);
    let mut buffer = DeviceBuffer::<u32, _>::zeroed(&home, 256).unwrap();
    let mut pinned = PinnedBuffer::<u32>::zeroed(256).unwrap();
    let mut sum = DeviceBuffer::<u32, _>::zeroed(&home, 256).unwrap();
    spin(&*home, Duration::from_millis(50)).unwrap();
    for round in 0..300u32 {
        // Written on the host only between rounds that synchronized: as_mut_slice waits.
        if round % 100 == 0 {
            pinned.as_mut_slice().unwrap().fill(round);
        }
        buffer.copy_from_pinned(&home, &mut pinned).unwrap();
        sum.copy_from(&home, &buffer).unwrap();
    }
    // One stream's copies out of the pinned buffer: the newest mark stands for all of them.
    assert!(format!("{pinned:?}").contains("copies_in_flight: 1"), "{pinned:?}");
    sum.copy_to_pinned(&home, &mut pinned).unwrap();
    assert_eq!(pinned.as_slice().unwrap(), &[200; 256][..], "the last round's value, after every copy");
}

/// Memory the program already has, registered for a closure: a copy from it returns at once
/// (behind a kernel that waits for the host, the copy has not run), the end of the closure
/// waits for it, and the memory is unregistered then (registering it again succeeds); copies
/// back land in it; a panic in the closure still waits and unregisters; memory already
/// page-locked and empty slices are refused.
#[test]
fn registered_host_memory_is_copied_asynchronously_and_unregistered_at_the_end() {
    let device = gpu_or_skip!();
    let (home, other) = (stream(device), stream(device));
    let mut data = vec![PATTERN; N];
    let mut buffer = DeviceBuffer::<u32, _>::zeroed(&home, N).unwrap();
    // The copy goes behind a kernel that waits for the host's flag, set inside the registration
    // once the copy's call has returned: however slow the host's calls are on a busy machine,
    // the copy cannot have run when the closure asks.
    let gate = MappedFlag::new().unwrap();
    wait_flag(&*home, &gate, Duration::from_secs(30)).unwrap();
    let pending = cuda_stream::register_host(&mut data, |registered| {
        buffer.copy_from_pinned(&home, registered).unwrap();
        let pending = !home.query().unwrap();
        gate.set();
        pending
    })
    .unwrap();
    assert!(pending, "the copy was enqueued behind the gate, not waited for");
    assert!(home.query().unwrap(), "the end of the registration waited for the copy");
    assert_eq!(gate.outcome(), FlagOutcome::Seen, "the gate's kernel saw the flag, not its timeout");
    assert_eq!(buffer.to_vec().unwrap(), vec![PATTERN; N]);

    // Back into the same memory (registered again: the first registration ended), on another
    // stream; the host reads it inside the closure, after the copy.
    data.fill(0);
    let seen = cuda_stream::register_host(&mut data, |registered| {
        buffer.copy_to_pinned(&other, registered).unwrap();
        registered.as_slice().unwrap().iter().all(|&word| word == PATTERN)
    })
    .unwrap();
    assert!(seen && data.iter().all(|&word| word == PATTERN));

    // A panic inside: the copy is still waited for and the memory unregistered.
    spin(&*home, Duration::from_millis(100)).unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cuda_stream::register_host(&mut data, |registered| {
            buffer.copy_from_pinned(&home, registered).unwrap();
            panic!("inside the registration");
        })
    }));
    assert!(panicked.is_err());
    assert!(home.query().unwrap(), "the unwinding waited for the copy");
    cuda_stream::register_host(&mut data, |_| ()).expect("unregistered after the panic");

    // Refusals, before CUDA or by it.
    let mut pinned = PinnedBuffer::<u32>::zeroed(16).unwrap();
    let twice = cuda_stream::register_host(pinned.as_mut_slice().unwrap(), |_| ());
    assert!(matches!(twice, Err(Error::Cuda { api: "cudaHostRegister", .. })), "{twice:?}");
    assert!(matches!(cuda_stream::register_host(&mut [0u32; 0], |_| ()), Err(Error::Size(_))));
}

/// A pinned pool hands a dropped buffer's block to the next buffer of its size class (same
/// address, no new allocation), zeroed; a buffer dropped with a copy into it in flight waits
/// for the copy before the block is reused (the next owner's data is not overwritten by it);
/// the figures follow; trim frees what is cached.
#[test]
fn a_pinned_pool_reuses_blocks_after_their_copies() {
    let device = gpu_or_skip!();
    let home = stream(device);
    let pool = cuda_stream::PinnedPool::new();
    let first = PinnedBuffer::<u32>::from_slice_in(&pool, &[7; 1000]).unwrap();
    let address = first.as_slice().unwrap().as_ptr();
    assert_eq!(pool.stats(), cuda_stream::PinnedPoolStats { cached_bytes: 0, in_use_bytes: 4096 });
    drop(first);
    assert_eq!(pool.stats(), cuda_stream::PinnedPoolStats { cached_bytes: 4096, in_use_bytes: 0 });
    let second = PinnedBuffer::<u32>::zeroed_in(&pool, 900).unwrap();
    assert_eq!(second.as_slice().unwrap().as_ptr(), address, "the same block, size class 4 KiB");
    assert!(second.as_slice().unwrap().iter().all(|&word| word == 0), "zeroed on reuse");

    // A copy into it behind a spin, then the drop: the block is cached only after the copy.
    let source = DeviceBuffer::from_slice(&home, &[PATTERN; 900]).unwrap();
    let mut second = second;
    spin(&*home, Duration::from_millis(200)).unwrap();
    source.copy_to_pinned(&home, &mut second).unwrap();
    drop(second);
    assert!(home.query().unwrap(), "the drop waited for the copy into the block");
    let mut third = PinnedBuffer::<u32>::zeroed_in(&pool, 900).unwrap();
    third.as_mut_slice().unwrap().fill(1);
    home.synchronize().unwrap();
    assert!(third.as_slice().unwrap().iter().all(|&word| word == 1), "no copy landed after the reuse");
    drop(third);
    pool.trim().unwrap();
    assert_eq!(pool.stats(), cuda_stream::PinnedPoolStats { cached_bytes: 0, in_use_bytes: 0 });
    // A buffer from the pool outlives the pool's handle.
    let kept = PinnedBuffer::<u8>::zeroed_in(&pool, 5000).unwrap();
    drop(pool);
    assert_eq!(kept.as_slice().unwrap().len(), 5000);
}

/// A kernel writes a pinned buffer through its device address (zero-copy), behind a spin:
/// the host's next read waits for the kernel and sees its data.
#[test]
fn a_kernel_writes_pinned_memory_in_place_and_the_host_waits_for_it() {
    let device = gpu_or_skip!();
    let (home, other) = (stream(device), stream(device));
    let source = DeviceBuffer::from_slice(&home, &vec![PATTERN; N]).unwrap();
    home.synchronize().unwrap();
    let mut pinned = PinnedBuffer::<u32>::zeroed(N).unwrap();
    let from = source.as_ptr();
    pinned
        .use_on(&other, |on, to| {
            // SAFETY: N u32s at both addresses: `source` (its home synchronized above, and it
            // outlives the kernel: the read below waits for it) and the pinned buffer's device
            // address, ordered by `use_on`.
            unsafe { spin_copy(on, from, to, N, Duration::from_millis(200)) }
        })
        .unwrap()
        .unwrap();
    assert!(pinned.as_slice().unwrap().iter().all(|&word| word == PATTERN), "the read waited for the kernel");
}

/// One pinned buffer, cut into parts as the device buffer is into chunks: each chunk copied in
/// from its part and back out on a stream of its own, the first held back between its two
/// copies by a kernel that waits for the host. The parts' copies do not wait for each other
/// (tracked for their ranges): the last stream finishes while the first still waits; the
/// host's read waits for every part's copy back; the ranges are checked.
#[test]
fn parts_of_one_pinned_buffer_are_copied_on_several_streams() {
    let device = gpu_or_skip!();
    let streams: Vec<Stream> = (0..4).map(|_| stream(device)).collect();
    let (chunk, chunks) = (4096, 4);
    let values: Vec<u32> = (0..(chunk * chunks) as u32).collect();
    let mut pinned = PinnedBuffer::from_slice(&values).unwrap();
    let mut buffer = DeviceBuffer::<u32, _>::zeroed(&streams[0], chunk * chunks).unwrap();
    // The first part's stream waits for the host's flag, set once the last part's copies are
    // seen done: they cannot have waited for it.
    let gate = MappedFlag::new().unwrap();
    for (index, mut view) in buffer.chunks_mut(chunk).unwrap().enumerate() {
        let (on, range) = (&streams[index], view.range());
        view.copy_from_pinned(on, &mut pinned.slice_mut(range.clone()).unwrap()).unwrap();
        if index == 0 {
            wait_flag(&*streams[0], &gate, Duration::from_secs(30)).unwrap();
        }
        view.copy_to_pinned(on, &mut pinned.slice_mut(range).unwrap()).unwrap();
    }
    streams[3].synchronize().unwrap();
    assert!(!streams[0].query().unwrap(), "the last part's copies did not wait for the first part's stream");
    gate.set();
    streams[0].synchronize().unwrap();
    assert_eq!(gate.outcome(), FlagOutcome::Seen, "the gate's kernel saw the flag, not its timeout");
    assert_eq!(pinned.as_slice().unwrap(), &values[..], "every part came back after its copy in");
    assert_eq!(buffer.to_vec().unwrap(), values, "each chunk holds its own part (the offsets are the parts')");
    assert!(matches!(pinned.slice_mut(0..0), Err(Error::Size(_))));
    assert!(matches!(pinned.slice_mut(..chunk * chunks + 1), Err(Error::Size(_))));
    assert!(matches!(
        buffer.copy_from_pinned(&streams[0], &mut pinned.slice_mut(..chunk).unwrap()),
        Err(Error::Size(_))
    ));
}

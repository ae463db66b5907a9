//! Peers' own tests of stream-ordered device memory, ported onto this crate's API: what
//! PyTorch (`test/test_cuda.py`), NVIDIA's cuda.core (`cuda_core/tests/test_memory.py`) and
//! CuPy (`tests/cupy_tests/cuda_tests/test_memory.py`) check of their allocators, restated as
//! this crate's model has it. Each test names the peer test it ports; `buffers` holds the
//! crate's own memory tests, which these do not repeat.
//!
//! * PyTorch's `record_stream` becomes a use through [`DeviceBuffer::use_on`]: a buffer used
//!   on another stream and dropped is not handed out under that use, which the tests observe
//!   by data (the use reads the original bytes, not those of the next allocation).
//! * cuda.core's `Buffer.copy_to`/`copy_from`/`close(stream)` become the buffer's copies on a
//!   stream of the caller's choice and its drop on its home stream.
//! * CuPy's `MemoryAsyncPool` figures (`used_bytes`, `total_bytes`, `free_all_blocks`) become
//!   [`MemPool::stats`] and [`MemPool::trim_to`].

use cuda_stream::sys;
use cuda_stream::{Device, DeviceBuffer, Error, MemPool, PinnedBuffer, Stream};
use cuda_stream_tests::non_blocking_stream as stream;
use cuda_stream_tests::{gpu_or_skip, spin, spin_copy};
use std::time::Duration;

const CLOBBER: u8 = 0xAB;
const N: usize = 1 << 16;
/// CuPy's allocation unit in these ports: the pool's own granularity, so figures add up.
const UNIT: usize = 2 << 20;
/// How many `u32`s [`read_words`] copies out of a large buffer.
const PROBE: usize = 1024;

fn clobbered() -> u32 {
    u32::from_ne_bytes([CLOBBER; 4])
}

/// cuda.core's `check=True` pattern: byte `i` holds `i`.
fn byte_ramp(len: usize) -> Vec<u8> {
    (0..len).map(|i| i as u8).collect()
}

/// The device's free memory now (`cudaMemGetInfo`), once the frees that other tests of this
/// binary left pending have run and the default pool has given back what it held unused.
fn free_device_memory(device: Device) -> usize {
    device.synchronize().unwrap();
    MemPool::device_default(device).unwrap().trim_to(0).unwrap();
    let _current = device.make_current().unwrap();
    let (mut free, mut total) = (0, 0);
    // SAFETY: valid out-pointers; the device is current.
    cuda_stream::check(unsafe { sys::cudaMemGetInfo(&mut free, &mut total) }, "cudaMemGetInfo").unwrap();
    free
}

/// `fraction` tenths of `bytes`, rounded down to a whole MiB (so that offsets stay aligned).
fn tenths(bytes: usize, fraction: usize) -> usize {
    (bytes / 10 * fraction) & !((1 << 20) - 1)
}

/// Whether `result` is CUDA's out-of-memory error from `api`.
fn is_out_of_memory<T>(result: &cuda_stream::Result<T>, api: &str) -> bool {
    matches!(
        result,
        Err(Error::Cuda { api: failed, code })
            if *failed == api && code.0 == sys::cudaError::cudaErrorMemoryAllocation.0 as i32
    )
}

/// [`PROBE`] words of `buffer` from `byte_offset` on, copied out by a kernel on `home` (the
/// buffer's home stream): reads a buffer too large to copy back whole.
fn read_words(buffer: &mut DeviceBuffer<u8, &Stream>, home: &Stream, byte_offset: usize) -> Vec<u32> {
    assert!(byte_offset % 4 == 0 && byte_offset + PROBE * 4 <= buffer.len());
    let mut words = DeviceBuffer::<u32, _>::zeroed(home, PROBE).unwrap();
    let words_ptr = words.as_mut_ptr();
    buffer
        .use_on(home, |stream, ptr| {
            // SAFETY: `PROBE` u32s from a 4-aligned offset inside the buffer (checked above) and
            // `words`, both on `stream`'s device and ordered on it (it is both buffers' home).
            unsafe { spin_copy(stream, ptr.wrapping_add(byte_offset).cast::<u32>(), words_ptr, PROBE, Duration::ZERO) }
        })
        .unwrap()
        .unwrap();
    words.to_vec().unwrap()
}

/// PyTorch `test/test_cuda.py::TestCuda::test_record_stream`: `tmp` is uploaded asynchronously
/// from pinned memory on its stream, used on another stream (`record_stream`) by a delayed copy
/// into `result`, and dropped; a new allocation on the first stream (`tmp2.zero_()`, here filled
/// with other bytes) must not be handed `tmp`'s memory under that copy, and `result` holds the
/// uploaded values. The use on the other stream also waits for the upload, still pending behind
/// a spin: a read of the zeros before it, or of the clobber after the free, fails the test.
#[test]
fn record_stream_an_async_upload_used_on_another_stream_survives_its_drop() {
    let device = gpu_or_skip!();
    let (home, user) = (stream(device), stream(device));
    let values: Vec<u32> = (1..=N as u32).collect();
    let mut upload = PinnedBuffer::from_slice(&values).unwrap();
    let mut tmp = DeviceBuffer::<u32, _>::zeroed(&home, N).unwrap();
    spin(&*home, Duration::from_millis(200)).unwrap();
    tmp.copy_from_pinned(&home, &mut upload).unwrap();
    let mut result = DeviceBuffer::<u32, _>::zeroed(&user, N).unwrap();
    let result_ptr = result.as_mut_ptr();
    tmp.use_on(&user, |stream, ptr| {
        // SAFETY: both addresses hold N u32s of `stream`'s device; `result` is homed on
        // `stream`, and `use_on` orders `tmp` both ways with it.
        unsafe { spin_copy(stream, ptr, result_ptr, N, Duration::from_millis(100)) }
    })
    .unwrap()
    .unwrap();
    let freed = tmp.as_ptr() as usize;
    drop(tmp);
    let mut tmp2 = DeviceBuffer::<u32, _>::new(&home, N).unwrap();
    tmp2.fill_bytes(&home, CLOBBER).unwrap();
    let seen = result.to_vec().unwrap();
    assert!(!seen.contains(&0), "the use on the other stream ran before the pending upload");
    assert!(!seen.contains(&clobbered()), "the freed memory was reused under the use on the other stream");
    assert_eq!(seen, values);
    println!("tmp2 reused tmp's address: {}", tmp2.as_ptr() as usize == freed);
    assert_eq!(tmp2.to_vec().unwrap(), vec![clobbered(); N]);
}

/// PyTorch `test/test_cuda.py::TestCuda::test_record_stream_on_shifted_view` (issue #27366): a
/// view at an offset into `base` is used on `stream_record` (here a kernel reading from the
/// shifted address), `base` is dropped and `stream_alloc` synchronized; the block must not be
/// handed to a new allocation on `stream_alloc` while the use is pending. Here: synchronizing
/// the allocating stream waited for the use on the other stream (the free was ordered after it,
/// whatever address the use started from), and the use read the original tail.
#[test]
fn record_stream_on_a_shifted_view_orders_the_free_of_the_whole_buffer() {
    const SHIFT: usize = 5;
    let device = gpu_or_skip!();
    let (stream_alloc, stream_record) = (stream(device), stream(device));
    let values: Vec<u32> = (0..N as u32).map(|i| i.wrapping_mul(0x9E37_79B9) | 1).collect();
    let mut base = DeviceBuffer::from_slice(&stream_alloc, &values).unwrap();
    let mut seen = DeviceBuffer::<u32, _>::zeroed(&stream_record, N - SHIFT).unwrap();
    let seen_ptr = seen.as_mut_ptr();
    base.use_on(&stream_record, |stream, ptr| {
        // SAFETY: the view starts SHIFT elements into the buffer's N and reads the N - SHIFT
        // that follow; `seen` holds N - SHIFT u32s homed on `stream`; `use_on` orders `base`.
        unsafe { spin_copy(stream, ptr.wrapping_add(SHIFT), seen_ptr, N - SHIFT, Duration::from_millis(200)) }
    })
    .unwrap()
    .unwrap();
    drop(base);
    stream_alloc.synchronize().unwrap();
    assert!(stream_record.query().unwrap(), "synchronizing the allocating stream waited for the use of the view");
    let mut try_realloc = DeviceBuffer::<u32, _>::new(&stream_alloc, N).unwrap();
    try_realloc.fill_bytes(&stream_alloc, CLOBBER).unwrap();
    assert_eq!(seen.to_vec().unwrap(), &values[SHIFT..], "the view's use read the original data");
    assert_eq!(try_realloc.to_vec().unwrap(), vec![clobbered(); N]);
}

/// PyTorch `test/test_cuda.py::TestCuda::test_caching_allocator_record_stream_oom` (issue
/// #19219): allocation after allocation on one stream, each used by the other stream (`y += x`)
/// and dropped there, must still be freed, and the allocator keeps serving. Here each `x` comes
/// from a pool, is filled with its own byte and copied by a kernel on the other stream into its
/// own slot of `y`: every slot must hold its round's byte (no `x` was reused under its copy),
/// the pool ends with nothing in use, and an impossible allocation from it is a typed
/// out-of-memory error after which it still serves.
#[test]
fn record_stream_oom_buffers_used_elsewhere_are_all_freed_and_the_pool_still_serves() {
    const ROUNDS: usize = 32;
    const CHUNK: usize = 1 << 20;
    let device = gpu_or_skip!();
    let (home, side) = (stream(device), stream(device));
    let pool = MemPool::new(device).unwrap();
    let mut y = DeviceBuffer::<u32, _>::zeroed(&side, ROUNDS * CHUNK).unwrap();
    let y_ptr = y.as_mut_ptr();
    for round in 0..ROUNDS {
        let mut x = DeviceBuffer::<u32, _>::new_in(&pool, &home, CHUNK).unwrap();
        x.fill_bytes(&home, round as u8 + 1).unwrap();
        let slot = y_ptr.wrapping_add(round * CHUNK);
        x.use_on(&side, |stream, ptr| {
            // SAFETY: `x` holds CHUNK u32s, ordered both ways with `stream` by `use_on`; the
            // slot is CHUNK u32s inside `y` (ROUNDS * CHUNK), whose home stream is `stream`.
            unsafe { spin_copy(stream, ptr, slot, CHUNK, Duration::from_millis(2)) }
        })
        .unwrap()
        .unwrap();
        drop(x);
    }
    let slots = y.to_vec().unwrap();
    for (round, slot) in slots.chunks(CHUNK).enumerate() {
        let expected = u32::from_ne_bytes([round as u8 + 1; 4]);
        assert!(slot.iter().all(|&word| word == expected), "round {round} read another round's bytes");
    }
    home.synchronize().unwrap();
    side.synchronize().unwrap();
    assert_eq!(pool.stats().unwrap().used_current, 0, "every x was freed");
    let huge = DeviceBuffer::<u8, _>::new_in(&pool, &home, 1 << 50);
    assert!(is_out_of_memory(&huge, "cudaMallocFromPoolAsync"), "a typed out-of-memory error: {huge:?}");
    let mut after = DeviceBuffer::<u16, _>::new_in(&pool, &home, 100).unwrap();
    after.copy_from_slice(&home, &[5; 100]).unwrap();
    assert_eq!(after.to_vec().unwrap(), [5; 100]);
}

/// PyTorch `test/test_cuda.py::TestCuda::test_memory_stats` and `test_memory_allocation`: a
/// 1 KiB allocation (`torch.randn(256)`) raises the allocator's current figure by at least
/// 1 KiB, the peak follows, deleting it brings the current figure back once the stream has
/// passed the free, and resetting the peak brings it down to the current figure. Here the
/// figures are the device's default pool's, which `DeviceBuffer::new` draws from (another pool
/// sees nothing of it).
#[test]
fn memory_stats_rise_with_an_allocation_and_fall_after_its_drop() {
    let device = gpu_or_skip!();
    let home = stream(device);
    let default = MemPool::device_default(device).unwrap();
    let other = MemPool::new(device).unwrap();
    // Frees that earlier tests left pending on their streams do not change the figures below.
    device.synchronize().unwrap();
    let before = default.stats().unwrap();
    let tmp = DeviceBuffer::<f32, _>::zeroed(&home, 256).unwrap();
    let during = default.stats().unwrap();
    assert!(during.used_current >= before.used_current + 1024, "{before:?} -> {during:?}");
    assert!(during.used_high >= during.used_current, "{during:?}");
    assert!(during.reserved_current >= during.used_current, "{during:?}");
    assert!(during.reserved_high >= during.reserved_current, "{during:?}");
    assert_eq!(other.stats().unwrap().used_current, 0, "drawn from the default pool, not another");
    assert_eq!(tmp.to_vec().unwrap(), [0.0; 256]);
    drop(tmp);
    home.synchronize().unwrap();
    let after = default.stats().unwrap();
    assert_eq!(after.used_current, before.used_current, "freed: {after:?}");
    assert!(after.used_high >= before.used_current + 1024, "the peak remembers: {after:?}");
    default.reset_peaks().unwrap();
    let reset = default.stats().unwrap();
    assert_eq!(reset.used_high, reset.used_current, "{reset:?}");
}

/// PyTorch `test/test_cuda.py::TestCuda::test_out_of_memory_retry` (and `test_out_of_memory`'s
/// "the error doesn't disturb subsequent kernels"): with more than half the memory taken, a
/// second allocation as large fails; after the first is deleted it succeeds. Here the failure
/// is `cudaMallocAsync`'s typed error, and a kernel reads the retried buffer's fill at both
/// ends.
#[test]
fn out_of_memory_is_a_typed_error_and_the_retry_after_a_drop_succeeds() {
    let device = gpu_or_skip!();
    let home = stream(device);
    let size = tenths(free_device_memory(device), 6);
    let a = DeviceBuffer::<u8, _>::new(&home, size).unwrap();
    let second = DeviceBuffer::<u8, _>::new(&home, size);
    assert!(is_out_of_memory(&second, "cudaMallocAsync"), "60% twice must not fit: {second:?}");
    drop(second);
    drop(a);
    home.synchronize().unwrap();
    let mut b = DeviceBuffer::<u8, _>::new(&home, size).unwrap();
    b.fill_bytes(&home, 0x5A).unwrap();
    assert_eq!(read_words(&mut b, &home, 0), vec![0x5A5A_5A5A; PROBE]);
    assert_eq!(read_words(&mut b, &home, size - PROBE * 4), vec![0x5A5A_5A5A; PROBE]);
    drop(b);
    home.synchronize().unwrap();
    MemPool::device_default(device).unwrap().trim_to(0).unwrap();
}

/// cuda.core `cuda_core/tests/test_memory.py::test_buffer_copy_from` and `test_buffer_copy_to`
/// (with `test_device_memory_resource_with_options`' copy between buffers of one pool):
/// `dst.copy_from(src, stream=stream)` and `src.copy_to(dst, stream=stream)`, device to
/// device on a stream that is neither buffer's home. The copy waits for the source's pending
/// upload and the destination's pending fill, and the home stream of the buffer copied from
/// frees it only after the copy.
#[test]
fn buffer_copy_from_and_copy_to_on_a_third_stream() {
    let device = gpu_or_skip!();
    let (a, b, c) = (stream(device), stream(device), stream(device));
    let pool = MemPool::new(device).unwrap();
    let bytes = byte_ramp(1024);
    let mut staged = PinnedBuffer::from_slice(&bytes).unwrap();
    let mut src = DeviceBuffer::<u8, _>::new_in(&pool, &a, 1024).unwrap();
    let mut dst = DeviceBuffer::<u8, _>::new_in(&pool, &b, 1024).unwrap();
    spin(&*a, Duration::from_millis(100)).unwrap();
    src.copy_from_pinned(&a, &mut staged).unwrap();
    spin(&*b, Duration::from_millis(150)).unwrap();
    dst.fill_bytes(&b, 0).unwrap();
    dst.copy_from(&c, &src).unwrap();
    assert_eq!(dst.to_vec().unwrap(), bytes, "the copy came after the upload into src and the fill of dst");

    // The other way (`copy_to`), with the copy delayed on its stream and the buffer copied
    // from dropped at once: its memory is not reused before the copy has read it.
    spin(&*b, Duration::from_millis(100)).unwrap();
    dst.fill_bytes(&b, 0xEE).unwrap();
    spin(&*c, Duration::from_millis(300)).unwrap();
    src.copy_from(&c, &dst).unwrap();
    drop(dst);
    let mut reuse = DeviceBuffer::<u8, _>::new_in(&pool, &b, 1024).unwrap();
    reuse.fill_bytes(&b, 0).unwrap();
    assert_eq!(src.to_vec().unwrap(), [0xEE; 1024], "dst was freed only after the copy read it");
    assert_eq!(reuse.to_vec().unwrap(), [0; 1024]);
}

/// cuda.core `cuda_core/tests/test_memory.py::test_buffer_copy_to`/`test_buffer_copy_from` with
/// `DummyPinnedMemoryResource` (`check=True`, byte `i` holds `i`): copies between a device
/// buffer and pinned host memory on streams other than the buffer's home. The upload waits for
/// the home stream's pending fill, the download comes after the upload, and the host sees the
/// pattern once the pinned buffer has waited for the copy.
#[test]
fn buffer_copies_to_and_from_host_memory_on_given_streams() {
    let device = gpu_or_skip!();
    let (home, upload, download) = (stream(device), stream(device), stream(device));
    let bytes = byte_ramp(1024);
    let mut buffer = DeviceBuffer::<u8, _>::new(&home, 1024).unwrap();
    assert_eq!(buffer.device(), device, "the buffer's device id");
    spin(&*home, Duration::from_millis(150)).unwrap();
    buffer.fill_bytes(&home, 0).unwrap();
    let mut host_src = PinnedBuffer::from_slice(&bytes).unwrap();
    buffer.copy_from_pinned(&upload, &mut host_src).unwrap();
    let mut host_dst = PinnedBuffer::<u8>::zeroed(1024).unwrap();
    buffer.copy_to_pinned(&download, &mut host_dst).unwrap();
    assert_eq!(host_dst.as_slice().unwrap(), bytes, "ordered: fill, upload, download");
    // The host writes the source again only after the upload has read it.
    host_src.as_mut_slice().unwrap().fill(0);
    assert_eq!(buffer.to_vec().unwrap(), bytes);
}

/// cuda.core `cuda_core/tests/test_memory.py::test_device_memory_resource_initialization`,
/// `test_device_memory_resource_with_options` and `test_buffer_initialization`: a resource (a
/// pool) of the device hands out buffers of the asked sizes on its device, at distinct
/// addresses, on the given stream, and `buffer.close(stream)` (the drop, on the buffer's home
/// stream) gives the memory back: nothing is in use once the streams are synchronized.
#[test]
fn device_memory_resource_buffers_have_their_size_device_and_stream_and_close_on_it() {
    let device = gpu_or_skip!();
    let (a, b) = (stream(device), stream(device));
    let pool = MemPool::new(device).unwrap();
    assert_eq!(pool.device(), device, "mr.device_id");
    let buffer1 = DeviceBuffer::<u8, _>::new_in(&pool, &a, 1024).unwrap();
    let buffer2 = DeviceBuffer::<u8, _>::new_in(&pool, &a, 2048).unwrap();
    assert_ne!(buffer1.as_ptr(), buffer2.as_ptr());
    assert_eq!((buffer1.len(), buffer2.len()), (1024, 2048));
    assert_eq!((buffer1.device(), buffer2.device()), (device, device));
    assert!(pool.stats().unwrap().used_current >= 3072);
    drop((buffer1, buffer2));

    let mut on_b = DeviceBuffer::<u32, _>::new_in(&pool, &b, 256).unwrap();
    assert_eq!(on_b.stream().as_raw(), b.as_raw(), "allocated on the stream it was given");
    on_b.copy_from_slice(&b, &(0..256).collect::<Vec<u32>>()).unwrap();
    assert_eq!(on_b.to_vec().unwrap(), (0..256).collect::<Vec<u32>>());
    drop(on_b);
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    assert_eq!(pool.stats().unwrap().used_current, 0, "every buffer closed on its stream");
}

/// cuda.core `cuda_core/tests/test_memory.py::test_buffer_fill` (its bad-size cases) and the
/// size checks of `Buffer.copy_to`/`copy_from`: a zero or overflowing size from a pool, and
/// copies between a buffer and pinned host memory of another length, are refused with
/// `Error::Size` before CUDA sees them, and change nothing on either side.
#[test]
fn bad_sizes_with_pools_and_pinned_memory_are_refused_and_change_nothing() {
    let device = gpu_or_skip!();
    let home = stream(device);
    let pool = MemPool::new(device).unwrap();
    assert!(matches!(DeviceBuffer::<u32, _>::new_in(&pool, &home, 0), Err(Error::Size(_))));
    assert!(matches!(DeviceBuffer::<u64, _>::new_in(&pool, &home, usize::MAX / 2), Err(Error::Size(_))));
    assert!(matches!(DeviceBuffer::<u8, _>::zeroed(&home, 0), Err(Error::Size(_))));
    home.synchronize().unwrap();
    assert_eq!(pool.stats().unwrap().used_current, 0, "a refused size allocated nothing");

    let mut buffer = DeviceBuffer::<u32, _>::new_in(&pool, &home, 64).unwrap();
    buffer.copy_from_slice(&home, &[7; 64]).unwrap();
    let mut short = PinnedBuffer::from_slice(&[1u32; 63]).unwrap();
    assert!(matches!(buffer.copy_from_pinned(&home, &mut short), Err(Error::Size(_))));
    let mut long = PinnedBuffer::<u32>::zeroed(65).unwrap();
    assert!(matches!(buffer.copy_to_pinned(&home, &mut long), Err(Error::Size(_))));
    assert_eq!(buffer.to_vec().unwrap(), [7; 64], "the refused upload wrote nothing");
    assert_eq!(long.as_slice().unwrap(), [0; 65], "the refused download wrote nothing");
    assert_eq!(short.as_slice().unwrap(), [1; 63]);
}

/// CuPy `tests/cupy_tests/cuda_tests/test_memory.py::TestSingleDeviceMemoryPool`'s
/// `test_used_bytes`, `test_used_bytes_stream` and `test_total_bytes`, on the pool behind
/// `TestMemoryAsyncPool` (CUDA's, whose `used_bytes` and `total_bytes` are the used and
/// reserved figures): 2 units then 4 more, on two streams, add up; freeing the 4 brings the
/// figure back to the 2 units' once their stream has passed the free, freeing all to 0; the
/// pool reserves at least what is in use.
#[test]
fn async_pool_used_bytes_add_up_across_two_streams() {
    let device = gpu_or_skip!();
    let (a, b) = (stream(device), stream(device));
    let pool = MemPool::new(device).unwrap();
    let fresh = pool.stats().unwrap();
    assert_eq!((fresh.used_current, fresh.reserved_current), (0, 0), "a fresh pool: {fresh:?}");
    let mut p1 = DeviceBuffer::<u8, _>::new_in(&pool, &a, 2 * UNIT).unwrap();
    let with_p1 = pool.stats().unwrap().used_current;
    assert!(with_p1 >= 2 * UNIT as u64, "{with_p1}");
    let mut p2 = DeviceBuffer::<u8, _>::new_in(&pool, &b, 4 * UNIT).unwrap();
    let both = pool.stats().unwrap();
    assert!(both.used_current >= with_p1 + 4 * UNIT as u64, "{both:?}");
    assert!(both.reserved_current >= both.used_current, "total_bytes >= used_bytes: {both:?}");
    p1.fill_bytes(&a, 1).unwrap();
    p2.fill_bytes(&b, 2).unwrap();
    assert!(p2.to_vec().unwrap().iter().all(|&byte| byte == 2));
    drop(p2);
    b.synchronize().unwrap();
    assert_eq!(pool.stats().unwrap().used_current, with_p1, "p2 freed, p1 still in use");
    assert!(p1.to_vec().unwrap().iter().all(|&byte| byte == 1));
    drop(p1);
    a.synchronize().unwrap();
    assert_eq!(pool.stats().unwrap().used_current, 0);
    let p3 = DeviceBuffer::<u8, _>::new_in(&pool, &b, UNIT).unwrap();
    let with_p3 = pool.stats().unwrap().used_current;
    assert!(with_p3 >= UNIT as u64 && with_p3 < with_p1, "{with_p3} for 1 unit, {with_p1} for 2");
    drop(p3);
    b.synchronize().unwrap();
    assert_eq!(pool.stats().unwrap().used_current, 0);
}

/// CuPy `tests/cupy_tests/cuda_tests/test_memory.py::TestMemoryAsyncPool::test_free_all_blocks`
/// with `TestSingleDeviceMemoryPool::test_free_all_blocks_split` and
/// `test_free_all_blocks_all_streams`: freeing the pool's blocks (`trim_to`) releases only what
/// no allocation uses: a buffer still alive keeps its memory and its data, a trim keeps at least
/// the bytes asked for, and once everything is freed on both streams and they are synchronized
/// a trim to 0 leaves nothing reserved (the release threshold, set high, kept it until then),
/// after which the pool still serves.
#[test]
fn async_pool_free_all_blocks_releases_only_unused_memory() {
    let device = gpu_or_skip!();
    let (a, b) = (stream(device), stream(device));
    let pool = MemPool::new(device).unwrap();
    pool.set_release_threshold(u64::MAX).unwrap();
    let words = 4 * UNIT / 4;
    let values: Vec<u32> = (0..words as u32).collect();
    let mut kept = DeviceBuffer::<u32, _>::new_in(&pool, &a, words).unwrap();
    kept.copy_from_slice(&a, &values).unwrap();
    let mut gone_a = DeviceBuffer::<u8, _>::new_in(&pool, &a, 4 * UNIT).unwrap();
    let mut gone_b = DeviceBuffer::<u8, _>::new_in(&pool, &b, 4 * UNIT).unwrap();
    gone_a.fill_bytes(&a, 1).unwrap();
    gone_b.fill_bytes(&b, 2).unwrap();
    drop((gone_a, gone_b));
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    let freed = pool.stats().unwrap();
    assert!(freed.used_current >= 4 * UNIT as u64, "{freed:?}");
    assert!(freed.reserved_current >= 12 * UNIT as u64, "the threshold keeps the freed blocks: {freed:?}");

    pool.trim_to(6 * UNIT).unwrap();
    let trimmed = pool.stats().unwrap();
    assert!(trimmed.reserved_current >= 6 * UNIT as u64, "a trim keeps what it is asked to: {trimmed:?}");
    pool.trim_to(0).unwrap();
    let trimmed = pool.stats().unwrap();
    assert!(trimmed.reserved_current >= trimmed.used_current, "{trimmed:?}");
    assert!(trimmed.used_current >= 4 * UNIT as u64, "the live buffer is still in use: {trimmed:?}");
    assert_eq!(kept.to_vec().unwrap(), values, "the trim left the live buffer's memory alone");

    drop(kept);
    a.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    assert_eq!(pool.stats().unwrap().reserved_current, 0, "all blocks freed");
    let mut again = DeviceBuffer::<u32, _>::new_in(&pool, &b, 1000).unwrap();
    again.copy_from_slice(&b, &[9; 1000]).unwrap();
    assert_eq!(again.to_vec().unwrap(), [9; 1000]);
}

/// CuPy `tests/cupy_tests/cuda_tests/test_memory.py::TestMemoryAsyncPool::test_free_all_blocks_large_chunk`
/// (and `test_interaction_with_CuPy_default_pool`), as CUDA's pools behave: CuPy's own pool
/// keeps freed memory from other allocators until `free_all_blocks`. CUDA's does not: memory an
/// idle pool keeps reserved (a high release threshold) is released to serve another pool's
/// allocation that needs it (observed on the H100, CUDA 13.0), and the first pool's reserve
/// shrinks. Here: 60% of the free memory through a pool that keeps it, then 60% through the
/// device's default pool.
#[test]
fn memory_an_idle_pool_keeps_is_released_to_another_pool_that_needs_it() {
    let device = gpu_or_skip!();
    let home = stream(device);
    let pool = MemPool::new(device).unwrap();
    pool.set_release_threshold(u64::MAX).unwrap();
    let chunk = tenths(free_device_memory(device), 6);
    let mem = DeviceBuffer::<u8, _>::new_in(&pool, &home, chunk).unwrap();
    drop(mem);
    home.synchronize().unwrap();
    let held = pool.stats().unwrap();
    assert_eq!(held.used_current, 0, "{held:?}");
    assert!(held.reserved_current >= chunk as u64, "freed, but still reserved by the pool: {held:?}");
    let mut now = DeviceBuffer::<u8, _>::new(&home, chunk).expect("CUDA releases the idle pool's reserve");
    let after = pool.stats().unwrap();
    assert!(after.reserved_current < chunk as u64, "the idle pool gave its reserve up: {after:?}");
    now.fill_bytes(&home, 0x3C).unwrap();
    assert_eq!(read_words(&mut now, &home, chunk - PROBE * 4), vec![0x3C3C_3C3C; PROBE]);
    drop(now);
    home.synchronize().unwrap();
    MemPool::device_default(device).unwrap().trim_to(0).unwrap();
}

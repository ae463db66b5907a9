//! A real all-reduce (NVIDIA's NCCL, loaded at run time: see `cuda_stream_tests::nccl`) over
//! every GPU of the machine, enqueued on our streams and ordered before and after by our
//! `wait_stream` and events. Each rank's input is written late, by a stream held back by a
//! host flag: with our `wait_stream` every element of every rank's result is the sum; without
//! it (the control) the all-reduce reads the inputs before they are written. One GPU is a
//! clique of one; the two-GPU test skips with fewer (fails under `CUDA_STREAM_REQUIRE_GPUS=2`).
//! Without NCCL the tests skip loudly, or fail under `CUDA_STREAM_REQUIRE_NCCL=1`.
//!
//! The race detector watches each program (the loader declares every collective, the tests
//! their raw copies and fills): silent when ordered, and in the control it names the
//! all-reduce's read of each input that the producer was still to write. On two GPUs, the rule
//! its rendezvous relies on is observed: rank 0's work after the all-reduce waits for rank 1's
//! work before it.

use cuda_stream::race::{Access, RaceKind};
use cuda_stream::{Device, RaceMode, RaceReport, Result, Stream, check, race_scope, sys};
use cuda_stream_tests::nccl::{Comms, Nccl, nccl};
use cuda_stream_tests::non_blocking_stream as stream;
use cuda_stream_tests::{MappedFlag, gpu_or_skip, gpus_or_skip};
use std::ffi::c_void;
use std::time::Duration;

const COUNT: usize = 1 << 20;
const BYTES: usize = COUNT * size_of::<i32>();

/// NCCL, or `None` after saying why the test `test` skips.
fn nccl_or_skip(test: &str) -> Option<&'static Nccl> {
    if cuda_stream_tests::skipped_under_sanitizer(
        test,
        "NCCL's communicator setup fails under it (`unhandled cuda error`)",
    ) {
        return None;
    }
    match nccl() {
        Ok(nccl) => {
            eprintln!("{test}: NCCL {} from {}", nccl.version().unwrap(), nccl.path);
            Some(nccl)
        }
        Err(why) if std::env::var("CUDA_STREAM_REQUIRE_NCCL").as_deref() == Ok("1") => panic!("{test}: {why}"),
        Err(why) => {
            eprintln!("SKIPPED {test}: {why}");
            None
        }
    }
}

/// Device memory of one device, freed on drop.
struct DeviceBuffer {
    device: Device,
    ptr: *mut c_void,
}

impl DeviceBuffer {
    /// `BYTES` bytes on `device`, each set to `byte`.
    fn filled(device: Device, byte: u8) -> Result<DeviceBuffer> {
        let _current = device.make_current()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        check(unsafe { sys::cudaMalloc(&mut ptr, BYTES) }, "cudaMalloc")?;
        let buffer = DeviceBuffer { device, ptr };
        // SAFETY: `ptr` holds BYTES bytes.
        check(unsafe { sys::cudaMemset(ptr, i32::from(byte), BYTES) }, "cudaMemset")?;
        // The fill runs on a default stream, which our non-blocking streams do not wait for.
        // SAFETY: no arguments; the device is current.
        check(unsafe { sys::cudaDeviceSynchronize() }, "cudaDeviceSynchronize")?;
        Ok(buffer)
    }

    /// Copies the buffer to the host, in `stream`'s order (pageable memory: the call returns
    /// once the copy is done).
    fn read_on(&self, stream: &Stream) -> Result<Vec<i32>> {
        let mut host = vec![0i32; COUNT];
        stream.declare_accesses("cudaMemcpyAsync", &[Access::read(self.ptr.cast::<u8>(), BYTES)])?;
        let kind = sys::cudaMemcpyKind::cudaMemcpyDeviceToHost;
        // SAFETY: `host` and the buffer hold BYTES bytes; `stream` is live.
        let code = unsafe { sys::cudaMemcpyAsync(host.as_mut_ptr().cast(), self.ptr, BYTES, kind, stream.as_raw()) };
        check(code, "cudaMemcpyAsync")?;
        stream.synchronize()?;
        Ok(host)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if let Ok(_current) = self.device.make_current() {
            // SAFETY: our allocation, freed once, after the tests synchronized its users.
            let _ = unsafe { sys::cudaFree(self.ptr) };
        }
    }
}

/// What `all_reduce` leaves in every rank's result, per element.
fn expected_sum(ranks: usize) -> i32 {
    // Rank r's input bytes are r + 1, so its i32s are (r + 1) * 0x01010101.
    (1..=ranks as i32).sum::<i32>() * 0x0101_0101
}

/// One all-reduce on `comms` first, before any test's work. NCCL's first collective on new
/// communicators sets up memory, which may wait for the whole device: with the producers'
/// kernels already waiting for the host's flag, it would wait out their timeout (seen on two
/// H100s: the control then read written inputs after 20 s).
fn warm_up(comms: &Comms, devices: &[Device]) {
    let warm: Vec<_> = devices
        .iter()
        .map(|device| {
            (stream(*device), DeviceBuffer::filled(*device, 0).unwrap(), DeviceBuffer::filled(*device, 0).unwrap())
        })
        .collect();
    let pointers: Vec<_> = warm.iter().map(|(_, send, receive)| (send.ptr.cast_const(), receive.ptr)).collect();
    let stream_refs: Vec<_> = warm.iter().map(|(stream, _, _)| &**stream).collect();
    // SAFETY: each pair holds COUNT i32s of its rank's device and outlives the work (each
    // stream is synchronized below); stream r belongs to rank r's device.
    unsafe { comms.all_reduce_sum_i32(&pointers, COUNT, &stream_refs) }.unwrap();
    for (stream, _, _) in &warm {
        stream.synchronize().unwrap();
    }
}

/// The all-reduce over `devices`, each rank's input written late (behind a host flag) on a
/// producer stream. With `ordered`, each rank's stream waits for its producer first
/// (`wait_stream`); the results are read on a third stream that waits for the all-reduce by
/// an event. Returns every rank's result, and the races the detector reported.
fn all_reduce(nccl: &'static Nccl, devices: &[Device], ordered: bool) -> (Vec<Vec<i32>>, Vec<RaceReport>) {
    let races = race_scope(RaceMode::Report);
    let comms = nccl.comms(devices).unwrap();
    warm_up(&comms, devices);
    let flag = MappedFlag::new().unwrap();
    let (mut streams, mut producers, mut readers, mut buffers) = (vec![], vec![], vec![], vec![]);
    for (rank, device) in devices.iter().enumerate() {
        let (work, producer, reader) = (stream(*device), stream(*device), stream(*device));
        let (send, receive) = (DeviceBuffer::filled(*device, 0).unwrap(), DeviceBuffer::filled(*device, 0xff).unwrap());
        cuda_stream_tests::wait_flag(&producer, &flag, Duration::from_secs(20)).unwrap();
        producer.declare_accesses("cudaMemsetAsync", &[Access::write(send.ptr.cast::<u8>(), BYTES)]).unwrap();
        // SAFETY: `send` holds BYTES bytes and outlives the producer's work (synchronized below).
        let code = unsafe { sys::cudaMemsetAsync(send.ptr, rank as i32 + 1, BYTES, producer.as_raw()) };
        check(code, "cudaMemsetAsync").unwrap();
        if ordered {
            work.wait_stream(&producer).unwrap();
        }
        streams.push(work);
        producers.push(producer);
        readers.push(reader);
        buffers.push((send, receive));
    }
    let pointers: Vec<_> = buffers.iter().map(|(send, receive)| (send.ptr.cast_const(), receive.ptr)).collect();
    let stream_refs: Vec<_> = streams.iter().map(|stream| &**stream).collect();
    // SAFETY: each pair holds COUNT i32s of its rank's device and outlives the work (every stream
    // is synchronized before the buffers drop); stream r belongs to rank r's device.
    unsafe { comms.all_reduce_sum_i32(&pointers, COUNT, &stream_refs) }.unwrap();
    if !ordered {
        // The control: the all-reduce finishes before any input is written.
        for stream in &streams {
            stream.synchronize().unwrap();
        }
    }
    flag.set();
    let results = readers
        .iter()
        .zip(&streams)
        .zip(&buffers)
        .map(|((reader, work), (_, receive))| {
            reader.wait_event(&work.record_event().unwrap()).unwrap();
            receive.read_on(reader).unwrap()
        })
        .collect();
    for stream in producers.iter().chain(&streams) {
        stream.synchronize().unwrap();
    }
    (results, races.take_reports())
}

fn assert_every_element(results: &[Vec<i32>], expected: i32, what: &str) {
    for (rank, result) in results.iter().enumerate() {
        let wrong = result.iter().filter(|value| **value != expected).count();
        assert_eq!(
            wrong, 0,
            "{what}: rank {rank}: {wrong} of {COUNT} elements are not {expected:#x} (first {:#x})",
            result[0]
        );
    }
}

fn every_device() -> Vec<Device> {
    (0..Device::count().unwrap()).map(|ordinal| Device::new(ordinal).unwrap()).collect()
}

#[test]
fn an_all_reduce_on_our_streams_is_ordered_by_wait_stream_and_events() {
    let _device = gpu_or_skip!();
    let Some(nccl) = nccl_or_skip("an_all_reduce_on_our_streams_is_ordered_by_wait_stream_and_events") else { return };
    let devices = every_device();
    let (results, races) = all_reduce(nccl, &devices, true);
    assert_every_element(&results, expected_sum(devices.len()), "ordered by wait_stream");
    assert!(races.is_empty(), "the ordered program raced: {races:#?}");
}

#[test]
fn without_the_wait_the_all_reduce_reads_inputs_not_yet_written() {
    let _device = gpu_or_skip!();
    let Some(nccl) = nccl_or_skip("without_the_wait_the_all_reduce_reads_inputs_not_yet_written") else { return };
    let devices = every_device();
    let (results, races) = all_reduce(nccl, &devices, false);
    assert_every_element(&results, 0, "the control, without wait_stream");
    // The detector saw it: each rank's input read by the all-reduce before the fill.
    let seen: Vec<_> = races.iter().map(|race| (race.kind, &*race.earlier.operation, &*race.later.operation)).collect();
    assert_eq!(seen, vec![(RaceKind::WriteRead, "cudaMemsetAsync", "ncclAllReduce"); devices.len()], "{races:#?}");
}

#[test]
fn two_gpus_all_reduce_on_our_streams() {
    let devices = gpus_or_skip!(2);
    let Some(nccl) = nccl_or_skip("two_gpus_all_reduce_on_our_streams") else { return };
    let (results, races) = all_reduce(nccl, &devices, true);
    assert_eq!(results.len(), 2);
    assert_every_element(&results, expected_sum(2), "two GPUs, ordered by wait_stream");
    assert!(races.is_empty(), "the ordered program raced: {races:#?}");
}

/// The rule the race detector's rendezvous relies on (`CollectiveOrder::AllToAll`), observed:
/// rank 0's work after an all-reduce does not complete while rank 1's work before it is held
/// back (by a host flag), since rank 0's part needs rank 1's data. And the detector agrees:
/// rank 0's later read of memory that rank 1's stream wrote before the all-reduce is ordered,
/// a stream outside the collective reading it is not.
#[test]
fn two_gpus_a_ranks_later_work_waits_for_every_ranks_earlier_work() {
    let devices = gpus_or_skip!(2);
    let devices = &devices[..2];
    let Some(nccl) = nccl_or_skip("two_gpus_a_ranks_later_work_waits_for_every_ranks_earlier_work") else { return };
    let races = race_scope(RaceMode::Report);
    let comms = nccl.comms(devices).unwrap();
    warm_up(&comms, devices);
    let (rank0, rank1, outsider) = (stream(devices[0]), stream(devices[1]), stream(devices[0]));
    // Rank r's input bytes are r + 1, as in `all_reduce`.
    let buffers: Vec<_> = (0u8..)
        .zip(devices)
        .map(|(rank, device)| {
            (DeviceBuffer::filled(*device, rank + 1).unwrap(), DeviceBuffer::filled(*device, 0).unwrap())
        })
        .collect();
    let written_by_rank1 = DeviceBuffer::filled(devices[1], 0).unwrap();
    let flag = MappedFlag::new().unwrap();
    // Rank 1's earlier work: held back by the flag, then a write of `written_by_rank1`.
    cuda_stream_tests::wait_flag(&rank1, &flag, Duration::from_secs(20)).unwrap();
    rank1.declare_accesses("cudaMemsetAsync", &[Access::write(written_by_rank1.ptr.cast::<u8>(), BYTES)]).unwrap();
    // SAFETY: the buffer holds BYTES bytes and outlives the work (synchronized below).
    check(unsafe { sys::cudaMemsetAsync(written_by_rank1.ptr, 7, BYTES, rank1.as_raw()) }, "cudaMemsetAsync").unwrap();
    let pointers: Vec<_> = buffers.iter().map(|(send, receive)| (send.ptr.cast_const(), receive.ptr)).collect();
    // SAFETY: each pair holds COUNT i32s of its rank's device and outlives the work (both
    // streams are synchronized before the buffers drop); stream r belongs to rank r's device.
    unsafe { comms.all_reduce_sum_i32(&pointers, COUNT, &[&*rank0, &*rank1]) }.unwrap();
    let after = rank0.record_event().unwrap();

    // The detector (declarations enqueue nothing): rank 0's later work comes after rank 1's
    // earlier write; an outsider's does not.
    let read = [Access::read(written_by_rank1.ptr.cast::<u8>(), BYTES)];
    rank0.declare_accesses("rank 0 reads rank 1's bytes", &read).unwrap();
    let by_rank0 = races.take_reports();
    outsider.declare_accesses("an outsider reads rank 1's bytes", &read).unwrap();
    let by_outsider: Vec<_> =
        races.take_reports().iter().map(|race| (race.kind, race.earlier.operation.clone())).collect();

    std::thread::sleep(Duration::from_millis(300));
    let done_while_held = after.query().unwrap();
    flag.set();
    after.synchronize().unwrap();
    rank1.synchronize().unwrap();
    assert!(!done_while_held, "rank 0's part of the all-reduce completed while rank 1's earlier work was held");
    assert_every_element(&[buffers[0].1.read_on(&rank0).unwrap()], expected_sum(2), "rank 0 after the rendezvous");
    assert!(by_rank0.is_empty(), "ordered by the rendezvous: {by_rank0:#?}");
    assert_eq!(by_outsider, [(RaceKind::WriteRead, "cudaMemsetAsync".to_string())]);
}

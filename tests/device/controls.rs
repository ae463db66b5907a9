//! Device controls on a GPU: the flags a device's primary context is created with (set before
//! it exists, refused after, and how a synchronize then waits), its memory, its properties, and
//! a kernel's opt-in to more dynamic shared memory than the default 48 KiB.

use cuda_stream::{Device, DeviceBuffer, DeviceFlags, Error, LaunchConfig, Schedule, Stream, StreamOptions, sys};
use cuda_stream_tests::{child_test_prints_with, gpu_or_skip};

cuda_stream::kernel! {
    static DYNAMIC_SHARED_SUM = fn cs_dynamic_shared_sum(out: *mut u64, words: u32);
}

#[test]
fn flags_are_set_before_the_context_exists_and_refused_after() {
    let _device = gpu_or_skip!();
    if cuda_stream_tests::skipped_under_sanitizer(
        "flags_are_set_before_the_context_exists_and_refused_after",
        "it measures the waiting thread's CPU time",
    ) {
        return;
    }
    for schedule in ["spin", "blocking-sync"] {
        child_test_prints_with(
            "flags_child",
            &[("CUDA_STREAM_TEST_SCHEDULE", schedule.to_owned())],
            &[&format!("flags {schedule}: set before, refused after, synchronize waits so")],
        );
    }
}

#[test]
#[ignore = "child process of flags_are_set_before_the_context_exists_and_refused_after"]
fn flags_child() {
    let name = std::env::var("CUDA_STREAM_TEST_SCHEDULE").unwrap();
    let schedule = if name == "spin" { Schedule::Spin } else { Schedule::BlockingSync };
    let device = Device::new(0).unwrap();
    device.properties().unwrap();
    assert!(!device.has_primary_context().unwrap(), "a fresh process, properties read: no context yet");
    let flags = DeviceFlags::schedule(schedule);
    device.set_flags(flags).unwrap();
    assert_eq!(device.flags().unwrap(), flags, "read back before the context exists");
    assert!(!device.has_primary_context().unwrap(), "setting the flags created nothing");
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    assert!(device.has_primary_context().unwrap());
    assert_eq!(device.flags().unwrap(), flags, "the context was created with them");
    let mut runtime_flags = 0;
    let _current = device.make_current().unwrap();
    // SAFETY: a valid out-pointer; the device is current.
    cuda_stream::check(unsafe { sys::cudaGetDeviceFlags(&mut runtime_flags) }, "cudaGetDeviceFlags").unwrap();
    assert_eq!(runtime_flags & sys::cudaDeviceScheduleMask, flags_bits(schedule), "the runtime sees them too");
    let refused = device.set_flags(DeviceFlags::schedule(Schedule::Yield));
    assert_eq!(refused, Err(Error::ContextActive { device: 0 }));
    assert_eq!(device.flags().unwrap(), flags, "a refused set changes nothing");
    // How a stream synchronize waits follows the schedule: asleep under blocking sync (the half
    // that tells the flag was applied: CUDA's default, auto, spins here too, so the spin half
    // checks only that nothing else made it sleep; the read-backs above show the spin flag).
    let (spent, full, waited) = cuda_stream_tests::waiting_thread_ticks(&stream, || {}, || stream.synchronize());
    waited.unwrap();
    println!("{name}: the synchronizing thread ran {spent} of {full} ticks");
    match schedule {
        Schedule::Spin => assert!(spent * 2 >= full, "spinning, it ran {spent} of {full} ticks"),
        _ => assert!(spent * 10 <= full, "blocking, it ran {spent} of {full} ticks"),
    }
    println!("flags {name}: set before, refused after, synchronize waits so");
}

fn flags_bits(schedule: Schedule) -> u32 {
    match schedule {
        Schedule::Spin => sys::cudaDeviceScheduleSpin,
        Schedule::Yield => sys::cudaDeviceScheduleYield,
        Schedule::BlockingSync => sys::cudaDeviceScheduleBlockingSync,
        _ => sys::cudaDeviceScheduleAuto,
    }
}

#[test]
fn memory_info_counts_an_allocation() {
    let device = gpu_or_skip!();
    if cuda_stream_tests::skipped_under_sanitizer(
        "memory_info_counts_an_allocation",
        "the sanitizer allocates device memory of its own beside the test's (it moved free memory by 3.5 GiB)",
    ) {
        return;
    }
    let total = device.properties().unwrap().total_memory;
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let bytes = 1usize << 30;
    // Other processes on the GPU move the free memory: an allocation shows in one of three
    // tries.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let before = device.memory_info().unwrap();
        assert_eq!(before.total, total, "memory_info's total is the properties' total");
        assert!(before.free <= before.total);
        let buffer = DeviceBuffer::<u8, _>::zeroed(&stream, bytes).unwrap();
        stream.synchronize().unwrap();
        let during = device.memory_info().unwrap();
        drop(buffer);
        // The stream-ordered free returns the memory to the pool, which gives it back to the
        // device at the next synchronize (its release threshold is 0).
        stream.synchronize().unwrap();
        let taken = before.free.saturating_sub(during.free);
        seen.push(taken);
        if taken >= bytes && taken < bytes + (256 << 20) {
            break;
        }
    }
    let last = *seen.last().unwrap();
    assert!(last >= bytes && last < bytes + (256 << 20), "1 GiB allocated; free memory moved by {seen:?}");
}

#[test]
fn properties_agree_with_the_attributes() {
    let device = gpu_or_skip!();
    let properties = device.properties().unwrap();
    let attribute = |attribute| device.attribute(attribute).unwrap();
    use sys::cudaDeviceAttr as A;
    assert_eq!(properties.name, device.name().unwrap());
    assert_eq!(
        properties.compute_capability,
        (attribute(A::cudaDevAttrComputeCapabilityMajor), attribute(A::cudaDevAttrComputeCapabilityMinor))
    );
    assert_eq!(properties.multiprocessors, attribute(A::cudaDevAttrMultiProcessorCount));
    assert_eq!(properties.warp_size, 32);
    assert_eq!(properties.max_threads_per_block, attribute(A::cudaDevAttrMaxThreadsPerBlock));
    assert_eq!(properties.shared_memory_per_block, 48 << 10);
    assert_eq!(
        properties.shared_memory_per_block_optin,
        attribute(A::cudaDevAttrMaxSharedMemoryPerBlockOptin) as usize
    );
    assert!(properties.shared_memory_per_block_optin > properties.shared_memory_per_block);
    assert_eq!(
        properties.pci,
        (attribute(A::cudaDevAttrPciDomainId), attribute(A::cudaDevAttrPciBusId), attribute(A::cudaDevAttrPciDeviceId))
    );
    assert_eq!(properties.l2_cache_bytes, attribute(A::cudaDevAttrL2CacheSize) as usize);
    assert_eq!(properties.total_memory, device.memory_info().unwrap().total);
    assert!(properties.uuid.iter().any(|byte| *byte != 0), "a GPU has a UUID");
    assert_eq!(properties.raw().totalGlobalMem, properties.total_memory);
    println!(
        "{}: sm_{}{}, {} SMs, {} GiB, {} KiB shared per block opted in",
        properties.name,
        properties.compute_capability.0,
        properties.compute_capability.1,
        properties.multiprocessors,
        properties.total_memory >> 30,
        properties.shared_memory_per_block_optin >> 10
    );
}

#[test]
fn a_kernel_opts_in_to_more_dynamic_shared_memory() {
    let device = gpu_or_skip!();
    let optin = device.properties().unwrap().shared_memory_per_block_optin;
    let stream = Stream::new(device, StreamOptions::non_blocking()).unwrap();
    let mut out = DeviceBuffer::<u64, _>::zeroed(&stream, 1).unwrap();
    // Above the default 48 KiB, below what the device allows once opted in.
    let bytes = (96 << 10).min(optin);
    let words = (bytes / 4) as u32;
    let config = LaunchConfig::new(1, 256).shared_bytes(bytes);
    let launch = |out: &mut DeviceBuffer<u64, &Stream>| {
        // SAFETY: one u64 on the stream's device; the kernel uses `words` words of dynamic
        // shared memory, which the configuration gives it.
        unsafe { DYNAMIC_SHARED_SUM.launch(&stream, &config, (out.as_mut_ptr(), words)) }
    };
    // CUDA refuses the launch before the kernel opts in.
    let refused = launch(&mut out);
    assert!(
        matches!(&refused, Err(Error::Cuda { api: "cudaLaunchKernelEx", code }) if code.0 == sys::cudaError::cudaErrorInvalidValue.0 as i32),
        "{refused:?}"
    );
    assert_eq!(cuda_stream_tests::take_last_error(), sys::cudaError::cudaSuccess, "no stale error left");
    DYNAMIC_SHARED_SUM.set_max_dynamic_shared_memory(device, bytes).unwrap();
    launch(&mut out).unwrap();
    let sum = out.to_vec().unwrap()[0];
    let expected = u64::from(words) * u64::from(words - 1) / 2;
    assert_eq!(sum, expected, "every word of {bytes} bytes of dynamic shared memory written and read");
    // Beyond what the device allows: CUDA's error, typed.
    let too_much = DYNAMIC_SHARED_SUM.set_max_dynamic_shared_memory(device, optin + 4096);
    let invalid = sys::cudaError::cudaErrorInvalidValue.0 as i32;
    assert!(
        matches!(&too_much, Err(Error::Cuda { api: "cudaFuncSetAttribute", code }) if code.0 == invalid),
        "{too_much:?}"
    );
    assert_eq!(cuda_stream_tests::take_last_error(), sys::cudaError::cudaSuccess, "no stale error left");
}

//! An all-reduce over every GPU with NVIDIA's NCCL, enqueued on cuda-stream streams: each
//! GPU's input is produced on another stream, which the all-reduce's stream waits for with
//! `wait_stream`; the result is read on a third stream ordered by an event. NCCL is loaded at
//! run time (`CUDA_STREAM_NCCL`, else the `nvidia-nccl-cu13` wheel of `python3`).
//! Without NCCL it says so and exits 0, unless `CUDA_STREAM_REQUIRE_NCCL=1` (the workspace's GPU
//! runs set it when they find NCCL): then that is its failure.
//!
//! A crate of its own: this file as `src/main.rs`, with `cuda-stream` (feature `testing`, for
//! the GPU gate) and `libloading` (0.8) as dependencies.

use cuda_stream::{Device, Stream, StreamOptions, check, sys};
use libloading::Library;
use std::ffi::{CStr, c_char, c_int, c_void};

const COUNT: usize = 1 << 16;
const BYTES: usize = COUNT * size_of::<i32>();

/// The few calls of NCCL this example makes, with the signatures of `nccl.h` (2.x).
struct Nccl {
    get_version: unsafe extern "C" fn(*mut c_int) -> c_int,
    comm_init_all: unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> c_int,
    comm_destroy: unsafe extern "C" fn(Comm) -> c_int,
    all_reduce: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, sys::cudaStream_t) -> c_int,
    group_start: unsafe extern "C" fn() -> c_int,
    group_end: unsafe extern "C" fn() -> c_int,
    get_error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    /// Keeps the entry points above loaded.
    _library: Library,
}

/// `ncclComm_t`.
type Comm = *mut c_void;
/// `ncclInt32` of `ncclDataType_t` and `ncclSum` of `ncclRedOp_t`.
const NCCL_INT32: c_int = 2;
const NCCL_SUM: c_int = 0;

impl Nccl {
    /// The first that loads of: the file `CUDA_STREAM_NCCL` names, the `nvidia-nccl-cu13`
    /// wheel in the site-packages of `python3`, `libnccl.so.2` on the loader's path.
    fn load() -> Result<Nccl, String> {
        let mut tried: Vec<String> = std::env::var("CUDA_STREAM_NCCL").into_iter().collect();
        let wheel = std::process::Command::new("python3")
            .args(["-c", "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))"])
            .output()
            .ok()
            .filter(|output| output.status.success());
        if let Some(output) = wheel {
            tried.push(format!("{}/libnccl.so.2", String::from_utf8_lossy(&output.stdout).trim()));
        }
        tried.push("libnccl.so.2".to_string());
        for path in &tried {
            // SAFETY: loading NCCL runs its initializers, which have no preconditions.
            let Ok(library) = (unsafe { Library::new(path) }) else { continue };
            let missing = |error: libloading::Error| format!("{path}: {error}");
            // SAFETY: each symbol has the signature of its field's type in nccl.h (NCCL 2.x);
            // the function pointers are used only while `library`, kept with them, is loaded.
            return unsafe {
                Ok(Nccl {
                    get_version: *library.get(b"ncclGetVersion\0").map_err(missing)?,
                    comm_init_all: *library.get(b"ncclCommInitAll\0").map_err(missing)?,
                    comm_destroy: *library.get(b"ncclCommDestroy\0").map_err(missing)?,
                    all_reduce: *library.get(b"ncclAllReduce\0").map_err(missing)?,
                    group_start: *library.get(b"ncclGroupStart\0").map_err(missing)?,
                    group_end: *library.get(b"ncclGroupEnd\0").map_err(missing)?,
                    get_error_string: *library.get(b"ncclGetErrorString\0").map_err(missing)?,
                    _library: library,
                })
            };
        }
        Err(format!("NCCL not found (tried {tried:?}); set CUDA_STREAM_NCCL to libnccl.so.2"))
    }

    /// NCCL's result `code` of `call`, with its own words for a failure.
    fn check(&self, code: c_int, call: &str) -> Result<(), String> {
        if code == 0 {
            return Ok(());
        }
        // SAFETY: NCCL returns a static, NUL-terminated string for every code.
        let text = unsafe { CStr::from_ptr((self.get_error_string)(code)) }.to_string_lossy();
        Err(format!("{call} failed: {text} ({code})"))
    }
}

/// One communicator per device of this process, destroyed on drop (NCCL waits for their work).
struct Comms<'a> {
    nccl: &'a Nccl,
    raw: Vec<Comm>,
}

impl Drop for Comms<'_> {
    fn drop(&mut self) {
        for comm in &self.raw {
            // SAFETY: a communicator of ours, destroyed once.
            let _ = unsafe { (self.nccl.comm_destroy)(*comm) };
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Device 0, or a plain "skipped" without a GPU (a failure under CUDA_STREAM_REQUIRE_GPU=1).
    let Some(_) = cuda_stream::testing::device_or_skip("multi_gpu_nccl") else { return Ok(()) };
    let nccl = match Nccl::load() {
        Ok(nccl) => nccl,
        Err(why) if std::env::var("CUDA_STREAM_REQUIRE_NCCL").as_deref() == Ok("1") => {
            return Err(format!("multi_gpu_nccl: NCCL is required (CUDA_STREAM_REQUIRE_NCCL=1): {why}").into());
        }
        Err(why) => {
            println!("multi_gpu_nccl: {why}. Nothing to show.");
            return Ok(());
        }
    };
    let devices: Vec<Device> = (0..Device::count()?).map(Device::new).collect::<cuda_stream::Result<_>>()?;
    let mut version = 0;
    // SAFETY: a valid out-pointer.
    nccl.check(unsafe { (nccl.get_version)(&mut version) }, "ncclGetVersion")?;
    println!("NCCL {version} over {} GPU(s)", devices.len());
    let ordinals: Vec<c_int> = devices.iter().map(|device| device.ordinal()).collect();
    let mut comms = Comms { nccl: &nccl, raw: vec![std::ptr::null_mut(); devices.len()] };
    // SAFETY: `comms.raw` and `ordinals` hold one entry per device.
    let code = unsafe { (nccl.comm_init_all)(comms.raw.as_mut_ptr(), ordinals.len() as c_int, ordinals.as_ptr()) };
    nccl.check(code, "ncclCommInitAll")?;
    let mut ranks = Vec::new();
    for (rank, device) in devices.iter().enumerate() {
        let _current = device.make_current()?;
        let (producer, work, reader) = (
            Stream::new(*device, StreamOptions::non_blocking())?,
            Stream::new(*device, StreamOptions::non_blocking())?,
            Stream::new(*device, StreamOptions::non_blocking())?,
        );
        let (mut send, mut receive): (*mut c_void, *mut c_void) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: valid out-pointers.
        check(unsafe { sys::cudaMalloc(&mut send, BYTES) }, "cudaMalloc")?;
        // SAFETY: as above.
        check(unsafe { sys::cudaMalloc(&mut receive, BYTES) }, "cudaMalloc")?;
        // Rank r's input: every byte r + 1, produced on its own stream.
        // SAFETY: `send` holds BYTES bytes; freed below after every stream is synchronized.
        check(unsafe { sys::cudaMemsetAsync(send, rank as i32 + 1, BYTES, producer.as_raw()) }, "cudaMemsetAsync")?;
        work.wait_stream(&producer)?;
        ranks.push((producer, work, reader, send, receive));
    }
    // Every rank's part of the all-reduce on its `work` stream, in one NCCL group.
    // SAFETY: no arguments.
    nccl.check(unsafe { (nccl.group_start)() }, "ncclGroupStart")?;
    let mut enqueued = Ok(());
    for (comm, (_, work, _, send, receive)) in comms.raw.iter().zip(&ranks) {
        // SAFETY: `send` and `receive` hold COUNT i32s of the rank's device, alive until every
        // stream is synchronized below; `work` is a live stream of that device, `comm` its rank.
        let code = unsafe {
            (nccl.all_reduce)(send.cast_const(), *receive, COUNT, NCCL_INT32, NCCL_SUM, *comm, work.as_raw())
        };
        enqueued = enqueued.and(nccl.check(code, "ncclAllReduce"));
    }
    // SAFETY: closes the group opened above, also after a failed enqueue.
    let ended = nccl.check(unsafe { (nccl.group_end)() }, "ncclGroupEnd");
    enqueued.and(ended)?;
    let expected = (1..=devices.len() as i32).sum::<i32>() * 0x0101_0101;
    for (rank, (producer, work, reader, send, receive)) in ranks.into_iter().enumerate() {
        reader.wait_event(&work.record_event()?)?;
        let mut host = vec![0i32; COUNT];
        let kind = sys::cudaMemcpyKind::cudaMemcpyDeviceToHost;
        let target = host.as_mut_ptr().cast();
        // SAFETY: both hold BYTES bytes; pageable memory: the copy is done when the call returns.
        let code = unsafe { sys::cudaMemcpyAsync(target, receive, BYTES, kind, reader.as_raw()) };
        check(code, "cudaMemcpyAsync")?;
        reader.synchronize()?;
        producer.synchronize()?;
        let right = host.iter().filter(|value| **value == expected).count();
        println!("rank {rank}: {right} of {COUNT} elements are the sum {expected:#x}");
        let _current = devices[rank].make_current()?;
        // SAFETY: our allocations; every stream that used them is synchronized.
        unsafe {
            check(sys::cudaFree(send), "cudaFree")?;
            check(sys::cudaFree(receive), "cudaFree")?;
        }
        if right != COUNT {
            return Err(format!("rank {rank}: the all-reduce's result is wrong").into());
        }
    }
    Ok(())
}

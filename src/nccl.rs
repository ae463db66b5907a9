//! NVIDIA's NCCL, loaded at run time (`libnccl.so.2` of the `nvidia-nccl-cu13` wheel, which
//! PyTorch's CUDA 13 wheels bring along), for the tests and the example that run a real
//! all-reduce on our streams. Only the few calls they need are bound, with the signatures of
//! `nccl.h` (2.x); nothing here is a collective of its own. Each collective is declared to the
//! race detector ([`StreamRef::declare_collective`]): its accesses, and the ranks' rendezvous.
//!
//! Where the library comes from, first hit wins: the file `CUDA_STREAM_NCCL` names; the wheel in
//! the site-packages of `python3` (`nvidia/nccl/lib/libnccl.so.2`); `libnccl.so.2` on the
//! loader's path.

use cuda_stream::race::{Access, CollectiveOrder};
use cuda_stream::{Device, StreamRef, sys};
use libloading::Library;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::OnceLock;

/// `ncclComm_t`.
pub type RawComm = *mut c_void;

/// `ncclInt32` of `ncclDataType_t`.
pub const INT32: c_int = 2;
/// `ncclSum` of `ncclRedOp_t`.
pub const SUM: c_int = 0;

type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type CommInitAll = unsafe extern "C" fn(*mut RawComm, c_int, *const c_int) -> c_int;
type CommDestroy = unsafe extern "C" fn(RawComm) -> c_int;
type AllReduce =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, RawComm, sys::cudaStream_t) -> c_int;
type Group = unsafe extern "C" fn() -> c_int;
type GetErrorString = unsafe extern "C" fn(c_int) -> *const c_char;

/// The loaded library and its entry points.
pub struct Nccl {
    _library: Library,
    get_version: GetVersion,
    comm_init_all: CommInitAll,
    comm_destroy: CommDestroy,
    all_reduce: AllReduce,
    group_start: Group,
    group_end: Group,
    get_error_string: GetErrorString,
    /// Where it was loaded from.
    pub path: String,
}

impl std::fmt::Debug for Nccl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nccl").field("path", &self.path).finish()
    }
}

/// The places to load NCCL from, in order.
fn candidates() -> Vec<String> {
    let mut paths = Vec::new();
    if let Ok(path) = std::env::var("CUDA_STREAM_NCCL") {
        paths.push(path);
    }
    let wheel = std::process::Command::new("python3")
        .args(["-c", "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))"])
        .output();
    if let Ok(output) = wheel
        && output.status.success()
    {
        let dir = String::from_utf8_lossy(&output.stdout).trim().to_string();
        paths.push(format!("{dir}/libnccl.so.2"));
    }
    paths.push("libnccl.so.2".to_string());
    paths
}

/// NCCL, loaded once; `Err` says where it was looked for.
///
/// # Errors
/// When no candidate loads or one lacks an entry point.
pub fn nccl() -> Result<&'static Nccl, String> {
    static NCCL: OnceLock<Result<Nccl, String>> = OnceLock::new();
    NCCL.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Nccl, String> {
    let tried = candidates();
    for path in &tried {
        // SAFETY: loading NCCL runs its initializers, which have no preconditions.
        let Ok(library) = (unsafe { Library::new(path) }) else { continue };
        // SAFETY: each symbol has the signature of its type in nccl.h (NCCL 2.x); the function
        // pointers are used only while `library`, kept in the result, stays loaded.
        return unsafe {
            Ok(Nccl {
                get_version: *library.get::<GetVersion>(b"ncclGetVersion\0").map_err(|e| e.to_string())?,
                comm_init_all: *library.get::<CommInitAll>(b"ncclCommInitAll\0").map_err(|e| e.to_string())?,
                comm_destroy: *library.get::<CommDestroy>(b"ncclCommDestroy\0").map_err(|e| e.to_string())?,
                all_reduce: *library.get::<AllReduce>(b"ncclAllReduce\0").map_err(|e| e.to_string())?,
                group_start: *library.get::<Group>(b"ncclGroupStart\0").map_err(|e| e.to_string())?,
                group_end: *library.get::<Group>(b"ncclGroupEnd\0").map_err(|e| e.to_string())?,
                get_error_string: *library.get::<GetErrorString>(b"ncclGetErrorString\0").map_err(|e| e.to_string())?,
                path: path.clone(),
                _library: library,
            })
        };
    }
    Err(format!("NCCL not found (tried {tried:?}); set CUDA_STREAM_NCCL to libnccl.so.2"))
}

impl Nccl {
    fn check(&self, code: c_int, api: &str) -> Result<(), String> {
        if code == 0 {
            return Ok(());
        }
        // SAFETY: NCCL returns a static, NUL-terminated string for every code.
        let text = unsafe { CStr::from_ptr((self.get_error_string)(code)) }.to_string_lossy();
        Err(format!("{api} failed: {text} ({code})"))
    }

    /// NCCL's version, e.g. 22809 for 2.28.9.
    ///
    /// # Errors
    /// NCCL's.
    pub fn version(&self) -> Result<i32, String> {
        let mut version = 0;
        // SAFETY: a valid out-pointer.
        self.check(unsafe { (self.get_version)(&mut version) }, "ncclGetVersion")?;
        Ok(version)
    }

    /// One communicator per device, all in this process (`ncclCommInitAll`).
    ///
    /// # Errors
    /// NCCL's.
    pub fn comms(&'static self, devices: &[Device]) -> Result<Comms, String> {
        let ordinals: Vec<c_int> = devices.iter().map(|device| device.ordinal()).collect();
        let mut raw = vec![std::ptr::null_mut(); devices.len()];
        // SAFETY: `raw` and `ordinals` hold one entry per device.
        let code = unsafe { (self.comm_init_all)(raw.as_mut_ptr(), raw.len() as c_int, ordinals.as_ptr()) };
        self.check(code, "ncclCommInitAll")?;
        Ok(Comms { nccl: self, raw })
    }
}

/// Communicators of one clique, destroyed on drop.
#[derive(Debug)]
pub struct Comms {
    nccl: &'static Nccl,
    raw: Vec<RawComm>,
}

impl Comms {
    /// Sums `count` `i32`s of each rank's `send` into every rank's `receive`, each rank's part
    /// enqueued on its stream (`ncclAllReduce` per rank inside `ncclGroupStart`/`End`).
    ///
    /// # Safety
    /// Each `send`/`receive` pair must be device memory of the rank's device holding `count`
    /// `i32`s, alive until the streams' work completes; `streams[i]` is a stream of rank `i`'s
    /// device.
    ///
    /// # Errors
    /// NCCL's; the race detector's refusal under `RaceMode::Fail` (nothing is enqueued).
    pub unsafe fn all_reduce_sum_i32(
        &self,
        buffers: &[(*const c_void, *mut c_void)],
        count: usize,
        streams: &[&StreamRef],
    ) -> Result<(), String> {
        let nccl = self.nccl;
        // Each rank reads its `send` and writes its `receive` on its stream; every rank
        // receives from every rank.
        let accesses: Vec<[Access; 2]> = buffers
            .iter()
            .map(|(send, receive)| {
                [Access::read(send.cast::<i32>(), count), Access::write(receive.cast::<i32>(), count)]
            })
            .collect();
        let ranks: Vec<(&StreamRef, &[Access])> =
            streams.iter().zip(&accesses).map(|(stream, accesses)| (*stream, &accesses[..])).collect();
        let enqueue = || {
            // SAFETY: no arguments.
            nccl.check(unsafe { (nccl.group_start)() }, "ncclGroupStart")?;
            let mut result = Ok(());
            for ((comm, (send, receive)), stream) in self.raw.iter().zip(buffers).zip(streams) {
                // SAFETY: the caller's contract for the buffers and streams; a live communicator.
                let code = unsafe { (nccl.all_reduce)(*send, *receive, count, INT32, SUM, *comm, stream.as_raw()) };
                result = result.and(nccl.check(code, "ncclAllReduce"));
            }
            // SAFETY: closes the group opened above, also after a failed enqueue.
            let ended = nccl.check(unsafe { (nccl.group_end)() }, "ncclGroupEnd");
            result.and(ended)
        };
        StreamRef::declare_collective("ncclAllReduce", CollectiveOrder::AllToAll, &ranks, enqueue)
            .map_err(|error| error.to_string())?
    }
}

impl Drop for Comms {
    fn drop(&mut self) {
        for comm in &self.raw {
            // SAFETY: a communicator of ours, destroyed once; NCCL waits for its pending work.
            let _ = unsafe { (self.nccl.comm_destroy)(*comm) };
        }
    }
}

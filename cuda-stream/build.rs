//! Two jobs, both from the metadata cuda-stream-sys publishes (`DEP_CUDART_*`):
//!
//! * Turns the CUDA runtime version it was built against (`DEP_CUDART_VERSION`, the header's
//!   `CUDART_VERSION`) into cfgs, so calls whose signature changed between versions pick the
//!   right one by the header, not by a guess: `cudart_13`, CUDA 13.0 or newer
//!   (`cudaStreamGetCaptureInfo` takes the edge-data argument).
//! * Passes the toolkit on to the build scripts of crates that depend on `cuda-stream` (Cargo
//!   gives `DEP_CUDART_*` only to direct dependents of cuda-stream-sys): they read it as
//!   `DEP_CUDA_STREAM_ROOT`, `_INCLUDE`, `_VERSION`, `_NVCC` (absent without nvcc) and
//!   `_PER_THREAD` (`1` when handle 0 means the per-thread stream, following this crate's
//!   `per-thread-default-stream` feature) and, with `dynamic-linking`, `_RPATH` (the directory
//!   of the shared libcudart). `cuda-stream-build` reads them.
//! * With `dynamic-linking`, gives this crate's own tests and examples an rpath to that
//!   directory, so they start without `LD_LIBRARY_PATH` (Cargo passes no link argument on).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(cudart_13)");
    for key in ["ROOT", "INCLUDE", "VERSION", "NVCC", "PER_THREAD", "RPATH"] {
        let name = format!("DEP_CUDART_{key}");
        println!("cargo:rerun-if-env-changed={name}");
        if let Ok(value) = std::env::var(&name) {
            println!("cargo:{}={value}", key.to_lowercase());
        }
    }
    if let Ok(dir) = std::env::var("DEP_CUDART_RPATH") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    let version: u32 = std::env::var("DEP_CUDART_VERSION").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    if version >= 13000 {
        println!("cargo:rustc-cfg=cudart_13");
    }
}

//! Compiles the CUDA C++ test kernels in `kernels/` with nvcc through the `cc` crate, using the
//! toolkit that cuda-stream-sys found (`DEP_CUDART_*`).
//!
//! * `cudart("none")`: cuda-stream-sys already links cudart; a second `cudart_static` in one
//!   binary would be a second runtime with its own contexts and streams.
//! * Architectures: `CUDA_STREAM_ARCHS` (comma-separated compute capabilities, default `90`);
//!   each gets SASS, and the highest also PTX so newer GPUs can JIT it.
//! * With cuda-stream-sys's `per-thread-default-stream` the kernels are compiled with
//!   `--default-stream per-thread`, so handle 0 means the same stream in C++ and in Rust.
//! * `kernels/header_values.c` is compiled by the host C compiler: it exports the header's
//!   values of the macros bindgen drops, for the tests to compare.
//! * A toolkit without nvcc (NVIDIA's CUDA 12 runtime wheel) gets `kernels/without-nvcc/stubs.c`
//!   instead and the cfg `kernels_missing`: the crates still build and their no-GPU tests run,
//!   and the GPU tests that need kernels say plainly that they are skipped.

use std::path::PathBuf;

fn var(name: &str) -> Option<String> {
    println!("cargo:rerun-if-env-changed={name}");
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

fn main() {
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo::rustc-check-cfg=cfg(kernels_missing)");
    let include_path = var("DEP_CUDART_INCLUDE").expect("cuda-stream-sys publishes DEP_CUDART_INCLUDE");
    let includes: Vec<PathBuf> = std::env::split_paths(&include_path).collect();
    let per_thread = var("DEP_CUDART_PER_THREAD").as_deref() == Some("1");

    cc::Build::new().file("kernels/header_values.c").includes(&includes).compile("cuda_stream_header_values");

    let Some(nvcc) = var("DEP_CUDART_NVCC") else {
        println!(
            "cargo:warning=the toolkit at {} has no nvcc: the test kernels are not built, and the GPU \
             tests that need them will say they are skipped",
            var("DEP_CUDART_ROOT").unwrap_or_default()
        );
        println!("cargo:rustc-cfg=kernels_missing");
        cc::Build::new().file("kernels/without-nvcc/stubs.c").includes(&includes).compile("cuda_stream_test_kernels");
        return;
    };
    // cc finds nvcc through this variable; `.compiler(nvcc)` would make it pass gcc-only flags.
    // SAFETY: a build script is single-threaded here; nothing else reads the environment now.
    unsafe { std::env::set_var("NVCC", &nvcc) };

    let archs = var("CUDA_STREAM_ARCHS").unwrap_or_else(|| "90".to_string());
    let archs: Vec<&str> = archs.split(',').map(str::trim).filter(|a| !a.is_empty()).collect();
    let mut build = cc::Build::new();
    build.cuda(true).cudart("none").includes(&includes).include("kernels");
    for arch in &archs {
        build.flag(format!("-gencode=arch=compute_{arch},code=sm_{arch}"));
    }
    if let Some(newest) = archs.iter().max_by_key(|arch| arch.parse::<u32>().unwrap_or(0)) {
        build.flag(format!("-gencode=arch=compute_{newest},code=compute_{newest}"));
    }
    if per_thread {
        build.flag("--default-stream").flag("per-thread");
    }
    let kernels: Vec<PathBuf> = std::fs::read_dir("kernels")
        .expect("kernels/ exists")
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "cu"))
        .collect();
    build.files(&kernels).compile("cuda_stream_test_kernels");
}

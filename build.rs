//! Compiles the CUDA C++ test kernels in `kernels/` with `cuda-stream-build` (nvcc with the
//! toolkit and default-stream mode of cuda-stream-sys, archived by `cc`), exactly as a crate of
//! our users does; see that crate for what it takes care of. The one difference: without a
//! setting or a GPU that names the architectures, sm_90 (the H100 and H200 the GPU tests run
//! on) instead of the broad default.
//!
//! * Module loading stays lazy, as CUDA's default: the GPU gates load the test kernels
//!   explicitly (`preload_kernels`), and the tests see what users without eager loading see.
//! * `kernels/header_values.c` is compiled by the host C compiler: it exports the header's
//!   values of the macros bindgen drops, for the tests to compare.
//! * A toolkit without nvcc (NVIDIA's CUDA 12 runtime wheel) gets `kernels/without-nvcc/stubs.c`
//!   instead and the cfg `kernels_missing`: the crates still build and their no-GPU tests run,
//!   and the GPU tests that need kernels say plainly that they are skipped.

use cuda_stream_build::{Error, Kernels, Toolkit};

fn main() {
    println!("cargo::rustc-check-cfg=cfg(kernels_missing)");
    let toolkit = Toolkit::from_dependencies().expect("cuda-stream-sys publishes the toolkit");
    cc::Build::new().file("kernels/header_values.c").includes(&toolkit.includes).compile("cuda_stream_header_values");
    // The workspace's GPU hosts are H100s and H200s: sm_90 when nothing else names the
    // architectures (CI has no GPU; its builds need not pay for the broad default).
    match Kernels::from_dir("kernels").lazy_loading().fallback_archs("90").try_compile("cuda_stream_test_kernels") {
        Ok(_) => {}
        Err(Error::NoNvcc { root }) => {
            println!(
                "cargo:warning=the toolkit at {root} has no nvcc: the test kernels are not built, and the GPU \
                 tests that need them will say they are skipped"
            );
            println!("cargo:rustc-cfg=kernels_missing");
            cc::Build::new()
                .file("kernels/without-nvcc/stubs.c")
                .includes(&toolkit.includes)
                .compile("cuda_stream_test_kernels");
        }
        Err(error) => panic!("{error}"),
    }
    // A stand-in NVTX tool for tests/profiling/nvtx.rs: a shared library that a test process
    // loads through NVTX_INJECTION64_PATH, as Nsight Systems' injection is loaded.
    let out_dir = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("Cargo sets OUT_DIR"));
    let recorder = out_dir.join("libnvtx_recorder.so");
    println!("cargo:rerun-if-changed=kernels/nvtx_recorder.c");
    let compiler = cc::Build::new().get_compiler();
    let status = compiler
        .to_command()
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&recorder)
        .arg("kernels/nvtx_recorder.c")
        .arg("-lpthread")
        .status()
        .expect("the C compiler runs");
    assert!(status.success(), "kernels/nvtx_recorder.c does not compile as a shared library");
    println!("cargo:rustc-env=CUDA_STREAM_NVTX_RECORDER={}", recorder.display());
    // The examples' kernels (`examples/kernels/NAME.cu`, one file per example, each example a
    // crate of its own once copied out: scripts/check-example-copies.sh). Without nvcc, C stubs
    // of their host stubs (`examples/kernels/without-nvcc/NAME.c`) let the examples link; they
    // then stop at their first launch (no kernel image), as they would on a machine without a
    // GPU anyway.
    // Cargo links a build script's libraries into the package's library, which the examples do
    // not use (they use only the published crates): they get the archive by name, and the C++
    // runtime its host code needs (which cc links into the library).
    println!("cargo:rustc-link-arg-examples=-lcuda_stream_example_kernels");
    println!("cargo:rustc-link-arg-examples=-lstdc++");
    match Kernels::from_dir("examples/kernels")
        .lazy_loading()
        .fallback_archs("90")
        .try_compile("cuda_stream_example_kernels")
    {
        Ok(_) => {}
        Err(Error::NoNvcc { .. }) => {
            let mut stubs = cc::Build::new();
            stubs.includes(&toolkit.includes);
            for entry in std::fs::read_dir("examples/kernels/without-nvcc").expect("the examples' stubs") {
                let path = entry.expect("a directory entry").path();
                if path.extension().is_some_and(|ext| ext == "c") {
                    println!("cargo:rerun-if-changed={}", path.display());
                    stubs.file(path);
                }
            }
            stubs.compile("cuda_stream_example_kernels");
        }
        Err(error) => panic!("{error}"),
    }
}

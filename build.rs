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
}

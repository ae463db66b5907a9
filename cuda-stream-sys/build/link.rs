//! Linking cudart and publishing the toolkit to dependent build scripts.
//!
//! `cudart_static` by default (then the binary needs only the driver, `libcuda.so`, which
//! cudart loads at run time), the shared `libcudart` with the `dynamic-linking` feature.
//! Metadata, read by dependents as `DEP_CUDART_*`: `ROOT`, `INCLUDE`, `VERSION`
//! (`CUDART_VERSION`), `NVCC` (absent when the toolkit has none), `PER_THREAD` (`1` when
//! handle 0 means the per-thread stream, so kernels must be built with
//! `--default-stream per-thread`) and, with `dynamic-linking`, `RPATH`: the directory of the
//! shared libcudart, which a dependent's binaries need at run time (its build script passes
//! `-Wl,-rpath,<RPATH>`; Cargo does not pass this crate's link arguments on).

use crate::env;
use crate::toolkit::Toolkit;

/// Prints the link directives and the metadata.
pub fn emit(toolkit: &Toolkit, per_thread: bool) {
    let lib_dirs = toolkit.lib_dirs();
    for dir in &lib_dirs {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
    if env::feature("DYNAMIC_LINKING") {
        // NVIDIA's wheels ship only the versioned name, with no `libcudart.so` link.
        let major = toolkit.version / 1000;
        let unversioned = lib_dirs.iter().any(|dir| dir.join("libcudart.so").exists());
        if unversioned {
            println!("cargo:rustc-link-lib=dylib=cudart");
        } else {
            println!("cargo:rustc-link-lib=dylib:+verbatim=libcudart.so.{major}");
        }
        // Where binaries find it at run time without LD_LIBRARY_PATH: an rpath for this crate's
        // own tests, and the `rpath` metadata for dependents (link arguments do not propagate).
        let runtime = format!("libcudart.so.{major}");
        if let Some(dir) = lib_dirs.iter().find(|dir| dir.join(&runtime).exists() || dir.join("libcudart.so").exists())
        {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
            println!("cargo:rpath={}", dir.display());
        }
    } else {
        println!("cargo:rustc-link-lib=static=cudart_static");
        for system in ["rt", "dl", "pthread"] {
            println!("cargo:rustc-link-lib=dylib={system}");
        }
    }
    println!("cargo:root={}", toolkit.root.display());
    let includes: Vec<String> = toolkit.includes().iter().map(|dir| dir.display().to_string()).collect();
    println!("cargo:include={}", includes.join(if cfg!(windows) { ";" } else { ":" }));
    println!("cargo:version={}", toolkit.version);
    println!("cargo:per_thread={}", u8::from(per_thread));
    let nvcc = toolkit.root.join("bin/nvcc");
    if nvcc.is_file() {
        println!("cargo:nvcc={}", nvcc.display());
    }
    println!("cargo:rustc-env=CUDA_STREAM_SYS_TOOLKIT_ROOT={}", toolkit.root.display());
}

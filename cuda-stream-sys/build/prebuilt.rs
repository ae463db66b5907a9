//! Bindings committed in the repository (`prebuilt/`), generated from the pinned CUDA 13.0
//! headers by `scripts/check-bindings.sh --update` (CI fails on any difference). They serve two
//! builds:
//!
//! * with a CUDA 13.0 toolkit on 64-bit Linux (the target they were generated for, checked at
//!   compile time by their layout assertions): bindgen, and so libclang, is not needed;
//!   `CUDA_STREAM_SYS_BINDGEN=1` runs it anyway (a 13.0 patch release whose header differs);
//! * without a toolkit: docs.rs (which sets `DOCS_RS`) and the `prebuilt-bindings` feature, for
//!   `cargo check` or `cargo doc`. Nothing is linked then: binaries need a toolkit.

use crate::env;
use crate::toolkit::Toolkit;
use std::path::PathBuf;

/// The `CUDART_VERSION` of the committed bindings.
const VERSION: u32 = 13000;

/// The variable that makes bindgen generate the bindings even where the committed ones fit.
const BINDGEN_VAR: &str = "CUDA_STREAM_SYS_BINDGEN";

/// Whether this build goes without a toolkit, on the committed bindings alone.
pub fn wanted() -> bool {
    env::var("DOCS_RS").is_some() || env::feature("PREBUILT_BINDINGS")
}

/// Whether the committed bindings are the ones bindgen would generate for `toolkit`.
pub fn fits(toolkit: &Toolkit) -> bool {
    let pointer_width = std::env::var("CARGO_CFG_TARGET_POINTER_WIDTH").unwrap_or_default();
    toolkit.version == VERSION && pointer_width == "64" && env::var(BINDGEN_VAR).is_none_or(|value| value != "1")
}

/// Copies the committed bindings of this mode to `OUT_DIR/bindings.rs`.
pub fn copy(per_thread: bool) {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let name = if per_thread { "bindings-13000-per-thread.rs" } else { "bindings-13000.rs" };
    let source = manifest.join("prebuilt").join(name);
    println!("cargo:rerun-if-changed={}", source.display());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::copy(&source, out.join("bindings.rs")).expect("the committed bindings are in the package");
    eprintln!("cuda-stream-sys: the committed bindings {} (CUDA 13.0; no bindgen)", source.display());
}

/// Installs the committed bindings with the metadata a toolkit build would publish (but no
/// root, no include and no nvcc), and links nothing.
pub fn install_without_toolkit(per_thread: bool) {
    copy(per_thread);
    println!("cargo:version={VERSION}");
    println!("cargo:per_thread={}", u8::from(per_thread));
    println!("cargo:rustc-env=CUDA_STREAM_SYS_TOOLKIT_ROOT=(none: prebuilt bindings)");
}

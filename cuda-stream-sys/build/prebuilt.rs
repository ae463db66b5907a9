//! Bindings committed in the repository (`prebuilt/`), for builds without a CUDA toolkit:
//! docs.rs (which sets `DOCS_RS`) and anyone who enables the `prebuilt-bindings` feature for
//! `cargo check` or `cargo doc`. They are generated from the pinned CUDA 13.0 headers by
//! `scripts/check-bindings.sh --update`; CI runs the script to fail on any difference. Nothing is
//! linked in this mode: binaries need the normal build.

use crate::env;
use std::path::PathBuf;

/// The `CUDART_VERSION` of the committed bindings.
const VERSION: u32 = 13000;

/// Whether this build uses the committed bindings.
pub fn wanted() -> bool {
    env::var("DOCS_RS").is_some() || env::feature("PREBUILT_BINDINGS")
}

/// Installs the committed bindings of this mode as `OUT_DIR/bindings.rs`, with the metadata a
/// toolkit build would publish (but no root and no nvcc).
pub fn install(per_thread: bool) {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let name = if per_thread { "bindings-13000-per-thread.rs" } else { "bindings-13000.rs" };
    let source = manifest.join("prebuilt").join(name);
    println!("cargo:rerun-if-changed={}", source.display());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::copy(&source, out.join("bindings.rs")).expect("the committed bindings are in the package");
    println!("cargo:version={VERSION}");
    println!("cargo:per_thread={}", u8::from(per_thread));
    println!("cargo:rustc-env=CUDA_STREAM_SYS_TOOLKIT_ROOT=(none: prebuilt bindings)");
}

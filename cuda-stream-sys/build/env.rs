//! The one way this build script reads its environment: every variable it reads is registered
//! with `cargo:rerun-if-env-changed`, so a changed toolkit location rebuilds the bindings. One
//! exception, [`path`].

use std::ffi::OsString;

/// Reads `name`, registering it for rerun. Empty values count as unset.
pub fn var(name: &str) -> Option<OsString> {
    println!("cargo:rerun-if-env-changed={name}");
    std::env::var_os(name).filter(|value| !value.is_empty())
}

/// `PATH`, read without registering it: it changes with every virtualenv or shell that
/// prepends to it, and each change would rebuild everything above this crate. When it decides
/// the toolkit (its `nvcc`), that nvcc is tracked instead (`toolkit::find`); to switch toolkits,
/// set `CUDA_PATH`.
pub fn path() -> Option<OsString> {
    std::env::var_os("PATH").filter(|value| !value.is_empty())
}

/// Whether cargo enabled the feature whose `CARGO_FEATURE_*` suffix is `name`.
pub fn feature(name: &str) -> bool {
    std::env::var_os(format!("CARGO_FEATURE_{name}")).is_some()
}

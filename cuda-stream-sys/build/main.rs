//! Build script of `cuda-stream-sys`, split by concern:
//!
//! 0. [`prebuilt`]: without a toolkit (docs.rs, or the `prebuilt-bindings` feature), use the
//!    committed bindings, link nothing, and stop there;
//! 1. [`target`]: refuse a target other than Linux, with the reason;
//! 2. [`toolkit`]: find the CUDA toolkit (or stop with one message saying where we looked);
//! 3. the bindings: the committed ones for CUDA 13.0 ([`prebuilt`]: no libclang needed), else
//!    [`bindings`]: bindgen on the toolkit's `cuda_runtime_api.h` into `OUT_DIR`;
//! 4. [`link`]: link cudart (static by default) and publish the toolkit's location as
//!    `DEP_CUDART_*` metadata for dependent build scripts.
//!
//! A successful build prints no `cargo:warning`: what it found goes to the build script's
//! log (`cargo build -vv`).

mod bindings;
mod env;
mod link;
mod prebuilt;
mod target;
mod toolkit;

fn main() {
    let per_thread = env::feature("PER_THREAD_DEFAULT_STREAM");
    if prebuilt::wanted() {
        prebuilt::install_without_toolkit(per_thread);
        return;
    }
    let toolkit = target::check().and_then(|()| toolkit::find()).unwrap_or_else(|message| {
        // One message, before bindgen or the linker can fail with a raw error.
        eprintln!("{message}");
        std::process::exit(1);
    });
    eprintln!(
        "cuda-stream-sys: CUDA {} at {} (found by {})",
        toolkit.version_string(),
        toolkit.root.display(),
        toolkit.found_by
    );
    if prebuilt::fits(&toolkit) {
        prebuilt::copy(per_thread);
    } else {
        bindings::generate(&toolkit, per_thread);
    }
    link::emit(&toolkit, per_thread);
}

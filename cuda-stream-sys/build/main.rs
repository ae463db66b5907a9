//! Build script of `cuda-stream-sys`, split by concern:
//!
//! 0. [`prebuilt`]: without a toolkit (docs.rs, or the `prebuilt-bindings` feature), use the
//!    committed bindings and stop there;
//! 1. [`toolkit`]: find the CUDA toolkit (or stop with one message saying where we looked);
//! 2. [`bindings`]: run bindgen on the toolkit's `cuda_runtime_api.h` into `OUT_DIR`;
//! 3. [`link`]: link cudart (static by default) and publish the toolkit's location as
//!    `DEP_CUDART_*` metadata for dependent build scripts.

mod bindings;
mod env;
mod link;
mod prebuilt;
mod toolkit;

fn main() {
    let per_thread = env::feature("PER_THREAD_DEFAULT_STREAM");
    if prebuilt::wanted() {
        prebuilt::install(per_thread);
        return;
    }
    let toolkit = match toolkit::find() {
        Ok(toolkit) => toolkit,
        Err(message) => {
            // One message, before bindgen can fail with a raw clang error.
            eprintln!("{message}");
            std::process::exit(1);
        }
    };
    println!(
        "cargo:warning=cuda-stream-sys: CUDA {} at {} (found by {})",
        toolkit.version_string(),
        toolkit.root.display(),
        toolkit.found_by
    );
    bindings::generate(&toolkit, per_thread);
    link::emit(&toolkit, per_thread);
}

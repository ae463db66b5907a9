//! Bindgen on the toolkit's `cuda_runtime_api.h`, into `OUT_DIR/bindings.rs`.
//!
//! C enums (error codes, flags, attributes) become integer newtypes with associated constants,
//! never Rust enums: a value the header did not know would be undefined behaviour in an enum.
//! With `per_thread`, the header is read with `CUDA_API_PER_THREAD_DEFAULT_STREAM`, which
//! renames the stream functions to their `_ptsz`/`_ptds` symbols; the Rust names drop the suffix
//! and `#[link_name]` keeps the per-thread symbol, so callers write the plain names either way.

use crate::toolkit::Toolkit;
use bindgen::callbacks::{ItemInfo, ItemKind, ParseCallbacks};
use std::path::PathBuf;

/// The header bindgen reads: the runtime API, and the driver API's `CUstream` for interop.
const WRAPPER: &str = "#include <cuda_runtime_api.h>\n";

/// Generates the bindings into `OUT_DIR/bindings.rs`.
pub fn generate(toolkit: &Toolkit, per_thread: bool) {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut builder = bindgen::Builder::default()
        .header_contents("cuda_stream_sys_wrapper.h", WRAPPER)
        .clang_arg(format!("-I{}", toolkit.include().display()))
        .allowlist_function("cuda.*")
        .allowlist_type("cuda.*|CU.*_st")
        .allowlist_var("CUDA.*|cuda.*")
        .default_enum_style(bindgen::EnumVariation::NewType { is_bitfield: false, is_global: false })
        .must_use_type("cudaError")
        .use_core()
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false)
        .parse_callbacks(Box::new(PlainNames));
    if per_thread {
        builder = builder.clang_arg("-DCUDA_API_PER_THREAD_DEFAULT_STREAM");
    }
    let bindings = builder.generate().unwrap_or_else(|error| {
        eprintln!(
            "\nerror: bindgen could not parse {}/cuda_runtime_api.h: {error}\n\
             bindgen needs libclang: on Debian or Ubuntu `apt-get install libclang-dev`, \
             or point LIBCLANG_PATH at the directory holding libclang.so.\n",
            toolkit.include().display()
        );
        std::process::exit(1);
    });
    bindings.write_to_file(out.join("bindings.rs")).expect("OUT_DIR is writable");
}

/// Drops the `_ptsz`/`_ptds` suffix from per-thread function names; bindgen keeps the symbol
/// in `#[link_name]`.
#[derive(Debug)]
struct PlainNames;

impl ParseCallbacks for PlainNames {
    fn generated_name_override(&self, item: ItemInfo<'_>) -> Option<String> {
        if !matches!(item.kind, ItemKind::Function) {
            return None;
        }
        let name = item.name;
        name.strip_suffix("_ptsz").or_else(|| name.strip_suffix("_ptds")).map(str::to_string)
    }
}

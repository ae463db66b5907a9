//! Bindgen on the toolkit's `cuda_runtime_api.h`, into `OUT_DIR/bindings.rs`.
//!
//! C enums (error codes, flags, attributes) become integer newtypes with associated constants,
//! never Rust enums: a value the header did not know would be undefined behaviour in an enum.
//! With `per_thread`, the header is read with `CUDA_API_PER_THREAD_DEFAULT_STREAM`, which
//! renames the stream functions to their `_ptsz`/`_ptds` symbols; the Rust names drop the suffix
//! and `#[link_name]` keeps the per-thread symbol, so callers write the plain names either way.

use crate::toolkit::Toolkit;
use bindgen::callbacks::{ItemInfo, ItemKind, ParseCallbacks};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The header bindgen reads: the runtime API, and the driver API's `CUstream` for interop.
const WRAPPER: &str = "#include <cuda_runtime_api.h>\n";

/// Generates the bindings into `OUT_DIR/bindings.rs`.
pub fn generate(toolkit: &Toolkit, per_thread: bool) {
    // bindgen panics when it cannot load libclang; loaded here first (bindgen then uses it),
    // a missing libclang gets one message that says how to install it.
    if let Err(why) = clang_sys::load() {
        eprintln!(
            "\nerror: cuda-stream-sys needs libclang to generate the bindings of CUDA {} (the committed \
             bindings are CUDA 13.0's), and none was found: {why}\n\
             Fix: on Debian or Ubuntu `apt-get install libclang-dev`; or point LIBCLANG_PATH at the directory \
             holding libclang.so; or build with a CUDA 13.0 toolkit, which needs no libclang.\n",
            toolkit.version_string()
        );
        std::process::exit(1);
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut builder = bindgen::Builder::default()
        .header_contents("cuda_stream_sys_wrapper.h", WRAPPER)
        .clang_args(toolkit.includes().iter().map(|dir| format!("-I{}", dir.display())))
        .allowlist_function("cuda.*")
        .allowlist_type("cuda.*|CU.*_st")
        .allowlist_var("CUDA.*|cuda.*")
        .default_enum_style(bindgen::EnumVariation::NewType { is_bitfield: false, is_global: false })
        .must_use_type("cudaError")
        .use_core()
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false)
        .parse_callbacks(Box::new(PlainNames::from_header(&toolkit.include().join("cuda_runtime_api.h"))));
    if per_thread {
        builder = builder.clang_arg("-DCUDA_API_PER_THREAD_DEFAULT_STREAM");
    }
    let bindings = builder.generate().unwrap_or_else(|error| {
        eprintln!(
            "\nerror: bindgen could not parse {}/cuda_runtime_api.h: {error}\n\
             If a header is missing, the toolkit at {} is incomplete (NVIDIA's CUDA 12 wheels also \
             need nvidia-cuda-nvcc-cu12 for the crt/ headers).\n",
            toolkit.include().display(),
            toolkit.root.display()
        );
        std::process::exit(1);
    });
    bindings.write_to_file(out.join("bindings.rs")).expect("OUT_DIR is writable");
}

/// Gives functions the names C code calls them by; bindgen keeps the real symbol in
/// `#[link_name]`:
/// * the `_ptsz`/`_ptds` suffix of the per-thread variants is dropped;
/// * a versioned symbol that the header maps a plain name to (CUDA 12:
///   `#define cudaGetDeviceProperties cudaGetDeviceProperties_v2`) takes the plain name.
#[derive(Debug)]
struct PlainNames {
    /// Versioned symbol → the plain name the header maps to it.
    versioned: HashMap<String, String>,
}

impl PlainNames {
    /// Reads the `#define cudaX [__CUDART_API_PTSZ(]cudaX_vN[)]` lines of the header.
    fn from_header(header: &Path) -> PlainNames {
        let text = std::fs::read_to_string(header).unwrap_or_default();
        let mut versioned = HashMap::new();
        for line in text.lines() {
            let Some(rest) = line.trim().strip_prefix("#define") else { continue };
            let mut words = rest.split_whitespace();
            let (Some(plain), Some(target)) = (words.next(), words.next()) else { continue };
            let target = target.trim_start_matches("__CUDART_API_PTSZ(").trim_end_matches(')');
            let is_version_of_plain = target
                .strip_prefix(plain)
                .and_then(|suffix| suffix.strip_prefix("_v"))
                .is_some_and(|digits| !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()));
            if plain.starts_with("cuda") && is_version_of_plain {
                versioned.insert(target.to_string(), plain.to_string());
            }
        }
        PlainNames { versioned }
    }
}

impl ParseCallbacks for PlainNames {
    fn generated_name_override(&self, item: ItemInfo<'_>) -> Option<String> {
        if !matches!(item.kind, ItemKind::Function) {
            return None;
        }
        let per_thread = item.name.strip_suffix("_ptsz").or_else(|| item.name.strip_suffix("_ptds"));
        let name = per_thread.unwrap_or(item.name);
        match self.versioned.get(name) {
            Some(plain) => Some(plain.clone()),
            None => per_thread.map(str::to_string),
        }
    }
}

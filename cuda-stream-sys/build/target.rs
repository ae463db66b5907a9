//! Linux only: cudart is linked with `librt`, `libdl` and `libpthread`, nvcc is `bin/nvcc`, and
//! dependents' kernels are compiled with `-fPIC`. Any other target stops here with that reason
//! rather than at a linker error later.

/// `Err` with the message for a target other than Linux.
pub fn check() -> Result<(), String> {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        return Ok(());
    }
    Err(format!(
        "\nerror: cuda-stream-sys builds for Linux only, and this build targets `{os}`: it links cudart \
         with librt, libdl and libpthread and finds the toolkit's bin/nvcc.\n\
         The `prebuilt-bindings` feature (the committed CUDA 13.0 bindings, no toolkit, nothing \
         linked: for `cargo check` and `cargo doc`) skips this check.\n"
    ))
}

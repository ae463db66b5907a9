//! Turns the CUDA runtime version that cuda-stream-sys was built against (`DEP_CUDART_VERSION`,
//! the header's `CUDART_VERSION`) into cfgs, so calls whose signature changed between versions
//! pick the right one by the header, not by a guess:
//! * `cudart_13`: CUDA 13.0 or newer (`cudaStreamGetCaptureInfo` takes the edge-data argument).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(cudart_13)");
    println!("cargo:rerun-if-env-changed=DEP_CUDART_VERSION");
    let version: u32 = std::env::var("DEP_CUDART_VERSION").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    if version >= 13000 {
        println!("cargo:rustc-cfg=cudart_13");
    }
}

//! The randomized ordering model on the GPU: random programs over 2 to 8 streams (blocking,
//! non-blocking, the legacy and the per-thread stream), run on the device, whose kernel log must
//! agree with the happens-before relation computed from CUDA's rules
//! (`cuda_stream_tests::ordering_model`).
//!
//! `CUDA_STREAM_MODEL_PROGRAMS` (default 1000) programs from seeds 0.., or only the seed
//! `CUDA_STREAM_MODEL_SEED`. A failure prints the seed and a shrunk program that still fails.

use cuda_stream_tests::gpu_or_skip;
use cuda_stream_tests::ordering_model::{Op, Program};

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|value| value.parse().ok())
}

#[test]
fn random_programs_respect_happens_before() {
    let device = gpu_or_skip!();
    let seeds: Vec<u64> = match env("CUDA_STREAM_MODEL_SEED") {
        Some(seed) => vec![seed],
        None => (0..env("CUDA_STREAM_MODEL_PROGRAMS").unwrap_or(cuda_stream_tests::scaled(1000, 50) as u64)).collect(),
    };
    let (mut kernels, mut ordered_pairs) = (0, 0);
    for &seed in &seeds {
        let program = Program::generate(seed);
        let log = program.run(device).unwrap_or_else(|error| panic!("seed {seed}: {error}\n{program}"));
        if let Err(violation) = program.check(&log) {
            let fails = |p: &Program| p.run(device).map(|log| p.check(&log).is_err()).unwrap_or(false);
            let minimal = program.shrink(200, fails);
            panic!("seed {seed}: {violation}\nminimal failing program:\n{minimal}\nfull program:\n{program}");
        }
        let before = program.happens_before();
        let is_kernel: Vec<bool> = program.ops.iter().map(|op| matches!(op, Op::Kernel { .. })).collect();
        kernels += is_kernel.iter().filter(|k| **k).count();
        for (later, ancestors) in before.iter().enumerate() {
            ordered_pairs += ancestors
                .iter()
                .enumerate()
                .filter(|(earlier, b)| **b && is_kernel[*earlier] && is_kernel[later])
                .count();
        }
    }
    eprintln!(
        "{} random programs, {kernels} kernels, {ordered_pairs} ordered kernel pairs checked: 0 violations",
        seeds.len()
    );
    assert!(ordered_pairs > seeds.len(), "the programs order enough kernels to test something");
}

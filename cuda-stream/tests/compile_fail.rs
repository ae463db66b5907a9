//! Every lifetime, Send and Sync promise of the crate, checked by the compiler: each program in
//! tests/compile_fail/ must be refused (and tests/compile_pass/ accepted).
#[test]
fn the_compiler_refuses_what_the_types_forbid() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
    t.pass("tests/compile_pass/*.rs");
    #[cfg(feature = "cudarc")]
    t.compile_fail("tests/compile_fail_cudarc/*.rs");
    #[cfg(feature = "python")]
    t.compile_fail("tests/compile_fail_python/*.rs");
}

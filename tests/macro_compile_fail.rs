//! `#[kernel]` error messages, checked against `tests/compile_fail/*.stderr`
//! (regenerate with `TRYBUILD=overwrite cargo test --test macro_compile_fail`, then review).

#[test]
fn compile_fail() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
    t.pass("tests/compile_fail/pass/*.rs");
}

//! The exit codes every command returns, in a file of their own so that the
//! commands (`cli.rs`) and the stages they call (`shrink/`) agree on them without
//! importing each other.

/// Every expectation met.
pub const EXIT_PASS: i32 = 0;
/// A check failed or an expectation was not met.
pub const EXIT_FAIL: i32 = 1;
/// Bad input, or the harness could not run.
pub const EXIT_ERROR: i32 = 2;

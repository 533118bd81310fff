//! The recorded formats of a run directory: every file name ([`rundir`]), the
//! worker and nemesis history ([`history`]), what the harness observed of the
//! lock service ([`observe`]) and what a storage held before the run
//! ([`before`]). Live code writes them and the checks read them, so
//! both import this module and nothing here imports anything live: a recorded run
//! can be re-checked offline, years later, by the formats alone.

pub mod before;
pub mod history;
pub mod observe;
pub mod rundir;

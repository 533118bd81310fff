//! The recorded formats of a run directory: every file name ([`rundir`]), the
//! worker and nemesis history ([`history`]) and what the harness observed of the
//! lock service ([`observe`]). Live code writes them and the checks read them, so
//! both import this module and nothing here imports anything live: a recorded run
//! can be re-checked offline, years later, by the formats alone.

pub mod history;
pub mod observe;
pub mod rundir;

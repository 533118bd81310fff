//! clockshim (`clockshim/`, built by `ci/bootstrap.sh` into the cache): an
//! `LD_PRELOAD` library that adds the nanoseconds in an offset file to every
//! wall-clock read of the process it is loaded into (`CLOCK_REALTIME`,
//! `gettimeofday`, `time`); monotonic clocks are left alone. Redis members run
//! under it for `clock-jump` of a member, workers (and the adapters they start)
//! for `clock-jump` of an elector.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The variable naming the offset file clockshim reads.
pub const OFFSET_ENV: &str = "CLOCKSHIM_OFFSET_FILE";

/// Where `ci/bootstrap.sh` builds it.
pub fn path() -> PathBuf {
    crate::scenario::cache_dir()
        .join("clockshim")
        .join("libclockshim.so")
}

/// The offset now (0 when its file holds nothing readable).
pub fn read_offset(path: &Path) -> i64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Writes the offset whole: a rename, so it never reads half a number.
pub fn write_offset(path: &Path, ns: i64) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{ns}\n"))
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))
}

/// Steps the clock behind `file` by `ns` (negative: backward).
pub fn step_ns(file: &Path, ns: i64) -> Result<(i64, i64)> {
    let old = read_offset(file);
    let new = old.saturating_add(ns);
    write_offset(file, new)?;
    Ok((old, new))
}

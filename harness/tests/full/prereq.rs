//! A scenario that needs something not installed is refused before anything
//! starts (exit 2), at its line, naming the one `ci/bootstrap.sh` command that
//! installs it: the real binary, with fencecheck's cache pointed at an empty
//! directory (where kube-apiserver is looked up; `FENCECHECK_CACHE`).

use crate::common;

use common::*;

#[test]
fn a_scenario_whose_system_is_not_installed_is_refused_naming_the_command() {
    let cache = tempfile::tempdir().expect("tmp");
    let out = tempfile::tempdir().expect("tmp");
    let file = "scenarios/k8s-lease-pause.toml";
    let text = std::fs::read_to_string(repo_root().join(file)).expect("scenario");
    let line = 1 + text
        .lines()
        .position(|l| l.trim() == "service = \"kubernetes\"")
        .expect("a kubernetes scenario");
    let missing = cache.path().join("kubernetes/bin/kube-apiserver");
    let want = format!(
        "{file}:{line}: kube-apiserver 1.20.2 is not installed ({} missing): run \
         `ci/bootstrap.sh --system kubernetes`",
        missing.display()
    );
    let run_dir = out.path().join("run");
    let suite_dir = out.path().join("suite");
    let started = std::time::Instant::now();
    for args in [
        vec!["scenario", file, "--out", run_dir.to_str().expect("utf-8")],
        vec!["suite", file, "--out", suite_dir.to_str().expect("utf-8")],
    ] {
        let o = bin()
            .args(&args)
            .env("FENCECHECK_CACHE", cache.path())
            .output()
            .expect("run");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", explain(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&want),
            "{args:?}: want {want:?} in {}",
            explain(&o)
        );
    }
    // Refused before anything started: no run directory, nothing made in the cache.
    assert!(!run_dir.exists() && !suite_dir.exists(), "a run started");
    let made: Vec<_> = std::fs::read_dir(cache.path()).expect("cache").collect();
    assert!(made.is_empty(), "the cache was written: {made:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

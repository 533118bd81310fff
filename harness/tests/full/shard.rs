//! `suite --shard I/N`, `--list` and `--merge`: shards partition the suite, bad
//! shards are exit 2, and two real shard runs merge into one index.

use crate::common;

use std::collections::BTreeSet;

use common::*;

fn list(args: &[&str]) -> Vec<String> {
    let o = bin()
        .arg("suite")
        .args(args)
        .arg("--list")
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    String::from_utf8(o.stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn shards_partition_the_suite() {
    let all = list(&["scenarios"]);
    assert!(all.len() > 10, "{all:?}");
    assert!(all.iter().all(|l| l.ends_with(".toml")), "{all:?}");
    for n in [2u32, 3, 4] {
        let mut union = BTreeSet::new();
        let mut total = 0;
        for i in 1..=n {
            let part = list(&["scenarios", "--shard", &format!("{i}/{n}")]);
            total += part.len();
            union.extend(part);
        }
        assert_eq!(total, all.len(), "shards of {n} overlap");
        assert_eq!(union, all.iter().cloned().collect::<BTreeSet<_>>(), "{n}");
    }
    // Deterministic: the same shard twice is the same list.
    assert_eq!(
        list(&["scenarios", "--shard", "1/2"]),
        list(&["scenarios", "--shard", "1/2"])
    );
    // Stable: a scenario's shard depends on its own file, not on its neighbours.
    let one = list(&["scenarios/pause.toml", "--shard", "1/2"]).len()
        + list(&["scenarios/pause.toml", "--shard", "2/2"]).len();
    assert_eq!(one, 1);
    let in_full = list(&["scenarios", "--shard", "1/2"]).contains(&"scenarios/pause.toml".into());
    let alone = list(&["scenarios/pause.toml", "--shard", "1/2"]).len() == 1;
    assert_eq!(in_full, alone);
}

#[test]
fn a_bad_shard_is_exit_2_with_the_rule() {
    for bad in ["3/2", "0/2", "x", "1/0", "1/", "2"] {
        let o = bin()
            .args(["suite", "scenarios", "--list", "--shard", bad])
            .output()
            .expect("run");
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", explain(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("expected I/N"), "{bad}: {err}");
        assert!(o.stdout.is_empty(), "{bad}: listed anyway");
    }
}

/// Two quick scenarios, one per shard, 3 s each; `--merge` of the two shard
/// directories makes one index linking both runs, and one JUnit file with both.
#[test]
fn two_shard_runs_merge_into_one_index() {
    let _g = serial();
    let tmp = tempfile::tempdir().expect("tmp");
    let files = ["scenarios/pause.toml", "scenarios/lease-id-token.toml"];
    let mut names = Vec::new();
    for (i, shard) in ["1/2", "2/2"].iter().enumerate() {
        let listed = list(&[files[0], files[1], "--shard", shard]);
        assert_eq!(listed.len(), 1, "{shard}: {listed:?}");
        names.push(
            std::path::Path::new(&listed[0])
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned(),
        );
        let o = bin()
            .args(["suite", files[0], files[1], "--shard", shard, "--quiet"])
            .args(["--duration", "3s", "--backend", "process", "--out"])
            .arg(tmp.path().join(format!("shard-{}", i + 1)))
            .output()
            .expect("run");
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", explain(&o));
    }
    let merged = tmp.path().join("merged");
    let junit = tmp.path().join("merged.xml");
    let o = bin()
        .args(["suite", "--merge"])
        .arg(tmp.path().join("shard-1"))
        .arg(tmp.path().join("shard-2"))
        .arg("--out")
        .arg(&merged)
        .arg("--junit")
        .arg(&junit)
        .output()
        .expect("run");
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", explain(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    let index = std::fs::read_to_string(merged.join("index.html")).expect("index.html");
    let xml = std::fs::read_to_string(&junit).expect("junit");
    for (i, name) in names.iter().enumerate() {
        let link = format!("../shard-{}/{name}/report.html", i + 1);
        assert!(index.contains(&link), "no link {link} in the index");
        assert!(
            merged.join(&link).exists(),
            "{link} does not resolve from the index"
        );
        assert!(table.contains(name.as_str()), "{table}");
        assert!(
            xml.contains(&format!("<testsuite name=\"{name}\"")),
            "{xml}"
        );
    }
    // A directory that is not a suite: exit 2, naming it.
    let o = bin()
        .args(["suite", "--merge"])
        .arg(tmp.path())
        .arg("--out")
        .arg(tmp.path().join("m2"))
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("suite.json"));
}

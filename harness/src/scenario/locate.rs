//! Finding a scenario file from what the user typed: a path that exists is used as
//! it is; otherwise `pause`, `pause.toml` or `clients/x.toml` are looked up among
//! the shipped scenarios (`scenarios/` under the current directory, then under the
//! source tree this binary was built from), so the brief's `cargo run -- scenario
//! pause.toml` works from the repository root.

use std::path::{Path, PathBuf};

use super::ScenarioError;

/// Where shipped scenarios are looked for, in order.
fn shipped_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from("scenarios")];
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("scenarios");
    if src.is_dir() {
        dirs.push(src);
    }
    dirs
}

pub fn locate(arg: &Path) -> Result<PathBuf, ScenarioError> {
    if arg.exists() {
        return Ok(arg.to_path_buf());
    }
    // `.toml` appended, not swapped in: `zoo/etcd-3.4-late-grant` has a dot in
    // its name that is not an extension.
    let with_ext = if arg.extension().is_some_and(|e| e == "toml") {
        arg.to_path_buf()
    } else {
        let mut s = arg.as_os_str().to_os_string();
        s.push(".toml");
        PathBuf::from(s)
    };
    for dir in shipped_dirs() {
        let p = dir.join(&with_ext);
        if p.is_file() {
            return Ok(p);
        }
    }
    let names = shipped_names();
    // A bare name that is one shipped scenario in a subfolder (`client-go-pause`
    // for `clients/client-go-pause`): that one. Two of the same name: the list.
    if arg.components().count() == 1 {
        if let Some(dir) = shipped_dirs().into_iter().find(|d| d.is_dir()) {
            let stem = with_ext
                .to_str()
                .and_then(|s| s.strip_suffix(".toml"))
                .unwrap_or_default();
            let mut hits = names
                .iter()
                .filter(|n| Path::new(n).file_name().and_then(|f| f.to_str()) == Some(stem));
            if let (Some(one), None) = (hits.next(), hits.next()) {
                return Ok(dir.join(format!("{one}.toml")));
            }
        }
    }
    Err(ScenarioError {
        file: arg.display().to_string(),
        line: None,
        message: if names.is_empty() {
            "no such scenario file (and no shipped scenarios found)".into()
        } else {
            format!(
                "no such scenario file; the shipped scenarios are: {}",
                names.join(", ")
            )
        },
    })
}

/// The shipped scenarios' names (relative to `scenarios/`, without `.toml`).
pub fn shipped_names() -> Vec<String> {
    let Some(dir) = shipped_dirs().into_iter().find(|d| d.is_dir()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    collect(&dir, &dir, &mut out);
    out.sort();
    out
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(root, &p, out);
        } else if p.extension().is_some_and(|x| x == "toml") {
            if let Ok(rel) = p.with_extension("").strip_prefix(root) {
                out.push(rel.display().to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_name_finds_its_shipped_scenario_in_a_subfolder() {
        let p = locate(Path::new("k8s-cluster-lease-pause")).expect("found");
        assert!(
            p.ends_with("scenarios/kubernetes/k8s-cluster-lease-pause.toml"),
            "{}",
            p.display()
        );
        let p = locate(Path::new("client-go-pause.toml")).expect("found");
        assert!(
            p.ends_with("scenarios/clients/client-go-pause.toml"),
            "{}",
            p.display()
        );
        // A dot in the name is not an extension, with or without the folder.
        for name in ["zoo/etcd-3.4-late-grant", "etcd-3.4-late-grant"] {
            let p = locate(Path::new(name)).expect("found");
            assert!(
                p.ends_with("scenarios/zoo/etcd-3.4-late-grant.toml"),
                "{name}: {}",
                p.display()
            );
        }
        let p = locate(Path::new("pause")).expect("found");
        assert!(p.ends_with("scenarios/pause.toml"), "{}", p.display());
        let e = locate(Path::new("no-such-scenario")).expect_err("nothing");
        assert!(
            e.message.contains("kubernetes/k8s-cluster-lease-pause"),
            "{e}"
        );
    }
}

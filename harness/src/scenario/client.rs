//! `[client]`: the lock client under test is the user's adapter program around a
//! lock library, spoken to over `docs/client-protocol.md`, instead of fencecheck's
//! own client.
//!
//! The command is resolved when the scenario is read — relative to the scenario
//! file when it names a path, on `PATH` otherwise — and kept resolved, so the run
//! directory's `scenario.toml` names exactly what ran. A command that cannot run is
//! bad input (exit 2) before anything starts.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Behaviour, Scenario, ScenarioError, TokenName};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Client {
    /// argv; `command[0]` is resolved (see the module comment).
    pub command: Vec<String>,
    /// Which token of the `acquire` answer the worker sends: `"token"`, or the
    /// name of one of its `tokens`.
    #[serde(default = "default_token")]
    pub token: String,
    #[serde(default)]
    pub behaviour: Behaviour,
    /// The kubernetes backend: what the adapter needs besides `command[0]` to run
    /// in a worker pod (its interpreter, its libraries, its own files), each put
    /// into the worker image at its path (see [`resolve_pod_file`]). Absent: the
    /// adapter's workers stay processes of the harness's machine. Resolved when
    /// the scenario is read, like the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_files: Option<Vec<String>>,
}

fn default_token() -> String {
    "token".into()
}

/// Resolves `command[0]` (against the directory of `file`, or `PATH`) and checks
/// that it can run (unless `find` is false: a recorded run's scenario); errors
/// point at the `command` line.
pub fn resolve(s: &mut Scenario, text: &str, file: &str, find: bool) -> Result<(), ScenarioError> {
    let Some(c) = s.client.as_mut() else {
        return Ok(());
    };
    let err = |key: &str, message: String| ScenarioError {
        file: file.to_string(),
        line: super::validate::line_of_nth_table_key(text, "[client]", 0, key),
        message,
    };
    let Some(program) = c.command.first().cloned() else {
        return Err(err(
            "command",
            "client.command is empty: expected the adapter's argv, e.g. [\"clients/kazoo/client.py\"]"
                .into(),
        ));
    };
    if c.token.trim().is_empty() {
        return Err(err(
            "token",
            "client.token is empty: expected \"token\" or a name from the answer's `tokens`".into(),
        ));
    }
    if find {
        let base = Path::new(file).parent().unwrap_or(Path::new("."));
        let found = find_program(&program, base).map_err(|why| err("command", why))?;
        c.command[0] = found.display().to_string();
        if let Some(files) = c.pod_files.as_mut() {
            for f in files.iter_mut() {
                *f = resolve_pod_file(f, base)
                    .map_err(|why| err("pod_files", why))?
                    .display()
                    .to_string();
            }
        }
    }
    // `[storage] token` names fencecheck's own client's tokens; an external
    // client's token is `[client] token`. Only "none" (send no token) applies.
    if !matches!(s.storage.token, TokenName::Grant | TokenName::None) {
        return Err(ScenarioError {
            file: file.to_string(),
            line: super::validate::line_of_nth_table_key(text, "[storage]", 0, "token"),
            message: format!(
                "storage.token = \"{}\" names a token of fencecheck's own client; with [client] \
                 the token sent is client.token (storage.token may only be \"none\")",
                s.storage.token.as_str()
            ),
        });
    }
    Ok(())
}

/// fencecheck's cache directory: `$FENCECHECK_CACHE`, else
/// `$XDG_CACHE_HOME/fencecheck`, else `~/.cache/fencecheck` — where
/// `ci/bootstrap.sh` puts the lock systems, clockshim and the shipped adapters'
/// runtimes, and what a `[client] pod_files` entry's `{cache}` names. Defined
/// here, with `{cache}`, because the config imports nothing of the crate; the
/// rest of the crate asks it here.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("FENCECHECK_CACHE") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("fencecheck");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
    PathBuf::from(home).join(".cache").join("fencecheck")
}

/// One `[client] pod_files` entry as the path it is copied from and to: a leading
/// `{cache}` is fencecheck's cache directory (where `ci/bootstrap.sh` makes the
/// shipped adapters' runtimes), a leading `~/` the home directory; an absolute
/// path stays as written (`/bin/sh` is at `/bin/sh` in the pod, even where this
/// machine's `/bin` is a link to `/usr/bin`); a relative one is resolved against
/// the scenario file's directory, links and `..` resolved, as the adapter's
/// launcher resolves its own path. It must exist.
fn resolve_pod_file(entry: &str, base: &Path) -> Result<PathBuf, String> {
    let p = if let Some(rest) = entry.strip_prefix("{cache}") {
        cache_dir().join(rest.trim_start_matches('/'))
    } else if let Some(rest) = entry.strip_prefix("~/") {
        match std::env::var_os("HOME") {
            Some(h) => PathBuf::from(h).join(rest),
            None => {
                return Err(format!(
                    "client.pod_files: {entry:?} names ~ and HOME is not set"
                ))
            }
        }
    } else {
        PathBuf::from(entry)
    };
    let p = if p.is_absolute() {
        p
    } else {
        std::fs::canonicalize(base.join(&p)).map_err(|_| {
            format!(
                "client.pod_files: {entry:?} ({}) does not exist",
                base.join(&p).display()
            )
        })?
    };
    if !p.exists() {
        return Err(format!(
            "client.pod_files: {} does not exist (expected a file or directory the adapter \
             needs in its pod)",
            p.display()
        ));
    }
    Ok(p)
}

/// `program` as an absolute path to an executable file.
fn find_program(program: &str, base: &Path) -> Result<PathBuf, String> {
    let candidates: Vec<PathBuf> = if program.contains('/') {
        let p = Path::new(program);
        vec![if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        }]
    } else {
        std::env::var_os("PATH")
            .map(|path| {
                std::env::split_paths(&path)
                    .map(|d| d.join(program))
                    .collect()
            })
            .unwrap_or_default()
    };
    for c in &candidates {
        if is_executable(c) {
            let abs = std::fs::canonicalize(c).unwrap_or_else(|_| c.clone());
            return Ok(abs);
        }
    }
    match candidates.as_slice() {
        [one] if one.exists() => Err(format!(
            "client command {} is not an executable file (chmod +x?)",
            one.display()
        )),
        [one] => Err(format!("client command {} does not exist", one.display())),
        _ => Err(format!("client command {program:?} is not on PATH")),
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::super::Scenario;

    #[test]
    fn missing_and_non_executable_commands_point_at_the_line() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("s.toml");
        let file = file.to_str().expect("utf-8");
        let text = "name = \"x\"\n[client]\ncommand = [\"./nope.py\"]\n";
        let e = Scenario::parse(text, file).unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("does not exist"), "{e}");

        std::fs::write(dir.path().join("plain.py"), "#!/bin/sh\n").expect("write");
        let text = "name = \"x\"\n[client]\ncommand = [\"./plain.py\"]\n";
        let e = Scenario::parse(text, file).unwrap_err();
        assert!(e.message.contains("not an executable"), "{e}");

        let e = Scenario::parse(
            "name = \"x\"\n[client]\ncommand = [\"no-such-fencecheck-client\"]\n",
            file,
        )
        .unwrap_err();
        assert!(e.message.contains("not on PATH"), "{e}");
    }

    /// A temporary directory with an executable `c/client.sh`.
    fn adapter_dir() -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::create_dir(dir.path().join("c")).expect("mkdir");
        let prog = dir.path().join("c/client.sh");
        std::fs::write(&prog, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        dir
    }

    #[test]
    fn relative_commands_resolve_against_the_scenario_file() {
        let dir = adapter_dir();
        let file = dir.path().join("s.toml");
        let text =
            "name = \"x\"\n[client]\ncommand = [\"c/client.sh\", \"--x\"]\nbehaviour = \"naive\"\n";
        let s = Scenario::parse(text, file.to_str().expect("utf-8")).expect("valid");
        let c = s.client.as_ref().expect("client");
        assert!(Path::new(&c.command[0]).is_absolute(), "{:?}", c.command);
        assert_eq!(c.command[1], "--x");
        assert_eq!(c.behaviour, crate::scenario::Behaviour::Naive);
        // PATH look-up for a bare name.
        let s = Scenario::parse("name = \"x\"\n[client]\ncommand = [\"sh\"]\n", "x.toml")
            .expect("sh is on PATH");
        assert!(s.client.expect("client").command[0].ends_with("sh"));
    }

    #[test]
    fn pod_files_resolve_and_a_missing_one_points_at_its_line() {
        let dir = adapter_dir();
        let file = dir.path().join("s.toml");
        let file = file.to_str().expect("utf-8");
        let text = "name = \"x\"\n[client]\ncommand = [\"c/client.sh\"]\n\
                    pod_files = [\"/bin/sh\", \"c\"]\n";
        let s = Scenario::parse(text, file).expect("valid");
        let files = s.client.expect("client").pod_files.expect("pod_files");
        assert_eq!(files[0], "/bin/sh", "an absolute path stays as written");
        let c = std::fs::canonicalize(dir.path().join("c")).expect("canonical");
        assert_eq!(files[1], c.display().to_string());
        // `{cache}` is fencecheck's cache directory (the error names where it looked).
        let e = super::resolve_pod_file("{cache}/no-such-adapter-runtime", dir.path()).unwrap_err();
        let want = super::cache_dir().join("no-such-adapter-runtime");
        assert!(e.contains(&want.display().to_string()), "{e}");

        let text = "name = \"x\"\n[client]\ncommand = [\"c/client.sh\"]\n\
                    pod_files = [\"/no/such/runtime\"]\n";
        let e = Scenario::parse(text, file).unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        assert!(e.message.contains("/no/such/runtime does not exist"), "{e}");
        let text = "name = \"x\"\n[client]\ncommand = [\"c/client.sh\"]\n\
                    pod_files = [\"lib/missing\"]\n";
        let e = Scenario::parse(text, file).unwrap_err();
        assert!(
            e.message.contains("\"lib/missing\"") && e.message.contains("does not exist"),
            "{e}"
        );
    }

    use std::path::Path;
}

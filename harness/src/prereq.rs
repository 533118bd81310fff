//! What a scenario needs installed on this machine, and the one command that
//! installs each: `ci/bootstrap.sh` installs per need (`--system`, `--fault`,
//! `--client`). Asked before anything starts (`plan::load_for`, for `scenario` and
//! `suite`; not `validate`, which judges the file alone), so a scenario whose lock
//! system, storage, fault or adapter is not installed is refused at its line with
//! exit 2 and the command, instead of failing minutes into a start.
//!
//! The checks are the files a run uses, as bootstrap's are; versions are checked by
//! each system when it starts. etcd is the exception: `fencecheck` fetches it itself
//! when it can (`systems::etcd::provision`), so it is missing only when it cannot.

use std::path::{Path, PathBuf};

use crate::scenario::{
    line_of_nth_table_key, ApiServer, EtcdVersion, FaultKind, Scenario, ScenarioError, ServiceKind,
    StorageKind,
};
use crate::systems::etcd::provision;

/// Where the table's files are looked up: `/` and fencecheck's cache on a real run;
/// a temporary directory in the tests.
#[derive(Debug, Clone)]
pub struct Places {
    /// Prefixed to every absolute path of the table (Debian's files).
    pub root: PathBuf,
    /// `{cache}` in the table: `$FENCECHECK_CACHE`, else `~/.cache/fencecheck`.
    pub cache: PathBuf,
}

impl Places {
    pub fn here() -> Places {
        Places {
            root: PathBuf::from("/"),
            cache: crate::scenario::cache_dir(),
        }
    }

    /// A table entry as a path: `{cache}/…`, `{adapter}/…` (the adapter's
    /// directory), or absolute under `root`.
    fn path(&self, entry: &str, adapter: &Path) -> PathBuf {
        if let Some(rest) = entry.strip_prefix("{cache}/") {
            self.cache.join(rest)
        } else if let Some(rest) = entry.strip_prefix("{adapter}/") {
            adapter.join(rest)
        } else {
            self.root.join(entry.trim_start_matches('/'))
        }
    }
}

/// A lock system or storage: what it is, the files it runs from, the flag.
struct System {
    what: &'static str,
    files: &'static [&'static str],
    flag: &'static str,
}

const ZOOKEEPER: System = System {
    what: "ZooKeeper 3.8 on JRE 17",
    files: &[
        "/usr/share/java/zookeeper.jar",
        "/usr/share/java/slf4j-simple.jar",
        "/usr/bin/java",
    ],
    flag: "--system zookeeper",
};
const REDIS: System = System {
    what: "Redis 7.0",
    files: &["/usr/bin/redis-server"],
    flag: "--system redis",
};
const KUBERNETES: System = System {
    what: "kube-apiserver 1.20.2",
    files: &["{cache}/kubernetes/bin/kube-apiserver"],
    flag: "--system kubernetes",
};
const POSTGRES: System = System {
    what: "PostgreSQL 15",
    files: &[
        "/usr/lib/postgresql/15/bin/postgres",
        "/usr/lib/postgresql/15/bin/initdb",
    ],
    flag: "--system postgres",
};
const CLOCKSHIM: System = System {
    what: "clockshim (the clock-jump fault's wall clock)",
    files: &["{cache}/clockshim/libclockshim.so"],
    flag: "--fault clock-jump",
};

/// The shipped adapters' runtimes (`clients/<name>/setup.sh` makes them). An
/// adapter not listed here needs its command to exist, as any `[client]` does.
const ADAPTERS: &[(&str, &[&str])] = &[
    (
        "curator",
        &[
            "{adapter}/classes/Client.class",
            "/usr/share/java/curator-recipes.jar",
        ],
    ),
    ("go-etcd-mutex", &["{adapter}/bin/go-etcd-mutex"]),
    ("go-leaderelection", &["{adapter}/bin/go-leaderelection"]),
    (
        "kazoo",
        &["/usr/lib/python3/dist-packages/kazoo/__init__.py"],
    ),
    (
        "python-etcd3",
        &[
            "/usr/lib/python3/dist-packages/etcd3/__init__.py",
            // PyPI's etcd3 0.12.0 for the `pypi` launcher (the `with` form).
            "{cache}/python-etcd3/venv/bin/python",
        ],
    ),
    (
        "python-leaselock",
        &["{cache}/python-leaselock/venv/bin/python"],
    ),
    (
        "python-redis-lock",
        &["{cache}/python-redis-lock/venv/bin/python"],
    ),
    (
        "redis-py",
        &["/usr/lib/python3/dist-packages/redis/__init__.py"],
    ),
    ("tooz", &["{cache}/tooz/venv/bin/python"]),
];

/// Refuses `s` when something it needs is not installed here: the first such
/// need, at the scenario line that asks for it, naming the command.
pub fn check(s: &Scenario) -> Result<(), ScenarioError> {
    check_in(s, &Places::here())
}

/// [`check`] against `places`.
pub fn check_in(s: &Scenario, places: &Places) -> Result<(), ScenarioError> {
    let service_at = |m: String| s.source.error_at_key("service", m);
    match (s.lock.service, s.lock.apiserver) {
        (ServiceKind::Etcd, _) => {
            let v = s.etcd_version();
            let flag = if v == EtcdVersion::V3_4 {
                " --system etcd"
            } else {
                ""
            };
            etcd(v, &format!("ci/bootstrap.sh{flag}"))
                .map_err(|m| s.source.error_at_key(version_key(s), m))?
        }
        (ServiceKind::Zookeeper, _) => system(&ZOOKEEPER, places).map_err(service_at)?,
        (ServiceKind::Redis | ServiceKind::Redlock, _) => {
            system(&REDIS, places).map_err(service_at)?
        }
        (ServiceKind::Kubernetes, ApiServer::Own) => {
            system(&KUBERNETES, places).map_err(service_at)?;
            etcd(EtcdVersion::V3_4, "ci/bootstrap.sh --system kubernetes").map_err(service_at)?;
        }
        // It elects on the cluster's own API server: nothing of this machine's.
        (ServiceKind::Kubernetes, ApiServer::Cluster) => {}
    }
    if s.storage.kind == StorageKind::Postgres {
        system(&POSTGRES, places).map_err(|m| at_table_key(s, "[storage]", "kind", m))?;
    }
    if let Some(i) = s.faults.iter().position(|f| f.kind == FaultKind::ClockJump) {
        system(&CLOCKSHIM, places).map_err(|m| s.source.error_at_fault(i, "kind", m))?;
    }
    if let Some(program) = s.client.as_ref().and_then(|c| c.command.first()) {
        adapter(Path::new(&s.source.file), program, places)
            .map_err(|m| at_table_key(s, "[client]", "command", m))?;
    }
    Ok(())
}

/// `[cluster] etcd` (or its name `version`) when the file sets it.
fn version_key(s: &Scenario) -> &'static str {
    if s.source.has_key("etcd") {
        "etcd"
    } else {
        "version"
    }
}

fn at_table_key(s: &Scenario, table: &str, key: &str, message: String) -> ScenarioError {
    ScenarioError {
        file: s.source.file.clone(),
        line: line_of_nth_table_key(&s.source.text, table, 0, key),
        message,
    }
}

fn install(what: &str, missing: &Path, command: &str) -> String {
    format!(
        "{what} is not installed ({} missing): run `{command}`",
        missing.display()
    )
}

fn system(sys: &System, places: &Places) -> Result<(), String> {
    for f in sys.files {
        let p = places.path(f, Path::new(""));
        if !p.exists() {
            let command = format!("ci/bootstrap.sh {}", sys.flag);
            return Err(install(sys.what, &p, &command));
        }
    }
    Ok(())
}

/// etcd is there (`provision::find`: `ETCD_BIN`, the cache, `PATH`,
/// `/usr/bin/etcd`), or `fencecheck` can fetch it: 3.5 with python3 (pip), 3.4
/// through apt-get as root.
fn etcd(want: EtcdVersion, command: &str) -> Result<(), String> {
    if provision::find(want).is_some() {
        return Ok(());
    }
    let fetchable = match want {
        EtcdVersion::V3_5 => on_path("python3"),
        EtcdVersion::V3_4 => nix::unistd::geteuid().is_root() && on_path("apt-get"),
    };
    if fetchable {
        return Ok(());
    }
    let how = match want {
        EtcdVersion::V3_5 => "no python3 to fetch it",
        EtcdVersion::V3_4 => "not root to apt-get install it",
    };
    Err(format!(
        "etcd {want} is not installed (none in ETCD_BIN, {}, PATH or /usr/bin/etcd, and \
         {how}): run `{command}`",
        crate::scenario::cache_dir()
            .join(format!("etcd-{want}/etcd"))
            .display()
    ))
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

/// A shipped adapter (a command under `clients/<name>/`, beside its `setup.sh`):
/// its runtime, else its command, is there. A command of the user's own is the
/// scenario's business (`[client]` checks it runs).
fn adapter(scenario_file: &Path, command: &str, places: &Places) -> Result<(), String> {
    let base = scenario_file.parent().unwrap_or(Path::new("."));
    let joined = base.join(command);
    let program = lexical(&std::path::absolute(&joined).unwrap_or(joined));
    let Some((name, dir)) = adapter_dir(&program) else {
        return Ok(());
    };
    let command = format!("ci/bootstrap.sh --client {name}");
    let what = format!("the {name} adapter");
    let files = ADAPTERS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f);
    let paths: Vec<PathBuf> = match files {
        Some(files) => files.iter().map(|f| places.path(f, &dir)).collect(),
        None => vec![program.clone()],
    };
    match paths.iter().find(|p| !p.exists()) {
        Some(p) => Err(install(&what, p, &command)),
        None => Ok(()),
    }
}

/// `p` with `.` and `..` taken out by name (the file may not exist yet, so no
/// `canonicalize`).
fn lexical(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// The adapter a program belongs to: the nearest directory above it that holds a
/// `setup.sh` and sits in a directory named `clients`.
fn adapter_dir(program: &Path) -> Option<(String, PathBuf)> {
    program.ancestors().skip(1).find_map(|d| {
        let name = d.file_name()?.to_string_lossy().into_owned();
        let in_clients = d.parent()?.file_name()? == "clients";
        (in_clients && d.join("setup.sh").is_file()).then(|| (name, d.to_path_buf()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scenario file at `dir/s.toml` with `text`, parsed as a recorded run's
    /// (its `[client]` command need not exist).
    fn scenario(dir: &Path, text: &str) -> Scenario {
        let file = dir.join("s.toml");
        std::fs::write(&file, text).expect("write");
        Scenario::load_recorded(&file).expect("parses")
    }

    fn places(dir: &Path) -> Places {
        Places {
            root: dir.join("root"),
            cache: dir.join("cache"),
        }
    }

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, "").expect("touch");
    }

    #[test]
    fn a_missing_system_is_refused_at_its_line_naming_the_command() {
        let dir = tempfile::tempdir().expect("tmp");
        let s = scenario(
            dir.path(),
            "name = \"zk\"\n\n[lock]\nservice = \"zookeeper\"\n",
        );
        let at = places(dir.path());
        let e = check_in(&s, &at).expect_err("nothing installed");
        let jar = at.root.join("usr/share/java/zookeeper.jar");
        assert_eq!(e.line, Some(4), "{e}");
        assert_eq!(
            e.message,
            format!(
                "ZooKeeper 3.8 on JRE 17 is not installed ({} missing): run \
                 `ci/bootstrap.sh --system zookeeper`",
                jar.display()
            )
        );
        for f in ZOOKEEPER.files {
            touch(&at.path(f, Path::new("")));
        }
        check_in(&s, &at).expect("installed now");
    }

    #[test]
    fn kubernetes_postgres_and_clock_jump_name_their_flags() {
        let dir = tempfile::tempdir().expect("tmp");
        let at = places(dir.path());
        let cases = [
            ("[lock]\nservice = \"kubernetes\"\n", "--system kubernetes", 3),
            ("[storage]\nkind = \"postgres\"\n", "--system postgres", 3),
            (
                "[lock]\nservice = \"redis\"\n[[fault]]\nkind = \"clock-jump\"\ntarget = \"member:0\"\nby = \"10s\"\nevery = \"5s\"\n",
                "--system redis",
                3,
            ),
        ];
        for (body, flag, line) in cases {
            let s = scenario(dir.path(), &format!("name = \"x\"\n{body}"));
            let e = check_in(&s, &at).expect_err(body);
            assert!(
                e.message
                    .ends_with(&format!("run `ci/bootstrap.sh {flag}`")),
                "{e}"
            );
            assert_eq!(e.line, Some(line), "{e}");
        }
        // Redis there, clockshim not: the fault's line and its own flag.
        touch(&at.path("/usr/bin/redis-server", Path::new("")));
        let (body, _, _) = cases[2];
        let e = check_in(&scenario(dir.path(), &format!("name = \"x\"\n{body}")), &at)
            .expect_err("no clockshim");
        assert!(e.message.contains("libclockshim.so missing"), "{e}");
        assert!(
            e.message.ends_with("`ci/bootstrap.sh --fault clock-jump`"),
            "{e}"
        );
        assert_eq!(e.line, Some(5), "{e}");
    }

    #[test]
    fn an_adapter_under_clients_names_its_client_flag() {
        let dir = tempfile::tempdir().expect("tmp");
        let at = places(dir.path());
        // Any directory under clients/ with a setup.sh is an adapter; one the
        // table does not know needs its command.
        touch(&dir.path().join("clients/mine/setup.sh"));
        let body = "[client]\ncommand = [\"clients/mine/bin/mine\"]\n";
        let s = scenario(dir.path(), &format!("name = \"x\"\n{body}"));
        let e = check_in(&s, &at).expect_err("not built");
        assert_eq!(e.line, Some(3), "{e}");
        assert_eq!(
            e.message,
            format!(
                "the mine adapter is not installed ({} missing): run \
                 `ci/bootstrap.sh --client mine`",
                dir.path().join("clients/mine/bin/mine").display()
            )
        );
        touch(&dir.path().join("clients/mine/bin/mine"));
        check_in(&s, &at).expect("built now");

        // A known one needs its runtime, not only its launcher.
        touch(&dir.path().join("clients/python-leaselock/setup.sh"));
        touch(&dir.path().join("clients/python-leaselock/python-leaselock"));
        let body = "[client]\ncommand = [\"clients/python-leaselock/python-leaselock\"]\n";
        let s = scenario(dir.path(), &format!("name = \"x\"\n{body}"));
        let e = check_in(&s, &at).expect_err("no venv");
        assert!(
            e.message
                .contains("python-leaselock/venv/bin/python missing"),
            "{e}"
        );
        assert!(
            e.message
                .ends_with("`ci/bootstrap.sh --client python-leaselock`"),
            "{e}"
        );

        // A command of the user's own, outside clients/: not this module's.
        let s = scenario(
            dir.path(),
            "name = \"x\"\n[client]\ncommand = [\"./mine.py\"]\n",
        );
        check_in(&s, &at).expect("not an adapter of clients/");
    }

    #[test]
    fn every_shipped_adapter_is_in_the_table() {
        let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients");
        for e in std::fs::read_dir(&clients).expect("clients/") {
            let dir = e.expect("entry").path();
            if dir.join("setup.sh").is_file() {
                let name = dir
                    .file_name()
                    .expect("name")
                    .to_string_lossy()
                    .into_owned();
                assert!(
                    ADAPTERS.iter().any(|(n, _)| *n == name),
                    "clients/{name} has a setup.sh and no row in ADAPTERS"
                );
            }
        }
    }
}

//! The plan step: a valid scenario × the lock system's declared capabilities ×
//! the backend's → the go-ahead, or an error with file:line. Asked once before
//! anything starts: by `validate`, `scenario` and `suite` for the backend the file
//! names (`auto`: what either backend can do), and by the run again once it has
//! chosen its backend. The scenario knows nothing of systems or backends; this is
//! where the three meet. Each fault kind decides its own availability
//! (`crate::nemesis::<kind>::available`).

use std::path::Path;

use crate::backend::caps;
use crate::nemesis::{self, Ask};
use crate::scenario::{BackendKind, FaultKind, Scenario, ScenarioError, ServiceKind, Target};
use crate::systems::Rules;

/// Is a fault available for a service on a backend?
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    Yes,
    No(String),
}

/// Whether `kind` on `target` can be done for `service` on `backend`. For `auto`,
/// what either backend can do.
pub fn available(
    service: ServiceKind,
    backend: BackendKind,
    kind: FaultKind,
    target: Target,
) -> Availability {
    let system = crate::systems::system(service).capabilities();
    let backend = caps::of(backend);
    let ask = Ask {
        service,
        system: &system,
        backend: &backend,
        kind,
        target,
    };
    match nemesis::available(&ask) {
        Ok(()) => Availability::Yes,
        Err(why) => Availability::No(why),
    }
}

/// Reads a scenario file and checks it against the backend it names: the file
/// alone (`validate`), not what this machine has installed.
pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
    let s = Scenario::load(path)?;
    check(&s, s.cluster.backend)?;
    Ok(s)
}

/// Reads a scenario file to run it and checks it against `backend` (`--backend`)
/// or, when none is given, the backend it names (a scenario that needs the
/// kubernetes backend runs with `--backend kubernetes` whatever its file says),
/// then that what it needs is installed here (`prereq`).
pub fn load_for(path: &Path, backend: Option<BackendKind>) -> Result<Scenario, ScenarioError> {
    // A shipped adapter not built yet fails the load (its command does not
    // exist); the command that builds it says more.
    let s = Scenario::load(path).map_err(|e| {
        let recorded = Scenario::load_recorded(path).ok();
        recorded
            .and_then(|r| crate::prereq::check(&r).err())
            .unwrap_or(e)
    })?;
    check(&s, backend.unwrap_or(s.cluster.backend))?;
    crate::prereq::check(&s)?;
    Ok(s)
}

/// Can `s` run on `backend`? The system must run there, and every fault must be
/// available; errors point at the scenario's own lines.
pub fn check(s: &Scenario, backend: BackendKind) -> Result<(), ScenarioError> {
    let svc = s.lock.service;
    (crate::systems::system(svc).rules().check)(s)?;
    settings_rules(s)?;
    if !s.lock.apiserver.is_own() && backend != BackendKind::Kubernetes {
        return Err(s.source.error_at_key(
            "apiserver",
            format!(
                "lock.apiserver = \"cluster\" elects on the kubernetes backend's cluster, and \
                 this run's backend is {}; expected backend = \"kubernetes\" (or --backend \
                 kubernetes)",
                backend.as_str()
            ),
        ));
    }
    if backend == BackendKind::Docker && !crate::systems::system(svc).runs_on_docker() {
        return Err(s.source.error_at_key(
            "backend",
            format!(
                "{svc} does not run on the docker backend yet; expected backend = \"process\" \
                 (or \"auto\", which runs it as processes)"
            ),
        ));
    }
    for (i, f) in s.faults.iter().enumerate() {
        if let Availability::No(why) = available(svc, backend, f.kind, f.target) {
            let message = format!("fault #{} ({}): {why}", i + 1, f.kind);
            return Err(s.source.error_at_fault(i, "kind", message));
        }
    }
    Ok(())
}

/// The `[lock]` settings and `[storage] token` names the scenario's system does
/// not have, refused at their lines, naming the systems that do (asked of each).
fn settings_rules(s: &Scenario) -> Result<(), ScenarioError> {
    let svc = s.lock.service;
    let own = crate::systems::system(svc).rules();
    let having = |has: &dyn Fn(&Rules) -> bool| -> String {
        let kinds: Vec<&str> = ServiceKind::ALL
            .iter()
            .filter(|k| has(crate::systems::system(**k).rules()))
            .map(|k| k.as_str())
            .collect();
        kinds.join(", ")
    };
    let err = |key: &str, message: String| s.source.error_at_key(key, message);
    if !own.elector_timing {
        for (key, set) in [
            ("renew_deadline", s.lock.renew_deadline.is_some()),
            ("retry_period", s.lock.retry_period.is_some()),
        ] {
            if set {
                let who = having(&|x| x.elector_timing);
                return Err(err(
                    key,
                    format!("lock.{key} is an elector's setting ({who}); {svc} has none"),
                ));
            }
        }
    }
    if !own.cluster_apiserver && !s.lock.apiserver.is_own() {
        let who = having(&|x| x.cluster_apiserver);
        return Err(err(
            "apiserver",
            format!("lock.apiserver is a setting of {who}; {svc} runs members of its own"),
        ));
    }
    if !own.persistence && s.lock.persistence.is_some() {
        let who = having(&|x| x.persistence);
        return Err(err(
            "persistence",
            format!("lock.persistence is a setting of {who}; {svc} keeps its data its own way"),
        ));
    }
    let t = s.storage.token;
    if s.client.is_none() && !own.tokens.contains(&t) {
        let who = having(&|x| x.tokens.contains(&t));
        let names: Vec<&str> = own.tokens.iter().map(|t| t.as_str()).collect();
        return Err(err(
            "token",
            format!(
                "storage.token = \"{}\" is not {svc}'s (it is {who}'s); {svc} has {}{}",
                t.as_str(),
                names.join(", "),
                own.tokens_why
            ),
        ));
    }
    Ok(())
}

/// For each system's own tests (in its folder): each case is
/// (backend, kind, target, None = available / Some(a word of why not)).
#[cfg(test)]
pub(crate) fn assert_available(
    service: ServiceKind,
    cases: &[(BackendKind, FaultKind, &str, Option<&str>)],
) {
    for &(backend, kind, target, why_not) in cases {
        let t = Target::try_from(target.to_string()).expect("target");
        let got = available(service, backend, kind, t);
        match (why_not, &got) {
            (None, Availability::Yes) => {}
            (Some(word), Availability::No(why)) if why.contains(word) => {}
            _ => panic!("{service} {backend:?} {kind} {target}: {got:?}, expected {why_not:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[lock] apiserver = "cluster"`: Kubernetes only, on the kubernetes backend
    /// only, with no members of the run's own and no fault aimed at the cluster's
    /// API server; each refusal at its line.
    #[test]
    fn electing_on_the_clusters_apiserver_is_refused_where_it_cannot_be() {
        let base = "name = \"x\"\n[lock]\nservice = \"kubernetes\"\napiserver = \"cluster\"\n\
                    ttl = \"3s\"\n";
        let pause = "\n[[fault]]\nkind = \"pause\"\ntarget = \"holder\"\nat = \"2s\"\n\
                     duration = \"4s\"\n";
        let s = Scenario::parse(&format!("{base}{pause}"), "c.toml").expect("valid");
        check(&s, BackendKind::Kubernetes).expect("a holder's pause on kubernetes");
        assert_eq!(
            s.member_count(),
            1,
            "the cluster's API server is the one member"
        );
        for b in [BackendKind::Process, BackendKind::Docker, BackendKind::Auto] {
            let e = check(&s, b).expect_err("not without the cluster");
            assert_eq!(e.line, Some(4), "{e}");
            assert!(e.message.contains("backend = \"kubernetes\""), "{e}");
        }
        let member = "\n[[fault]]\nkind = \"pause\"\ntarget = \"member:0\"\nat = \"2s\"\n\
                      duration = \"4s\"\n";
        let s = Scenario::parse(&format!("{base}{member}"), "m.toml").expect("parses");
        let e = check(&s, BackendKind::Kubernetes).expect_err("the cluster's is not ours");
        assert_eq!(e.line, Some(9), "{e}");
        assert!(e.message.contains("does not fault"), "{e}");
        let three = "name = \"x\"\n[cluster]\nmembers = 3\n[lock]\nservice = \"kubernetes\"\n\
                     apiserver = \"cluster\"\nttl = \"3s\"\n";
        let s = Scenario::parse(three, "3.toml").expect("parses");
        let e = check(&s, BackendKind::Kubernetes).expect_err("no members of its own");
        assert_eq!(e.line, Some(3), "{e}");
        let etcd = "name = \"x\"\n[lock]\napiserver = \"cluster\"\n";
        let s = Scenario::parse(etcd, "e.toml").expect("parses");
        let e = check(&s, BackendKind::Kubernetes).expect_err("etcd has no such setting");
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("kubernetes"), "{e}");
    }

    /// `--backend kubernetes` runs a file that names no backend (`auto`) but
    /// needs the kubernetes one, as the refusal tells the user to.
    #[test]
    fn the_backend_flag_is_what_a_file_is_loaded_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("c.toml");
        std::fs::write(
            &f,
            "name = \"x\"\n[lock]\nservice = \"kubernetes\"\napiserver = \"cluster\"\n",
        )
        .expect("write");
        let e = load(&f).expect_err("auto cannot elect on a cluster");
        assert!(e.message.contains("--backend kubernetes"), "{e}");
        let s = load_for(&f, Some(BackendKind::Kubernetes)).expect("with the flag");
        assert_eq!(
            s.cluster.backend,
            BackendKind::Auto,
            "the file is unchanged"
        );
        load_for(&f, Some(BackendKind::Process)).expect_err("nor on process");
    }

    #[test]
    fn storage_kill_runs_on_both_backends() {
        // The docker backend kills and starts its storage container like a member.
        let text = "name = \"x\"\n[[fault]]\nkind = \"kill\"\ntarget = \"storage\"\nat = \"2s\"\n";
        let s = Scenario::parse(text, "k.toml").expect("valid");
        for b in [BackendKind::Docker, BackendKind::Process, BackendKind::Auto] {
            check(&s, b).expect("either backend");
        }
    }

    #[test]
    fn a_fault_the_backend_cannot_do_points_at_its_kind() {
        let text = "name = \"x\"\n[cluster]\nmembers = 3\n\n[[fault]]\nkind = \"delay\"\n\
                    target = \"leader\"\nat = \"1s\"\nduration = \"1s\"\nlatency = \"5ms\"\n";
        let s = Scenario::parse(text, "d.toml").expect("valid");
        check(&s, BackendKind::Process).expect("process has peer proxies");
        check(&s, BackendKind::Auto).expect("auto: either backend");
        let e = check(&s, BackendKind::Docker).expect_err("docker cannot slow members");
        assert_eq!(e.line, Some(6), "{e}");
        assert!(e.message.starts_with("fault #1 (delay): "), "{e}");
        assert!(e.message.contains("peer proxies"), "{e}");
        // The kubernetes backend's members share the harness's network: its peer
        // proxies slow them as the process backend's do.
        check(&s, BackendKind::Kubernetes).expect("kubernetes has peer proxies");
    }

    #[test]
    fn a_member_clock_jump_is_refused_at_its_line_on_docker_only() {
        let text = "name = \"x\"\n[cluster]\nmembers = 3\n[lock]\nservice = \"redlock\"\n\
                    [storage]\nfencing = \"off\"\ntoken = \"none\"\n\n[[fault]]\n\
                    kind = \"clock-jump\"\ntarget = \"member:0\"\nat = \"1s\"\nby = \"10s\"\n";
        let s = Scenario::parse(text, "c.toml").expect("valid");
        check(&s, BackendKind::Process).expect("process steps clocks (clockshim)");
        check(&s, BackendKind::Kubernetes).expect("clockshim in the member pods");
        let e = check(&s, BackendKind::Docker).expect_err("no clockshim in containers");
        assert_eq!(e.line, Some(11), "{e}");
        assert!(e.message.starts_with("fault #1 (clock-jump): "), "{e}");
        // Pause and kill of members are the in-pod agent's.
        let text = "name = \"x\"\n[cluster]\nmembers = 3\n\n[[fault]]\nkind = \"kill\"\n\
                    target = \"leader\"\nat = \"1s\"\n";
        let s = Scenario::parse(text, "k.toml").expect("valid");
        check(&s, BackendKind::Kubernetes).expect("the agent kills");
    }

    #[test]
    fn backend_names_round_trip() {
        for b in [
            BackendKind::Auto,
            BackendKind::Process,
            BackendKind::Docker,
            BackendKind::Kubernetes,
        ] {
            assert_eq!(b.as_str().parse::<BackendKind>(), Ok(b));
        }
        let e = "k3s".parse::<BackendKind>().expect_err("unknown");
        assert!(e.contains("kubernetes"), "{e}");
    }
}

//! The `process` backend: etcd and the storage as local processes on loopback ports,
//! their data and logs inside the run directory.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use super::Deployment;
use crate::etcd;
use crate::proc::{free_port, poll_until, spawn, Child};
use crate::scenario::Scenario;

const READY_DEADLINE: Duration = Duration::from_secs(30);
const HOST: &str = "127.0.0.1";

pub struct ProcessBackend {
    etcd: Vec<Child>,
    storage: Option<Child>,
}

impl ProcessBackend {
    pub async fn start(
        scenario: &Scenario,
        run_dir: &Path,
        say: &dyn Fn(&str),
    ) -> Result<(ProcessBackend, Deployment)> {
        let want = scenario.cluster.etcd;
        let bin = tokio::task::block_in_place(|| etcd::find_or_provision(want, say))?;
        say(&format!(
            "starting etcd {} ({}) and the storage service",
            bin.version,
            bin.path.display()
        ));
        let mut backend = ProcessBackend {
            etcd: Vec::new(),
            storage: None,
        };

        let client_port = free_port(HOST)?;
        let peer_port = free_port(HOST)?;
        let client_url = format!("http://{HOST}:{client_port}");
        let peer_url = format!("http://{HOST}:{peer_port}");
        let mut cmd = std::process::Command::new(&bin.path);
        cmd.arg("--name")
            .arg("m0")
            .arg("--data-dir")
            .arg(run_dir.join("etcd-0.data"))
            .arg("--listen-client-urls")
            .arg(&client_url)
            .arg("--advertise-client-urls")
            .arg(&client_url)
            .arg("--listen-peer-urls")
            .arg(&peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer_url)
            .arg("--initial-cluster")
            .arg(format!("m0={peer_url}"))
            .arg("--initial-cluster-state")
            .arg("new")
            .arg("--logger")
            .arg("zap");
        backend
            .etcd
            .push(spawn("etcd m0", cmd, &run_dir.join("etcd-0.log"))?);

        let storage_port = free_port(HOST)?;
        let storage_url = format!("http://{HOST}:{storage_port}");
        let exe = std::env::current_exe().context("cannot find the fencecheck binary")?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("storage")
            .arg("--listen")
            .arg(format!("{HOST}:{storage_port}"))
            .arg("--log")
            .arg(run_dir.join("storage.jsonl"))
            .arg("--fencing")
            .arg(fencing_arg(scenario));
        backend.storage = Some(spawn("storage", cmd, &run_dir.join("storage.log"))?);

        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()?;
        let etcd_health = format!("{client_url}/health");
        let etcd_log = run_dir.join("etcd-0.log");
        let ready = poll_until("etcd", READY_DEADLINE, || {
            let http = http.clone();
            let url = etcd_health.clone();
            async move {
                match http.get(&url).send().await {
                    Ok(r) => r.text().await.is_ok_and(|t| t.contains("true")),
                    Err(_) => false,
                }
            }
        })
        .await;
        if let Err(e) = ready {
            backend.stop().await;
            return Err(e.context(format!("see {}", etcd_log.display())));
        }
        let storage_health = format!("{storage_url}/health");
        let ready = poll_until("storage", READY_DEADLINE, || {
            let http = http.clone();
            let url = storage_health.clone();
            async move {
                http.get(&url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
            }
        })
        .await;
        if let Err(e) = ready {
            backend.stop().await;
            return Err(e.context(format!("see {}", run_dir.join("storage.log").display())));
        }
        let deployment = Deployment {
            etcd_endpoints: vec![client_url],
            storage_url,
            etcd_version: bin.version.clone(),
            backend: "process".into(),
            backend_reason: String::new(),
        };
        Ok((backend, deployment))
    }

    pub async fn stop(&mut self) {
        if let Some(mut s) = self.storage.take() {
            s.stop(Duration::from_secs(2)).await;
        }
        for mut e in self.etcd.drain(..) {
            e.stop(Duration::from_secs(5)).await;
        }
    }
}

fn fencing_arg(s: &Scenario) -> &'static str {
    match s.storage.fencing {
        crate::scenario::Fencing::Monotonic => "monotonic",
        crate::scenario::Fencing::Exact => "exact",
        crate::scenario::Fencing::Off => "off",
    }
}

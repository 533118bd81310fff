//! Just enough of the Docker engine API for the reaper: HTTP/1.0 over the unix
//! socket (no chunked bodies to decode), unversioned paths (the engine answers at
//! its own API version), JSON through serde_json.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use serde_json::Value;

pub struct Docker {
    socket: String,
}

/// What one reap pass saw and did.
pub struct Pass {
    /// Objects with the label (spared ones not counted).
    pub found: usize,
    pub removed: usize,
}

impl Docker {
    pub fn new(socket: &str) -> Docker {
        Docker {
            socket: socket.to_string(),
        }
    }

    fn request(&self, method: &str, path: &str) -> Result<(u16, Vec<u8>), String> {
        let mut s = UnixStream::connect(&self.socket)
            .map_err(|e| format!("cannot connect to {}: {e}", self.socket))?;
        let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
        let req = format!("{method} {path} HTTP/1.0\r\nHost: docker\r\nContent-Length: 0\r\n\r\n");
        s.write_all(req.as_bytes())
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| format!("{method} {path}: no HTTP header in the answer"))?;
        let head = String::from_utf8_lossy(&raw[..split]);
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("{method} {path}: bad status line {head:?}"))?;
        Ok((status, raw[split + 4..].to_vec()))
    }

    fn list(&self, path: &str, label: &str) -> Result<Value, String> {
        let filters = format!(r#"{{"label":[{}]}}"#, Value::String(label.into()));
        let sep = if path.contains('?') { '&' } else { '?' };
        let (status, body) =
            self.request("GET", &format!("{path}{sep}filters={}", encode(&filters)))?;
        if status != 200 {
            return Err(format!(
                "GET {path}: {status} {}",
                String::from_utf8_lossy(&body).trim()
            ));
        }
        serde_json::from_slice(&body).map_err(|e| format!("GET {path}: {e}"))
    }

    /// `DELETE`, counting "gone already" as done.
    fn delete(&self, what: &str, path: &str) -> Result<(), String> {
        let (status, body) = self.request("DELETE", path)?;
        match status {
            200..=299 | 404 => Ok(()),
            _ => Err(format!(
                "removing {what}: {status} {}",
                String::from_utf8_lossy(&body).trim()
            )),
        }
    }

    /// Removes (forced) every container whose name contains `needle` and does not
    /// contain `spare`; returns their names. Kubelet's dockershim names a pod's
    /// containers `k8s_<container>_<pod>_<namespace>_<uid>_<n>`.
    pub fn remove_named(&self, needle: &str, spare: Option<&str>) -> Result<Vec<String>, String> {
        let filters = format!(r#"{{"name":[{}]}}"#, Value::String(needle.into()));
        let path = format!("/containers/json?all=1&filters={}", encode(&filters));
        let (status, body) = self.request("GET", &path)?;
        if status != 200 {
            return Err(format!(
                "GET /containers/json: {status} {}",
                String::from_utf8_lossy(&body).trim()
            ));
        }
        let list: Value =
            serde_json::from_slice(&body).map_err(|e| format!("GET /containers/json: {e}"))?;
        let mut removed = Vec::new();
        for c in list.as_array().into_iter().flatten() {
            let name = c["Names"][0].as_str().unwrap_or("").trim_start_matches('/');
            if !name.contains(needle) || spare.is_some_and(|s| name.contains(s)) {
                continue;
            }
            let Some(id) = c["Id"].as_str() else { continue };
            self.delete(name, &format!("/containers/{id}?force=1&v=1"))?;
            removed.push(name.to_string());
        }
        Ok(removed)
    }

    /// One pass over containers, then volumes, then networks with `label`.
    pub fn reap_pass(&self, label: &str, spare: Option<&str>) -> Result<Pass, String> {
        let mut pass = Pass {
            found: 0,
            removed: 0,
        };
        let mut errors = Vec::new();
        let containers = self.list("/containers/json?all=1", label)?;
        for c in containers.as_array().into_iter().flatten() {
            let Some(id) = c["Id"].as_str() else { continue };
            if spare.is_some_and(|s| has_label(c, s)) {
                continue;
            }
            pass.found += 1;
            // A frozen container is thawed first, so nothing is ever left paused.
            let _ = self.request("POST", &format!("/containers/{id}/unpause"));
            match self.delete(
                &format!("container {id}"),
                &format!("/containers/{id}?force=1&v=1"),
            ) {
                Ok(()) => pass.removed += 1,
                Err(e) => errors.push(e),
            }
        }
        let volumes = self.list("/volumes", label)?;
        for v in volumes["Volumes"].as_array().into_iter().flatten() {
            let Some(name) = v["Name"].as_str() else {
                continue;
            };
            pass.found += 1;
            match self.delete(
                &format!("volume {name}"),
                &format!("/volumes/{}?force=1", encode(name)),
            ) {
                Ok(()) => pass.removed += 1,
                Err(e) => errors.push(e),
            }
        }
        let networks = self.list("/networks", label)?;
        for n in networks.as_array().into_iter().flatten() {
            let Some(id) = n["Id"].as_str() else { continue };
            pass.found += 1;
            match self.delete(&format!("network {id}"), &format!("/networks/{id}")) {
                Ok(()) => pass.removed += 1,
                Err(e) => errors.push(e),
            }
        }
        for e in &errors {
            eprintln!("fencecheck-reaper: {e}");
        }
        Ok(pass)
    }
}

/// Whether a listed container carries `key=value`.
fn has_label(c: &Value, kv: &str) -> bool {
    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
    c["Labels"][k].as_str() == Some(v)
}

/// Percent-encoding of a query value.
fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(
            encode(r#"{"label":["fencecheck.run=fc1"]}"#),
            "%7B%22label%22%3A%5B%22fencecheck.run%3Dfc1%22%5D%7D"
        );
    }

    #[test]
    fn spared_by_label() {
        let c: Value = serde_json::json!({"Labels": {"fencecheck.role": "reaper"}});
        assert!(has_label(&c, "fencecheck.role=reaper"));
        assert!(!has_label(&c, "fencecheck.role=etcd"));
    }
}

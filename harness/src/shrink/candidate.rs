//! Candidates are edits of the scenario's own TOML table (the `toml` crate's
//! table API), not re-renderings of the parsed `Scenario`: the `[expect]` table,
//! and any field this module does not know, stay exactly as written.

use std::time::Duration;

use toml::{Table, Value};

use crate::scenario::{Scenario, ScenarioError};

/// The fields of a `[[fault]]` table that say how long or how far, in the order
/// they are shortened.
pub const SHORTENED: [&str; 4] = ["duration", "restart_after", "latency", "by"];

/// The `[[fault]]` tables, in order.
pub fn faults(doc: &Table) -> Vec<Table> {
    doc.get("fault")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_table().cloned()).collect())
        .unwrap_or_default()
}

/// `doc` with exactly these `[[fault]]` tables.
pub fn with_faults(doc: &Table, faults: &[Table]) -> Table {
    let mut d = doc.clone();
    if faults.is_empty() {
        d.remove("fault");
    } else {
        let arr = faults.iter().cloned().map(Value::Table).collect();
        d.insert("fault".into(), Value::Array(arr));
    }
    d
}

/// `doc` keeping only the fault tables at `keep` (indices into [`faults`]).
pub fn keep_faults(doc: &Table, keep: &[usize]) -> Table {
    let all = faults(doc);
    let kept: Vec<Table> = keep.iter().filter_map(|&i| all.get(i).cloned()).collect();
    with_faults(doc, &kept)
}

/// A duration as a scenario writes it: whole seconds as `4s`, else milliseconds,
/// else microseconds.
pub fn fmt_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d.as_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}us", d.as_micros())
    }
}

/// A duration field of a table, if set and readable.
pub fn duration_of(t: &Table, key: &str) -> Option<Duration> {
    humantime::parse_duration(t.get(key)?.as_str()?).ok()
}

/// Sets a duration field.
pub fn set_duration(t: &mut Table, key: &str, d: Duration) {
    t.insert(key.into(), Value::String(fmt_duration(d)));
}

/// The typed, validated scenario of a candidate (`label` names it in errors).
pub fn typed(doc: &Table, label: &str) -> Result<Scenario, ScenarioError> {
    Scenario::parse(&render(doc), label)
}

/// The TOML text of a candidate, in the order a scenario is written (the
/// `toml` crate's table sorts its keys): name, description, duration, seed, the
/// sections, the faults (kind and target first), `[expect]` last.
pub fn render(doc: &Table) -> String {
    const TOP: [&str; 4] = ["name", "description", "duration", "seed"];
    const SECTIONS: [&str; 6] = [
        "cluster", "lock", "storage", "workload", "client", "network",
    ];
    const FAULT: [&str; 5] = ["kind", "target", "at", "every", "jitter"];
    let is_section = |v: &Value| {
        v.is_table()
            || v.as_array()
                .is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_table))
    };
    let mut out = String::new();
    let rank = |order: &[&str], k: &str| order.iter().position(|t| *t == k).unwrap_or(order.len());
    let mut scalars: Vec<(&String, &Value)> = doc.iter().filter(|(_, v)| !is_section(v)).collect();
    scalars.sort_by_key(|(k, _)| rank(&TOP, k));
    for (k, v) in scalars {
        out.push_str(&one(k, v));
    }
    let mut sections: Vec<(&String, &Value)> = doc.iter().filter(|(_, v)| is_section(v)).collect();
    let place = |k: &str| match k {
        "fault" => SECTIONS.len() + 1,
        "expect" => SECTIONS.len() + 2,
        k => rank(&SECTIONS, k),
    };
    sections.sort_by_key(|(k, _)| place(k));
    for (k, v) in sections {
        let flat = |t: &Table| t.values().all(|v| !is_section(v));
        match v.as_array() {
            Some(tables) if k == "fault" && tables.iter().filter_map(Value::as_table).all(flat) => {
                for t in tables.iter().filter_map(Value::as_table) {
                    out.push_str("\n[[fault]]\n");
                    let mut keys: Vec<(&String, &Value)> = t.iter().collect();
                    keys.sort_by_key(|(k, _)| rank(&FAULT, k));
                    for (k, v) in keys {
                        out.push_str(&one(k, v));
                    }
                }
            }
            _ => {
                let mut t = Table::new();
                t.insert(k.clone(), v.clone());
                out.push('\n');
                out.push_str(
                    &toml::to_string_pretty(&t)
                        .unwrap_or_else(|e| format!("# could not render: {e}\n")),
                );
            }
        }
    }
    out
}

/// `key = value`, one line.
fn one(k: &str, v: &Value) -> String {
    let mut t = Table::new();
    t.insert(k.to_string(), v.clone());
    toml::to_string(&t).unwrap_or_else(|e| format!("# could not render {k}: {e}\n"))
}

/// Every repeating (`every`) fault turned into its single injections, each an
/// `at` fault, as the schedule for `seed` places them — so that one injection
/// can be dropped without the others. `None` when no fault repeats. The flag
/// says whether a repeating fault had `jitter` (its times then depend on the
/// seed, so the expanded scenario is a different one and must be tested).
pub fn expand(doc: &Table, s: &Scenario, seed: u64) -> Option<(Table, bool)> {
    let tables = faults(doc);
    if !tables.iter().any(|t| t.contains_key("every")) {
        return None;
    }
    let plan = crate::nemesis::plan(s, seed);
    let mut jittered = false;
    let mut out = Vec::new();
    for (i, t) in tables.iter().enumerate() {
        if !t.contains_key("every") {
            out.push(t.clone());
            continue;
        }
        jittered |= t.get("jitter").and_then(Value::as_bool).unwrap_or(false);
        // A repeating fault that never fits in the run plans nothing: it goes.
        for p in plan.iter().filter(|p| p.spec == i) {
            let mut one = t.clone();
            one.remove("every");
            one.remove("jitter");
            set_duration(&mut one, "at", p.at);
            out.push(one);
        }
    }
    Some((with_faults(doc, &out), jittered))
}

/// `doc` with `[workload] key = n`.
pub fn with_workload(doc: &Table, key: &str, n: u32) -> Table {
    let mut d = doc.clone();
    let w = d
        .entry("workload")
        .or_insert_with(|| Value::Table(Table::new()));
    if let Value::Table(w) = w {
        w.insert(key.into(), Value::Integer(i64::from(n)));
    }
    if key == "workers" {
        keep_network_workers_below(&mut d, n);
    }
    d
}

/// `[[network.unreachable]]` names workers by number: with fewer workers, the
/// ones gone leave its lists (and an entry with none left goes), so the
/// candidate is still a valid scenario, set in what is left of the same network.
fn keep_network_workers_below(doc: &mut Table, n: u32) {
    let Some(Value::Table(net)) = doc.get_mut("network") else {
        return;
    };
    let Some(Value::Array(entries)) = net.get_mut("unreachable") else {
        return;
    };
    for e in entries.iter_mut() {
        if let Some(Value::Array(ws)) = e.get_mut("workers") {
            ws.retain(|w| w.as_integer().is_some_and(|w| w < i64::from(n)));
        }
    }
    entries.retain(|e| {
        e.get("workers")
            .and_then(Value::as_array)
            .is_some_and(|ws| !ws.is_empty())
    });
    if entries.is_empty() {
        doc.remove("network");
    }
}

/// `doc` with the run's `duration`.
pub fn with_run_duration(doc: &Table, d: Duration) -> Table {
    let mut out = doc.clone();
    set_duration(&mut out, "duration", d);
    out
}

/// `doc` with fault `i`'s `key` set to `d`.
pub fn with_fault_duration(doc: &Table, i: usize, key: &str, d: Duration) -> Table {
    let mut all = faults(doc);
    if let Some(t) = all.get_mut(i) {
        set_duration(t, key, d);
    }
    with_faults(doc, &all)
}

/// When the last planned fault of `s` (seeded `seed`) ends, from the run's start.
pub fn last_fault_end(s: &Scenario, seed: u64) -> Option<Duration> {
    crate::nemesis::plan(s, seed)
        .iter()
        .map(|p| p.at + p.duration)
        .max()
}

/// Rounds up to a tenth of a second, the precision a shrunk file is written in.
pub fn round_up(d: Duration) -> Duration {
    let tenth = 100_000_000u128;
    let n = d.as_nanos().div_ceil(tenth) * tenth;
    Duration::from_nanos(n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
name = "heap"
duration = "12s"
seed = 3

[lock]
ttl = "2s"

[storage]
fencing = "off"
token = "revision"

[workload]
workers = 4

[[fault]]
kind = "pause"
target = "holder"
every = "4s"
duration = "2500ms"

[[fault]]
kind = "delay"
target = "workers->storage"
at = "1s"
duration = "1s"
latency = "1ms"

[expect]
fencing_violations = 0
mutex_overlaps = "any"
"#;

    fn doc() -> Table {
        toml::from_str(TEXT).expect("toml")
    }

    #[test]
    fn expanding_a_repeating_fault_gives_its_planned_injections_as_at_faults() {
        let s = typed(&doc(), "heap.toml").expect("valid");
        let (d, jittered) = expand(&doc(), &s, 3).expect("something repeats");
        assert!(!jittered);
        let f = faults(&d);
        // every 4s in a 12s run: 4 and 8 (12 does not fit); the delay stays.
        let ats: Vec<Option<Duration>> = f.iter().map(|t| duration_of(t, "at")).collect();
        assert_eq!(
            ats,
            vec![
                Some(Duration::from_secs(4)),
                Some(Duration::from_secs(8)),
                Some(Duration::from_secs(1))
            ]
        );
        assert!(f.iter().all(|t| !t.contains_key("every")));
        let e = typed(&d, "expanded.toml").expect("the expansion validates");
        // The same schedule as before, injection by injection.
        let before: Vec<_> = crate::nemesis::plan(&s, 3)
            .iter()
            .map(|p| (p.at, p.kind))
            .collect();
        let after: Vec<_> = crate::nemesis::plan(&e, 3)
            .iter()
            .map(|p| (p.at, p.kind))
            .collect();
        assert_eq!(before, after);
        assert!(expand(&d, &e, 3).is_none(), "nothing repeats any more");
    }

    #[test]
    fn edits_keep_expect_and_unknown_tables_as_written() {
        let d = keep_faults(&doc(), &[1]);
        let d = with_workload(&d, "workers", 2);
        let d = with_run_duration(&d, Duration::from_millis(5500));
        let d = with_fault_duration(&d, 0, "duration", Duration::from_millis(500));
        let text = render(&d);
        let s = Scenario::parse(&text, "edited.toml").expect("valid");
        assert_eq!(s.faults.len(), 1);
        assert_eq!(s.workload.workers, 2);
        assert_eq!(s.duration, Duration::from_millis(5500));
        assert_eq!(s.faults[0].duration(), Some(Duration::from_millis(500)));
        assert_eq!(d.get("expect"), doc().get("expect"));
        assert!(text.contains("mutex_overlaps = \"any\""), "{text}");
        assert!(with_faults(&d, &[]).get("fault").is_none());
        // Written in the order a scenario is: name first, faults kind first, expect last.
        assert!(
            text.starts_with("name = \"heap\"\nduration = \"5500ms\"\nseed = 3\n"),
            "{text}"
        );
        assert!(
            text.contains("[[fault]]\nkind = \"delay\"\ntarget = "),
            "{text}"
        );
        let expect = text.find("[expect]").expect("expect");
        assert!(text.find("[[fault]]").expect("fault") < expect, "{text}");
        assert!(text.find("[workload]").expect("workload") < text.find("[[fault]]").expect("f"));
    }

    #[test]
    fn fewer_workers_take_their_links_out_of_the_network() {
        let text = "name = \"n\"\n[cluster]\nmembers = 3\n[lock]\nservice = \"redlock\"\n\
                    [workload]\nworkers = 5\n\
                    [[network.unreachable]]\nworkers = [0, 1]\nmembers = [2]\n\
                    [[network.unreachable]]\nworkers = [2, 3, 4]\nmembers = [1]\n";
        let doc: Table = toml::from_str(text).expect("toml");
        let s = typed(&with_workload(&doc, "workers", 3), "c").expect("valid with 3");
        assert_eq!(s.network.cut_links(), vec![(0, 2), (1, 2), (2, 1)]);
        let s = typed(&with_workload(&doc, "workers", 2), "c").expect("valid with 2");
        assert_eq!(s.network.cut_links(), vec![(0, 2), (1, 2)]);
        let d = with_workload(&with_workload(&doc, "workers", 2), "workers", 0);
        assert!(d.get("network").is_none(), "{d:?}");
    }

    #[test]
    fn durations_are_written_as_a_scenario_writes_them() {
        assert_eq!(fmt_duration(Duration::from_secs(4)), "4s");
        assert_eq!(fmt_duration(Duration::from_millis(2250)), "2250ms");
        assert_eq!(fmt_duration(Duration::from_micros(1500)), "1500us");
        assert_eq!(
            round_up(Duration::from_millis(4010)),
            Duration::from_millis(4100)
        );
        assert_eq!(round_up(Duration::from_secs(4)), Duration::from_secs(4));
    }
}

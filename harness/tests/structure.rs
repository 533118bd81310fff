//! The structure `docs/architecture.md` ("Layers and circles") states, kept true:
//! every file of `harness/src` is read, every path it names of the crate is
//! collected (`use crate::…`, `super::…`, `self::…`, a child module's name, a
//! module a `use` brought in, and the same inline), and the rules are asserted
//! over the file graph that makes:
//!
//! - no circle of files larger than two, and a circle of two only inside one
//!   folder;
//! - `scenario/` imports nothing of the crate;
//! - `check/` imports of the crate only `record/` and `scenario/`, and of the
//!   workspace only `lincheck`, `reports` (the result types) and `storage` (the
//!   storage log's records);
//! - `record/` imports of the crate only `scenario/`;
//! - the worker's side (`systems/`, `resources/`, `worker`) imports nothing of
//!   the report and the commands above it;
//! - nothing in the library imports `cli.rs`.
//!
//! A file naming its own descendants (a folder's `mod.rs` dispatching to, or
//! re-exporting, its children) is the module tree, not an import: a child's
//! use of its parent is then not a circle. `#[cfg(test)]` items are left out:
//! the rules are about what the binary is made of. A failure names the file, the
//! line and the import.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// One path of the crate named by a file.
#[derive(Debug, Clone)]
struct Import {
    /// The file that names it, relative to `harness/src`.
    from: String,
    /// The file the path leads into.
    to: String,
    /// The path as resolved from the crate root.
    path: String,
    line: usize,
}

/// A module's path from the crate root (`systems/etcd/mod.rs` → `systems::etcd`).
fn module_of(rel: &str) -> Vec<String> {
    let mut segs: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if segs.last().is_some_and(|s| s == "mod") {
        segs.pop();
    }
    if segs == ["lib"] {
        segs.clear();
    }
    segs
}

/// `src` with comments, and the insides of string and character literals, as
/// spaces (newlines kept, so lines still count).
fn blank(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out: Vec<char> = c.clone();
    let wipe = |out: &mut Vec<char>, from: usize, to: usize| {
        for x in out.iter_mut().take(to.min(c.len())).skip(from) {
            if *x != '\n' {
                *x = ' ';
            }
        }
    };
    let ident = |i: usize| i < c.len() && (c[i].is_alphanumeric() || c[i] == '_');
    let mut i = 0;
    while i < c.len() {
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            let end = (i..c.len()).find(|&j| c[j] == '\n').unwrap_or(c.len());
            wipe(&mut out, i, end);
            i = end;
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let (mut depth, mut j) = (1, i + 2);
            while j < c.len() && depth > 0 {
                if c[j] == '/' && c.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 1;
                } else if c[j] == '*' && c.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 1;
                }
                j += 1;
            }
            wipe(&mut out, i, j);
            i = j;
        } else if c[i] == 'r' && !(i > 0 && ident(i - 1) && c[i - 1] != 'b') && {
            let mut j = i + 1;
            while c.get(j) == Some(&'#') {
                j += 1;
            }
            c.get(j) == Some(&'"')
        } {
            // r"…", r#"…"#: ends at the quote followed by as many hashes.
            let hashes = (i + 1..c.len()).take_while(|&j| c[j] == '#').count();
            let start = i + 1 + hashes + 1;
            let mut j = start;
            while j < c.len() {
                if c[j] == '"' && (1..=hashes).all(|k| c.get(j + k) == Some(&'#')) {
                    break;
                }
                j += 1;
            }
            wipe(&mut out, start, j);
            i = j + 1 + hashes;
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            wipe(&mut out, i + 1, j);
            i = j + 1;
        } else if c[i] == '\'' {
            // A character literal ('x', '\n', '\u{..}'), else a lifetime.
            if c.get(i + 1) == Some(&'\\') {
                let j = (i + 2..c.len()).find(|&j| c[j] == '\'').unwrap_or(c.len());
                wipe(&mut out, i + 1, j);
                i = j + 1;
            } else if c.get(i + 2) == Some(&'\'') {
                wipe(&mut out, i + 1, i + 2);
                i += 3;
            } else {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// `src` (blanked) without its `#[cfg(test)]` items.
fn without_tests(src: &str) -> String {
    let mut s: Vec<char> = src.chars().collect();
    let at: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + at.len() <= s.len() {
        if s[i..i + at.len()] != at[..] {
            i += 1;
            continue;
        }
        // The item: to its first `;`, or through the block its first `{` opens.
        let mut j = i + at.len();
        while j < s.len() && s[j] != ';' && s[j] != '{' {
            j += 1;
        }
        if j < s.len() && s[j] == '{' {
            let mut depth = 0;
            while j < s.len() {
                match s[j] {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            // `use a::{b, c};`: its `;` too.
            let mut k = j + 1;
            while k < s.len() && s[k].is_whitespace() {
                k += 1;
            }
            if s.get(k) == Some(&';') {
                j = k;
            }
        }
        for x in s.iter_mut().take((j + 1).min(src.len())).skip(i) {
            if *x != '\n' {
                *x = ' ';
            }
        }
        i = j + 1;
    }
    s.into_iter().collect()
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Path, // `::`
    Punct(char),
}

fn tokens(src: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let word = word.strip_prefix("r#").map(String::from).unwrap_or(word);
            out.push((Tok::Ident(word), line));
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push((Tok::Path, line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// The paths of a `use` tree starting at `toks[*i]`, each with the name it
/// brings into scope; `*i` ends past the tree.
fn use_tree(
    toks: &[(Tok, usize)],
    i: &mut usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, String)>,
) {
    let mut path = prefix.to_vec();
    if toks.get(*i).map(|t| &t.0) == Some(&Tok::Path) {
        *i += 1;
    }
    loop {
        match toks.get(*i).map(|t| &t.0) {
            Some(Tok::Ident(w)) => {
                path.push(w.clone());
                *i += 1;
                if toks.get(*i).map(|t| &t.0) == Some(&Tok::Path) {
                    *i += 1;
                    continue;
                }
                let mut name = w.clone();
                if toks.get(*i).map(|t| &t.0) == Some(&Tok::Ident("as".into())) {
                    if let Some((Tok::Ident(n), _)) = toks.get(*i + 1) {
                        name = n.clone();
                    }
                    *i += 2;
                }
                if name == "self" {
                    path.pop();
                    name = path.last().cloned().unwrap_or_default();
                }
                out.push((path, name));
                return;
            }
            Some(Tok::Punct('{')) => {
                *i += 1;
                while *i < toks.len() && toks[*i].0 != Tok::Punct('}') {
                    use_tree(toks, i, &path, out);
                    if toks.get(*i).map(|t| &t.0) == Some(&Tok::Punct(',')) {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            Some(Tok::Punct('*')) => {
                *i += 1;
                out.push((path, String::new()));
                return;
            }
            _ => return,
        }
    }
}

/// Every import of the crate in `files` (path relative to `src` → source).
fn imports(files: &BTreeMap<String, String>) -> Vec<Import> {
    let modules: HashMap<Vec<String>, String> = files
        .keys()
        .filter(|f| *f != "main.rs")
        .map(|f| (module_of(f), f.clone()))
        .collect();
    let mut out = Vec::new();
    for (rel, src) in files {
        if rel == "main.rs" {
            continue;
        }
        let me = module_of(rel);
        let toks = tokens(&without_tests(&blank(src)));
        // (segments, line, module the path is written in)
        let mut named: Vec<(Vec<String>, usize, Vec<String>)> = Vec::new();
        let mut aliases: HashMap<String, Vec<String>> = modules
            .keys()
            .filter(|m| m.len() == me.len() + 1 && m.starts_with(&me))
            .map(|m| (m[me.len()].clone(), m.clone()))
            .collect();
        // Inline modules (`mod defaults { … }`): (name, brace depth inside it).
        let (mut inline, mut depth): (Vec<(String, usize)>, usize) = (Vec::new(), 0);
        let mut i = 0;
        while i < toks.len() {
            let here: Vec<String> = me
                .iter()
                .cloned()
                .chain(inline.iter().map(|m| m.0.clone()))
                .collect();
            match &toks[i].0 {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => {
                    if inline.last().is_some_and(|m| m.1 == depth) {
                        inline.pop();
                    }
                    depth = depth.saturating_sub(1);
                }
                Tok::Ident(w) if w == "mod" => {
                    if let (Some((Tok::Ident(n), _)), Some((Tok::Punct('{'), _))) =
                        (toks.get(i + 1), toks.get(i + 2))
                    {
                        inline.push((n.clone(), depth + 1));
                    }
                }
                Tok::Ident(w) if w == "use" => {
                    let line = toks[i].1;
                    i += 1;
                    let mut trees = Vec::new();
                    use_tree(&toks, &mut i, &[], &mut trees);
                    for (segs, name) in trees {
                        if let Some(full) = absolute(&segs, &here, &aliases) {
                            if modules.contains_key(&full) && !name.is_empty() {
                                aliases.insert(name, full);
                            }
                        }
                        named.push((segs, line, here.clone()));
                    }
                    continue;
                }
                Tok::Ident(w) if i == 0 || toks[i - 1].0 != Tok::Path => {
                    let line = toks[i].1;
                    let mut segs = vec![w.clone()];
                    let mut j = i + 1;
                    while toks.get(j).map(|t| &t.0) == Some(&Tok::Path) {
                        match toks.get(j + 1) {
                            Some((Tok::Ident(n), _)) => segs.push(n.clone()),
                            _ => break,
                        }
                        j += 2;
                    }
                    if segs.len() > 1 {
                        named.push((segs, line, here.clone()));
                        i = j;
                        continue;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        for (segs, line, here) in named {
            let Some(full) = absolute(&segs, &here, &aliases) else {
                continue;
            };
            let Some(to) = (0..=full.len()).rev().find_map(|k| modules.get(&full[..k])) else {
                continue;
            };
            let target = module_of(to);
            // The file itself, or its own descendants (the module tree).
            if to == rel || (target.len() > me.len() && target.starts_with(&me)) {
                continue;
            }
            out.push(Import {
                from: rel.clone(),
                to: to.clone(),
                path: format!("crate::{}", full.join("::")),
                line,
            });
        }
    }
    out
}

/// `segs` from the crate root, when it names the crate.
fn absolute(
    segs: &[String],
    here: &[String],
    aliases: &HashMap<String, Vec<String>>,
) -> Option<Vec<String>> {
    let first = segs.first()?.as_str();
    let (mut base, mut rest) = match first {
        "crate" => (Vec::new(), &segs[1..]),
        "self" => (here.to_vec(), &segs[1..]),
        "super" => (here.to_vec(), segs),
        _ => (aliases.get(first)?.clone(), &segs[1..]),
    };
    while rest.first().is_some_and(|s| s == "super") {
        base.pop();
        rest = &rest[1..];
    }
    base.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(base)
}

/// The strongly connected components of more than one file (Tarjan).
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        let edges = t.edges;
        for w in edges.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        edges,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// Circles not yet cut, each with who cuts it. A listed circle that is gone
/// fails the test too, so the list only shrinks.
const NOT_YET_CUT: &[(&[&str], &str)] = &[(
    &[
        "backend/caps.rs",
        "backend/mod.rs",
        "nemesis/mod.rs",
        "plan.rs",
    ],
    "the placement seam (issue #43, item 1): the backend's availability and the \
     nemesis' dispatch through one trait",
)];

fn folder(rel: &str) -> &str {
    rel.rsplit_once('/').map_or("", |(d, _)| d)
}

/// What breaks the rules, one line each (file:line, the import, the rule).
fn violations(files: &BTreeMap<String, String>) -> (Vec<String>, usize) {
    let all = imports(files);
    let mut bad = Vec::new();
    let under = |f: &str, dir: &str| f.starts_with(&format!("{dir}/"));
    let mut say = |i: &Import, rule: &str| {
        bad.push(format!(
            "harness/src/{}:{}: imports `{}` ({}): {rule}",
            i.from, i.line, i.path, i.to
        ));
    };
    for i in &all {
        if under(&i.from, "scenario") && !under(&i.to, "scenario") {
            say(i, "scenario/ imports nothing of the crate");
        }
        if under(&i.from, "check")
            && !["check", "record", "scenario"]
                .iter()
                .any(|d| under(&i.to, d))
        {
            say(i, "check/ imports of the crate only record/ and scenario/");
        }
        if under(&i.from, "record") && !["record", "scenario"].iter().any(|d| under(&i.to, d)) {
            say(i, "record/ imports of the crate only scenario/ (a recorded run is read by its formats alone)");
        }
        let worker_side = ["systems", "resources", "worker"]
            .iter()
            .any(|d| under(&i.from, d))
            || i.from == "worker.rs";
        let above = [
            "assess.rs",
            "output.rs",
            "run.rs",
            "cli.rs",
            "suite.rs",
            "junit.rs",
        ]
        .contains(&i.to.as_str())
            || under(&i.to, "shrink")
            || under(&i.to, "check");
        if worker_side && above {
            say(i, "the worker's side (systems/, resources/, worker) imports nothing of the report or the commands");
        }
        if i.to == "cli.rs" {
            say(
                i,
                "nothing in the library imports cli.rs (the commands are the top)",
            );
        }
    }
    // Workspace crates a check may use.
    for (rel, src) in files.iter().filter(|(f, _)| under(f, "check")) {
        for (n, line) in without_tests(&blank(src)).lines().enumerate() {
            for word in line.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
                let allowed = [
                    "fencecheck_lincheck",
                    "fencecheck_reports",
                    "fencecheck_storage",
                ];
                if word.starts_with("fencecheck_") && !allowed.contains(&word) {
                    bad.push(format!(
                        "harness/src/{rel}:{}: uses `{word}`: check/ uses of the workspace only lincheck, \
                         reports and storage",
                        n + 1
                    ));
                }
            }
        }
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for i in &all {
        edges
            .entry(i.from.clone())
            .or_default()
            .insert(i.to.clone());
    }
    let found = circles(&edges);
    for (known, why) in NOT_YET_CUT {
        if !found.iter().any(|c| c == known) {
            bad.push(format!(
                "the circle {} ({why}) is not there as listed: take it out of NOT_YET_CUT in \
                 harness/tests/structure.rs and docs/architecture.md",
                known.join(", ")
            ));
        }
    }
    for c in found {
        if (c.len() == 2 && folder(&c[0]) == folder(&c[1]))
            || NOT_YET_CUT.iter().any(|(k, _)| c == *k)
        {
            continue;
        }
        let mut text = format!(
            "a circle of {} files ({}; the rule: none over 2 files, none across folders), through:",
            c.len(),
            c.join(", ")
        );
        let mut seen = BTreeSet::new();
        for i in all
            .iter()
            .filter(|i| c.contains(&i.from) && c.contains(&i.to))
        {
            if seen.insert((&i.from, &i.to)) {
                text += &format!(
                    "\n    harness/src/{}:{}: imports `{}` ({})",
                    i.from, i.line, i.path, i.to
                );
            }
        }
        bad.push(text);
    }
    (bad, all.len())
}

fn read_tree(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            read_tree(&p, root, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p
                .strip_prefix(root)
                .expect("under src")
                .to_string_lossy()
                .to_string();
            let text = std::fs::read_to_string(&p)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
            out.insert(rel, text);
        }
    }
}

#[test]
fn the_layers_hold_and_no_circle_is_over_two_files_or_across_folders() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    read_tree(&root, &root, &mut files);
    assert!(
        files.len() > 100,
        "harness/src has {} .rs files",
        files.len()
    );
    let all = imports(&files);
    // Not an empty graph passing by itself: imports known to be there are seen.
    for (from, to) in [
        ("assess.rs", "check/mod.rs"),
        ("check/findings.rs", "check/exclusion.rs"),
        ("check/findings.rs", "check/sessions.rs"),
        ("worker.rs", "systems/client.rs"),
        ("resources/mod.rs", "record/before.rs"),
        ("scenario/client.rs", "scenario/mod.rs"),
    ] {
        assert!(
            all.iter().any(|i| i.from == from && i.to == to),
            "the import {from} → {to} was not seen: the reading of imports is broken"
        );
    }
    let (bad, n) = violations(&files);
    assert!(n > 500, "only {n} imports of the crate seen");
    assert!(
        bad.is_empty(),
        "docs/architecture.md's structure does not hold ({} problem(s)):\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// The reading itself, on a small tree: paths in comments, strings and tests do
/// not count, `super::`, `self`-imports and child names do, and a circle of
/// three is reported with its imports.
#[test]
fn a_circle_of_three_and_an_upward_import_are_reported_with_file_and_line() {
    let files: BTreeMap<String, String> = [
        ("lib.rs", "pub mod scenario;\npub mod b;\npub mod record;\n"),
        (
            "scenario/mod.rs",
            "use crate::b::{self, c::Thing};\nfn f() { b::g(); }\n// crate::record::x\n",
        ),
        (
            "b/mod.rs",
            "pub mod c;\npub fn g() { c::h(); super::scenario::f(); }\n\
             #[cfg(test)]\nmod tests { use crate::record::X; }\n",
        ),
        (
            "b/c.rs",
            "use super::super::scenario::f;\nconst S: &str = \"crate::record::y\";\nconst C: char = '{';\n",
        ),
        ("record/mod.rs", "pub struct X;\n"),
    ]
    .into_iter()
    .map(|(f, s)| (f.to_string(), s.to_string()))
    .collect();
    let all = imports(&files);
    let pairs: BTreeSet<(&str, &str)> = all
        .iter()
        .map(|i| (i.from.as_str(), i.to.as_str()))
        .collect();
    let want: BTreeSet<(&str, &str)> = [
        ("scenario/mod.rs", "b/mod.rs"),
        ("scenario/mod.rs", "b/c.rs"),
        ("b/mod.rs", "scenario/mod.rs"),
        ("b/c.rs", "scenario/mod.rs"),
    ]
    .into_iter()
    .collect();
    assert_eq!(pairs, want, "{all:#?}");
    let (bad, _) = violations(&files);
    assert!(
        bad.iter().any(
            |b| b.starts_with("harness/src/scenario/mod.rs:1: imports `crate::b`")
                && b.contains("scenario/ imports nothing")
        ),
        "{bad:#?}"
    );
    let circle = bad
        .iter()
        .find(|b| b.starts_with("a circle of 3 files"))
        .expect("the circle");
    assert!(
        circle.contains("harness/src/b/c.rs:1: imports `crate::scenario::f`"),
        "{circle}"
    );
}

//! The agent with real processes and real signals: `run -- /bin/sleep 1000` with
//! its socket in a temporary directory, driven by `ctl` as the harness drives it
//! in a pod, every answer checked against `/proc` independently.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fencecheck-agent");

/// The agent process, killed (and its child group) when the test ends.
struct Agent {
    child: Child,
    sock: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(p) = pid_of(&ctl(&self.sock, "state")) {
            // SAFETY: killing the test's own sleep process group.
            unsafe { libc::kill(-p, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(prog: &[&str]) -> Agent {
    let tmp = tempfile::tempdir().expect("tmp");
    let sock = tmp.path().join("agent.sock");
    let child = Command::new(BIN)
        .arg("run")
        .arg("--")
        .args(prog)
        .env("FENCECHECK_AGENT_SOCKET", &sock)
        .spawn()
        .expect("start the agent");
    let a = Agent {
        child,
        sock,
        _tmp: tmp,
    };
    let until = Instant::now() + Duration::from_secs(10);
    while ctl(&a.sock, "state").status.code() != Some(0) {
        assert!(
            Instant::now() < until,
            "the agent did not answer within 10 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    a
}

fn ctl(sock: &Path, cmd: &str) -> Output {
    Command::new(BIN)
        .args(["ctl", cmd])
        .env("FENCECHECK_AGENT_SOCKET", sock)
        .output()
        .expect("run ctl")
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn pid_of(o: &Output) -> Option<i32> {
    let s = out(o);
    let rest = s.split("\"pid\":").nth(1)?;
    rest.split(',').next()?.parse().ok()
}

fn state_of(o: &Output) -> Option<char> {
    out(o).split("\"state\":\"").nth(1)?.chars().next()
}

/// The state letter /proc gives, read here, not by the agent.
fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

fn ok(sock: &Path, cmd: &str) -> Output {
    let o = ctl(sock, cmd);
    assert_eq!(
        o.status.code(),
        Some(0),
        "ctl {cmd}: {} {}",
        out(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

#[test]
fn stop_cont_kill_start_are_confirmed_from_proc() {
    let a = start(&["/bin/sleep", "1000"]);
    let s = ok(&a.sock, "state");
    let pid = pid_of(&s).expect("pid");
    assert!(matches!(state_of(&s), Some('S' | 'R')), "{}", out(&s));
    // Its own process group, led by itself.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let pgrp: i32 = stat[stat.rfind(')').expect(")") + 1..]
        .split_whitespace()
        .nth(2)
        .expect("pgrp")
        .parse()
        .expect("pgrp");
    assert_eq!(pgrp, pid);

    let o = ok(&a.sock, "stop");
    assert_eq!(
        out(&o),
        format!("{{\"pid\":{pid},\"state\":\"T\",\"processes\":1,\"stopped\":1}}")
    );
    assert_eq!(proc_state(pid), Some('T'));
    assert_eq!(state_of(&ok(&a.sock, "state")), Some('T'));

    let o = ok(&a.sock, "cont");
    assert!(matches!(state_of(&o), Some('S' | 'R')), "{}", out(&o));
    assert!(matches!(proc_state(pid), Some('S' | 'R')));

    let o = ok(&a.sock, "kill");
    assert_eq!(out(&o), "{\"running\":false}");
    assert_eq!(proc_state(pid), None, "pid {pid} still in /proc");
    assert_eq!(out(&ok(&a.sock, "state")), "{\"running\":false}");
    // Not restarted by the agent, which stays up.
    let o = ctl(&a.sock, "stop");
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));

    let o = ok(&a.sock, "start");
    let new = pid_of(&o).expect("new pid");
    assert_ne!(new, pid);
    assert!(matches!(proc_state(new), Some('S' | 'R')));
    let o = ctl(&a.sock, "start");
    assert_eq!(o.status.code(), Some(1), "start while running: {}", out(&o));
}

#[test]
fn a_bad_command_is_refused_with_a_message() {
    let a = start(&["/bin/sleep", "1000"]);
    let o = ctl(&a.sock, "explode");
    assert_eq!(o.status.code(), Some(1));
    assert!(out(&o).contains("unknown command"), "{}", out(&o));
    let o = Command::new(BIN).arg("ctl").output().expect("ctl");
    assert_eq!(o.status.code(), Some(2));
    let o = Command::new(BIN)
        .args(["ctl", "state"])
        .env("FENCECHECK_AGENT_SOCKET", "/nonexistent/agent.sock")
        .output()
        .expect("ctl");
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn exits_with_the_childs_status_and_forwards_sigterm() {
    let tmp = tempfile::tempdir().expect("tmp");
    let sock = tmp.path().join("s");
    let st = Command::new(BIN)
        .args(["run", "--", "/bin/sh", "-c", "exit 7"])
        .env("FENCECHECK_AGENT_SOCKET", &sock)
        .status()
        .expect("agent");
    assert_eq!(st.code(), Some(7));

    let b = start(&["/bin/sleep", "1000"]);
    let pid = pid_of(&ok(&b.sock, "state")).expect("pid");
    // SAFETY: SIGTERM to the agent this test started.
    unsafe { libc::kill(b.child.id() as i32, libc::SIGTERM) };
    let mut b = b;
    let until = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = b.child.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < until, "the agent did not exit on SIGTERM");
        std::thread::sleep(Duration::from_millis(5));
    };
    // sleep died of the forwarded SIGTERM: 128 + 15.
    assert_eq!(status.code(), Some(143));
    assert_eq!(proc_state(pid), None);
}

/// The children of `parent`, with their state letters, from /proc.
fn children(parent: u32) -> Vec<(i32, char)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(i) = stat.rfind(')') else { continue };
        let mut f = stat[i + 1..].split_whitespace();
        let state = f.next().and_then(|s| s.chars().next()).unwrap_or('?');
        if f.next().and_then(|p| p.parse::<u32>().ok()) == Some(parent) {
            out.push((pid, state));
        }
    }
    out
}

#[test]
fn orphans_come_to_the_agent_and_are_reaped() {
    // The subshell starts a sleep and exits: the orphaned sleep is reparented to
    // the agent (its subreaper here, as PID 1 in a pod) and must not stay a zombie.
    let a = start(&["/bin/sh", "-c", "(sleep 0.3 &); exec sleep 1000"]);
    let agent = a.child.id();
    let main = pid_of(&ok(&a.sock, "state")).expect("pid");
    let until = Instant::now() + Duration::from_secs(10);
    let orphan = loop {
        if let Some(&(p, _)) = children(agent).iter().find(|(p, _)| *p != main) {
            break p;
        }
        assert!(Instant::now() < until, "no orphan reached the agent");
        std::thread::sleep(Duration::from_millis(5));
    };
    while proc_state(orphan).is_some() {
        assert!(
            Instant::now() < until,
            "orphan {orphan} not reaped: {:?}",
            proc_state(orphan)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let left: Vec<i32> = children(agent).into_iter().map(|(p, _)| p).collect();
    assert_eq!(left, vec![main]);
}

/// The manifest's directory (0700) and files are in place before the program
/// starts: the program itself (`sh -c`) reads them back; a bad line is exit 2
/// naming the manifest's line, and nothing is started.
#[test]
fn the_manifests_files_are_placed_before_the_start() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tmp");
    let files = tmp.path().join("files");
    std::fs::create_dir(&files).expect("mkdir");
    let data = tmp.path().join("run/member-0/data");
    let conf = tmp.path().join("run/member-0.conf");
    let myid = data.join("myid");
    std::fs::write(files.join("f0"), "a = 1\n").expect("write");
    std::fs::write(files.join("f1"), "2\n").expect("write");
    std::fs::write(
        files.join("manifest"),
        format!(
            "dir\t{}\nfile\tf0\t{}\nfile\tf1\t{}\n",
            data.display(),
            conf.display(),
            myid.display()
        ),
    )
    .expect("write");
    let seen = tmp.path().join("seen");
    let o = Command::new(BIN)
        .args(["run", "--", "/bin/sh", "-c"])
        .arg(format!(
            "cat {} {} > {}",
            conf.display(),
            myid.display(),
            seen.display()
        ))
        .env("FENCECHECK_AGENT_SOCKET", tmp.path().join("agent.sock"))
        .env("FENCECHECK_AGENT_FILES", &files)
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert_eq!(std::fs::read_to_string(&seen).expect("seen"), "a = 1\n2\n");
    let mode = std::fs::metadata(&data)
        .expect("data dir")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");

    std::fs::write(files.join("manifest"), "dir\nfile\tf0\n").expect("write");
    let o = Command::new(BIN)
        .args(["run", "--", "/bin/sh", "-c"])
        .arg(format!(
            "echo started > {}",
            tmp.path().join("started").display()
        ))
        .env("FENCECHECK_AGENT_SOCKET", tmp.path().join("agent2.sock"))
        .env("FENCECHECK_AGENT_FILES", &files)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("manifest:1:") && err.contains("dir<TAB>PATH"),
        "{err}"
    );
    assert!(
        !tmp.path().join("started").exists(),
        "started despite a bad manifest"
    );
}

/// `follow` waits for its file, then prints it whole and what is appended to
/// it afterwards, as it is appended.
#[test]
fn follow_prints_a_file_and_what_is_appended() {
    use std::io::{BufRead, BufReader, Write};
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("storage.jsonl");
    let mut child = Command::new(BIN)
        .arg("follow")
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("follow");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&file)
        .expect("open");
    for i in 0..3 {
        writeln!(f, "{{\"n\":{i}}}").expect("write");
        f.flush().expect("flush");
        let line = lines.next().expect("a line").expect("read");
        assert_eq!(line, format!("{{\"n\":{i}}}"));
    }
    let _ = child.kill();
    let _ = child.wait();
    // From an offset, once: the rest as it is now, and the end.
    let o = Command::new(BIN)
        .arg("follow")
        .arg(&file)
        .args(["8", "--once"])
        .output()
        .expect("follow --once");
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "{\"n\":1}\n{\"n\":2}\n");
    let o = Command::new(BIN)
        .arg("follow")
        .arg(tmp.path().join("none"))
        .arg("--once")
        .output()
        .expect("follow --once");
    assert_eq!(
        (o.status.code(), o.stdout.len()),
        (Some(0), 0),
        "{}",
        out(&o)
    );
}

/// `put` replaces a file whole (what clockshim reads on a remote node), and a
/// directory that is not there is an error, not a silent nothing.
#[test]
fn put_replaces_a_file_whole() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("redis-0.clock-offset-ns");
    std::fs::write(&file, "0\n").expect("write");
    let o = Command::new(BIN)
        .arg("put")
        .arg(&file)
        .arg("10000000000")
        .output()
        .expect("put");
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert_eq!(
        std::fs::read_to_string(&file).expect("read"),
        "10000000000\n"
    );
    let names: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names.len(), 1, "nothing left beside it: {names:?}");
    let o = Command::new(BIN)
        .arg("put")
        .arg(tmp.path().join("no/such/dir/f"))
        .arg("1")
        .output()
        .expect("put");
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("put"),
        "{}",
        out(&o)
    );
}

/// `clock` answers each line with this machine's monotonic clock, rising,
/// until stdin ends.
#[test]
fn clock_answers_each_line_with_the_monotonic_clock() {
    use std::io::{BufRead, BufReader, Write};
    let mut child = Command::new(BIN)
        .arg("clock")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("clock");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut last = 0u64;
    for _ in 0..3 {
        writeln!(stdin, "?").expect("ask");
        stdin.flush().expect("flush");
        let t: u64 = lines
            .next()
            .expect("an answer")
            .expect("read")
            .parse()
            .expect("ns");
        assert!(t > last, "{t} after {last}");
        last = t;
    }
    drop(stdin);
    assert!(child.wait().expect("wait").success());
}

/// Lingering (`FENCECHECK_AGENT_LINGER=1`), the agent outlives a program that
/// ended on its own, says it is not running, and goes on SIGTERM.
#[test]
fn a_lingering_agent_stays_after_its_program_ends() {
    let tmp = tempfile::tempdir().expect("tmp");
    let sock = tmp.path().join("s");
    let mut child = Command::new(BIN)
        .args(["run", "--", "/bin/sh", "-c", "exit 7"])
        .env("FENCECHECK_AGENT_SOCKET", &sock)
        .env("FENCECHECK_AGENT_LINGER", "1")
        .spawn()
        .expect("agent");
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let o = ctl(&sock, "state");
        if o.status.code() == Some(0) && out(&o).contains("\"running\":false") {
            break;
        }
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the agent exited"
        );
        assert!(
            Instant::now() < until,
            "never seen not running: {}",
            out(&o)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        child.try_wait().expect("wait").is_none(),
        "the agent exited"
    );
    // SAFETY: SIGTERM to the agent this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let until = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < until, "the agent did not exit on SIGTERM");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(status.code(), Some(128 + 15));
}

/// An agent running a shell that has started a child in its group (a
/// worker and its adapter), once the agent counts both; and the shell's pid.
fn a_group_of_two() -> (Agent, i32) {
    let a = start(&["/bin/sh", "-c", "/bin/sleep 1000 & wait"]);
    let until = Instant::now() + Duration::from_secs(10);
    let mut o = ok(&a.sock, "state");
    while !out(&o).contains("\"processes\":2") {
        assert!(Instant::now() < until, "{}", out(&o));
        std::thread::sleep(Duration::from_millis(10));
        o = ok(&a.sock, "state");
    }
    let pid = pid_of(&o).expect("pid");
    (a, pid)
}

/// `mapped` counts the processes of the program's group (the program and the
/// child it started) that map a file by a part of its path: the C library is
/// in both, a name that is nowhere in none.
#[test]
fn mapped_counts_the_groups_processes_that_map_a_file() {
    let (a, pid) = a_group_of_two();
    let o = ok(&a.sock, "mapped libc");
    assert_eq!(
        out(&o),
        format!("{{\"pid\":{pid},\"processes\":2,\"with\":2}}")
    );
    let o = ok(&a.sock, "mapped no-such-library-anywhere.so");
    assert_eq!(
        out(&o),
        format!("{{\"pid\":{pid},\"processes\":2,\"with\":0}}")
    );
}

#[test]
fn stop_and_cont_are_confirmed_on_every_process_of_the_group() {
    // A worker with its adapter: two processes of one group, each able to act
    // on its own (the adapter keeps the lock alive).
    let (a, pid) = a_group_of_two();
    let o = ok(&a.sock, "stop");
    assert!(
        out(&o).ends_with("\"processes\":2,\"stopped\":2}"),
        "{}",
        out(&o)
    );
    // Read here, not by the agent: both stopped.
    let kids: Vec<char> = children(pid as u32).into_iter().map(|(_, s)| s).collect();
    assert_eq!(kids, vec!['T'], "the shell's child");
    assert_eq!(proc_state(pid), Some('T'));
    let o = ok(&a.sock, "cont");
    assert!(
        out(&o).ends_with("\"processes\":2,\"stopped\":0}"),
        "{}",
        out(&o)
    );
    let kids: Vec<char> = children(pid as u32).into_iter().map(|(_, s)| s).collect();
    assert!(matches!(kids.as_slice(), ['S' | 'R']), "{kids:?}");
}

#[test]
fn aim_stops_the_group_on_the_first_new_matching_line_and_a_line_on_stdin_disarms_it() {
    use std::io::{BufRead, BufReader, Write};
    let a = start(&["/bin/sleep", "1000"]);
    let pid = pid_of(&ok(&a.sock, "state")).expect("pid");
    let events = a._tmp.path().join("worker-0.jsonl");
    let needle = "\"type\":\"ok\",\"f\":\"read\"";
    let read = |t: u64| {
        format!("{{\"index\":0,\"time_ns\":{t},\"process\":0,\"type\":\"ok\",\"f\":\"read\",\"key\":\"k0\"}}")
    };
    // Before it is armed: a matching line (past: it must not fire on it) and
    // the first half of one (cut: it must not fire on its rest either).
    let mut f = std::fs::File::create(&events).expect("events");
    let half = read(2000);
    let (head, tail) = half.split_at(30);
    write!(f, "{}\n{head}", read(2000)).expect("write");
    f.flush().expect("flush");
    let aim = |since: &str| {
        let mut c = Command::new(BIN)
            .args(["aim", events.to_str().expect("utf-8"), needle, since, "0"])
            .env("FENCECHECK_AGENT_SOCKET", &a.sock)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start aim");
        let mut out = BufReader::new(c.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("armed");
        assert_eq!(line.trim(), "{\"armed\":true}");
        (c, out)
    };
    let (mut armed, mut out) = aim("1000");
    // Lines it must pass over: the cut line's rest, a read before SINCE, the
    // needle only inside the client's detail, a write; then a half line,
    // which waits for its end, and that line is the one it fires on.
    for line in [
        tail.to_string(),
        read(999),
        "{\"index\":0,\"time_ns\":1100,\"process\":0,\"type\":\"ok\",\"f\":\"acquire\",\"detail\":{\"x\":{\"type\":\"ok\",\"f\":\"read\"}}}".into(),
        "{\"index\":0,\"time_ns\":1200,\"process\":0,\"type\":\"invoke\",\"f\":\"write\",\"key\":\"k0\"}".into(),
    ] {
        writeln!(f, "{line}").expect("write");
    }
    let last = read(1300);
    let (head, tail) = last.split_at(40);
    write!(f, "{head}").expect("write");
    f.flush().expect("flush");
    writeln!(f, "{tail}").expect("write");
    let mut line = String::new();
    out.read_line(&mut line).expect("aim's answer");
    assert!(armed.wait().expect("aim").success());
    let v: serde_json::Value = serde_json::from_str(&line).expect("json");
    assert_eq!(v["line"]["time_ns"], 1300, "{line}");
    assert_eq!(v["answer"]["state"], "T", "{line}");
    assert!(v["stopped_ns"].as_u64().is_some_and(|n| n > 0), "{line}");
    assert_eq!(proc_state(pid), Some('T'), "read here, not by the agent");
    ok(&a.sock, "cont");

    // Armed again, then disarmed: it says so and stops nothing.
    let (mut armed, mut out) = aim("5000");
    let mut stdin = armed.stdin.take().expect("stdin");
    writeln!(stdin, "disarm").expect("disarm");
    let mut line = String::new();
    out.read_line(&mut line).expect("aim's answer");
    assert_eq!(line.trim(), "{\"disarmed\":true}");
    assert!(armed.wait().expect("aim").success());
    assert!(matches!(proc_state(pid), Some('S' | 'R')));
}

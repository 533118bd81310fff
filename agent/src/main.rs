//! fencecheck's in-pod fault agent (issue #20): the container's entry point, which
//! runs the real program and pauses, resumes, kills or restarts it on the harness's
//! command, and confirms each fault from `/proc`.
//!
//! - `fencecheck-agent run -- PROG ARGS...` (PID 1 of the container): starts PROG in
//!   its own process group, forwards SIGTERM/SIGINT to that group, reaps every
//!   zombie, exits with PROG's status when PROG exits on its own, and answers
//!   one-line commands on a unix socket (`/fencecheck-agent.sock`, or
//!   `$FENCECHECK_AGENT_SOCKET`).
//! - `fencecheck-agent ctl CMD`: sends CMD to that socket and prints the one-line
//!   JSON answer; exit 0 on ok, 1 on a refused command, 2 on bad usage or no agent.
//!
//! - `fencecheck-agent follow FILE [OFFSET] [--once]`: prints FILE from byte
//!   OFFSET (0) and then whatever is appended to it, until killed (the exec that
//!   runs it is closed); waits for FILE to appear. With `--once`, prints what is
//!   there now from OFFSET and exits (a missing FILE is empty). The harness streams a file a pod writes (the storage's
//!   journal on a node that is not the harness's machine) into the run
//!   directory this way, as it is written.
//!
//! - `fencecheck-agent put FILE TEXT`: replaces FILE with TEXT and a newline,
//!   whole (written beside it, then renamed over it), so a reader never sees
//!   half of it. The harness steps a member's clock on a node that is not its
//!   machine this way: clockshim's offset file is the pod's, not the run
//!   directory's.
//!
//! - `fencecheck-agent clock`: for each line read on stdin, prints this
//!   machine's `CLOCK_MONOTONIC` in nanoseconds, one line each, until stdin
//!   ends. The harness measures the offset of a node's monotonic clock to its
//!   own with it (NTP's way: the sample with the shortest round trip).
//!
//! - `fencecheck-agent aim FILE NEEDLE SINCE_NS OFFSET_US`: an aimed pause
//!   fired in the pod: `{"armed":true}` once it stands at FILE's end, then
//!   OFFSET after the first line appended to the worker's events FILE
//!   that holds NEEDLE (e.g. `"type":"ok","f":"read"`) with a `time_ns` at or
//!   after SINCE_NS, stops PROG's group as `ctl stop` does and prints
//!   `{"stopped_ns":N,"answer":{...},"line":{...}}`; a line on stdin, or its
//!   end, disarms it (`{"disarmed":true}`).
//!
//! With `$FENCECHECK_AGENT_LINGER=1`, `run` stays after PROG exits on its own
//! (until SIGTERM or SIGINT), so what PROG wrote can still be read through exec.
//!
//! With `$FENCECHECK_AGENT_FILES` set to a directory holding a `manifest`, `run`
//! first puts the files a program needs in place (a ConfigMap mounted there,
//! on a node that does not have the run directory): each manifest line is
//! `dir<TAB>PATH` (created, mode 0700, with its parents) or
//! `file<TAB>KEY<TAB>PATH` (the directory's KEY copied to PATH).
//!
//! Commands: `stop` (SIGSTOP the group), `cont` (SIGCONT), `kill` (SIGKILL the
//! group; not restarted by the agent), `start` (PROG again after a kill), `state`,
//! `mapped TEXT` (how many of the group's processes map a file whose path holds
//! TEXT: `{"pid":12,"processes":2,"with":2}`; a worker's clockshim).
//! Each answer is the state read back from `/proc/PID/stat` after acting, with
//! how many processes PROG's group has and how many of them are stopped:
//! `{"pid":12,"state":"T","processes":2,"stopped":2}`, or `{"running":false}`;
//! a refusal is `{"error":"..."}`. `stop` and `cont` wait until every process
//! of the group is stopped, or none is.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where the agent listens in the container's filesystem.
const DEFAULT_SOCKET: &str = "/fencecheck-agent.sock";
/// Overrides [`DEFAULT_SOCKET`] (tests run several agents on one machine).
const SOCKET_ENV: &str = "FENCECHECK_AGENT_SOCKET";
/// `1`: `run` does not exit when PROG exits on its own, but answers (`state`:
/// not running) until it is sent SIGTERM or SIGINT. A worker pod on a node
/// that is not the harness's machine: its events file is still followed to
/// its last byte after the worker ended.
const LINGER_ENV: &str = "FENCECHECK_AGENT_LINGER";
/// A directory with a `manifest` of the files to put in place before the start.
const FILES_ENV: &str = "FENCECHECK_AGENT_FILES";
/// How often `follow` looks for more of its file.
const FOLLOW_POLL: Duration = Duration::from_millis(20);
/// How often `aim` reads its events file (the harness's feed does the same).
const AIM_POLL: Duration = Duration::from_millis(1);
/// How long a command waits to see its effect in `/proc` before it says it failed.
const CONFIRM: Duration = Duration::from_secs(5);
/// The interval of that poll.
const POLL: Duration = Duration::from_millis(2);

fn socket_path() -> String {
    std::env::var(SOCKET_ENV).unwrap_or_else(|_| DEFAULT_SOCKET.to_string())
}

fn usage() -> ! {
    eprintln!(
        "usage: fencecheck-agent run -- PROG [ARGS...]\n       \
         fencecheck-agent ctl stop|cont|kill|start|state\n       \
         fencecheck-agent follow FILE [OFFSET] [--once]\n       \
         fencecheck-agent put FILE TEXT\n       \
         fencecheck-agent aim FILE NEEDLE SINCE_NS OFFSET_US\n       \
         fencecheck-agent clock"
    );
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") => {
            let prog = match args.get(1).map(String::as_str) {
                Some("--") => args[2..].to_vec(),
                _ => args[1..].to_vec(),
            };
            if prog.is_empty() {
                usage();
            }
            let placed = match std::env::var_os(FILES_ENV) {
                Some(dir) => place_files(std::path::Path::new(&dir)),
                None => Ok(()),
            };
            if let Err(e) = placed {
                eprintln!("fencecheck-agent: {e}");
                std::process::exit(2)
            }
            match run(prog) {
                Ok(code) => std::process::exit(code),
                Err(e) => {
                    eprintln!("fencecheck-agent: {e}");
                    std::process::exit(2)
                }
            }
        }
        Some("ctl") if args.len() == 2 => std::process::exit(ctl(&args[1])),
        Some("follow") if (2..=4).contains(&args.len()) => {
            let once = args[2..].iter().any(|a| a == "--once");
            let offset = match args[2..].iter().find(|a| *a != "--once") {
                None => 0,
                Some(o) => o.parse().unwrap_or_else(|_| usage()),
            };
            if let Err(e) = follow(&args[1], offset, once) {
                eprintln!("fencecheck-agent follow {}: {e}", args[1]);
                std::process::exit(1)
            }
        }
        Some("clock") if args.len() == 1 => {
            if let Err(e) = clock() {
                eprintln!("fencecheck-agent clock: {e}");
                std::process::exit(1)
            }
        }
        Some("aim") if args.len() == 5 => {
            let since: u64 = args[3].parse().unwrap_or_else(|_| usage());
            let offset_us: u64 = args[4].parse().unwrap_or_else(|_| usage());
            if let Err(e) = aim(&args[1], &args[2], since, Duration::from_micros(offset_us)) {
                eprintln!("fencecheck-agent aim {}: {e}", args[1]);
                std::process::exit(1)
            }
        }
        Some("put") if args.len() == 3 => {
            if let Err(e) = put(&args[1], &args[2]) {
                eprintln!("fencecheck-agent put {}: {e}", args[1]);
                std::process::exit(1)
            }
        }
        _ => usage(),
    }
}

/// Answers each line on stdin with `CLOCK_MONOTONIC` in ns, at once.
fn clock() -> std::io::Result<()> {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        line?;
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes only into the timespec we own.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        writeln!(
            out,
            "{}",
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        )?;
        out.flush()?;
    }
    Ok(())
}

/// `CLOCK_MONOTONIC` in ns.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Does an events-file line name the aimed event? NEEDLE in its top-level
/// fields (before any `"detail"`, whose contents are the client's), and a
/// `time_ns` at or after SINCE.
fn aimed_at(line: &str, needle: &str, since_ns: u64) -> bool {
    let head = line.split(",\"detail\":").next().unwrap_or(line);
    let time = head.split("\"time_ns\":").nth(1).and_then(|t| {
        let digits: String = t.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u64>().ok()
    });
    head.contains(needle) && time.is_some_and(|t| t >= since_ns)
}

/// `aim FILE NEEDLE SINCE_NS OFFSET_US`: an aimed pause, fired in the pod
/// itself. Says `{"armed":true}` once it stands at the end of the worker's
/// events FILE (what is there is past), then reads what is appended every
/// millisecond; OFFSET after the first line [`aimed_at`] NEEDLE and SINCE,
/// stops PROG's group through the agent (as `ctl stop`) and prints one line,
/// `{"stopped_ns":N,"answer":{...},"line":{...}}` (N this machine's
/// monotonic clock just before the stop, the answer the agent's to `stop`,
/// the line the event's). A line on stdin, or its end, disarms it first:
/// `{"disarmed":true}`. Through exec, an aimed pause lands as soon after its
/// event as this machine's signals do, not an exec round trip later.
fn aim(path: &str, needle: &str, since_ns: u64, offset: Duration) -> std::io::Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let disarmed = Arc::new(AtomicBool::new(false));
    {
        let disarmed = disarmed.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::stdin().lock().read_line(&mut line);
            disarmed.store(true, Ordering::SeqCst);
        });
    }
    let mut out = std::io::stdout().lock();
    // What is in the file already is past: an event read now would fire the
    // pause long after it (the exec that started this took ~100 ms). Only
    // what is written from here on counts.
    let mut file = std::fs::File::open(path).ok();
    // A line cut by that seek is no event: what comes before its newline is
    // dropped.
    let mut mid_line = false;
    if let Some(f) = file.as_mut() {
        use std::io::{Seek, SeekFrom};
        let end = f.seek(SeekFrom::End(0))?;
        if end > 0 {
            let mut last = [0u8; 1];
            f.seek(SeekFrom::Start(end - 1))?;
            f.read_exact(&mut last)?;
            mid_line = last[0] != b'\n';
        }
    }
    // From here on, an event fires it.
    writeln!(out, "{{\"armed\":true}}")?;
    out.flush()?;
    let mut partial: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if disarmed.load(Ordering::SeqCst) {
            return said_disarmed(&mut out);
        }
        if file.is_none() {
            file = std::fs::File::open(path).ok();
        }
        let mut fired = None;
        if let Some(f) = file.as_mut() {
            loop {
                match f.read(&mut buf)? {
                    0 => break,
                    n => partial.extend_from_slice(&buf[..n]),
                }
            }
            while let Some(end) = partial.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = partial.drain(..=end).collect();
                if std::mem::take(&mut mid_line) {
                    continue;
                }
                let line = String::from_utf8_lossy(&line).trim_end().to_string();
                if aimed_at(&line, needle, since_ns) {
                    fired = Some(line);
                    break;
                }
            }
        }
        if let Some(line) = fired {
            std::thread::sleep(offset);
            if disarmed.load(Ordering::SeqCst) {
                return said_disarmed(&mut out);
            }
            let at = monotonic_ns();
            let answer = ask("stop").unwrap_or_else(|e| error(&format!("stop: {e}")));
            writeln!(
                out,
                "{{\"stopped_ns\":{at},\"answer\":{answer},\"line\":{line}}}"
            )?;
            return out.flush();
        }
        std::thread::sleep(AIM_POLL);
    }
}

/// `aim`'s answer when it was disarmed before it fired.
fn said_disarmed(out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "{{\"disarmed\":true}}")?;
    out.flush()
}

/// Replaces `path` with `text` and a newline, whole: a rename over it.
fn put(path: &str, text: &str) -> std::io::Result<()> {
    let tmp = format!("{path}.agent-tmp");
    std::fs::write(&tmp, format!("{text}\n"))?;
    std::fs::rename(&tmp, path)
}

/// Puts the manifest's directories and files in place (see the top of this file).
fn place_files(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    let manifest = dir.join("manifest");
    let text = std::fs::read_to_string(&manifest)
        .map_err(|e| format!("cannot read {}: {e}", manifest.display()))?;
    for (n, line) in text.lines().enumerate() {
        let at = || format!("{}:{}", manifest.display(), n + 1);
        let fields: Vec<&str> = line.split('\t').collect();
        match fields.as_slice() {
            [] | [""] => {}
            ["dir", path] => std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(|e| format!("{}: cannot create {path}: {e}", at()))?,
            ["file", key, path] => {
                if let Some(parent) = std::path::Path::new(path).parent() {
                    std::fs::create_dir_all(parent).map_err(|e| {
                        format!("{}: cannot create {}: {e}", at(), parent.display())
                    })?;
                }
                std::fs::copy(dir.join(key), path)
                    .map_err(|e| format!("{}: cannot copy {key} to {path}: {e}", at()))?;
            }
            _ => {
                return Err(format!(
                    "{}: expected dir<TAB>PATH or file<TAB>KEY<TAB>PATH",
                    at()
                ))
            }
        }
    }
    Ok(())
}

/// `follow FILE OFFSET`: its bytes from OFFSET to stdout as they are written,
/// until killed; `once`: what is there now, then the end.
fn follow(path: &str, offset: u64, once: bool) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut file = loop {
        match std::fs::File::open(path) {
            Ok(f) => break f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && once => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::thread::sleep(FOLLOW_POLL),
            Err(e) => return Err(e),
        }
    };
    file.seek(SeekFrom::Start(offset))?;
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut buf)? {
            0 if once => return Ok(()),
            0 => std::thread::sleep(FOLLOW_POLL),
            n => {
                out.write_all(&buf[..n])?;
                out.flush()?;
            }
        }
    }
}

/// One request to the agent's socket, its one answer line.
fn ask(cmd: &str) -> std::io::Result<String> {
    let mut s = UnixStream::connect(socket_path())?;
    s.set_read_timeout(Some(CONFIRM + Duration::from_secs(5)))?;
    s.write_all(format!("{cmd}\n").as_bytes())?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    Ok(line.trim_end().to_string())
}

/// `ctl CMD`: one request, one answer line.
fn ctl(cmd: &str) -> i32 {
    let path = socket_path();
    let answer = ask(cmd);
    match answer {
        Ok(a) if a.is_empty() => {
            eprintln!("fencecheck-agent ctl: the agent at {path} closed without answering");
            2
        }
        Ok(a) => {
            println!("{a}");
            if a.starts_with("{\"error\"") {
                eprintln!("fencecheck-agent ctl: {cmd} refused");
                1
            } else {
                0
            }
        }
        Err(e) => {
            eprintln!("fencecheck-agent ctl: cannot talk to the agent at {path}: {e}");
            2
        }
    }
}

/// What the agent knows of its child.
struct Child {
    prog: Vec<String>,
    /// The running child's pid (its process group's id too), if any.
    pid: Option<i32>,
    /// The pid the agent killed on command: its exit is expected, not the end.
    killed: Option<i32>,
    /// SIGTERM/SIGINT came: the agent ends when the child does.
    terminating: bool,
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// The signals the agent handles itself, on one thread with `sigwait`.
fn handled() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a local sigset_t.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        set
    }
}

extern "C" fn ignore(_: libc::c_int) {}

fn spawn(prog: &[String]) -> std::io::Result<i32> {
    let set = handled();
    let mut cmd = Command::new(&prog[0]);
    cmd.args(&prog[1..]).process_group(0);
    // The signals the agent blocks for `sigwait` would stay blocked in the child
    // (std's spawn keeps the mask): unblocked between fork and exec. The handlers
    // go back to the default by themselves at exec.
    // SAFETY: pthread_sigmask is async-signal-safe; `set` is a copied value.
    unsafe {
        cmd.pre_exec(move || {
            if libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::other("cannot unblock signals"));
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    // Dropping a std Child neither waits nor kills: the signal thread reaps it.
    Ok(child.id() as i32)
}

fn run(prog: Vec<String>) -> Result<i32, String> {
    let set = handled();
    let linger = std::env::var_os(LINGER_ENV).is_some_and(|v| v == "1");
    // Blocked in this thread before any other exists, so every thread inherits
    // it and only `sigwait` below takes these signals. A handler (not SIG_DFL)
    // as well: the kernel drops a default-action signal sent to a namespace's
    // PID 1.
    // SAFETY: installing a no-op handler and blocking signals for this thread.
    unsafe {
        for sig in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT] {
            libc::signal(
                sig,
                ignore as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(format!("cannot block signals: {}", errno()));
        }
    }
    // Orphans of PROG's come to the agent to reap even when it is not PID 1 (a
    // sidecar, a test): it is their subreaper.
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    let path = socket_path();
    // A socket file left by an earlier agent in the same filesystem.
    let _ = std::fs::remove_file(&path);
    let listener =
        UnixListener::bind(&path).map_err(|e| format!("cannot listen on {path}: {e}"))?;
    let pid = spawn(&prog).map_err(|e| format!("cannot start {}: {e}", prog[0]))?;
    let child = Arc::new(Mutex::new(Child {
        prog,
        pid: Some(pid),
        killed: None,
        terminating: false,
    }));
    {
        let child = Arc::clone(&child);
        std::thread::spawn(move || serve(listener, child));
    }
    loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: set is initialised; sig is a valid out pointer.
        if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
            return Err(format!("sigwait: {}", errno()));
        }
        match sig {
            libc::SIGCHLD => {
                if let Some(code) = reap(&child) {
                    // Lingering, it stays for the harness to read what PROG
                    // left (its files, its state) until it is stopped itself.
                    if linger && !lock(&child).terminating {
                        continue;
                    }
                    let _ = std::fs::remove_file(&path);
                    return Ok(code);
                }
            }
            _ => {
                let mut c = lock(&child);
                c.terminating = true;
                match c.pid {
                    // SAFETY: signalling the child's process group.
                    Some(p) => unsafe {
                        libc::kill(-p, sig);
                        // A stopped group would never see it.
                        libc::kill(-p, libc::SIGCONT);
                    },
                    None => {
                        let _ = std::fs::remove_file(&path);
                        return Ok(128 + sig);
                    }
                }
            }
        }
    }
}

fn lock(child: &Mutex<Child>) -> std::sync::MutexGuard<'_, Child> {
    // A poisoned lock still holds consistent plain data.
    child.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reaps every exited child (the agent is PID 1: orphans are its to reap). Returns
/// the agent's exit code when its child exited on its own (or after SIGTERM).
fn reap(child: &Mutex<Child>) -> Option<i32> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid with a valid out pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return None;
        }
        let mut c = lock(child);
        if c.pid != Some(pid) {
            continue;
        }
        c.pid = None;
        if c.killed == Some(pid) && !c.terminating {
            continue;
        }
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else if libc::WIFSIGNALED(status) {
            128 + libc::WTERMSIG(status)
        } else {
            1
        };
        return Some(code);
    }
}

/// The state letter of `/proc/PID/stat` (after the command name, which may hold
/// spaces and parentheses), or None when the process is gone.
fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.trim_start().chars().next()
}

fn serve(listener: UnixListener, child: Arc<Mutex<Child>>) {
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let mut line = String::new();
        let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
        let read = BufReader::new((&conn).take(4096)).read_line(&mut line);
        let answer = match read {
            Ok(_) => command(line.trim(), &child),
            Err(e) => error(&format!("cannot read the command: {e}")),
        };
        let _ = conn.write_all(format!("{answer}\n").as_bytes());
    }
}

fn escape(s: &str) -> String {
    let mut o = String::new();
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o
}

fn error(msg: &str) -> String {
    format!("{{\"error\":\"{}\"}}", escape(msg))
}

/// The live processes of process group `pgrp` (PROG and the children it
/// started in it; zombies left out) with their states, read from `/proc`.
fn group(pgrp: i32) -> Vec<(i32, char)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // After the command name: state, ppid, pgrp.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let Some(state) = f.first().and_then(|s| s.chars().next()) else {
            continue;
        };
        if f.get(2).and_then(|g| g.parse::<i32>().ok()) != Some(pgrp) || matches!(state, 'Z' | 'X')
        {
            continue;
        }
        out.push((p, state));
    }
    out
}

/// Stopped by a signal (or a tracer).
fn is_stopped(state: char) -> bool {
    matches!(state, 'T' | 't')
}

/// How many processes of PROG's group have `needle` in their
/// `/proc/PID/maps`: a library preloaded into them.
fn mapped(pid: i32, needle: &str) -> String {
    let members = group(pid);
    let with = members
        .iter()
        .filter(|(p, _)| {
            std::fs::read_to_string(format!("/proc/{p}/maps")).is_ok_and(|m| m.contains(needle))
        })
        .count();
    format!(
        "{{\"pid\":{pid},\"processes\":{},\"with\":{with}}}",
        members.len()
    )
}

/// PROG's state and its group's: how many processes it has and how many of
/// them are stopped (a pause holds only when every one is: an adapter beside
/// the worker keeps the lock alive on its own).
fn running(pid: i32, state: char) -> String {
    let members = group(pid);
    let stopped = members.iter().filter(|(_, s)| is_stopped(*s)).count();
    format!(
        "{{\"pid\":{pid},\"state\":\"{state}\",\"processes\":{},\"stopped\":{stopped}}}",
        members.len()
    )
}

/// Polls the group until every process is stopped (`want`) or none is, up
/// to [`CONFIRM`]; returns PROG's last state and whether that held.
fn confirm_group(pid: i32, want: bool) -> (Option<char>, bool) {
    let until = Instant::now() + CONFIRM;
    loop {
        let members = group(pid);
        let held = !members.is_empty() && members.iter().all(|(_, s)| is_stopped(*s) == want);
        let s = proc_state(pid);
        if held {
            return (s, true);
        }
        if Instant::now() >= until {
            return (s, false);
        }
        std::thread::sleep(POLL);
    }
}

/// Polls `/proc/PID/stat` until `ok` holds of its state (None: gone), up to
/// [`CONFIRM`]; returns the last state seen and whether `ok` held.
fn confirm(pid: i32, ok: impl Fn(Option<char>) -> bool) -> (Option<char>, bool) {
    let until = Instant::now() + CONFIRM;
    loop {
        let s = proc_state(pid);
        if ok(s) {
            return (s, true);
        }
        if Instant::now() >= until {
            return (s, false);
        }
        std::thread::sleep(POLL);
    }
}

fn signal_group(pid: i32, sig: libc::c_int) -> Result<(), String> {
    // SAFETY: kill(2) on the child's process group.
    if unsafe { libc::kill(-pid, sig) } != 0 {
        return Err(format!("cannot signal process group {pid}: {}", errno()));
    }
    Ok(())
}

fn command(cmd: &str, child: &Mutex<Child>) -> String {
    let pid = lock(child).pid;
    if let Some(needle) = cmd.strip_prefix("mapped ") {
        return match pid {
            None => "{\"running\":false}".to_string(),
            Some(p) => mapped(p, needle),
        };
    }
    match (cmd, pid) {
        ("state", None) => "{\"running\":false}".to_string(),
        ("state", Some(p)) => match proc_state(p) {
            Some(s) => running(p, s),
            None => error(&format!("pid {p} has no /proc entry")),
        },
        ("stop" | "cont" | "kill", None) => error(&format!("{cmd}: not running")),
        ("stop", Some(p)) => {
            if let Err(e) = signal_group(p, libc::SIGSTOP) {
                return error(&e);
            }
            match confirm_group(p, true) {
                (Some(s), true) => running(p, s),
                (s, _) => error(&format!(
                    "stop: pid {p} state {s:?}, not every process of its group stopped after {CONFIRM:?}"
                )),
            }
        }
        ("cont", Some(p)) => {
            if let Err(e) = signal_group(p, libc::SIGCONT) {
                return error(&e);
            }
            match confirm_group(p, false) {
                (Some(s), true) => running(p, s),
                (s, _) => error(&format!(
                    "cont: pid {p} state {s:?}, a process of its group still stopped after {CONFIRM:?}"
                )),
            }
        }
        ("kill", Some(p)) => {
            lock(child).killed = Some(p);
            if let Err(e) = signal_group(p, libc::SIGKILL) {
                return error(&e);
            }
            // Gone from /proc: dead and reaped by the signal thread.
            match confirm(p, |s| s.is_none()) {
                (_, true) => "{\"running\":false}".to_string(),
                (s, false) => error(&format!(
                    "kill: pid {p} still there ({s:?}) after {CONFIRM:?}"
                )),
            }
        }
        ("start", Some(p)) => error(&format!("start: already running as pid {p}")),
        ("start", None) => {
            let mut c = lock(child);
            let new = match spawn(&c.prog) {
                Ok(n) => n,
                Err(e) => return error(&format!("cannot start {}: {e}", c.prog[0])),
            };
            c.pid = Some(new);
            drop(c);
            // Started: its /proc entry, in a state other than a zombie's.
            match confirm(new, |s| matches!(s, Some(c) if c != 'Z' && c != 'X')) {
                (Some(s), true) => running(new, s),
                (s, _) => error(&format!("start: pid {new} state {s:?}")),
            }
        }
        _ => error(&format!(
            "unknown command {cmd:?} (stop, cont, kill, start, state)"
        )),
    }
}

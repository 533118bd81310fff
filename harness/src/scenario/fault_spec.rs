//! One `[[fault]]` table as a tagged enum: each kind a struct with exactly its own
//! fields (`deny_unknown_fields`), so a field a kind does not take is refused by
//! serde. The fault's own rules (what it needs, which targets fit it) sit with it;
//! what a lock system or a backend can do is decided by `crate::plan`.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::fault::{Aim, AimEvent, FaultKind, Target};
use super::validate::line_of_nth_table_key;

fn is_off(a: &Aim) -> bool {
    !a.is_on()
}

/// Declares one kind's table: the fields every kind takes (who and when), then the
/// kind's own durations.
macro_rules! fault_table {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $field:ident),* $(,)? }
     $(; $($(#[$xdoc:meta])* $extra:ident : $xty:ty),* )?) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            #[serde(default)]
            pub target: Target,
            /// One injection at this offset from the start of the run.
            #[serde(default, with = "humantime_serde", skip_serializing_if = "Option::is_none")]
            pub at: Option<Duration>,
            /// Repeated injections; the first one after `every` (or a random gap
            /// with jitter).
            #[serde(default, with = "humantime_serde", skip_serializing_if = "Option::is_none")]
            pub every: Option<Duration>,
            /// With `every`: gaps drawn uniformly from [0, 2*every) with the seed.
            #[serde(default)]
            pub jitter: bool,
            /// Fire on an event the harness sees instead of at the time: each
            /// injection is armed at its planned time and fires on the next such
            /// event (`true`: the kind's most damaging one).
            #[serde(default, skip_serializing_if = "is_off")]
            pub aim: Aim,
            /// With `aim`: how long after the event.
            #[serde(default, with = "humantime_serde", skip_serializing_if = "Option::is_none")]
            pub offset: Option<Duration>,
            /// With `aim`: how many injections (default: as many as `at` or
            /// `every` plan).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub count: Option<u32>,
            $(
                $(#[$fdoc])*
                #[serde(default, with = "humantime_serde", skip_serializing_if = "Option::is_none")]
                pub $field: Option<Duration>,
            )*
            $($(
                $(#[$xdoc])*
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $extra: Option<$xty>,
            )*)?
        }
    };
}

fault_table!(
    /// `pause`: SIGSTOP for `duration`, then SIGCONT.
    Pause { duration };
    /// End sooner, on an event the harness sees (`duration` is then the cap).
    until: Until
);

/// `[[fault]] until`: what ends a pause before its `duration`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Until {
    /// The next grant of the paused worker's lock to another worker (of any
    /// lock, when it held none): the woken worker's next request then runs
    /// beside the new holder's first, however long the lease took to end.
    NextGrant,
}
fault_table!(
    /// `revoke-lease` and `expire-session`: instantaneous, nothing of their own.
    Session {}
);
fault_table!(
    /// `delay`: `latency` ± `latency_jitter` per chunk, each way, for `duration`.
    Delay { duration, latency, latency_jitter }
);
fault_table!(
    /// `partition`: links blackholed for `duration`.
    Partition { duration }
);
fault_table!(
    /// `kill`: dead for `restart_after` (default 3s), then restarted on its data.
    Kill { restart_after }
);
fault_table!(
    /// `clock-jump`: the wall clock steps forward `by` (or, an elector's only,
    /// backward `back`); the window is `duration` (default: the lock TTL).
    ClockJump { by, back, duration }
);

/// A `[[fault]]` table, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Fault {
    Pause(Pause),
    RevokeLease(Session),
    ExpireSession(Session),
    Delay(Delay),
    Partition(Partition),
    Kill(Kill),
    ClockJump(ClockJump),
}

/// Runs `$e` with `$f` bound to whichever kind's table `$x` holds.
macro_rules! each {
    ($x:expr, $f:ident => $e:expr) => {
        match $x {
            Fault::Pause($f) => $e,
            Fault::RevokeLease($f) | Fault::ExpireSession($f) => $e,
            Fault::Delay($f) => $e,
            Fault::Partition($f) => $e,
            Fault::Kill($f) => $e,
            Fault::ClockJump($f) => $e,
        }
    };
}

impl Fault {
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::Pause(_) => FaultKind::Pause,
            Fault::RevokeLease(_) => FaultKind::RevokeLease,
            Fault::ExpireSession(_) => FaultKind::ExpireSession,
            Fault::Delay(_) => FaultKind::Delay,
            Fault::Partition(_) => FaultKind::Partition,
            Fault::Kill(_) => FaultKind::Kill,
            Fault::ClockJump(_) => FaultKind::ClockJump,
        }
    }
    pub fn target(&self) -> Target {
        each!(self, f => f.target)
    }
    pub fn at(&self) -> Option<Duration> {
        each!(self, f => f.at)
    }
    pub fn every(&self) -> Option<Duration> {
        each!(self, f => f.every)
    }
    pub fn jitter(&self) -> bool {
        each!(self, f => f.jitter)
    }
    pub fn aim(&self) -> Aim {
        each!(self, f => f.aim)
    }
    /// Aims the fault (`--aim[=EVENT]`), unless it is aimed already.
    pub fn aim_at(&mut self, aim: Aim) {
        each!(self, f => if !f.aim.is_on() { f.aim = aim })
    }
    /// At most `n` aimed injections (`--aim-count`).
    pub fn cap_count(&mut self, n: u32) {
        each!(self, f => if f.aim.is_on() { f.count = Some(f.count.map_or(n, |c| c.min(n))) })
    }
    /// The event an aimed fault fires on.
    pub fn aim_event(&self, nth: usize) -> Option<AimEvent> {
        self.aim().event(self.kind(), self.target(), nth)
    }
    pub fn offset(&self) -> Option<Duration> {
        each!(self, f => f.offset)
    }
    pub fn count(&self) -> Option<u32> {
        each!(self, f => f.count)
    }
    /// How long it lasts, where the kind takes a `duration`.
    pub fn duration(&self) -> Option<Duration> {
        match self {
            Fault::Pause(f) => f.duration,
            Fault::Delay(f) => f.duration,
            Fault::Partition(f) => f.duration,
            Fault::ClockJump(f) => f.duration,
            Fault::RevokeLease(_) | Fault::ExpireSession(_) | Fault::Kill(_) => None,
        }
    }
    /// pause: what ends it before its `duration`.
    pub fn until(&self) -> Option<Until> {
        match self {
            Fault::Pause(f) => f.until,
            _ => None,
        }
    }
    /// delay: (latency, jitter).
    pub fn latency(&self) -> (Option<Duration>, Option<Duration>) {
        match self {
            Fault::Delay(f) => (f.latency, f.latency_jitter),
            _ => (None, None),
        }
    }
    /// clock-jump: how far the clock steps.
    pub fn by(&self) -> Option<Duration> {
        match self {
            Fault::ClockJump(f) => f.by,
            _ => None,
        }
    }

    /// clock-jump: how far the clock steps backward.
    pub fn back(&self) -> Option<Duration> {
        match self {
            Fault::ClockJump(f) => f.back,
            _ => None,
        }
    }

    /// How long one occurrence lasts, for the schedule (`ttl`: the lock's, the
    /// default window of a clock jump).
    pub fn window(&self, ttl: Duration) -> Duration {
        match self {
            Fault::ClockJump(f) => f.duration.unwrap_or(ttl),
            Fault::RevokeLease(_) | Fault::ExpireSession(_) => Duration::ZERO,
            Fault::Kill(f) => f.restart_after.unwrap_or(Duration::from_secs(3)),
            _ => self.duration().unwrap_or_default(),
        }
    }

    /// The fault's own rules: when it fires, what it needs, which targets fit it.
    /// An error names the key whose line it points at.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let kind = self.kind();
        self.check_aim()?;
        match (self.at(), self.every()) {
            // An aimed fault may leave both out: armed from the start.
            (None, None) if !self.aim().is_on() => {
                return Err(("kind", "needs `at` or `every` (or `aim`)".into()))
            }
            (Some(_), Some(_)) => {
                return Err(("every", "has both `at` and `every`; pick one".into()))
            }
            (_, Some(e)) if e < Duration::from_millis(100) => {
                return Err(("every", "`every` must be at least 100ms".into()))
            }
            _ => {}
        }
        if self.jitter() && self.every().is_none() {
            return Err(("jitter", "`jitter` only goes with `every`".into()));
        }
        let t = self.target();
        if let Some(want) = targets_wanted(kind, t) {
            return Err((
                "target",
                format!("target {t} does not fit; expected {want}"),
            ));
        }
        let needs_duration = matches!(
            kind,
            FaultKind::Pause | FaultKind::Delay | FaultKind::Partition
        );
        if needs_duration && self.duration().is_none() {
            return Err(("kind", format!("a {kind} needs a `duration`")));
        }
        if self.until().is_some()
            && !matches!(t, Target::Holder | Target::RandomWorker | Target::Worker(_))
        {
            return Err((
                "until",
                format!(
                    "`until = \"next-grant\"` ends the pause of one worker when another is \
                     granted its lock; target {t} does not fit (expected holder, random-worker \
                     or worker:N)"
                ),
            ));
        }
        if let Fault::Delay(d) = self {
            if d.latency.is_none() {
                return Err(("kind", "a delay needs a `latency`".into()));
            }
        }
        if let Fault::ClockJump(c) = self {
            if let Some(back) = c.back {
                if c.by.is_some() {
                    return Err((
                        "back",
                        "a clock-jump steps `by` forward or `back`, not both".into(),
                    ));
                }
                if back < Duration::from_millis(1) {
                    return Err(("back", "`back` must be at least 1ms".into()));
                }
                if !c.target.is_worker() {
                    return Err((
                        "back",
                        "`back` steps an elector's clock (a worker target on kubernetes); a \
                         member's clock steps forward only (`by`)"
                            .into(),
                    ));
                }
                return Ok(());
            }
            match c.by {
                None => {
                    return Err((
                        "kind",
                        "a clock-jump needs `by` (how far the clock steps forward, e.g. \"10s\")"
                            .into(),
                    ))
                }
                Some(by) if by < Duration::from_millis(1) => {
                    return Err(("by", "`by` must be at least 1ms".into()))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

impl Fault {
    /// `aim`, `offset` and `count`: what can be seen, and in range.
    fn check_aim(&self) -> Result<(), (&'static str, String)> {
        let aimed = self.aim().is_on();
        if !aimed {
            if self.offset().is_some() {
                return Err(("offset", "`offset` only goes with `aim`".into()));
            }
            if self.count().is_some() {
                return Err(("count", "`count` only goes with `aim`".into()));
            }
            return Ok(());
        }
        if self.aim_event(0) == Some(AimEvent::Renew) {
            return Err(("aim", super::fault::RENEW_UNSEEN.into()));
        }
        if let Some(o) = self.offset() {
            if o > MAX_OFFSET {
                return Err((
                    "offset",
                    format!(
                        "`offset` must be at most {}",
                        humantime::format_duration(MAX_OFFSET)
                    ),
                ));
            }
        }
        match self.count() {
            Some(0) => Err(("count", "`count` must be at least 1".into())),
            Some(c) if c > MAX_COUNT => {
                Err(("count", format!("`count` must be at most {MAX_COUNT}")))
            }
            _ => Ok(()),
        }
    }
}

/// An aimed fault's delay after its event: beyond a minute it aims at nothing.
pub const MAX_OFFSET: Duration = Duration::from_secs(60);
/// Aimed injections of one `[[fault]]`.
pub const MAX_COUNT: u32 = 1000;

/// `None` when `t` fits `kind`; else the targets that would.
fn targets_wanted(kind: FaultKind, t: Target) -> Option<&'static str> {
    let fits = match kind {
        FaultKind::Pause => t.is_worker() || t.is_members() || t == Target::Storage,
        FaultKind::RevokeLease | FaultKind::ExpireSession => {
            matches!(t, Target::Holder | Target::RandomWorker | Target::Worker(_))
        }
        FaultKind::Delay | FaultKind::Partition => t.is_worker_link() || t.is_members(),
        FaultKind::Kill => t.is_members() || t == Target::Storage,
        FaultKind::ClockJump => t.is_members() || t.is_worker(),
    };
    if fits {
        return None;
    }
    Some(match kind {
        FaultKind::Pause => {
            "holder, random-worker, all-workers, worker:N, a member target (leader, \
             member:N, all-members, majority, minority, random-members) or storage"
        }
        FaultKind::RevokeLease | FaultKind::ExpireSession => "holder, random-worker or worker:N",
        FaultKind::Delay | FaultKind::Partition => {
            "workers->service, holder->service, workers->storage or a member target \
             (leader, member:N, all-members, majority, minority, random-members, \
             etcd-majority-minority)"
        }
        FaultKind::Kill => {
            "a member target (leader, member:N, all-members, majority, minority, \
             random-members) or storage"
        }
        FaultKind::ClockJump => {
            "a member target (member:N, all-members, majority, minority, random-members), \
             or on kubernetes a worker target (holder, random-worker, all-workers, worker:N: \
             the elector's own clock)"
        }
    })
}

/// One `[[fault]]` of a scenario. `kind` and `target` are the table's own, kept as
/// fields for the callers that only ask what and whom.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "Fault", into = "Fault")]
pub struct FaultSpec {
    pub kind: FaultKind,
    pub target: Target,
    pub fault: Fault,
}

impl From<Fault> for FaultSpec {
    fn from(fault: Fault) -> Self {
        FaultSpec {
            kind: fault.kind(),
            target: fault.target(),
            fault,
        }
    }
}

impl From<FaultSpec> for Fault {
    fn from(f: FaultSpec) -> Self {
        f.fault
    }
}

impl std::ops::Deref for FaultSpec {
    type Target = Fault;
    fn deref(&self) -> &Fault {
        &self.fault
    }
}

/// The kinds that take a field another kind does not, for the error that says so.
fn taken_by(field: &str) -> Option<&'static str> {
    Some(match field {
        "latency" | "latency_jitter" => "kind = \"delay\"",
        "by" => "kind = \"clock-jump\"",
        "restart_after" => "kind = \"kill\"",
        "until" => "kind = \"pause\"",
        "duration" => {
            "kind = \"pause\", \"delay\", \"partition\" or \"clock-jump\" (a kill lasts \
             until its `restart_after`; revoke-lease and expire-session are instantaneous)"
        }
        _ => return None,
    })
}

/// Locates an error serde found in a `[[fault]]` table. A tagged enum is read
/// whole before its variant, so the TOML parser can only point at the array's
/// first header (`line`); this reads the tables again, each as the kind it names,
/// and returns the line of the first field at fault and what is wrong with it.
pub fn locate_error(text: &str, line: usize) -> Option<(Option<usize>, String)> {
    let first = fault_index_at(text, line)?;
    let doc: toml::Value = toml::from_str(text).ok()?;
    let tables = doc.get("fault")?.as_array()?;
    tables
        .iter()
        .enumerate()
        .skip(first)
        .find_map(|(i, t)| table_error(text, i, t.as_table()?))
}

/// The first field of the `i`-th table that its kind refuses, located.
fn table_error(text: &str, i: usize, table: &toml::Table) -> Option<(Option<usize>, String)> {
    let mut table = table.clone();
    let Some(kind) = table.remove("kind") else {
        let header = line_of_nth_table_key(text, "[[fault]]", i, "kind");
        return Some((header, "missing field `kind`".into()));
    };
    let kind: FaultKind = kind.as_str()?.parse().ok()?;
    let value = toml::Value::Table(table);
    let (key, message) = match kind {
        FaultKind::Pause => field_error::<Pause>(value),
        FaultKind::RevokeLease | FaultKind::ExpireSession => field_error::<Session>(value),
        FaultKind::Delay => field_error::<Delay>(value),
        FaultKind::Partition => field_error::<Partition>(value),
        FaultKind::Kill => field_error::<Kill>(value),
        FaultKind::ClockJump => field_error::<ClockJump>(value),
    }?;
    let at = line_of_nth_table_key(text, "[[fault]]", i, &key);
    let unknown = format!("unknown field `{key}`");
    let message = match taken_by(&key) {
        Some(owner) if message.starts_with(&unknown) => {
            format!("fault #{} ({kind}): `{key}` goes only with {owner}", i + 1)
        }
        _ => message,
    };
    Some((at, message))
}

/// The first field of `value` that does not deserialize as a `T`, and why.
fn field_error<T: DeserializeOwned>(value: toml::Value) -> Option<(String, String)> {
    let e = serde_path_to_error::deserialize::<_, T>(value).err()?;
    let key = e.path().iter().next().map(|s| s.to_string())?;
    Some((key, e.inner().message().to_string()))
}

/// Which `[[fault]]` table has its header on `line` (1-based).
fn fault_index_at(text: &str, line: usize) -> Option<usize> {
    let header = text.lines().nth(line.checked_sub(1)?)?;
    if header.trim() != "[[fault]]" {
        return None;
    }
    let before = text.lines().take(line - 1);
    Some(before.filter(|l| l.trim() == "[[fault]]").count())
}

#[cfg(test)]
mod tests {
    use crate::scenario::{Fault, FaultKind, Scenario, Target};
    use std::time::Duration;

    fn err(text: &str) -> crate::scenario::ScenarioError {
        Scenario::parse(text, "f.toml").expect_err(text)
    }

    #[test]
    fn a_field_the_kind_does_not_take_is_refused_at_its_line() {
        let e = err("name = \"x\"\n[[fault]]\nkind = \"pause\"\nat = \"1s\"\nduration = \"1s\"\n\nlatency = \"5ms\"\n");
        assert_eq!(e.line, Some(7), "{e}");
        assert_eq!(
            e.message,
            "fault #1 (pause): `latency` goes only with kind = \"delay\""
        );
        let e = err("name = \"x\"\n[[fault]]\nkind = \"kill\"\nat = \"1s\"\nrestart_after = \"1s\"\n[[fault]]\nkind = \"revoke-lease\"\nat = \"1s\"\nrestart_after = \"2s\"\n");
        assert_eq!(e.line, Some(9), "{e}");
        assert!(
            e.message.starts_with(
                "fault #2 (revoke-lease): `restart_after` goes only with kind = \"kill\""
            ),
            "{e}"
        );
        // A field no kind takes keeps serde's words, which list the kind's own.
        let e = err("name = \"x\"\n[[fault]]\nkind = \"kill\"\nat = \"1s\"\nlatncy = \"1s\"\n");
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.message.contains("unknown field `latncy`"), "{e}");
        assert!(e.message.contains("restart_after"), "{e}");
    }

    #[test]
    fn bad_values_inside_a_fault_point_at_their_field() {
        let e = err("name = \"x\"\n[[fault]]\nkind = \"pause\"\nat = \"1s\"\nduration = \"ten\"\n");
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.message.contains("duration"), "{e}");
        let e = err("name = \"x\"\n[[fault]]\nkind = \"paus\"\nat = \"1s\"\n");
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("unknown variant `paus`"), "{e}");
        let e = err("name = \"x\"\n[[fault]]\nat = \"1s\"\n");
        assert_eq!(e.line, Some(2), "{e}");
        assert!(e.message.contains("missing field `kind`"), "{e}");
        let e =
            err("name = \"x\"\n[[fault]]\nkind = \"kill\"\nat = \"1s\"\n[[fault]]\nat = \"1s\"\n");
        assert_eq!(e.line, Some(5), "the second table's header: {e}");
    }

    #[test]
    fn until_next_grant_is_a_pause_of_one_worker() {
        let head = "name = \"x\"\n[[fault]]\n";
        let ok = Scenario::parse(
            &format!("{head}kind = \"pause\"\naim = \"read\"\nuntil = \"next-grant\"\nduration = \"5s\"\n"),
            "u.toml",
        )
        .expect("valid");
        assert_eq!(ok.faults[0].until(), Some(super::Until::NextGrant));
        let again = Scenario::parse(&ok.to_toml(), "again.toml").expect("round trip");
        assert_eq!(again.faults, ok.faults);
        let e = err(&format!(
            "{head}kind = \"pause\"\ntarget = \"leader\"\nat = \"1s\"\nduration = \"1s\"\nuntil = \"next-grant\"\n"
        ));
        assert_eq!(e.line, Some(7), "{e}");
        assert!(e.message.contains("target leader does not fit"), "{e}");
        let e = err(&format!(
            "{head}kind = \"kill\"\nat = \"1s\"\nuntil = \"next-grant\"\n"
        ));
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.message.contains("goes only with kind = \"pause\""), "{e}");
        let e = err(&format!(
            "{head}kind = \"pause\"\nat = \"1s\"\nduration = \"1s\"\nuntil = \"next-release\"\n"
        ));
        assert_eq!(e.line, Some(6), "{e}");
        assert!(e.message.contains("next-grant"), "{e}");
    }

    #[test]
    fn each_kind_reads_its_own_fields_and_round_trips() {
        let text = "name = \"x\"\nduration = \"30s\"\n[cluster]\nmembers = 3\n\
                    [[fault]]\nkind = \"delay\"\ntarget = \"leader\"\nevery = \"5s\"\njitter = true\n\
                    duration = \"1s\"\nlatency = \"10ms\"\nlatency_jitter = \"2ms\"\n\
                    [[fault]]\nkind = \"kill\"\ntarget = \"minority\"\nat = \"3s\"\n";
        let s = Scenario::parse(text, "k.toml").expect("valid");
        assert_eq!(s.faults[0].kind, FaultKind::Delay);
        assert_eq!(s.faults[0].target, Target::Leader);
        assert_eq!(
            s.faults[0].latency(),
            (
                Some(Duration::from_millis(10)),
                Some(Duration::from_millis(2))
            )
        );
        assert!(matches!(s.faults[1].fault, Fault::Kill(_)));
        assert_eq!(s.faults[1].window(s.lock.ttl), Duration::from_secs(3));
        let again = Scenario::parse(&s.to_toml(), "again.toml").expect("round trip");
        assert_eq!(again.faults, s.faults);
    }
}

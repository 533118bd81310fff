//! One descriptor per check: its name, the question it answers, how it fails and
//! when its counts are only a floor. The terminal's verdict table, the JUnit
//! file and its Markdown summary, the suite's table and index.html, and
//! report.html all take these words from here, so a check is described once.
//!
//! Why here, in one table, and not next to each check in `harness/src/check/`:
//! report.html is rendered by this crate, which the harness depends on (never
//! the other way round), so only this crate is read by all four renderers. Why
//! not in report.json: a descriptor says what a check *is*, the same for every
//! run, so a report written by an older fencecheck is shown with the words of
//! the binary that renders it, and report.json carries only what the run found.

/// What a check is to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A verdict on the recorded history: a row of the verdict table, a JUnit
    /// testcase (`check NAME`), a section of report.html.
    Check,
    /// A finding judged against the harness's own observation of the service
    /// (present only when it was observed): a row of the verdict table and a
    /// part of report.html's findings section.
    Finding,
    /// What the run tested (the fault tally, the coverage gaps): a gap makes the
    /// run INCONCLUSIVE rather than FAIL.
    Coverage,
}

/// How a check fails a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fails {
    /// A safety check: unless `[expect]` says otherwise it must hold, and a
    /// violation fails the run.
    ByDefault,
    /// Only when the scenario states an expectation for it.
    WhenExpected,
    /// Its verdict alone never fails a run, for the reason given (shown on its
    /// row); an expectation the scenario states for it can.
    Informational(&'static str),
    /// Never: a measurement, not a verdict (the words say so).
    Never(&'static str),
    /// A gap makes the run INCONCLUSIVE (a fault's, unless `[expect]
    /// faults_skipped` / `faults_unconfirmed` allow it).
    Inconclusive,
}

impl Fails {
    /// The rule in words, a clause after "it" ("it fails the run unless …").
    pub fn words(self) -> String {
        match self {
            Fails::ByDefault => "fails the run unless [expect] allows it (a safety check: \
                                 it must hold by default)"
                .into(),
            Fails::WhenExpected => "fails the run only when the scenario's [expect] sets it".into(),
            Fails::Informational(why) => format!(
                "fails the run only when the scenario's [expect] sets it; its verdict \
                 alone is {why}"
            ),
            Fails::Never(why) => format!("never fails a run ({why})"),
            Fails::Inconclusive => {
                "makes the run INCONCLUSIVE when it finds a gap (the run did not test what \
                 it claims)"
                    .into()
            }
        }
    }
}

/// When a count of a check is only a floor (shown `≥ n`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LowerBound {
    /// Without a storage log (a storage of the user's own, `kind = "http"`): the
    /// reason report.json records in the check's `lower_bound`.
    pub no_log: &'static str,
    /// With writes the check could not judge (fencing's `unjudged`), why its
    /// count is then a floor.
    pub unjudged: Option<&'static str>,
}

/// One check, described once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    /// Its row's, testcase's and section's name.
    pub name: &'static str,
    /// The question it answers, one sentence.
    pub summary: &'static str,
    pub kind: Kind,
    pub fails: Fails,
    /// The `[expect]` fields that judge it.
    pub expectations: &'static [&'static str],
    /// When its counts are a floor; `None` when they never are.
    pub lower_bound: Option<LowerBound>,
}

pub const FENCING: Descriptor = Descriptor {
    name: "fencing",
    summary: "Was a write from an older lock grant accepted after a newer grant had written?",
    kind: Kind::Check,
    fails: Fails::ByDefault,
    expectations: &["fencing_violations", "stale_rejected", "fresh_rejected"],
    lower_bound: Some(LowerBound {
        no_log: "HTTP storage: a write concurrent with the newer grant's first operation \
                 cannot be judged from the client side",
        unjudged: Some(
            "a write whose answer was unknown, or that named no grant the harness observed, \
             is not judged, so stale accepted counts only the judged ones",
        ),
    }),
};

pub const MUTEX: Descriptor = Descriptor {
    name: "mutex",
    summary: "Did two workers hold the lock at the same time (client-observed)?",
    kind: Kind::Check,
    fails: Fails::Informational("informational: a lease lock is not a mutex"),
    expectations: &["mutex_overlaps"],
    lower_bound: None,
};

pub const EXCLUSION: Descriptor = Descriptor {
    name: "exclusion",
    summary: "Was a client told it holds a lock the service never granted it, or did two \
              holders overlap with both sessions alive?",
    kind: Kind::Check,
    fails: Fails::ByDefault,
    expectations: &["exclusion_violations"],
    lower_bound: None,
};

pub const COUNTER: Descriptor = Descriptor {
    name: "counter",
    summary: "Were acknowledged increments lost?",
    kind: Kind::Check,
    fails: Fails::ByDefault,
    expectations: &["lost_updates"],
    lower_bound: Some(LowerBound {
        no_log: "HTTP storage: judged by final reads against acknowledged writes; a write \
                 whose answer was lost but applied can hide a lost increment",
        unjudged: None,
    }),
};

pub const LINEARIZABLE: Descriptor = Descriptor {
    name: "linearizable",
    summary: "Does the client-observed storage history fit a fenced register?",
    kind: Kind::Check,
    fails: Fails::ByDefault,
    expectations: &["linearizable"],
    lower_bound: None,
};

pub const TOKEN: Descriptor = Descriptor {
    name: "token",
    summary: "Is the token the clients sent a fencing token — does it grow with every grant, \
              in the service's own order, and is it never shared by two grants?",
    kind: Kind::Check,
    fails: Fails::ByDefault,
    expectations: &["token_regressions", "token_repeats"],
    lower_bound: None,
};

pub const GRANT_VALID: Descriptor = Descriptor {
    name: "grant-valid",
    summary: "Was a client told of a grant after its session had already ended at the service?",
    kind: Kind::Finding,
    fails: Fails::ByDefault,
    expectations: &["late_grants", "late_grants_caught"],
    lower_bound: None,
};

pub const UNSAFE_WINDOW: Descriptor = Descriptor {
    name: "unsafe-window",
    summary: "How long did a holder whose session had ended at the service go on using the \
              storage, and what did the fence do with those operations?",
    kind: Kind::Finding,
    fails: Fails::Never("a finding: measured, never a verdict"),
    expectations: &[],
    lower_bound: Some(LowerBound {
        no_log: "HTTP storage: counted from the client history, only operations sent after \
                 the session ended; one in flight at the end is not counted",
        unjudged: None,
    }),
};

pub const POST_LOSS: Descriptor = Descriptor {
    name: "post-loss",
    summary: "Did an unsafe holder itself say it had lost the lock, and what did it do \
              before and after it knew?",
    kind: Kind::Finding,
    fails: Fails::Never("a finding: measured, never a verdict"),
    expectations: &[],
    lower_bound: None,
};

pub const LIVENESS: Descriptor = Descriptor {
    name: "liveness",
    summary: "Was a worker left waiting for a lock while the service held no entry of it, \
              neither paused nor cut off meanwhile, or a holder never told that the service \
              had ended its session?",
    kind: Kind::Finding,
    fails: Fails::WhenExpected,
    expectations: &["stuck_waits", "untold_holders"],
    lower_bound: None,
};

pub const FAULTS: Descriptor = Descriptor {
    name: "faults",
    summary: "Was every planned fault injected, and was its effect seen?",
    kind: Kind::Coverage,
    fails: Fails::Inconclusive,
    expectations: &["faults_skipped", "faults_unconfirmed"],
    lower_bound: None,
};

pub const COVERAGE: Descriptor = Descriptor {
    name: "coverage",
    summary: "Did the run test what it claims: every acquisition matched to a grant the \
              harness observed, every lock client kept to the protocol?",
    kind: Kind::Coverage,
    fails: Fails::Inconclusive,
    expectations: &[],
    lower_bound: None,
};

/// Every descriptor, in the order the renderers show them.
pub const ALL: &[&Descriptor] = &[
    &FENCING,
    &MUTEX,
    &EXCLUSION,
    &COUNTER,
    &LINEARIZABLE,
    &TOKEN,
    &GRANT_VALID,
    &UNSAFE_WINDOW,
    &POST_LOSS,
    &LIVENESS,
    &FAULTS,
    &COVERAGE,
];

/// The descriptor named `name`.
pub fn named(name: &str) -> Option<&'static Descriptor> {
    ALL.iter().copied().find(|d| d.name == name)
}

/// The check an `[expect]` field judges (`None`: a run statistic such as
/// `keepalive_lost`).
pub fn judged_by(expectation: &str) -> Option<&'static Descriptor> {
    ALL.iter()
        .copied()
        .find(|d| d.expectations.contains(&expectation))
}

impl crate::Checks {
    /// The verdict of the check `d` describes: `None` for a check this report
    /// does not have (not run, or written before it existed) and for the
    /// descriptors that are not of [`Kind::Check`].
    pub fn validity(&self, d: &Descriptor) -> Option<crate::Validity> {
        match d.name {
            "fencing" => Some(self.fencing.valid),
            "mutex" => Some(self.mutex.valid),
            "exclusion" => self.exclusion.as_ref().map(|x| x.valid),
            "counter" => Some(self.counter.valid),
            "linearizable" => self.linearizable.as_ref().map(|l| l.valid),
            "token" => self.token.as_ref().map(|t| t.valid),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_expectations_are_unique() {
        for (i, d) in ALL.iter().enumerate() {
            assert!(
                ALL[i + 1..].iter().all(|e| e.name != d.name),
                "{} twice",
                d.name
            );
            assert!(d.summary.ends_with('?'), "{}: a question", d.name);
            for x in d.expectations {
                assert_eq!(judged_by(x).map(|j| j.name), Some(d.name), "{x}");
            }
        }
        assert_eq!(named("grant-valid"), Some(&GRANT_VALID));
        assert_eq!(judged_by("lost_updates"), Some(&COUNTER));
        assert_eq!(judged_by("keepalive_lost"), None);
    }

    #[test]
    fn every_check_kind_has_a_verdict_and_no_other_does() {
        let checks = crate::Checks {
            fencing: Default::default(),
            mutex: crate::MutexCheck {
                valid: crate::Validity::Invalid,
                holds: 2,
                overlaps: 1,
                examples: Vec::new(),
            },
            counter: crate::CounterCheck {
                valid: crate::Validity::Valid,
                acknowledged: 0,
                lost: 0,
                lost_fraction: None,
                keys: Vec::new(),
                lower_bound: None,
            },
            linearizable: Some(crate::LinearizableCheck {
                valid: crate::Validity::Unknown,
                model: "m".into(),
                operations: 0,
                elapsed_ms: 0.0,
                detail: serde_json::Value::Null,
            }),
            token: Some(crate::TokenCheck::default()),
            judged_from: None,
            exclusion: Some(crate::ExclusionCheck::default()),
        };
        for d in ALL {
            assert_eq!(
                checks.validity(d).is_some(),
                d.kind == Kind::Check,
                "{}",
                d.name
            );
        }
        assert_eq!(
            checks.validity(&MUTEX),
            Some(crate::Validity::Invalid),
            "the mutex's own verdict"
        );
    }
}

//! The findings section of report.html: grant validity and unsafe windows, each
//! against the harness's own observation of the lock service.

use std::fmt::Write;

use super::{check_header, escape, folded_list, hex_id, tiles, Ctx, MAX_LISTED};
use crate::descriptor;
use crate::TokenCheck;

pub(super) fn findings_section(h: &mut String, ctx: &Ctx) {
    let f = &ctx.report.findings;
    h.push_str(
        "<section id=\"findings\" class=\"card check\" data-checker=\"findings\">\n\
         <h2>Findings from the service's own record</h2>\n\
         <p class=\"question\">What did the lock service itself say happened to each session, \
         and how did the clients behave against that? (observed by the harness through the \
         service's change feed, never taken from a worker)</p>\n",
    );
    if !f.observed {
        h.push_str(
            "<p class=\"muted\">This run has no observations of the service \
             (written before fencecheck recorded them).</p>\n</section>\n",
        );
        return;
    }
    if f.observation_gaps > 0 {
        let _ = writeln!(
            h,
            "<p class=\"muted\">The feed had {} gap(s) (a member down): what happened inside them \
             may be missing.</p>",
            f.observation_gaps
        );
    }
    let l = &f.liveness;
    question(h, "liveness", "Liveness", &descriptor::LIVENESS);
    let _ = writeln!(
        h,
        "<p>Workers left waiting ≥ {} s while the lock was free (a waiter never woken, a \
         lock stuck after a reconnect): {}.</p>",
        l.threshold_ms / 1000,
        l.stuck_waits
    );
    if !l.examples.is_empty() {
        let items: Vec<String> = l
            .examples
            .iter()
            .take(MAX_LISTED)
            .map(|w| {
                format!(
                    "<li class=\"violation\">{}</li>",
                    escape(&format!(
                        "Worker {} waited for {} from {}; the lock was free {}.",
                        w.worker,
                        w.key,
                        ctx.clock.at(w.waiting_since_ns),
                        ctx.clock.span(w.free_from_ns, Some(w.free_to_ns))
                    ))
                )
            })
            .collect();
        folded_list(h, "liveness-stuck", &items);
    }
    let _ = writeln!(
        h,
        "<p>Holders never told that the service had ended their session (no session loss \
         reported, no failed keepalive, from the grant to their next acquisition): {}.</p>",
        l.untold_holders
    );
    if !l.untold.is_empty() {
        let items: Vec<String> = l
            .untold
            .iter()
            .take(MAX_LISTED)
            .map(|u| {
                format!(
                    "<li class=\"violation\">{}</li>",
                    escape(&format!(
                        "Worker {} held {} from {}; the service ended session {} at {}; \
                         the hold ended at {}, and the worker was never told.",
                        u.worker,
                        u.key,
                        ctx.clock.at(u.hold_start_ns),
                        u.session,
                        ctx.clock.at(u.session_ended_ns),
                        ctx.clock.at(u.hold_end_ns)
                    ))
                )
            })
            .collect();
        folded_list(h, "liveness-untold", &items);
    }
    let g = &f.grant_validity;
    question(
        h,
        "grant-validity",
        "Grant validity",
        &descriptor::GRANT_VALID,
    );
    tiles(
        h,
        &[
            ("grants told", g.grants, ""),
            (
                "after the session ended",
                g.after_session_end,
                if g.after_session_end > 0 {
                    "bad"
                } else {
                    "good"
                },
            ),
            ("of them caught by the client", g.caught_by_client, ""),
        ],
    );
    if !g.examples.is_empty() {
        h.push_str("<table class=\"grid small\" id=\"late-grants\"><thead><tr><th>worker</th><th>key</th><th>grant</th><th>session</th><th>session ended</th><th>told</th><th>late by</th><th>client</th></tr></thead><tbody>\n");
        for e in &g.examples {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{:.0} ms</td><td>{}</td></tr>",
                e.worker,
                escape(&e.key),
                e.grant.map(|x| x.to_string()).unwrap_or_else(|| "—".into()),
                hex_id(e.session),
                ctx.clock.at(e.session_ended_ns),
                ctx.clock.at(e.told_ns),
                e.told_ns.saturating_sub(e.session_ended_ns) as f64 / 1e6,
                if e.caught_by_client {
                    "caught it (found the grant gone)"
                } else {
                    "went on to use it"
                }
            );
        }
        h.push_str("</tbody></table>\n");
    }
    let u = &f.unsafe_window;
    question(
        h,
        "unsafe-window",
        "Unsafe windows",
        &descriptor::UNSAFE_WINDOW,
    );
    h.push_str("<p>Holds whose session ended at the service while the holder went on (outlived), or had already ended when the grant was told (granted-dead: the window is the whole hold). Marked on the timeline in red.</p>\n");
    if let Some(why) = &u.lower_bound {
        let _ = writeln!(
            h,
            "<p class=\"lower-bound\" id=\"unsafe-window-lower-bound\">≥ The operation \
             counts and windows are lower bounds: {}</p>",
            escape(why)
        );
    }
    tiles(
        h,
        &[
            ("unsafe holds", u.holds, ""),
            (
                "outlived their session",
                u.holds - u.granted_dead.min(u.holds),
                "",
            ),
            (
                "granted on an ended session",
                u.granted_dead,
                if u.granted_dead > 0 { "bad" } else { "" },
            ),
            (
                "writes refused by the fence",
                u.writes_refused,
                if u.writes_refused > 0 { "good" } else { "" },
            ),
            (
                "writes accepted",
                u.writes_accepted,
                if u.writes_accepted > 0 { "bad" } else { "good" },
            ),
            ("reads served", u.reads, ""),
        ],
    );
    let _ = writeln!(
        h,
        "<p>window p50 {:.0} ms · p90 {:.0} ms · max {:.0} ms</p>",
        u.p50_ms, u.p90_ms, u.max_ms
    );
    if u.holds > 0 {
        let p = &u.post_loss;
        let _ = writeln!(
            h,
            "<h4 id=\"post-loss\">Post-loss action window</h4>\n<p class=\"question\">{}</p>\n\
             <p>The same windows cut where \
             the client itself said it had lost the lock (an elector at its renew deadline, \
             a keepalive that failed): {} of {} unsafe holders said so before letting go, \
             p50 {:.0} ms (max {:.0} ms) after the service had moved on.</p>\n\
             <table class=\"grid small\" id=\"post-loss-split\"><thead><tr><th></th>\
             <th>writes refused</th><th>writes accepted</th><th>reads</th></tr></thead><tbody>\n\
             <tr><td>before it knew</td><td>{}</td><td>{}</td><td>{}</td></tr>\n\
             <tr><td>after it knew</td><td>{}</td><td>{}</td><td>{}</td></tr>\n</tbody></table>",
            escape(descriptor::POST_LOSS.summary),
            p.told,
            p.told + p.untold,
            p.believed_p50_ms,
            p.believed_max_ms,
            p.before.writes_refused,
            p.before.writes_accepted,
            p.before.reads,
            p.after.writes_refused,
            p.after.writes_accepted,
            p.after.reads,
        );
    }
    if !u.windows.is_empty() {
        h.push_str("<table class=\"grid small\" id=\"unsafe-windows\"><thead><tr><th>kind</th><th>worker</th><th>key</th><th>grant</th><th>session</th><th>session ended</th><th>last operation</th><th>window</th><th>writes refused</th><th>writes accepted</th><th>reads</th></tr></thead><tbody>\n");
        for w in u.windows.iter().take(super::MAX_LISTED) {
            let _ = writeln!(
                h,
                "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{:.0} ms</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                if w.writes_accepted > 0 { "unmet" } else { "" },
                escape(&w.kind),
                w.worker,
                escape(&w.key),
                w.grant.map(|x| x.to_string()).unwrap_or_else(|| "—".into()),
                hex_id(w.session),
                ctx.clock.at(w.session_ended_ns),
                ctx.clock.at(w.last_op_ns),
                w.window_ms,
                w.writes_refused,
                w.writes_accepted,
                w.reads
            );
        }
        h.push_str("</tbody></table>\n");
    }
    h.push_str("</section>\n");
}

/// A finding's heading and its descriptor's question.
fn question(h: &mut String, id: &str, title: &str, d: &descriptor::Descriptor) {
    let _ = writeln!(
        h,
        "<h3 id=\"{id}\">{title}</h3>\n<p class=\"question\">{}</p>",
        escape(d.summary)
    );
}

pub(super) fn token_section(h: &mut String, ctx: &Ctx, t: &TokenCheck) {
    check_header(h, ctx, &descriptor::TOKEN, t.valid);
    tiles(
        h,
        &[
            ("grants", t.grants, ""),
            (
                "tokens that went backwards",
                t.regressions,
                if t.regressions > 0 { "bad" } else { "" },
            ),
            (
                "tokens repeated",
                t.repeats,
                if t.repeats > 0 { "bad" } else { "" },
            ),
            ("grants not seen at the service", t.unverified, ""),
        ],
    );
    if t.valid == crate::Validity::Unknown {
        h.push_str("<p class=\"muted\">No token was sent: nothing to judge.</p>\n");
    }
    if !t.examples.is_empty() {
        h.push_str("<table class=\"grid small\" id=\"token-examples\"><thead><tr><th>key</th><th>earlier grant</th><th>its token</th><th>later grant</th><th>its token</th></tr></thead><tbody>\n");
        for e in &t.examples {
            let _ = writeln!(
                h,
                "<tr class=\"unmet\"><td>{}</td><td>worker {} · {}</td><td>{}</td><td>worker {} · {}</td><td>{}</td></tr>",
                escape(&e.key),
                e.earlier_worker,
                e.earlier_grant,
                e.earlier_token,
                e.later_worker,
                e.later_grant,
                e.later_token
            );
        }
        h.push_str("</tbody></table>\n");
    }
    h.push_str("</section>\n");
}

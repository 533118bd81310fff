//! The fencing, mutex and counter sections: each checker's counts and its
//! counterexamples in words.

use super::*;

pub(super) fn fencing_section(h: &mut String, ctx: &Ctx) {
    let f = &ctx.report.checks.fencing;
    check_header(h, ctx, &descriptor::FENCING, f.valid);
    let bad = |n: u64| if n > 0 { "bad" } else { "" };
    tiles(
        h,
        &[
            ("writes", f.writes, ""),
            ("accepted", f.accepted, ""),
            ("rejected", f.rejected, ""),
            (
                if f.lower_bound.is_some() {
                    "stale accepted (violations, ≥: a lower bound)"
                } else {
                    "stale accepted (violations)"
                },
                f.stale_accepted,
                bad(f.stale_accepted),
            ),
            (
                "stale rejected (fencing at work)",
                f.stale_rejected,
                if f.stale_rejected > 0 { "good" } else { "" },
            ),
            (
                "fresh rejected (liveness)",
                f.fresh_rejected,
                bad(f.fresh_rejected),
            ),
            ("unjudged (no revision)", f.unjudged, ""),
        ],
    );
    if let Some(why) = &f.lower_bound {
        let _ = writeln!(
            h,
            "<p class=\"lower-bound\" id=\"fencing-lower-bound\">≥ {} stale accepted \
             is a lower bound: {}</p>",
            f.stale_accepted,
            escape(why)
        );
    } else if f.unjudged > 0 {
        let _ = writeln!(
            h,
            "<p class=\"lower-bound\" id=\"fencing-lower-bound\">≥ {} stale accepted \
             is a lower bound: {} writes unjudged ({})</p>",
            f.stale_accepted,
            f.unjudged,
            escape(
                descriptor::FENCING
                    .lower_bound
                    .and_then(|l| l.unjudged)
                    .unwrap_or_default()
            )
        );
    }
    if f.violations.is_empty() {
        h.push_str("<p class=\"ok-line\">No stale write was accepted.</p>\n");
    } else {
        let _ = writeln!(h, "<h3>Stale writes accepted ({})</h3>", f.violations.len());
        let items: Vec<String> = f
            .violations
            .iter()
            .take(MAX_LISTED)
            .enumerate()
            .map(|(i, v)| {
                let id = format!("fencing-{}", i + 1);
                format!(
                    "<li id=\"{id}\" class=\"violation\">{} {}</li>",
                    escape(&ctx.stale_words(v)),
                    goto_link(&id)
                )
            })
            .collect();
        folded_list(h, "fencing-violations", &items);
        more_note(h, f.violations.len());
    }
    if !f.fresh_rejected_examples.is_empty() {
        let _ = writeln!(
            h,
            "<h3>Legitimate holders refused ({} shown of {})</h3>",
            f.fresh_rejected_examples.len().min(MAX_LISTED),
            f.fresh_rejected
        );
        let items: Vec<String> = f
            .fresh_rejected_examples
            .iter()
            .take(MAX_LISTED)
            .enumerate()
            .map(|(i, w)| {
                let id = format!("fresh-{}", i + 1);
                format!(
                    "<li id=\"{id}\" class=\"fresh\">{} {}</li>",
                    escape(&ctx.fresh_words(w)),
                    goto_link(&id)
                )
            })
            .collect();
        folded_list(h, "fresh-rejected", &items);
    }
    h.push_str("</section>\n");
}

pub(super) fn mutex_section(h: &mut String, ctx: &Ctx) {
    let m = &ctx.report.checks.mutex;
    check_header(h, ctx, &descriptor::MUTEX, m.valid);
    tiles(
        h,
        &[
            ("holds", m.holds, ""),
            (
                "overlapping holds",
                m.overlaps,
                if m.overlaps > 0 { "bad" } else { "" },
            ),
        ],
    );
    if m.examples.is_empty() {
        h.push_str("<p class=\"ok-line\">No two holds overlapped.</p>\n");
    } else {
        let _ = writeln!(
            h,
            "<h3>Overlapping holds ({} shown of {})</h3>",
            m.examples.len().min(MAX_LISTED),
            m.overlaps
        );
        let items: Vec<String> = m
            .examples
            .iter()
            .take(MAX_LISTED)
            .enumerate()
            .map(|(i, o)| {
                let id = format!("mutex-{}", i + 1);
                format!(
                    "<li id=\"{id}\" class=\"overlap\">{} {}</li>",
                    escape(&ctx.overlap_words(o)),
                    goto_link(&id)
                )
            })
            .collect();
        folded_list(h, "mutex-overlaps", &items);
    }
    h.push_str("</section>\n");
}

pub(super) fn exclusion_section(h: &mut String, ctx: &Ctx, x: &crate::ExclusionCheck) {
    check_header(h, ctx, &descriptor::EXCLUSION, x.valid);
    h.push_str(
        "<p class=\"muted\">A bug of the lock, unlike the mutex overlap of a lease lock \
         under a pause.</p>\n",
    );
    let bad = |n: u64| if n > 0 { "bad" } else { "" };
    tiles(
        h,
        &[
            ("acquisitions", x.acquisitions, ""),
            ("matched to an observed grant", x.matched, ""),
            ("phantom grants", x.phantom, bad(x.phantom)),
            (
                "overlaps, both sessions alive",
                x.unexplained_overlaps,
                bad(x.unexplained_overlaps),
            ),
            (
                "unjudged (lock never observed)",
                x.unobserved,
                bad(x.unobserved),
            ),
        ],
    );
    if !x.unobserved_entries.is_empty() {
        let names: Vec<String> = x
            .unobserved_entries
            .iter()
            .map(|e| format!("<code>{}</code>", escape(e)))
            .collect();
        let _ = writeln!(
            h,
            "<p class=\"lower-bound\" id=\"exclusion-unobserved\">Never observed at the \
             service: {}. Their acquisitions are not judged, so the run cannot pass.</p>",
            names.join(", ")
        );
    }
    if x.phantoms.is_empty() && x.overlaps.is_empty() {
        h.push_str("<p class=\"ok-line\">Every matched acquisition was a grant the service made, and no two live sessions held at once.</p>\n");
    }
    if !x.phantoms.is_empty() {
        let _ = writeln!(
            h,
            "<h3>Phantom grants ({} shown of {})</h3>",
            x.phantoms.len().min(MAX_LISTED),
            x.phantom
        );
        let items: Vec<String> = x
            .phantoms
            .iter()
            .take(MAX_LISTED)
            .map(|p| {
                let holder = match p.held_by {
                    Some((g, s)) => format!("; the service held grant {g} (session {}) then", hex_id(s)),
                    None => "; the service held no grant then".into(),
                };
                format!(
                    "<li class=\"violation\">{}</li>",
                    escape(&format!(
                        "Worker {} was told it holds {} ({}{}) at {}, a grant the service never made{}.",
                        p.worker,
                        p.key,
                        p.entry.as_deref().unwrap_or("no entry named"),
                        p.value.as_deref().map(|v| format!(", value {v}")).unwrap_or_default(),
                        ctx.clock.at(p.told_ns),
                        holder
                    ))
                )
            })
            .collect();
        folded_list(h, "exclusion-phantoms", &items);
    }
    if !x.overlaps.is_empty() {
        let _ = writeln!(
            h,
            "<h3>Overlaps with both sessions alive ({} shown of {})</h3>",
            x.overlaps.len().min(MAX_LISTED),
            x.unexplained_overlaps
        );
        let items: Vec<String> = x
            .overlaps
            .iter()
            .take(MAX_LISTED)
            .map(|o| {
                format!(
                    "<li class=\"violation\">{}</li>",
                    escape(&format!(
                        "Workers {} (grant {}, session {}) and {} (grant {}, session {}) held {} at once, {}, with both sessions alive at the service.",
                        o.a_worker,
                        opt_i64(o.a_grant),
                        hex_id(o.a_session),
                        o.b_worker,
                        opt_i64(o.b_grant),
                        hex_id(o.b_session),
                        o.key,
                        ctx.clock.span(o.start_ns, Some(o.end_ns))
                    ))
                )
            })
            .collect();
        folded_list(h, "exclusion-overlaps", &items);
    }
    h.push_str("</section>\n");
}

pub(super) fn counter_section(h: &mut String, ctx: &Ctx) {
    let c = &ctx.report.checks.counter;
    check_header(h, ctx, &descriptor::COUNTER, c.valid);
    tiles(
        h,
        &[
            ("acknowledged increments", c.acknowledged, ""),
            (
                if c.lower_bound.is_some() {
                    "lost (≥: a lower bound)"
                } else {
                    "lost"
                },
                c.lost,
                if c.lost > 0 { "bad" } else { "" },
            ),
        ],
    );
    if let Some(why) = &c.lower_bound {
        let _ = writeln!(
            h,
            "<p class=\"lower-bound\" id=\"counter-lower-bound\">≥ {} lost is a lower \
             bound: {}</p>",
            c.lost,
            escape(why)
        );
    }
    if let Some(f) = c.lost_fraction.filter(|f| *f > 0.0) {
        let _ = writeln!(
            h,
            "<p id=\"counter-lost-fraction\"><b>{}</b> of the acknowledged increments are \
             missing from the final value (acknowledged increments compared with the final \
             value, over all keys; Jepsen's measure for its 2020 etcd lock test).</p>",
            percent(f)
        );
    }
    if !c.keys.is_empty() {
        h.push_str(
            "<table class=\"grid\" id=\"counter-keys\"><thead><tr><th>key</th><th>acknowledged</th>\
             <th>applied by the storage</th><th>final value</th><th>lost</th>\
             <th>of acknowledged</th><th></th></tr></thead><tbody>\n",
        );
        for k in &c.keys {
            let words = if k.lost > 0 {
                format!(
                    "the storage accepted {} increments but the final value is {}: {} overwritten",
                    k.applied, k.final_value, k.lost
                )
            } else {
                "every applied increment is in the final value".to_string()
            };
            let _ = writeln!(
                h,
                "<tr class=\"{}\"><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                if k.lost > 0 { "unmet" } else { "" },
                escape(&k.key),
                k.acknowledged,
                k.applied,
                k.final_value,
                k.lost,
                k.lost_fraction.map(percent).unwrap_or_default(),
                escape(&words)
            );
        }
        h.push_str("</tbody></table>\n");
    }
    h.push_str("</section>\n");
}

/// A share as a percentage with one decimal, e.g. `18.2%`.
fn percent(f: f64) -> String {
    format!("{:.1}%", f * 100.0)
}

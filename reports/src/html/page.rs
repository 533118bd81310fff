//! The page's frame: the verdict banner, the run's facts, the navigation, the
//! "how to read this report" box, and the small pieces every section uses.

use super::*;

pub fn render_html(report: &Report, timeline: &Timeline) -> String {
    let ctx = Ctx {
        report,
        clock: Clock {
            origin: report.run.time_origin_ns,
        },
        lanes: Lanes::new(report, timeline),
        faults: report.faults.iter().map(|f| (f.id, f)).collect(),
    };
    let run = &report.run;
    let mut h = String::with_capacity(64 * 1024 + timeline.ops.len() * 64);
    let title = format!("{} — {} — fencecheck", run.scenario, verdict_word(report));
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>\n{}</style>\n</head>\n<body>\n",
        escape(&title),
        REPORT_CSS
    );
    verdict_banner(&mut h, &ctx);
    h.push_str("<main>\n");
    nav(&mut h, report);
    run_facts(&mut h, &ctx);
    fencing_section(&mut h, &ctx);
    mutex_section(&mut h, &ctx);
    if let Some(x) = &report.checks.exclusion {
        exclusion_section(&mut h, &ctx, x);
    }
    counter_section(&mut h, &ctx);
    if let Some(l) = &report.checks.linearizable {
        linearizable_section(&mut h, &ctx, l);
    }
    if let Some(t) = &report.checks.token {
        findings::token_section(&mut h, &ctx, t);
    }
    findings::findings_section(&mut h, &ctx);
    timeline_section(&mut h, &ctx);
    stats_section(&mut h, &ctx);
    how_to_read(&mut h);
    let _ = write!(
        h,
        "</main>\n<footer>fencecheck {} · report schema {} · run directory <code>{}</code></footer>\n",
        escape(&report.fencecheck_version),
        report.schema_version,
        escape(&run.run_dir)
    );
    h.push_str("<div id=\"tl-tip\" class=\"tip\" hidden></div>\n");
    h.push_str("<script type=\"application/json\" id=\"fc-data\">");
    h.push_str(&script_safe_json(&data_json(&ctx, timeline)));
    h.push_str("</script>\n<script>\n");
    h.push_str(REPORT_JS);
    h.push_str("</script>\n</body>\n</html>\n");
    h
}

/// PASS, FAIL, INCOMPLETE for a run that never reached its end, or
/// INCONCLUSIVE for one that needed a finding no fault took effect to make.
pub(super) fn verdict_word(r: &Report) -> &'static str {
    if r.incomplete.is_some() {
        "INCOMPLETE"
    } else if r.inconclusive.is_some() {
        "INCONCLUSIVE"
    } else if r.passed {
        "PASS"
    } else {
        "FAIL"
    }
}

pub(super) fn verdict_banner(h: &mut String, ctx: &Ctx) {
    let r = ctx.report;
    let unmet = r.expectations.iter().filter(|e| !e.met).count();
    let sub = if let Some(why) = &r.incomplete {
        why.clone()
    } else if let Some(why) = &r.inconclusive {
        format!("INCONCLUSIVE: {why}")
    } else if r.passed {
        if r.expectations.is_empty() {
            "PASS: no expectation was set, and nothing the defaults check failed".to_string()
        } else {
            format!(
                "PASS: every expectation met ({} of {})",
                r.expectations.len(),
                r.expectations.len()
            )
        }
    } else if unmet > 0 {
        format!(
            "FAIL: {unmet} of {} expectations not met",
            r.expectations.len()
        )
    } else {
        "FAIL".to_string()
    };
    let word = verdict_word(r);
    let _ = write!(
        h,
        "<header id=\"verdict\" class=\"verdict {cls}\" data-passed=\"{passed}\">\n\
         <div class=\"verdict-word\">{word}</div>\n<div class=\"verdict-text\">\n\
         <h1>{scenario}</h1>\n<p class=\"desc\">{desc}</p>\n<p class=\"verdict-sub\">{sub} <a class=\"howto-link\" href=\"#howto\">how to read this report</a></p>\n",
        cls = if r.passed {
            "pass"
        } else if r.inconclusive.is_some() {
            "fail unk"
        } else {
            "fail"
        },
        passed = r.passed,
        scenario = escape(&r.run.scenario),
        desc = escape(&r.run.description),
        sub = escape(&sub),
    );
    h.push_str("</div>\n");
    expectations_table(h, &r.expectations, "expectations");
    h.push_str("</header>\n");
}

pub(super) fn expectations_table(h: &mut String, exps: &[Expectation], id: &str) {
    if exps.is_empty() {
        return;
    }
    let _ = write!(
        h,
        "<table class=\"exp\" id=\"{id}\">\n<thead><tr><th>expectation</th><th>expected</th>\
         <th>actual</th><th></th></tr></thead>\n<tbody>\n"
    );
    for e in exps {
        let _ = writeln!(
            h,
            "<tr class=\"{cls}\" data-name=\"{name}\"><td><code>{name}</code></td><td>{exp}</td>\
             <td>{act}</td><td class=\"met\">{met}</td></tr>",
            cls = if e.met { "met" } else { "unmet" },
            name = escape(&e.name),
            exp = if e.default {
                format!("{} <small>(default)</small>", escape(&e.expected))
            } else {
                escape(&e.expected)
            },
            act = escape(&e.actual),
            met = if e.met { "✓ met" } else { "✗ NOT MET" },
        );
    }
    h.push_str("</tbody></table>\n");
}

pub(super) fn nav(h: &mut String, r: &Report) {
    h.push_str("<nav id=\"toc\"><a href=\"#run\">run</a>");
    for d in descriptor::ALL {
        if let Some(v) = r.checks.validity(d) {
            let _ = write!(
                h,
                "<a href=\"#check-{name}\" class=\"v-{}\">{name}</a>",
                validity_class(v),
                name = d.name
            );
        }
    }
    h.push_str("<a href=\"#findings\">findings</a>");
    h.push_str("<a href=\"#timeline\">timeline</a><a href=\"#charts\">throughput &amp; latency</a><a href=\"#howto\">how to read</a></nav>\n");
}

pub(super) fn run_facts(h: &mut String, ctx: &Ctx) {
    let run = &ctx.report.run;
    h.push_str("<section id=\"run\" class=\"card\">\n<h2>The run</h2>\n<dl class=\"facts\">\n");
    let fact = |h: &mut String, k: &str, v: String| {
        let _ = writeln!(h, "<div><dt>{}</dt><dd>{}</dd></div>", escape(k), v);
    };
    fact(h, "scenario", format!("<b>{}</b>", escape(&run.scenario)));
    fact(h, "seed", run.seed.to_string());
    fact(
        h,
        "backend",
        format!(
            "{} <span class=\"muted\">— {}</span>",
            escape(&run.backend),
            escape(&run.backend_reason)
        ),
    );
    let version = if run.service_version.is_empty() {
        &run.etcd_version
    } else {
        &run.service_version
    };
    fact(
        h,
        "lock service",
        format!(
            "<span id=\"service\">{}</span> {} · {} member{}",
            escape(&run.service),
            escape(version),
            run.etcd_members,
            if run.etcd_members == 1 { "" } else { "s" }
        ),
    );
    fact(
        h,
        "workload",
        format!(
            "{} {} workers · {} key{} · session TTL {} s",
            run.workers,
            escape(&run.behaviour),
            run.keys,
            if run.keys == 1 { "" } else { "s" },
            run.ttl_s
        ),
    );
    if !run.network.is_empty() {
        fact(
            h,
            "network",
            format!(
                "<span id=\"network\">{}</span> (for the whole run; not a fault)",
                escape(&run.network)
            ),
        );
    }
    fact(
        h,
        "storage",
        format!(
            "<span id=\"resource\">{}</span> · fencing <code>{}</code> · token <code>{}</code>",
            escape(&run.resource),
            escape(&run.fencing),
            escape(&run.token)
        ),
    );
    fact(
        h,
        "duration",
        format!(
            "{:.1} s · started {}",
            run.duration_s,
            escape(&run.started_at)
        ),
    );
    let st = &ctx.report.stats;
    fact(
        h,
        "activity",
        format!(
            "{} events · {} faults · {} keepalives lost",
            st.events,
            ctx.report.faults.len(),
            st.keepalive_lost
        ),
    );
    h.push_str("</dl>\n");
    let _ = writeln!(
        h,
        "<div class=\"repro\"><span>reproduce</span><pre id=\"repro-cmd\">{}</pre>\
         <button type=\"button\" class=\"copy\" data-copy=\"repro-cmd\">copy</button></div>",
        escape(&run.command)
    );
    if let Some(j) = &ctx.report.checks.judged_from {
        let _ = writeln!(
            h,
            "<div id=\"judged-from\" class=\"problems\"><h3>Judged from the {} \
             (no storage log): weaker than with one</h3><ul>",
            escape(&j.source.replace('-', " "))
        );
        for w in &j.weaker {
            let _ = writeln!(h, "<li>{}</li>", escape(w));
        }
        h.push_str("</ul></div>\n");
    }
    if !ctx.report.coverage.is_empty() {
        let _ = writeln!(
            h,
            "<div id=\"coverage\" class=\"problems\"><h3>Not tested: why this run cannot \
             pass</h3><p class=\"question\">{}</p><ul>",
            escape(descriptor::COVERAGE.summary)
        );
        for p in &ctx.report.coverage {
            let _ = writeln!(h, "<li>{}</li>", escape(p));
        }
        h.push_str("</ul></div>\n");
    }
    if !ctx.report.problems.is_empty() {
        h.push_str("<div id=\"problems\" class=\"problems\"><h3>Problems met while reading the record</h3><ul>\n");
        for p in &ctx.report.problems {
            let _ = writeln!(h, "<li>{}</li>", escape(p));
        }
        h.push_str("</ul></div>\n");
    }
    h.push_str("</section>\n");
}

/// The timeline's colours, shown under it and in the how-to box.
pub(super) const LEGEND: &str = "<li><span class=\"sw hold\"></span>lock hold (acquire ok → release)</li>\n\
<li><span class=\"sw wait\"></span>waiting for the lock (acquire invoked)</li>\n\
<li><span class=\"sw o-ok\"></span>op ok</li>\n\
<li><span class=\"sw o-rej\"></span>write rejected as stale by the storage</li>\n\
<li><span class=\"sw o-fail\"></span>op failed</li>\n\
<li><span class=\"sw o-unk\"></span>outcome unknown (timed out / never completed)</li>\n\
<li><span class=\"sw stale\"></span>stale write accepted — a fencing violation (dashed line: the newer write it came after)</li>\n\
<li><span class=\"sw overlap\"></span>two holders at once (mutex overlap)</li>\n\
<li><span class=\"sw ka\"></span>keepalive lost</li>\n\
<li><span class=\"sw f-pause\"></span>pause fault window</li>\n\
<li><span class=\"sw f-revoke\"></span>lease revocation</li>\n\
<li><span class=\"sw unsafe\"></span>unsafe window (session ended at the service, holder still at work)</li>\n\
<li><span class=\"sw f-other\"></span>other fault</li>\n\
";

/// Every check's descriptor as a definition: its question, how it fails, and
/// when its counts are a floor.
pub(super) fn check_defs(h: &mut String) {
    for d in descriptor::ALL {
        let _ = write!(
            h,
            "<dt>{}</dt><dd>{} <i>It {}.</i>",
            d.name,
            escape(d.summary),
            escape(&d.fails.words())
        );
        if !d.expectations.is_empty() {
            let fields: Vec<String> = d
                .expectations
                .iter()
                .map(|x| format!("<code>{x}</code>"))
                .collect();
            let _ = write!(h, " Its [expect] fields: {}.", fields.join(", "));
        }
        if let Some(lb) = d.lower_bound {
            let _ = write!(h, " ≥ marks a floor: {}", escape(lb.no_log));
            if let Some(why) = lb.unjudged {
                let _ = write!(h, "; unjudged writes: {}", escape(why));
            }
            h.push('.');
        }
        h.push_str("</dd>\n");
    }
}

pub(super) fn how_to_read(h: &mut String) {
    h.push_str(
        "<section id=\"howto\" class=\"card\">\n<details open>\n<summary><h2>How to read this report</h2></summary>\n\
<div class=\"howto-grid\">\n<div>\n\
<p>Workers contend for one etcd lock per key and, while they believe they hold it, do read-modify-write \
increments on the storage, sending a <b>fencing token</b> with each write. The nemesis injects faults \
(SIGSTOP pauses, lease revocation) so that a holder loses its lock without knowing.</p>\n\
<dl class=\"defs\" id=\"check-defs\">\n",
    );
    check_defs(h);
    h.push_str(
        "<dt>verdict</dt><dd>PASS when every expectation of the scenario holds (a checker may be INVALID and the run \
still PASS, e.g. the negative-control scenarios expect violations).</dd>\n\
</dl>\n</div>\n<div>\n<h3>Timeline colours</h3>\n<ul class=\"legend\">\n",
    );
    h.push_str(LEGEND);
    h.push_str(
        "</ul>\n<p class=\"muted\">Zoomed out, each pixel column shows the worst outcome among its ops. Scroll to zoom, \
drag to pan, shift-drag to zoom into a range, hover for details. Times are seconds since the run started.</p>\n\
</div>\n</div>\n</details>\n</section>\n",
    );
}

/// A check's section opens with its verdict, its name and its descriptor's
/// question, then the scenario's expectations that judge it.
pub(super) fn check_header(h: &mut String, ctx: &Ctx, d: &Descriptor, valid: Validity) {
    let (id, name) = (d.name, d.name);
    let _ = write!(
        h,
        "<section id=\"check-{id}\" class=\"card check\" data-checker=\"{id}\" data-valid=\"{v}\">\n\
         <h2><span class=\"badge v-{cls}\">{vtext}</span> {name}</h2>\n<p class=\"question\">{q}</p>\n",
        v = match valid {
            Validity::Valid => "true",
            Validity::Invalid => "false",
            Validity::Unknown => "unknown",
        },
        cls = validity_class(valid),
        vtext = valid,
        q = escape(d.summary),
    );
    let exps: Vec<Expectation> = ctx
        .report
        .expectations
        .iter()
        .filter(|e| expectation_checker(&e.name) == id)
        .cloned()
        .collect();
    if !exps.is_empty() {
        h.push_str("<div class=\"check-exp\"><span>expected by the scenario:</span> ");
        for e in &exps {
            let _ = write!(
                h,
                "<span class=\"pill {}\"><code>{}</code> {} — actual {} {}</span> ",
                if e.met { "met" } else { "unmet" },
                escape(&e.name),
                escape(&e.expected),
                escape(&e.actual),
                if e.met { "✓" } else { "✗" }
            );
        }
        h.push_str("</div>\n");
    }
}

pub(super) fn tiles(h: &mut String, items: &[(&str, u64, &str)]) {
    h.push_str("<div class=\"tiles\">");
    for (label, n, class) in items {
        let _ = write!(
            h,
            "<div class=\"tile {class}\"><b>{n}</b><span>{}</span></div>",
            escape(label)
        );
    }
    h.push_str("</div>\n");
}

/// Items shown before a list folds the rest under "show N more".
pub(super) const SHOWN_UNFOLDED: usize = 5;

/// Writes `<li>` items, folding all but the first few into a `<details>`.
pub(super) fn folded_list(h: &mut String, list_id: &str, items: &[String]) {
    let _ = writeln!(h, "<ol class=\"cx\" id=\"{list_id}\">");
    for (i, it) in items.iter().enumerate() {
        if i == SHOWN_UNFOLDED {
            let _ = writeln!(
                h,
                "</ol>\n<details class=\"more\"><summary>show {} more</summary>\n<ol class=\"cx\" start=\"{}\">",
                items.len() - SHOWN_UNFOLDED,
                SHOWN_UNFOLDED + 1
            );
        }
        h.push_str(it);
        h.push('\n');
    }
    h.push_str("</ol>\n");
    if items.len() > SHOWN_UNFOLDED {
        h.push_str("</details>\n");
    }
}

pub(super) fn goto_link(id: &str) -> String {
    format!("<a class=\"goto\" href=\"#show={id}\" data-goto=\"{id}\">show on timeline ↘</a>")
}

pub(super) fn more_note(h: &mut String, total: usize) {
    if total > MAX_LISTED {
        let _ = writeln!(
            h,
            "<p class=\"muted\">… and {} more, all marked on the timeline.</p>",
            total - MAX_LISTED
        );
    }
}

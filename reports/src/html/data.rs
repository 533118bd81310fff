//! The timeline and charts sections, and the JSON block the inline script draws
//! them from (columns of small integers, so 100,000 operations stay fast).

use super::*;

pub(super) fn timeline_section(h: &mut String, ctx: &Ctx) {
    let n = ctx.lanes.ids.len();
    let lane_h = lane_height(n);
    let _ = write!(
        h,
        "<section id=\"timeline\" class=\"card\" data-lanes=\"{n}\">\n<h2>Timeline</h2>\n\
<div class=\"tl-controls\"><button type=\"button\" data-zoom=\"in\" title=\"zoom in\">+</button>\
<button type=\"button\" data-zoom=\"out\" title=\"zoom out\">−</button>\
<button type=\"button\" data-zoom=\"reset\" title=\"whole run\">whole run</button>\
<span id=\"tl-range\" class=\"muted\"></span><span class=\"muted tl-hint\">scroll: zoom · drag: pan · shift-drag: zoom to range</span></div>\n\
<div class=\"tl-body\">\n<div class=\"tl-labels\" style=\"--lane-h:{lane_h}px\">\
<div class=\"tl-axis-space\"></div><div class=\"tl-lane nemesis\" data-lane=\"nemesis\">nemesis</div>"
    );
    for (i, w) in ctx.lanes.ids.iter().enumerate() {
        let _ = write!(
            h,
            "<div class=\"tl-lane worker\" data-lane=\"{i}\" data-worker=\"{w}\">worker {w}</div>"
        );
    }
    h.push_str(
        "</div>\n<div class=\"tl-canvas-wrap\"><canvas id=\"tl-canvas\" aria-label=\"timeline\"></canvas>\
         <div id=\"tl-loading\" class=\"muted\">drawing…</div></div>\n</div>\n\
         <noscript><p>The timeline and the charts are drawn by JavaScript; everything else on this page reads without it.</p></noscript>\n",
    );
    h.push_str("<ul class=\"legend strip\" id=\"tl-legend\">");
    h.push_str(LEGEND);
    h.push_str("</ul>\n");
    fault_counts_table(h, ctx.report);
    if ctx.report.faults.is_empty() {
        h.push_str("<p class=\"muted\" id=\"tl-faults-none\">No fault was injected.</p>\n");
    } else {
        h.push_str("<h3>Faults</h3>\n<ul id=\"tl-faults\" class=\"faults\">\n");
        for f in &ctx.report.faults {
            let _ = writeln!(
                h,
                "<li class=\"tl-fault k-{kind_cls}\" id=\"fault-{id}\" data-fault-id=\"{id}\" data-kind=\"{kind}\">\
                 <span class=\"sw {sw}\"></span> <b>#{id}</b> {kind} → {target}: {words}{aim}{effect} {link}</li>",
                id = f.id,
                kind_cls = escape(&f.kind),
                sw = fault_swatch(&f.kind),
                kind = escape(&f.kind),
                target = escape(&f.target),
                words = escape(&ctx.fault_words(f)),
                link = goto_link(&format!("fault-{}", f.id)),
                aim = f
                    .aim_words()
                    .map(|a| format!(" <span class=\"aim\">— {}</span>", escape(&a)))
                    .unwrap_or_default(),
                effect = f
                    .effect
                    .as_ref()
                    .map(|e| format!(
                        " <span class=\"effect e-{st}\">— {st}: {how}</span>",
                        st = e.status.as_str(),
                        how = escape(&e.how)
                    ))
                    .unwrap_or_default(),
            );
        }
        h.push_str("</ul>\n");
    }
    h.push_str("</section>\n");
}

/// Per fault kind: planned, injected, confirmed, unconfirmed, skipped; then
/// every fault not confirmed, with its reason.
fn fault_counts_table(h: &mut String, r: &Report) {
    if r.fault_counts.is_empty() {
        return;
    }
    let _ = write!(
        h,
        "<h3>Fault confirmation</h3>\n<p class=\"question\">{}</p>\n\
         <table class=\"exp\" id=\"fault-counts\">\n<thead><tr>\
         <th>kind</th><th>planned</th><th>injected</th><th>confirmed</th><th>unconfirmed</th>\
         <th>skipped</th></tr></thead>\n<tbody>\n",
        escape(descriptor::FAULTS.summary)
    );
    for c in &r.fault_counts {
        let _ = writeln!(
            h,
            "<tr class=\"{cls}\" data-kind=\"{kind}\"><td>{kind}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td></tr>",
            c.planned,
            c.injected,
            c.confirmed,
            c.unconfirmed,
            c.skipped,
            cls = if c.confirmed == c.injected && c.skipped == 0 {
                "met"
            } else {
                "unmet"
            },
            kind = escape(&c.kind),
        );
    }
    h.push_str("</tbody></table>\n");
    let reasons: Vec<_> = r
        .fault_counts
        .iter()
        .flat_map(|c| c.reasons.iter().map(move |why| (&c.kind, why)))
        .collect();
    if !reasons.is_empty() {
        h.push_str("<ul id=\"fault-reasons\" class=\"faults\">\n");
        for (kind, why) in reasons {
            let _ = writeln!(
                h,
                "<li data-fault-id=\"{id}\"><b>#{id}</b> {kind} {st}: {reason} {link}</li>",
                id = why.id,
                kind = escape(kind),
                st = why.status.as_str(),
                reason = escape(&why.reason),
                link = goto_link(&format!("fault-{}", why.id)),
            );
        }
        h.push_str("</ul>\n");
    }
}

pub(super) fn fault_swatch(kind: &str) -> &'static str {
    match kind {
        "pause" => "f-pause",
        "revoke-lease" => "f-revoke",
        _ => "f-other",
    }
}

pub(super) fn lane_height(n: usize) -> u32 {
    match n {
        0..=12 => 30,
        13..=24 => 22,
        25..=48 => 16,
        _ => 12,
    }
}

pub(super) fn stats_section(h: &mut String, ctx: &Ctx) {
    let st = &ctx.report.stats;
    h.push_str(
        "<section id=\"charts\" class=\"card\">\n<h2>Throughput and latency</h2>\n\
<p class=\"muted\">Both charts follow the timeline's zoom; fault windows are shaded.</p>\n\
<h3>Operations completed per second, by outcome</h3>\n\
<div class=\"chart-wrap\"><canvas id=\"chart-throughput\" class=\"chart\"></canvas></div>\n\
<h3>Latency over time <span class=\"muted\">(each op a dot; lines: p99 per time bucket; log scale)</span></h3>\n\
<div id=\"lat-legend\" class=\"chart-legend\"></div>\n\
<div class=\"chart-wrap\"><canvas id=\"chart-latency\" class=\"chart tall\"></canvas></div>\n",
    );
    let _ = write!(
        h,
        "<h3>Latency percentiles</h3>\n<table class=\"grid num\" id=\"latency-table\"><thead><tr><th>op</th><th>count</th>\
         <th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr></thead><tbody>\n"
    );
    for l in &st.latency {
        let _ = writeln!(
            h,
            "<tr data-op=\"{op}\"><td><code>{op}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            l.count,
            us_words(l.p50_us),
            us_words(l.p90_us),
            us_words(l.p99_us),
            us_words(l.p999_us),
            us_words(l.max_us),
            op = escape(&l.op),
        );
    }
    h.push_str("</tbody></table>\n");
    let _ = writeln!(
        h,
        "<p class=\"muted\">acquires ok {} · failed {} · reads ok {} · writes ok {} · rejected {} · unknown {} · keepalives lost {}</p>",
        st.acquires_ok,
        st.acquires_failed,
        st.reads_ok,
        st.writes_ok,
        st.writes_rejected,
        st.writes_unknown,
        st.keepalive_lost
    );
    h.push_str("</section>\n");
}

pub(super) fn us_words(us: u64) -> String {
    if us >= 1_000_000 {
        format!("{:.2} s", us as f64 / 1e6)
    } else if us >= 1000 {
        format!("{:.2} ms", us as f64 / 1e3)
    } else {
        format!("{us} µs")
    }
}

/// The embedded data. Times are microseconds since the run's origin; ops and holds
/// are columns sorted by lane then start, so the script can binary-search a lane.
pub(super) fn data_json(ctx: &Ctx, tl: &Timeline) -> String {
    let r = ctx.report;
    let clock = &ctx.clock;
    let mut out = String::with_capacity(tl.ops.len() * 60 + 4096);
    let _ = write!(
        out,
        "{{\"v\":1,\"end\":{},\"workers\":{},\"laneH\":{},",
        clock.rel_us(r.run.time_end_ns.max(r.run.time_origin_ns)),
        serde_json::to_string(&ctx.lanes.ids).unwrap_or_else(|_| "[]".into()),
        lane_height(ctx.lanes.ids.len())
    );

    let mut fnames = Interner::with(&["acquire", "read", "write", "release"]);
    let mut outcomes = Interner::with(&["ok", "rejected-stale", "fail", "unknown"]);
    let mut keys = Interner::default();
    let mut errors = Interner::default();

    let mut order: Vec<usize> = (0..tl.ops.len()).collect();
    order.sort_by_key(|&i| {
        let o = &tl.ops[i];
        (ctx.lanes.of(o.worker), o.start_ns)
    });
    // Compact encodings keep a 100,000-op page small enough for the browser to parse
    // quickly: lanes as offsets instead of a lane per op, starts as deltas within a
    // lane, ends as durations, and string indices shifted by one so 0 means none.
    let mut ops = Columns::new(&["f", "s", "d", "o", "k", "v", "t", "r", "q", "x"]);
    let mut lane_starts = vec![0usize; ctx.lanes.ids.len() + 1];
    let mut has_ops = vec![false; ctx.lanes.ids.len()];
    let mut prev: Option<(usize, i64)> = None;
    for (n, i) in order.into_iter().enumerate() {
        let o = &tl.ops[i];
        let lane = ctx.lanes.of(o.worker).unwrap_or(0);
        let start = clock.rel_us(o.start_ns);
        let base = match prev {
            Some((l, t)) if l == lane => t,
            _ => {
                lane_starts[lane] = n;
                has_ops[lane] = true;
                0
            }
        };
        prev = Some((lane, start));
        ops.push(0, Some(fnames.get(&o.f) as i128));
        ops.push(1, Some((start - base) as i128));
        ops.push(2, o.end_ns.map(|e| (clock.rel_us(e) - start) as i128));
        ops.push(3, Some(outcomes.get(&o.outcome) as i128));
        ops.push(
            4,
            Some(o.key.as_deref().map_or(0, |k| keys.get(k) + 1) as i128),
        );
        ops.push(5, o.value.map(i128::from));
        ops.push(6, o.token.map(i128::from));
        ops.push(7, o.revision.map(i128::from));
        ops.push(8, o.request_id.map(i128::from));
        ops.push(
            9,
            Some(o.error.as_deref().map_or(0, |e| errors.get(e) + 1) as i128),
        );
    }
    // Lanes without ops start where the next lane starts.
    let n_ops = tl.ops.len();
    let mut next = n_ops;
    for l in (0..ctx.lanes.ids.len()).rev() {
        if has_ops[l] {
            next = lane_starts[l];
        } else {
            lane_starts[l] = next;
        }
    }
    lane_starts[ctx.lanes.ids.len()] = n_ops;
    let ops = ops.finish();
    let _ = write!(
        out,
        "\"ops\":{},\"opLanes\":{},",
        ops,
        serde_json::to_string(&lane_starts).unwrap_or_else(|_| "[]".into())
    );

    let mut order: Vec<usize> = (0..tl.holds.len()).collect();
    order.sort_by_key(|&i| {
        let hd = &tl.holds[i];
        (ctx.lanes.of(hd.worker), hd.start_ns)
    });
    let mut holds = Columns::new(&["w", "s", "e", "k", "r", "l", "rel"]);
    for i in order {
        let hd = &tl.holds[i];
        holds.push(0, Some(ctx.lanes.of(hd.worker).unwrap_or(0) as i128));
        holds.push(1, Some(clock.rel_us(hd.start_ns) as i128));
        holds.push(2, Some(clock.rel_us(hd.end_ns) as i128));
        holds.push(3, Some(keys.get(&hd.key) as i128));
        holds.push(4, hd.revision.map(i128::from));
        holds.push(5, hd.lease.map(i128::from));
        holds.push(6, Some(hd.released as i128));
    }
    let _ = write!(out, "\"holds\":{},", holds.finish());
    // Unsafe windows (session ended at the service, holder still at work): a red
    // bar under the hold, from the end to the holder's last operation.
    let unsafe_windows: Vec<[i64; 3]> = ctx
        .report
        .findings
        .unsafe_window
        .windows
        .iter()
        .filter_map(|w| {
            let lane = ctx.lanes.of(w.worker)? as i64;
            let end = clock.rel_us(w.last_op_ns);
            Some([lane, clock.rel_us(w.session_ended_ns), end])
        })
        .collect();
    let _ = write!(
        out,
        "\"unsafe\":{},",
        serde_json::to_string(&unsafe_windows).unwrap_or_else(|_| "[]".into())
    );

    let notices: Vec<Value> = tl
        .notices
        .iter()
        .map(|n| {
            serde_json::json!({
                "w": ctx.lanes.of(n.worker),
                "t": clock.rel_us(n.time_ns),
                "what": n.what,
                "detail": n.detail,
            })
        })
        .collect();
    let faults: Vec<Value> = r
        .faults
        .iter()
        .map(|f| {
            let victims: Vec<Option<usize>> = Ctx::victims(f)
                .into_iter()
                .map(|w| ctx.lanes.of(w))
                .collect();
            serde_json::json!({
                "id": f.id,
                "kind": f.kind,
                "target": f.target,
                "s": clock.rel_us(f.start_ns),
                "e": f.end_ns.map(|e| clock.rel_us(e)),
                "outcome": f.outcome,
                "victims": victims,
                "words": ctx.fault_words(f),
                "detail": js_safe(&f.detail),
            })
        })
        .collect();
    let mut marks: Vec<Value> = Vec::new();
    for (i, v) in r.checks.fencing.violations.iter().enumerate() {
        marks.push(serde_json::json!({
            "id": format!("fencing-{}", i + 1),
            "kind": "stale",
            "w": ctx.lanes.of_str(&v.stale.worker),
            "t": clock.rel_us(v.stale.time_ns),
            "w2": ctx.lanes.of_str(&v.newer.worker),
            "t2": clock.rel_us(v.newer.time_ns),
            "acq": v.stale_acquired_ns.map(|a| clock.rel_us(a)),
            "faults": v.faults,
            "words": ctx.stale_words(v),
        }));
    }
    for (i, w) in r.checks.fencing.fresh_rejected_examples.iter().enumerate() {
        marks.push(serde_json::json!({
            "id": format!("fresh-{}", i + 1),
            "kind": "fresh",
            "w": ctx.lanes.of_str(&w.worker),
            "t": clock.rel_us(w.time_ns),
            "words": ctx.fresh_words(w),
        }));
    }
    for (i, o) in r.checks.mutex.examples.iter().enumerate() {
        marks.push(serde_json::json!({
            "id": format!("mutex-{}", i + 1),
            "kind": "overlap",
            "a": ctx.lanes.of(o.a.worker),
            "b": ctx.lanes.of(o.b.worker),
            "s": clock.rel_us(o.start_ns),
            "e": clock.rel_us(o.end_ns),
            "as": clock.rel_us(o.a.start_ns),
            "bs": clock.rel_us(o.b.start_ns),
            "faults": o.faults,
            "words": ctx.overlap_words(o),
        }));
    }
    if let Some(l) = &r.checks.linearizable {
        if let Some(ce) = l.detail.get("counterexample").filter(|c| c.is_object()) {
            if let (Some(a), Some(b)) = ce_time_range(ctx, ce) {
                // lincheck's clients are the workers: highlight their lanes.
                let mut lanes: Vec<usize> = ce
                    .as_object()
                    .into_iter()
                    .flat_map(|o| o.values())
                    .filter_map(Value::as_array)
                    .flatten()
                    .filter_map(|op| op.get("client").and_then(Value::as_u64))
                    .filter_map(|c| u32::try_from(c).ok().and_then(|c| ctx.lanes.of(c)))
                    .collect();
                lanes.sort_unstable();
                lanes.dedup();
                marks.push(serde_json::json!({
                    "id": "lin",
                    "kind": "lin",
                    "s": clock.rel_us(a),
                    "e": clock.rel_us(b),
                    "lanes": lanes,
                    "words": "the linearizability counterexample's operations",
                }));
            }
        }
    }
    let _ = write!(
        out,
        "\"notices\":{},\"faults\":{},\"marks\":{},\"fnames\":{},\"outcomes\":{},\"keys\":{},\"errors\":{}}}",
        serde_json::to_string(&notices).unwrap_or_else(|_| "[]".into()),
        serde_json::to_string(&faults).unwrap_or_else(|_| "[]".into()),
        serde_json::to_string(&marks).unwrap_or_else(|_| "[]".into()),
        fnames.json(),
        outcomes.json(),
        keys.json(),
        errors.json(),
    );
    out
}

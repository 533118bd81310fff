//! The linearizability section: the checker's result, its counterexample as a
//! table and as an SVG of the operations that cannot be placed.

use super::*;

pub(super) fn linearizable_section(h: &mut String, ctx: &Ctx, l: &LinearizableCheck) {
    check_header(h, ctx, &descriptor::LINEARIZABLE, l.valid);
    let _ = writeln!(
        h,
        "<p>{} operations checked against the <code>{}</code> model in {:.0} ms.</p>",
        l.operations,
        escape(&l.model),
        l.elapsed_ms
    );
    let detail = &l.detail;
    if let Some(parts) = detail.get("partitions").and_then(Value::as_array) {
        if !parts.is_empty() && parts.iter().all(Value::is_object) {
            h.push_str("<h3>Partitions</h3>\n");
            object_table(h, ctx, parts, "lin-partitions", None);
        }
    }
    match detail.get("counterexample") {
        Some(Value::Object(ce)) => {
            h.push_str(
                "<div id=\"lin-counterexample\" class=\"lin-cx\">\n<h3>Counterexample</h3>\n",
            );
            let (t0, t1) = ce_time_range(ctx, &Value::Object(ce.clone()));
            if let (Some(a), Some(b)) = (t0, t1) {
                let _ = writeln!(
                    h,
                    "<p>The operations below lie in {}. {}</p>",
                    ctx.clock.span(a, Some(b)),
                    goto_link("lin")
                );
            }
            // Scalars first (key, state…), then the op lists, which are long.
            for (k, v) in ce {
                if !matches!(v, Value::Array(_)) {
                    let _ = writeln!(
                        h,
                        "<div class=\"kv\"><span>{}</span> <code>{}</code></div>",
                        escape(k),
                        escape(&compact_json(v))
                    );
                }
            }
            for (k, v) in ce {
                if let Value::Array(items) = v {
                    let _ = writeln!(h, "<h4>{} ({})</h4>", escape(k), items.len());
                    if items.iter().all(Value::is_object) && !items.is_empty() {
                        // A long linearized prefix hides the interesting end.
                        let shown: &[Value] = if k == "linearized" && items.len() > 20 {
                            let _ = writeln!(
                                h,
                                "<p class=\"muted\">the last 20 of {} shown</p>",
                                items.len()
                            );
                            &items[items.len() - 20..]
                        } else {
                            items
                        };
                        object_table(h, ctx, shown, &format!("lin-{}", k), Some(k));
                    } else {
                        let _ =
                            writeln!(h, "<pre class=\"json\">{}</pre>", escape(&pretty_json(v)));
                    }
                }
            }
            if let Some(svg) = lin_svg(ctx, ce) {
                h.push_str(&svg);
            }
            h.push_str("</div>\n");
        }
        Some(Value::Null) | None if l.valid != Validity::Invalid => {}
        _ => {
            h.push_str("<h3>Checker output</h3>\n");
            let _ = writeln!(
                h,
                "<pre class=\"json\" id=\"lin-detail\">{}</pre>",
                escape(&pretty_json(detail))
            );
        }
    }
    h.push_str("</section>\n");
}

pub(super) fn pretty_json(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

pub(super) fn compact_json(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        _ => serde_json::to_string(v).unwrap_or_default(),
    }
}

pub(super) fn is_time_field(k: &str) -> bool {
    k.ends_with("_ns") || k == "time" || k == "call" || k == "return"
}

/// A table of JSON objects: one column per field seen. Nanosecond times within the
/// run are shown as seconds since its start.
pub(super) fn object_table(
    h: &mut String,
    ctx: &Ctx,
    items: &[Value],
    id: &str,
    group: Option<&str>,
) {
    // Known lincheck fields first, in reading order; anything else after.
    let mut cols: Vec<String> = [
        "index",
        "client",
        "process",
        "key",
        "op",
        "f",
        "arg",
        "out",
        "call_ns",
        "return_ns",
        "unknown",
        "state_after",
    ]
    .iter()
    .filter(|k| items.iter().any(|it| it.get(**k).is_some()))
    .map(|k| k.to_string())
    .collect();
    for it in items {
        if let Value::Object(o) = it {
            for k in o.keys() {
                if !cols.contains(k) {
                    cols.push(k.clone());
                }
            }
        }
    }
    let _ = write!(
        h,
        "<table class=\"grid small\" id=\"{}\"><thead><tr>",
        escape(id)
    );
    for c in &cols {
        let _ = write!(h, "<th>{}</th>", escape(c));
    }
    h.push_str("</tr></thead><tbody>\n");
    for it in items {
        let _ = write!(
            h,
            "<tr{}>",
            if group == Some("unplaceable") {
                " class=\"unmet\""
            } else {
                ""
            }
        );
        for c in &cols {
            let v = it.get(c).unwrap_or(&Value::Null);
            let text = match (is_time_field(c), v.as_u64()) {
                (true, Some(ns)) if in_run(ctx, ns) => ctx.clock.at(ns),
                _ if v.is_null() => String::new(),
                _ => compact_json(v),
            };
            let _ = write!(h, "<td>{}</td>", escape(&text));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody></table>\n");
}

pub(super) fn in_run(ctx: &Ctx, ns: u64) -> bool {
    let r = &ctx.report.run;
    let slack = (r.time_end_ns.saturating_sub(r.time_origin_ns)) / 2 + 60_000_000_000;
    ns + slack >= r.time_origin_ns && ns <= r.time_end_ns + slack
}

/// The span of run times (`*_ns` fields) found in a counterexample, if any.
pub(super) fn ce_time_range(ctx: &Ctx, v: &Value) -> (Option<u64>, Option<u64>) {
    fn walk(ctx: &Ctx, v: &Value, lo: &mut Option<u64>, hi: &mut Option<u64>) {
        match v {
            Value::Object(o) => {
                for (k, v) in o {
                    match (is_time_field(k), v.as_u64()) {
                        (true, Some(ns)) if in_run(ctx, ns) => {
                            *lo = Some(lo.map_or(ns, |l| l.min(ns)));
                            *hi = Some(hi.map_or(ns, |x| x.max(ns)));
                        }
                        _ => walk(ctx, v, lo, hi),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| walk(ctx, v, lo, hi)),
            _ => {}
        }
    }
    let (mut lo, mut hi) = (None, None);
    walk(ctx, v, &mut lo, &mut hi);
    (lo, hi)
}

/// A Knossos-style picture of a linearizability counterexample: one row per client,
/// each op a bar from call to return; the ops that cannot be placed in red.
pub(super) fn lin_svg(ctx: &Ctx, ce: &serde_json::Map<String, Value>) -> Option<String> {
    struct Bar {
        client: String,
        call: u64,
        ret: Option<u64>,
        label: String,
        bad: bool,
    }
    let mut bars = Vec::new();
    for (group, v) in ce {
        let Some(items) = v.as_array() else { continue };
        let items = if group == "linearized" && items.len() > 20 {
            &items[items.len() - 20..]
        } else {
            &items[..]
        };
        for it in items {
            let Some(call) = it.get("call_ns").and_then(Value::as_u64) else {
                continue;
            };
            let client = it
                .get("client")
                .or_else(|| it.get("process"))
                .or_else(|| it.get("worker"))
                .map(compact_json)
                .unwrap_or_else(|| "?".into());
            let op = it.get("op").or_else(|| it.get("f")).map(compact_json);
            let arg = it.get("arg").filter(|v| !v.is_null()).map(compact_json);
            let out = it.get("out").filter(|v| !v.is_null()).map(compact_json);
            let mut label = op.unwrap_or_default();
            if let Some(a) = arg {
                let _ = write!(label, "({a})");
            }
            if let Some(o) = out {
                let _ = write!(label, " → {o}");
            }
            bars.push(Bar {
                client,
                call,
                ret: it.get("return_ns").and_then(Value::as_u64),
                label,
                bad: group == "unplaceable",
            });
        }
    }
    if bars.is_empty() {
        return None;
    }
    let t0 = bars.iter().map(|b| b.call).min()?;
    let t1 = bars
        .iter()
        .map(|b| b.ret.unwrap_or(b.call))
        .max()?
        .max(t0 + 1);
    let span = (t1 - t0) as f64 * 1.08;
    let mut clients: Vec<String> = bars.iter().map(|b| b.client.clone()).collect();
    clients.sort();
    clients.dedup();
    let (w, left, row) = (900.0_f64, 90.0_f64, 34.0_f64);
    let height = 30.0 + row * clients.len() as f64;
    let x = |ns: u64| left + (ns - t0) as f64 / span * (w - left - 10.0);
    let mut s = format!(
        "<svg class=\"lin-svg\" id=\"lin-svg\" viewBox=\"0 0 {w} {height}\" width=\"100%\" role=\"img\" \
         aria-label=\"counterexample operations\">\n"
    );
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"14\" class=\"axis\">{}</text><text x=\"{}\" y=\"14\" class=\"axis\" text-anchor=\"end\">{}</text>",
        escape(&ctx.clock.at(t0)),
        w - 10.0,
        escape(&ctx.clock.at(t1))
    );
    for (i, c) in clients.iter().enumerate() {
        let y = 24.0 + row * i as f64;
        let _ = writeln!(
            s,
            "<text x=\"4\" y=\"{}\" class=\"lane\">client {}</text><line x1=\"{left}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" class=\"rule\"/>",
            y + row / 2.0 + 4.0,
            escape(c),
            w - 10.0,
            y + row - 2.0,
            y + row - 2.0
        );
    }
    for b in &bars {
        let i = clients.iter().position(|c| *c == b.client).unwrap_or(0);
        let y = 24.0 + row * i as f64 + 6.0;
        let x0 = x(b.call);
        let x1 = b.ret.map_or(w - 10.0, x).max(x0 + 3.0);
        // Labels of ops in the right half grow leftwards, so none runs off the picture.
        let (tx, anchor) = if x0 > (left + w) / 2.0 {
            (x1 - 3.0, "end")
        } else {
            (x0 + 3.0, "start")
        };
        let _ = writeln!(
            s,
            "<g class=\"{}\"><rect x=\"{x0:.1}\" y=\"{y}\" width=\"{:.1}\" height=\"{}\" rx=\"3\"{}/>\
             <text x=\"{:.1}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text><title>{} {}–{}</title></g>",
            if b.bad { "op bad" } else { "op" },
            x1 - x0,
            row - 14.0,
            if b.ret.is_none() {
                " stroke-dasharray=\"4 3\""
            } else {
                ""
            },
            tx,
            y + row - 18.0,
            escape(&b.label),
            escape(&b.label),
            escape(&ctx.clock.at(b.call)),
            b.ret
                .map(|r| escape(&ctx.clock.at(r)))
                .unwrap_or_else(|| "never returned".into())
        );
    }
    s.push_str("</svg>\n");
    Some(s)
}

//! `index.html`: one line per run of a suite, linking each report.

use super::*;

/// Renders the index page of a suite of runs.
pub fn render_index(entries: &[SuiteEntry]) -> String {
    let passed = entries.iter().filter(|e| e.passed).count();
    let failed = entries.len() - passed;
    let all_pass = failed == 0;
    let mut h = String::with_capacity(8192 + entries.len() * 512);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>fencecheck suite — {}</title>\n<style>\n{}</style>\n</head>\n<body>\n",
        if all_pass { "PASS" } else { "FAIL" },
        REPORT_CSS
    );
    let _ = write!(
        h,
        "<header id=\"verdict\" class=\"verdict {cls}\" data-passed=\"{all_pass}\">\
         <div class=\"verdict-word\">{word}</div><div class=\"verdict-text\"><h1>fencecheck suite</h1>\
         <p class=\"verdict-sub\">{n} run{s}: {passed} passed, {failed} failed · {secs:.1} s in all</p></div></header>\n<main>\n",
        cls = if all_pass { "pass" } else { "fail" },
        word = if all_pass { "PASS" } else { "FAIL" },
        n = entries.len(),
        s = if entries.len() == 1 { "" } else { "s" },
        secs = entries.iter().map(|e| e.elapsed_s).sum::<f64>(),
    );
    h.push_str(
        "<section class=\"card\"><table class=\"grid sortable\" id=\"suite\"><thead><tr>\
         <th data-sort=\"text\">verdict</th><th data-sort=\"text\">scenario</th><th data-sort=\"text\">key counts</th>\
         <th data-sort=\"num\">elapsed</th><th data-sort=\"num\">seed</th><th data-sort=\"text\">service</th></tr></thead><tbody>\n",
    );
    for e in entries {
        let _ = writeln!(
            h,
            "<tr class=\"run {cls}\" data-passed=\"{p}\"><td><span class=\"badge v-{vcls}\">{word}</span></td>\
             <td><a href=\"{href}\">{scenario}</a></td><td>{line}</td><td data-v=\"{el}\">{el:.1} s</td>\
             <td data-v=\"{seed}\">{seed}</td><td>{service} {version}</td></tr>",
            cls = if e.passed { "pass" } else { "fail" },
            p = e.passed,
            vcls = if e.passed { "valid" } else { "invalid" },
            word = if e.passed { "PASS" } else { "FAIL" },
            href = escape(&e.report_html),
            scenario = escape(&e.scenario),
            line = escape(&e.verdict_line),
            el = e.elapsed_s,
            seed = e.seed,
            service = escape(&e.service),
            version = escape(&e.version),
        );
    }
    h.push_str("</tbody></table></section>\n");
    // What each check asks, so the key counts read without a run's report.
    h.push_str("<section class=\"card\" id=\"checks\"><h2>The checks</h2>\n<dl class=\"defs\">\n");
    check_defs(&mut h);
    h.push_str("</dl></section>\n</main>\n<script>\n");
    h.push_str(INDEX_JS);
    h.push_str("</script>\n</body>\n</html>\n");
    h
}

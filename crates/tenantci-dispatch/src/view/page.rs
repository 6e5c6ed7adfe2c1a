//! The status page (`/` on the status listener): the same [`Status`] as HTML, rendered here
//! (pure), one self-contained document: inline CSS, no script, no external asset, reloaded by
//! the browser every few seconds (`<meta http-equiv="refresh">`). Capacity as bars, the
//! tasks grouped by state, and the last hour's timeline (`timeline`, from the task history).
//!
//! Invariant: every value from outside (repository, job and label names, errors) is escaped.

use std::fmt::Write as _;

use super::history::HistoryDoc;
use super::{State, Status, TaskStatus, timeline};

/// Seconds between the page's reloads.
pub const REFRESH_SECS: u32 = 5;

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#1d2330;background:#f7f8fa}\
h1{font-size:1.3em}h2{font-size:1.05em;margin-top:1.4em}table{border-collapse:collapse;background:#fff}\
td,th{padding:.3em .8em;border-bottom:1px solid #e3e6ec;text-align:left}th{color:#5b6475;font-weight:600}\
.bar{width:14em;height:.9em;background:#e3e6ec;border-radius:.45em;overflow:hidden;display:inline-block;vertical-align:middle}\
.bar>span{display:block;height:100%;background:#3a7bd5}.full>span{background:#d5713a}\
.ok{color:#1f7a3a}.bad{color:#b3261e}.muted{color:#5b6475}";

/// HTML-escapes text for element content and quoted attributes.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn bar(used: u32, capacity: u32) -> String {
    let pct = (u64::from(used) * 100)
        .checked_div(u64::from(capacity))
        .unwrap_or(0)
        .min(100);
    let full = if used >= capacity { " full" } else { "" };
    format!(
        "<span class=\"bar{full}\"><span style=\"width:{pct}%\"></span></span> {used}/{capacity}"
    )
}

fn reachable(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "<span class=\"ok\">reachable</span>",
        Some(false) => "<span class=\"bad\">unreachable</span>",
        None => "<span class=\"muted\">unknown</span>",
    }
}

/// The whole page (pure): the status, then the timeline of `recent` (the task history).
pub fn render(s: &Status, recent: &HistoryDoc) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\">\
         <link rel=\"icon\" href=\"data:,\">\
         <title>tenantci dispatcher {}</title><style>{STYLE}</style></head><body>\
         <h1>tenantci dispatcher <code>{}</code> {}</h1>",
        esc(&s.instance),
        esc(&s.instance),
        if s.leader {
            "(leader)"
        } else {
            "(standby: the leader claims)"
        },
    );
    summary(&mut h, s);
    for state in State::ALL {
        let tasks: Vec<&TaskStatus> = s.tasks.iter().filter(|t| t.state == state).collect();
        if !tasks.is_empty() {
            tasks_table(&mut h, state, &tasks);
        }
    }
    if s.tasks.is_empty() {
        h.push_str("<p class=\"muted\">No task held: nothing queued or running.</p>");
    }
    h.push_str(&timeline::render(recent, s.generated_at, esc));
    let _ = write!(
        h,
        "<p class=\"muted\">{} · reloads every {REFRESH_SECS}s · JSON: <a href=\"/v1/status\">/v1/status</a>, <a href=\"/v1/history\">/v1/history</a></p></body></html>",
        s.generated_at.format("%Y-%m-%d %H:%M:%S UTC")
    );
    h
}

fn summary(h: &mut String, s: &Status) {
    let m = &s.summary;
    h.push_str(
        "<h2>Capacity</h2><table><tr><th>backend</th><th>used</th><th>queued</th><th>API</th></tr>",
    );
    for b in &m.backends {
        let api = match &b.error {
            None => reachable(Some(true)).to_string(),
            Some(e) => format!(
                "{} <span class=\"muted\">{}</span>",
                reachable(Some(false)),
                esc(e)
            ),
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{api}</td></tr>",
            b.backend,
            bar(b.used, b.capacity),
            b.queued
        );
    }
    for c in &m.classes {
        let _ = write!(
            h,
            "<tr><td>class {} <span class=\"muted\">({}, runs-on {})</span></td><td>{}</td><td>warm {}</td><td></td></tr>",
            esc(&c.name),
            c.backend,
            esc(&c.label),
            bar(c.used, c.capacity),
            c.warm_slots
        );
    }
    let _ = write!(
        h,
        "</table><p>Queue depth {} · claims in the last minute: {} · forge {} {} · cache {} · labels {}</p>",
        m.queue_depth,
        m.claims_per_minute,
        esc(&m.forge.url),
        reachable(m.forge.reachable),
        if m.cache.enabled {
            format!("{} bytes stored", m.cache.stored_bytes)
        } else {
            "off".into()
        },
        esc(&m.labels.join(", ")),
    );
}

fn tasks_table(h: &mut String, state: State, tasks: &[&TaskStatus]) {
    let _ = write!(
        h,
        "<h2 id=\"{0}\">{0} ({1})</h2><table><tr><th>task</th><th>repository</th><th>workflow</th>\
         <th>job</th><th>runs-on</th><th>backend</th><th>class</th><th>executor</th><th>node</th>\
         <th>age</th><th>in state</th></tr>",
        state.name(),
        tasks.len()
    );
    for t in tasks {
        let or_dash = |v: Option<&str>| esc(v.unwrap_or("-"));
        let _ = write!(
            h,
            "<tr class=\"task\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}s</td><td>{}s</td></tr>",
            t.task,
            esc(&t.repository),
            esc(&t.workflow),
            esc(&t.job),
            esc(&t.runs_on.join(",")),
            t.backend,
            or_dash(t.class.as_deref()),
            or_dash(t.executor.as_deref()),
            or_dash(t.node.as_deref()),
            t.age_seconds,
            t.in_state_seconds
        );
    }
    h.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::super::tests::full;
    use super::*;

    #[test]
    fn the_page_groups_tasks_by_state_and_escapes_what_comes_from_outside() {
        let mut s = full();
        s.tasks[0].repository = "acme/<script>".into();
        let html = render(&s, &super::super::history::build(&[], &Default::default()));
        assert!(html.contains("<h2 id=\"Reported\">Reported (1)</h2>"));
        assert!(html.contains("<h2 id=\"Queued\">Queued (1)</h2>"));
        assert!(html.contains("acme/&lt;script&gt;") && !html.contains("<script"));
        assert!(html.contains("bar full"), "the pod backend is full");
        assert!(
            !html.contains("http://") && !html.contains("src="),
            "no external asset"
        );
    }
}

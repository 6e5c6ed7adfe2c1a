//! The status page's timeline of the last hour (pure): one bar per task of the history, its
//! phases coloured, as inline SVG with a legend, rendered on the server (no script, no
//! external asset). Each phase's rectangle carries a `<title>` (the browser's own tooltip).
//!
//! Invariant: every value from outside (repository names) is escaped.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::history::{HistoryDoc, TaskHistory, short};
use crate::task::history::Phase;

/// How far back the timeline reaches.
pub const WINDOW_SECS: i64 = 3600;
/// At most this many bars (the most recent tasks).
pub const MAX_BARS: usize = 60;

const LABEL_W: f64 = 180.0;
const PLOT_W: f64 = 720.0;
const ROW_H: f64 = 16.0;
const TOP: f64 = 20.0;

/// A phase's colour (one per phase, readable on white).
pub fn colour(phase: &str) -> &'static str {
    match phase {
        "forge_queue" => "#9e9e9e",
        "claim" => "#6d4c41",
        "queue" => "#d5713a",
        "scheduling" => "#c62828",
        "starting" => "#8e24aa",
        "runner_start" => "#3949ab",
        "run" => "#2e7d32",
        "teardown" => "#78909c",
        _ => "#000000",
    }
}

/// The timeline's HTML: a heading, the SVG and its legend; a sentence when no task of the
/// last hour has a history.
pub fn render(doc: &HistoryDoc, now: DateTime<Utc>, esc: fn(&str) -> String) -> String {
    let start = now - chrono::Duration::seconds(WINDOW_SECS);
    let tasks: Vec<&TaskHistory> = doc
        .tasks
        .iter()
        .filter(|t| t.marks.values().max().is_some_and(|last| *last >= start))
        .take(MAX_BARS)
        .collect();
    let mut h = String::from("<h2 id=\"timeline\">The last hour</h2>");
    if tasks.is_empty() {
        h.push_str("<p class=\"muted\">No task passed a mark in the last hour.</p>");
        return h;
    }
    let height = TOP + ROW_H * tasks.len() as f64 + 4.0;
    let _ = write!(
        h,
        "<svg class=\"timeline\" width=\"{w}\" height=\"{height}\" viewBox=\"0 0 {w} {height}\" role=\"img\" aria-label=\"phases of the tasks of the last hour\">",
        w = LABEL_W + PLOT_W
    );
    axis(&mut h, height);
    for (row, t) in tasks.iter().enumerate() {
        bar(&mut h, t, row, start, esc);
    }
    h.push_str("</svg>");
    legend(&mut h);
    h
}

fn x_of(at: DateTime<Utc>, start: DateTime<Utc>) -> f64 {
    let secs = (at - start).num_milliseconds() as f64 / 1000.0;
    LABEL_W + (secs / WINDOW_SECS as f64 * PLOT_W).clamp(0.0, PLOT_W)
}

/// Ticks every ten minutes, `-60m` to `now`.
fn axis(h: &mut String, height: f64) {
    for i in 0..=6 {
        let x = LABEL_W + PLOT_W * f64::from(i) / 6.0;
        let label = if i == 6 {
            "now".to_string()
        } else {
            format!("-{}m", 60 - i * 10)
        };
        let _ = write!(
            h,
            "<line x1=\"{x:.1}\" y1=\"{TOP}\" x2=\"{x:.1}\" y2=\"{height}\" stroke=\"#e3e6ec\"/>\
             <text x=\"{x:.1}\" y=\"12\" font-size=\"10\" text-anchor=\"middle\" fill=\"#5b6475\">{label}</text>"
        );
    }
}

fn bar(h: &mut String, t: &TaskHistory, row: usize, start: DateTime<Utc>, esc: fn(&str) -> String) {
    let y = TOP + ROW_H * row as f64;
    let job = match (&t.repository, t.run) {
        (Some(r), Some(n)) => format!("{} #{n}", esc(r)),
        _ => format!("task {}", t.task.get()),
    };
    let _ = write!(
        h,
        "<g class=\"task\"><text x=\"0\" y=\"{:.1}\" font-size=\"11\" fill=\"#1d2330\">{job}</text>",
        y + 11.0
    );
    for p in &t.phases {
        let end = p.start + chrono::Duration::milliseconds((p.seconds * 1000.0) as i64);
        let (x0, x1) = (x_of(p.start, start), x_of(end, start));
        let _ = write!(
            h,
            "<rect class=\"phase {phase}\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>task {} {phase}: {}</title></rect>",
            y + 2.0,
            (x1 - x0).max(1.0),
            ROW_H - 4.0,
            colour(&p.phase),
            t.task.get(),
            short(p.seconds),
            phase = esc(&p.phase),
        );
    }
    h.push_str("</g>");
}

fn legend(h: &mut String) {
    h.push_str("<p class=\"legend\">");
    for p in Phase::ALL {
        let _ = write!(
            h,
            "<span style=\"display:inline-block;width:.8em;height:.8em;background:{};margin:0 .3em 0 .8em\"></span>{}",
            colour(p.name()),
            p.name()
        );
    }
    h.push_str("</p>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::history::{Decoded, Mark, Record};
    use crate::task_id::TaskId;
    use crate::view::history::{Query, build};

    fn esc(s: &str) -> String {
        s.replace('<', "&lt;")
    }

    #[test]
    fn one_bar_per_recent_task_its_phases_coloured_with_a_legend() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let mut r = Record::new(TaskId::new(4));
        r.repository = Some("acme/<app>".into());
        r.run = Some(2);
        for (m, ago) in [
            (Mark::Claimed, 600),
            (Mark::ExecutorCreated, 590),
            (Mark::Scheduled, 300),
            (Mark::Reported, 100),
        ] {
            r.marks.insert(m, now - chrono::Duration::seconds(ago));
        }
        let mut old = Record::new(TaskId::new(3));
        old.marks
            .insert(Mark::Claimed, now - chrono::Duration::seconds(7200));
        old.marks
            .insert(Mark::Reported, now - chrono::Duration::seconds(7100));
        let doc = build(
            &[Decoded::Record(r), Decoded::Record(old)],
            &Query {
                limit: 10,
                ..Query::default()
            },
        );
        let html = render(&doc, now, esc);
        assert_eq!(
            html.matches("<g class=\"task\">").count(),
            1,
            "the old task is out of the window"
        );
        assert!(html.contains("class=\"phase scheduling\"") && html.contains(colour("scheduling")));
        assert!(html.contains("acme/&lt;app&gt; #2") || html.contains("acme/&lt;app> #2"));
        assert!(
            !html.contains("<script") && !html.contains("href="),
            "no script, no asset"
        );
        for p in Phase::ALL {
            assert!(html.contains(p.name()), "the legend names {}", p.name());
        }
        let empty = render(&build(&[], &Query::default()), now, esc);
        assert!(empty.contains("No task passed a mark in the last hour"));
    }
}

//! `runner status`'s text (pure): the runner as GitLab sees it, its concurrency, then the job
//! Pods as `kubectl get` prints them (upper-case headers, padded columns, ages as `45s`, `3m`,
//! `2h`); `wide` adds the ref, the commit, where the node came from and the job's URL.

use super::pods::JobPod;
use super::{GitlabRunner, Status};
use tenantci_core::kubectl_text::{age, columns};

fn or_dash(v: Option<impl ToString>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// GitLab's view in a few lines.
pub fn gitlab_lines(g: &GitlabRunner) -> String {
    let r = &g.runner;
    let version = g
        .managers
        .iter()
        .filter_map(|m| m.version.clone())
        .next()
        .or_else(|| r.version.clone());
    let tags = if r.tag_list.is_empty() {
        "(none)".to_string()
    } else {
        r.tag_list.join(",")
    };
    format!(
        "runner {} ({}): {}, last contact {}, {}\n  tags {tags}; run-untagged {}; locked {}; access {}; maximum timeout {}; version {}\n",
        r.id,
        r.runner_type,
        r.status,
        or_dash(r.contacted_at.as_deref()),
        if r.paused { "paused" } else { "not paused" },
        r.run_untagged,
        r.locked,
        r.access_level,
        r.maximum_timeout
            .map_or_else(|| "-".into(), |s| format!("{s}s")),
        or_dash(version.as_deref()),
    )
}

fn pod_row(p: &JobPod, wide: bool) -> Vec<String> {
    let mut row = vec![
        p.name.clone(),
        p.job.id.to_string(),
        or_dash(p.job.name.as_deref()),
        p.phase.clone(),
        or_dash(p.node.as_deref()),
        age(u64::try_from(p.age_seconds).unwrap_or(0)),
        p.restarts.to_string(),
    ];
    if wide {
        row.extend([
            or_dash(p.job.git_ref.as_deref()),
            or_dash(p.job.sha.as_deref().map(|s| &s[..8.min(s.len())])),
            or_dash(p.node_source),
            or_dash(p.job.url.as_deref()),
        ]);
    }
    row
}

/// The whole text.
pub fn render(s: &Status, wide: bool) -> String {
    let mut out = format!(
        "entry {} in {} (namespace {})\n",
        s.runner,
        s.config.display(),
        s.namespace
    );
    match (&s.gitlab, &s.note) {
        (Some(g), _) => out.push_str(&gitlab_lines(g)),
        (None, Some(note)) => out.push_str(&format!("note: {note}\n")),
        (None, None) => {}
    }
    let c = &s.concurrency;
    out.push_str(&format!(
        "concurrency: {} job Pods of {} slots (concurrent {}, limit {}, request_concurrency {}){}; warm pause pods {}/{}\n\n",
        c.active,
        or_dash(c.slots),
        or_dash(c.concurrent),
        or_dash(c.limit),
        or_dash(c.request_concurrency),
        if c.full { ", full" } else { "" },
        s.warm,
        s.pause,
    ));
    if s.pods.is_empty() {
        out.push_str("No job Pods.\n");
        return out;
    }
    let mut head = vec!["POD", "JOB", "NAME", "PHASE", "NODE", "AGE", "RESTARTS"];
    if wide {
        head.extend(["REF", "SHA", "NODE-SOURCE", "URL"]);
    }
    let mut rows = vec![head.into_iter().map(String::from).collect()];
    rows.extend(s.pods.iter().map(|p| pod_row(p, wide)));
    out.push_str(&columns(&rows));
    out
}

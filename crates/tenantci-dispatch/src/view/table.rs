//! `tenantci dispatch status`'s text (pure): the capacity and the tasks as `kubectl get`
//! prints them (upper-case headers, columns padded, ages as `45s`, `3m`, `2h`), `wide` adding
//! the workflow, run, labels, executor and node.

use super::explain::Reason;
use super::{Status, TaskStatus};
use tenantci_core::kubectl_text::{age, columns};

fn dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

fn task_row(t: &TaskStatus, wide: bool) -> Vec<String> {
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let mut row = vec![
        t.task.to_string(),
        dash(&t.repository),
        dash(&t.job),
        t.state.name().to_string(),
        t.backend.to_string(),
        opt(&t.class),
        age(t.age_seconds),
    ];
    if wide {
        row.extend([
            age(t.in_state_seconds),
            dash(&t.workflow),
            t.run.map_or("-".into(), |r| r.to_string()),
            dash(&t.runs_on.join(",")),
            opt(&t.executor),
            opt(&t.node),
        ]);
    }
    row
}

/// The capacity table, then the tasks' (pure).
pub fn render(s: &Status, wide: bool) -> String {
    let m = &s.summary;
    let mut cap = vec![
        ["BACKEND", "USED", "FREE", "QUEUED", "API"]
            .map(String::from)
            .to_vec(),
    ];
    for b in &m.backends {
        let api = b
            .error
            .as_ref()
            .map_or("reachable".into(), |e| format!("unreachable: {e}"));
        cap.push(vec![
            b.backend.to_string(),
            format!("{}/{}", b.used, b.capacity),
            b.free.to_string(),
            b.queued.to_string(),
            api,
        ]);
    }
    for c in &m.classes {
        let warm = format!("warm {}", c.warm_slots);
        cap.push(vec![
            format!("{}/{}", c.backend, c.name),
            format!("{}/{}", c.used, c.capacity),
            c.free.to_string(),
            "-".into(),
            warm,
        ]);
    }
    let forge = match m.forge.reachable {
        Some(true) => "reachable",
        Some(false) => "unreachable",
        None => "unknown (not the leader)",
    };
    let mut out = columns(&cap);
    out.push_str(&format!(
        "\ninstance {}{}; forge {} {forge}; claims in the last minute: {}\n\n",
        s.instance,
        if s.leader { " (leader)" } else { " (standby)" },
        m.forge.url,
        m.claims_per_minute
    ));
    if s.tasks.is_empty() {
        out.push_str("No tasks held.\n");
        return out;
    }
    let mut head = vec![
        "TASK",
        "REPOSITORY",
        "JOB",
        "STATE",
        "BACKEND",
        "CLASS",
        "AGE",
    ];
    if wide {
        head.extend(["IN-STATE", "WORKFLOW", "RUN", "RUNS-ON", "EXECUTOR", "NODE"]);
    }
    let mut rows = vec![head.into_iter().map(String::from).collect()];
    rows.extend(s.tasks.iter().map(|t| task_row(t, wide)));
    out.push_str(&columns(&rows));
    out
}

/// `dispatch explain`'s lines for one job: what it is, then each reason and its fix.
pub fn explanation(task: Option<&TaskStatus>, runs_on: &[String], reasons: &[Reason]) -> String {
    let mut out = match task {
        Some(t) => format!(
            "task {} ({} run {}, runs-on {}): {} on {} for {}\n",
            t.task,
            super::explain::describe(t),
            t.run.map_or("-".into(), |r| r.to_string()),
            runs_on.join(","),
            t.state.name(),
            t.backend,
            age(t.in_state_seconds)
        ),
        None => format!("a job with runs-on {}:\n", runs_on.join(",")),
    };
    if reasons.is_empty() {
        out.push_str("  will run: nothing holds it back\n");
    }
    for r in reasons {
        out.push_str(&format!(
            "  waits ({}): {}\n    fix: {}\n",
            r.kind, r.what, r.fix
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_kubectl_shaped_and_wide_adds_placement() {
        let s = super::super::tests::full();
        let text = render(&s, false);
        assert!(
            text.starts_with(
                "BACKEND  USED  FREE  QUEUED  API\npod      2/2   0     1       reachable\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("TASK  REPOSITORY  JOB    STATE     BACKEND  CLASS  AGE\n"),
            "{text}"
        );
        assert!(
            text.contains("\n3     acme/app    job-3  Queued    pod      -      30s"),
            "{text}"
        );
        let wide = render(&s, true);
        assert!(
            wide.contains("gitea-task-1") && wide.contains("node-a"),
            "{wide}"
        );
        assert_eq!(
            (age(59), age(300), age(7300), age(200_000)),
            ("59s".into(), "5m".into(), "2h".into(), "2d".into())
        );
    }
}

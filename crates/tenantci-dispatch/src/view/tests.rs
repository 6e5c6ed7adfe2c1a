use super::*;
use crate::backend::Placement;
use crate::backend::lifecycle::Decision;
use crate::task::registry::Description;
use crate::task_id::TaskId;

fn executor(task: TaskId, progress: Option<Progress>, node: Option<&str>) -> Observed {
    Observed {
        task,
        attempt: 1,
        decision: Decision::Keep,
        terminal: false,
        complete: true,
        age: None,
        progress,
        placement: node.map(|n| Placement {
            pod_name: format!("gitea-task-{task}"),
            pod_uid: "uid".into(),
            node_name: n.into(),
            spiffe_id: None,
        }),
        class: None,
        recheck: None,
        marks: Vec::new(),
        waited_for_node: None,
    }
}

#[test]
fn every_state_of_the_table_is_told_apart() {
    let ex = |p| executor(TaskId::new(1), Some(p), None);
    let cases = [
        (Held::Queued, Some(Phase::Claimed), None, State::Claimed),
        (Held::Queued, Some(Phase::Queued), None, State::Queued),
        (Held::Queued, None, None, State::Queued),
        (Held::Queued, Some(Phase::Started), None, State::Starting),
        (
            Held::Queued,
            Some(Phase::Queued),
            Some(ex(Progress::Unfetched)),
            State::Starting,
        ),
        (
            Held::Running,
            Some(Phase::Started),
            Some(ex(Progress::Unfetched)),
            State::Running,
        ),
        (
            Held::Running,
            Some(Phase::Fetched),
            Some(ex(Progress::Fetched)),
            State::Fetched,
        ),
        (
            Held::Running,
            Some(Phase::Reported),
            Some(ex(Progress::Reported)),
            State::Reported,
        ),
        // A backend that cannot tell (VM): the ledger's phase says.
        (
            Held::Running,
            Some(Phase::Fetched),
            Some(executor(TaskId::new(1), None, None)),
            State::Fetched,
        ),
        (Held::Withdrawn, Some(Phase::Final), None, State::Withdrawn),
    ];
    for (held, phase, ex, want) in cases {
        assert_eq!(state(held, phase, ex.as_ref()), want, "{held:?} {phase:?}");
    }
}

pub(super) fn card(now: DateTime<Utc>, task: TaskId, held: Held, class: Option<&str>) -> Card {
    let at = now - chrono::Duration::seconds(30);
    Card {
        task,
        backend: BackendKind::new("pod"),
        held,
        class: class.map(str::to_string),
        description: Some(Description {
            repository: "acme/app".into(),
            workflow: "ci".into(),
            job: format!("job-{task}"),
            run: Some(task.get()),
            runs_on: vec!["self-hosted".into(), "pod".into()],
            class: None,
        }),
        since: at,
        held_since: at,
    }
}

/// Two running on a pod capacity of two, a third queued: the pod backend is full.
pub(super) fn full() -> Status {
    let labels = ["self-hosted".to_string(), "pod".to_string()];
    let mut observed = BTreeMap::new();
    observed.insert(
        BackendKind::new("pod"),
        Ok([
            (
                TaskId::new(1),
                executor(TaskId::new(1), Some(Progress::Reported), Some("node-a")),
            ),
            (
                TaskId::new(2),
                executor(TaskId::new(2), Some(Progress::Unfetched), None),
            ),
        ]
        .into_iter()
        .collect()),
    );
    observed.insert(
        BackendKind::new("vm"),
        Err("the Lifecycle API: connection refused".into()),
    );
    let now = Utc::now();
    build(Inputs {
        now,
        instance: "d1",
        leader: true,
        forge_url: "https://gitea.example",
        labels: &labels,
        capacity: &[(BackendKind::new("pod"), 2), (BackendKind::new("vm"), 1)],
        classes: &[],
        cache_enabled: false,
        cards: vec![
            card(now, TaskId::new(1), Held::Running, None),
            card(now, TaskId::new(2), Held::Running, None),
            card(now, TaskId::new(3), Held::Queued, None),
        ],
        ledger: BTreeMap::new(),
        observed,
        figures: Figures {
            claims_last_minute: 3,
            since_forge_answered: Some(std::time::Duration::from_secs(1)),
            queue_depth: [(BackendKind::new("pod"), 1)].into_iter().collect(),
            ..Default::default()
        },
    })
}

#[test]
fn the_summary_counts_slots_from_the_tasks_and_names_an_api_away() {
    let s = full();
    let pod = &s.summary.backends[0];
    assert_eq!((pod.used, pod.free, pod.queued), (2, 0, 1));
    assert!(pod.reachable);
    let vm = &s.summary.backends[1];
    assert!(!vm.reachable && vm.error.as_deref().unwrap().contains("refused"));
    assert_eq!(s.tasks[0].node.as_deref(), Some("node-a"));
    assert_eq!(s.tasks[0].state, State::Reported);
    assert_eq!(s.tasks[2].state, State::Queued);
    assert_eq!(s.tasks[2].age_seconds, 30);
    assert_eq!(s.summary.forge.reachable, Some(true));
    let json = serde_json::to_string(&s).unwrap();
    let back: Status = serde_json::from_str(&json).unwrap();
    assert_eq!(back, s, "the CLI reads back what the API writes");
}

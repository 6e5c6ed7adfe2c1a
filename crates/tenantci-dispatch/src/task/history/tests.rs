use super::*;

fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
}

fn record(marks: &[(Mark, i64)]) -> Record {
    let mut r = Record::new(TaskId::new(7));
    for &(m, s) in marks {
        r.marks.insert(m, at(s));
    }
    r
}

#[test]
fn phases_run_in_mark_order_with_their_durations() {
    // Inserted out of order: the record orders them.
    let r = record(&[
        (Mark::Reported, 100),
        (Mark::Claimed, 0),
        (Mark::Queued, 1),
        (Mark::ExecutorCreated, 2),
        (Mark::Scheduled, 62),
        (Mark::Started, 65),
        (Mark::Fetched, 70),
    ]);
    let spans: Vec<(Phase, u64)> = r
        .phases()
        .iter()
        .map(|s| (s.phase, s.took.as_secs()))
        .collect();
    assert_eq!(
        spans,
        vec![
            (Phase::Claim, 1),
            (Phase::Queue, 1),
            (Phase::Scheduling, 60),
            (Phase::Starting, 3),
            (Phase::RunnerStart, 5),
            (Phase::Run, 30),
        ]
    );
    let slowest = r.slowest().unwrap();
    assert_eq!(slowest.phase, Phase::Scheduling);
    assert!(slowest.phase.cause().contains("node"));
    assert_eq!(r.total(), Duration::from_secs(100));
    assert!(r.finished());
}

#[test]
fn a_missing_mark_folds_its_phase_into_the_next_and_says_from_where() {
    let r = record(&[
        (Mark::Claimed, 0),
        (Mark::Fetched, 40),
        (Mark::Reported, 45),
    ]);
    let p = r.phases();
    assert_eq!(p.len(), 2);
    assert_eq!(
        (p[0].phase, p[0].from, p[0].to),
        (Phase::RunnerStart, Mark::Claimed, Mark::Fetched)
    );
    assert_eq!(p[0].took, Duration::from_secs(40));
    assert_eq!(record(&[(Mark::Claimed, 0)]).slowest(), None);
    assert!(!record(&[(Mark::Claimed, 0)]).finished());
}

#[test]
fn clocks_apart_count_zero_not_a_negative_duration() {
    let r = record(&[(Mark::Fetched, 10), (Mark::Reported, 5)]);
    // BTreeMap orders by mark: reported is after fetched whatever the clocks say.
    assert_eq!(r.phases()[0].took, Duration::ZERO);
}

#[test]
fn merge_keeps_the_earliest_mark_and_fills_fields_once() {
    let task = TaskId::new(7);
    let first = Observation {
        repository: Some("acme/app".into()),
        run: Some(3),
        ..Observation::mark(Mark::Claimed, at(10))
    };
    let r = merge(None, task, &first).unwrap().record;
    // A second observer of the same mark, later, and another repository: nothing changes.
    let again = Observation {
        repository: Some("other/repo".into()),
        ..Observation::mark(Mark::Claimed, at(20))
    };
    assert_eq!(merge(Some(&r), task, &again), None);
    // An earlier time of the same mark wins.
    let earlier = merge(Some(&r), task, &Observation::mark(Mark::Claimed, at(5)))
        .unwrap()
        .record;
    assert_eq!(earlier.marks[&Mark::Claimed], at(5));
    assert_eq!(earlier.repository.as_deref(), Some("acme/app"));
}

#[test]
fn exactly_one_write_completes_a_record_in_either_order() {
    let task = TaskId::new(7);
    let reported = Observation {
        result: Some("RESULT_SUCCESS".into()),
        ..Observation::mark(Mark::Reported, at(30))
    };
    let gone = Observation::mark(Mark::Gone, at(31));
    for (a, b) in [(&reported, &gone), (&gone, &reported)] {
        let one = merge(None, task, a).unwrap();
        assert!(!one.completed);
        let two = merge(Some(&one.record), task, b).unwrap();
        assert!(two.completed);
        // Replayed: no write, so no second observation.
        assert_eq!(merge(Some(&two.record), task, a), None);
        assert_eq!(merge(Some(&two.record), task, b), None);
    }
}

#[test]
fn a_newer_version_is_reported_not_misread() {
    let task = TaskId::new(7);
    let ours = serde_json::to_vec(&record(&[(Mark::Claimed, 0)])).unwrap();
    assert!(matches!(decode(task, &ours).unwrap(), Decoded::Record(r) if r.version == VERSION));
    let newer = br#"{"version":2,"task":7,"marks":{"teleported":"2027-01-01T00:00:00Z"}}"#;
    assert_eq!(
        decode(task, newer).unwrap(),
        Decoded::Newer { task, version: 2 }
    );
    assert!(
        matches!(decode(task, br#"{"task":7,"marks":{}}"#).unwrap(), Decoded::Record(r) if r.version == 1),
        "no version: version 1"
    );
}

#[test]
fn every_mark_but_the_first_ends_one_phase() {
    let ended: Vec<Phase> = Mark::ALL.iter().filter_map(|m| m.ends()).collect();
    assert_eq!(ended, Phase::ALL.to_vec());
}

#[test]
fn the_scheduling_cause_says_whether_the_executor_waited_for_a_node() {
    let mut r = record(&[(Mark::ExecutorCreated, 0), (Mark::Scheduled, 90)]);
    assert!(
        r.cause(Phase::Scheduling)
            .starts_with("placing the executor on a node that was there"),
        "{}",
        r.cause(Phase::Scheduling)
    );
    // Seen waiting twice (two writers): the earliest is kept, and a replay changes nothing.
    let seen = |secs| Observation {
        waited_for_node: Some(at(secs)),
        ..Observation::default()
    };
    r = merge(Some(&r), r.task, &seen(5)).unwrap().record;
    r = merge(Some(&r), r.task, &seen(2)).unwrap().record;
    assert_eq!(r.waited_for_node, Some(at(2)));
    assert_eq!(merge(Some(&r), r.task, &seen(7)), None);
    assert!(
        r.cause(Phase::Scheduling)
            .starts_with("waiting for a node: a rented node booting"),
        "{}",
        r.cause(Phase::Scheduling)
    );
    assert_eq!(r.cause(Phase::Starting), Phase::Starting.cause());
    // Stored only when seen: a record without it reads as before.
    let json = serde_json::to_value(record(&[(Mark::Claimed, 0)])).unwrap();
    assert!(json.get("waited_for_node").is_none(), "{json}");
}

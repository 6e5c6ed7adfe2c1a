use super::*;
use crate::task::history::{Mark, Record};

fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
}

fn record(task: i64, run: i64, marks: &[(Mark, i64)]) -> Decoded {
    let mut r = Record::new(TaskId::new(task));
    r.repository = Some("acme/app".into());
    r.run = Some(run);
    r.result = Some("RESULT_SUCCESS".into());
    for &(m, s) in marks {
        r.marks.insert(m, at(s));
    }
    Decoded::Record(r)
}

/// A task whose executor waited for a rented node (seen unschedulable) for 88 s.
fn booted() -> Decoded {
    let Decoded::Record(mut r) = booted_marks() else {
        unreachable!("record() makes a record")
    };
    r.waited_for_node = Some(at(103));
    Decoded::Record(r)
}

fn booted_marks() -> Decoded {
    record(
        2,
        5,
        &[
            (Mark::Claimed, 100),
            (Mark::Queued, 101),
            (Mark::ExecutorCreated, 102),
            (Mark::Scheduled, 190),
            (Mark::Started, 191),
            (Mark::Fetched, 195),
            (Mark::Reported, 200),
            (Mark::Gone, 201),
        ],
    )
}

#[test]
fn the_most_recent_first_within_the_limit_finished_only_when_asked() {
    let records = vec![
        record(1, 4, &[(Mark::Claimed, 0), (Mark::Reported, 10)]),
        booted(),
        record(3, 6, &[(Mark::Claimed, 300)]),
        Decoded::Newer {
            task: TaskId::new(9),
            version: 2,
        },
    ];
    let q = Query {
        finished: true,
        limit: 10,
        ..Query::default()
    };
    let doc = build(&records, &q);
    let ids: Vec<i64> = doc.tasks.iter().map(|t| t.task.get()).collect();
    assert_eq!(ids, vec![2, 1]);
    assert_eq!(doc.unreadable.len(), 1);
    let one = build(
        &records,
        &Query {
            limit: 1,
            ..Query::default()
        },
    );
    assert_eq!(one.tasks[0].task.get(), 3);
    let text = table(&doc);
    assert!(
        text.contains("SCHEDULING") && text.contains("1m28s"),
        "{text}"
    );
    assert!(
        text.contains("newer tenantci (history record version 2"),
        "{text}"
    );
}

#[test]
fn explain_names_the_slowest_phase_and_its_cause() {
    let job = Job::Run {
        origin: None,
        repository: "ACME/app".into(),
        run: 5,
        job: None,
    };
    let doc = build(&[booted()], &Query::of_job(&job, 5));
    let t = &doc.tasks[0];
    assert_eq!(t.slowest.as_ref().unwrap().phase, "scheduling");
    let text = explain(t);
    assert!(
        text.contains("slowest: scheduling (1m28s): waiting for a node"),
        "{text}"
    );
    assert!(text.contains("finished, RESULT_SUCCESS"), "{text}");
    let other = Query::of_job(&Job::Task(TaskId::new(77)), 5);
    assert!(build(&[booted()], &other).tasks.is_empty());
}

#[test]
fn durations_read_short() {
    assert_eq!(short(0.42), "0.4s");
    assert_eq!(short(42.0), "42s");
    assert_eq!(short(185.0), "3m05s");
    assert_eq!(short(3720.0), "1h02m");
}

#[test]
fn the_forges_creation_time_adds_its_queue_and_can_be_the_slowest() {
    let doc = build(
        &[booted()],
        &Query {
            limit: 1,
            ..Query::default()
        },
    );
    let t = with_created(&doc.tasks[0], at(-200));
    assert_eq!(t.phases[0].phase, "forge_queue");
    assert_eq!(t.phases[0].seconds, 300.0);
    let slowest = t.slowest.unwrap();
    assert_eq!(slowest.phase, "forge_queue");
    assert!(
        slowest.cause.starts_with("the forge's own queue"),
        "{}",
        slowest.cause
    );
}

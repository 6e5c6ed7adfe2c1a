//! Every message against bytes written out by hand from the field table: tag byte =
//! field << 3 | wire type (0 varint, 2 length-delimited). A wrong field number, type or
//! wire type in `proto.rs` changes the bytes and fails here.

use std::fmt::Debug;

use prost::Message;
use prost_types::value::Kind;

use super::*;
use crate::forge::gitea::connect::Codec;

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[track_caller]
fn check<M>(msg: M, bytes: &[u8])
where
    M: Message + Default + PartialEq + Debug + Serialize + serde::de::DeserializeOwned,
{
    assert_eq!(msg.encode_to_vec(), bytes, "binary encoding of {msg:?}");
    assert_eq!(M::decode(bytes).expect("fixture decodes"), msg);
    let json = serde_json::to_vec(&msg).unwrap();
    assert_eq!(
        serde_json::from_slice::<M>(&json).unwrap(),
        msg,
        "JSON round trip via {}",
        String::from_utf8_lossy(&json)
    );
}

fn ts(seconds: i64, nanos: i32) -> Option<Timestamp> {
    Some(Timestamp { seconds, nanos })
}

fn runner() -> (Runner, Vec<u8>) {
    let msg = Runner {
        id: 5,
        uuid: "u".into(),
        token: "t".into(),
        name: "n".into(),
        status: RunnerStatus::Idle as i32,
        agent_labels: vec!["a".into()],
        custom_labels: vec!["c".into()],
        version: "v".into(),
        labels: vec!["l".into()],
        ephemeral: true,
    };
    let bytes = cat(&[
        b"\x08\x05",
        b"\x12\x01u",
        b"\x1a\x01t",
        b"\x22\x01n",
        b"\x28\x01",
        b"\x32\x01a",
        b"\x3a\x01c",
        b"\x42\x01v",
        b"\x4a\x01l",
        b"\x50\x01",
    ]);
    assert_eq!(bytes.len(), 0x1b);
    (msg, bytes)
}

#[test]
fn ping_messages() {
    check(PingRequest { data: "x".into() }, b"\x0a\x01x");
    check(
        PingResponse {
            data: "Hello, x!".into(),
        },
        b"\x0a\x09Hello, x!",
    );
}

#[test]
fn register_request() {
    let msg = RegisterRequest {
        name: "r1".into(),
        token: "tok".into(),
        agent_labels: vec!["a".into()],
        custom_labels: vec!["c".into()],
        version: "v1".into(),
        labels: vec!["l1".into(), "l2".into()],
        ephemeral: true,
        capabilities: vec!["cap".into()],
    };
    let bytes = cat(&[
        b"\x0a\x02r1",
        b"\x12\x03tok",
        b"\x1a\x01a",
        b"\x22\x01c",
        b"\x2a\x02v1",
        b"\x32\x02l1",
        b"\x32\x02l2",
        b"\x38\x01",
        b"\x42\x03cap",
    ]);
    check(msg, &bytes);
}

#[test]
fn runner_and_register_declare_responses() {
    let (r, rb) = runner();
    check(r.clone(), &rb);
    let wrapped = cat(&[b"\x0a\x1b", &rb]);
    check(
        RegisterResponse {
            runner: Some(r.clone()),
        },
        &wrapped,
    );
    check(DeclareResponse { runner: Some(r) }, &wrapped);
}

#[test]
fn declare_request() {
    let msg = DeclareRequest {
        version: "v".into(),
        labels: vec!["a".into(), "b".into()],
        capabilities: vec!["c".into()],
    };
    check(msg, b"\x0a\x01v\x12\x01a\x12\x01b\x1a\x01c");
}

#[test]
fn fetch_task_request() {
    check(
        FetchTaskRequest {
            tasks_version: 300,
            ..Default::default()
        },
        b"\x08\xac\x02",
    );
    check(
        FetchTaskRequest {
            tasks_version: 0,
            ..Default::default()
        },
        b"",
    );
    check(
        FetchTaskRequest {
            tasks_version: -1,
            ..Default::default()
        },
        b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
    );
}

fn task() -> (Task, Vec<u8>) {
    let mut context = prost_types::Struct::default();
    context.fields.insert(
        "token".into(),
        prost_types::Value {
            kind: Some(Kind::StringValue("jt".into())),
        },
    );
    let msg = Task {
        id: 7,
        workflow_payload: Some(b"on: push".to_vec()),
        context: Some(context),
        secrets: [("S".to_string(), "s".to_string())].into(),
        machine: "m".into(),
        needs: [(
            "build".to_string(),
            TaskNeed {
                outputs: [("o".to_string(), "1".to_string())].into(),
                result: TaskResult::Success as i32,
            },
        )]
        .into(),
        vars: [("V".to_string(), "v".to_string())].into(),
    };
    let bytes = cat(&[
        b"\x08\x07",
        b"\x12\x08on: push",
        // context: Struct{ fields(1): entry{ key(1) "token", value(2) Value{ string_value(3) "jt" } } }
        b"\x1a\x0f\x0a\x0d\x0a\x05token\x12\x04\x1a\x02jt",
        // secrets: entry{ key(1) "S", value(2) "s" }
        b"\x22\x06\x0a\x01S\x12\x01s",
        b"\x2a\x01m",
        // needs: entry{ key "build", value TaskNeed{ outputs(1) {o: 1}, result(2) SUCCESS } }
        b"\x32\x13\x0a\x05build\x12\x0a\x0a\x06\x0a\x01o\x12\x011\x10\x01",
        b"\x3a\x06\x0a\x01V\x12\x01v",
    ]);
    assert_eq!(bytes.len(), 0x45);
    (msg, bytes)
}

#[test]
fn task_and_fetch_task_response() {
    let (t, tb) = task();
    check(t.clone(), &tb);
    check(
        FetchTaskResponse {
            task: Some(t.clone()),
            tasks_version: 9,
            additional_tasks: Vec::new(),
        },
        &cat(&[b"\x0a\x45", &tb, b"\x10\x09"]),
    );
    check(
        FetchTaskResponse {
            task: None,
            tasks_version: 150,
            additional_tasks: Vec::new(),
        },
        b"\x10\x96\x01",
    );
    // Forgejo's additional_tasks: field 3, length-delimited, repeated.
    check(
        FetchTaskResponse {
            task: Some(t.clone()),
            tasks_version: 9,
            additional_tasks: vec![t],
        },
        &cat(&[b"\x0a\x45", &tb, b"\x10\x09\x1a\x45", &tb]),
    );
}

/// Forgejo 14.0.0 and 14.0.1 could answer with `additional_tasks` and no `task`: every task
/// in either field is assigned, and the tasks-version cursor goes back to 0 as after any task.
#[test]
fn an_answer_with_additional_tasks_only_assigns_them_all() {
    let (t, _) = task();
    let mut second = t.clone();
    second.id = t.id + 1;
    let answer = FetchTaskResponse {
        task: None,
        tasks_version: 9,
        additional_tasks: vec![t.clone(), second],
    };
    let bytes = answer.encode_to_vec();
    assert!(
        bytes.starts_with(b"\x10\x09\x1a\x45"),
        "no field 1: {bytes:x?}"
    );
    let decoded = FetchTaskResponse::decode(bytes.as_slice()).unwrap();
    assert!(decoded.has_tasks());
    let mut version = crate::forge::gitea::client::TasksVersion::default();
    version.observe(&decoded);
    assert_eq!(version.get(), 0);
    let ids: Vec<i64> = decoded.into_tasks().iter().map(|t| t.id).collect();
    assert_eq!(ids, [t.id, t.id + 1]);
}

#[test]
fn forgejo_s_locked_request_key_is_recognised_and_nothing_else_is() {
    use crate::forge::gitea::ConnectError;
    use crate::forge::gitea::client::ClientError;
    let status = |error| ClientError::Status {
        method: "FetchTask",
        error,
    };
    let locked = status(ConnectError::internal(
        "request key is currently locked; retry soon",
    ));
    assert!(locked.request_key_locked());
    assert!(
        !locked.claim_may_be_lost(),
        "the locked call assigned nothing"
    );
    assert!(!status(ConnectError::internal("database is locked")).request_key_locked());
    assert!(
        !status(ConnectError::unavailable("request key is currently locked")).request_key_locked()
    );
}

#[test]
fn forgejo_task_capacity() {
    // Field 2, varint, proto3 optional: present even when 0, absent when None.
    let msg = FetchTaskRequest {
        tasks_version: 1,
        task_capacity: Some(4),
    };
    check(msg, b"\x08\x01\x10\x04");
    let zero = FetchTaskRequest {
        tasks_version: 0,
        task_capacity: Some(0),
    };
    check(zero, b"\x10\x00");
    let json = Codec::Json.encode(&FetchTaskRequest {
        tasks_version: 2,
        task_capacity: Some(3),
    });
    assert_eq!(json, br#"{"tasksVersion":"2","taskCapacity":"3"}"#);
    let back: FetchTaskRequest = Codec::Json.decode(br#"{"task_capacity":5}"#).unwrap();
    assert_eq!(back.task_capacity, Some(5));
    let none: FetchTaskRequest = Codec::Json.decode(br#"{"tasksVersion":"2"}"#).unwrap();
    assert_eq!(none.task_capacity, None);
}

#[test]
fn task_need() {
    let msg = TaskNeed {
        outputs: [("o".to_string(), "1".to_string())].into(),
        result: TaskResult::Skipped as i32,
    };
    check(msg, b"\x0a\x06\x0a\x01o\x12\x011\x10\x04");
}

fn task_state() -> (TaskState, Vec<u8>) {
    let step = StepState {
        id: 1,
        result: TaskResult::Success as i32,
        started_at: ts(100, 0),
        stopped_at: ts(101, 0),
        log_index: 3,
        log_length: 4,
    };
    let msg = TaskState {
        id: 7,
        result: TaskResult::Failure as i32,
        started_at: ts(100, 0),
        stopped_at: ts(160, 500),
        steps: vec![step],
    };
    let bytes = cat(&[
        b"\x08\x07",
        b"\x10\x02",
        b"\x1a\x02\x08\x64",
        b"\x22\x06\x08\xa0\x01\x10\xf4\x03",
        b"\x2a\x10\x08\x01\x10\x01\x1a\x02\x08\x64\x22\x02\x08\x65\x28\x03\x30\x04",
    ]);
    assert_eq!(bytes.len(), 0x22);
    (msg, bytes)
}

#[test]
fn step_state() {
    let (state, _) = task_state();
    check(
        state.steps[0].clone(),
        b"\x08\x01\x10\x01\x1a\x02\x08\x64\x22\x02\x08\x65\x28\x03\x30\x04",
    );
}

#[test]
fn task_state_and_update_task() {
    let (state, sb) = task_state();
    check(state.clone(), &sb);
    check(
        UpdateTaskRequest {
            state: Some(state),
            outputs: [("k".to_string(), "v".to_string())].into(),
        },
        &cat(&[b"\x0a\x22", &sb, b"\x12\x06\x0a\x01k\x12\x01v"]),
    );
    check(
        UpdateTaskResponse {
            state: Some(TaskState {
                id: 7,
                result: TaskResult::Cancelled as i32,
                ..Default::default()
            }),
            sent_outputs: vec!["k".into()],
        },
        b"\x0a\x04\x08\x07\x10\x03\x12\x01k",
    );
}

#[test]
fn update_log_and_log_row() {
    let row = LogRow {
        time: ts(100, 0),
        content: "hi".into(),
    };
    check(row.clone(), b"\x0a\x02\x08\x64\x12\x02hi");
    let t = Timestamp {
        seconds: 1_700_000_000,
        nanos: 500,
    };
    let tb = b"\x08\x80\xe2\xcf\xaa\x06\x10\xf4\x03";
    assert_eq!(t.encode_to_vec(), tb);
    check(
        LogRow {
            time: Some(t),
            content: String::new(),
        },
        &cat(&[b"\x0a\x09", tb]),
    );
    let msg = UpdateLogRequest {
        task_id: 7,
        index: 2,
        rows: vec![
            row,
            LogRow {
                time: None,
                content: "x".into(),
            },
        ],
        no_more: true,
    };
    check(
        msg,
        &cat(&[
            b"\x08\x07",
            b"\x10\x02",
            b"\x1a\x08\x0a\x02\x08\x64\x12\x02hi",
            b"\x1a\x03\x12\x01x",
            b"\x20\x01",
        ]),
    );
    check(UpdateLogResponse { ack_index: 150 }, b"\x08\x96\x01");
}

#[test]
fn unknown_fields_are_skipped() {
    // RegisterRequest name, then an unknown field 15 (varint) and 16 (bytes).
    let msg = RegisterRequest::decode(&b"\x0a\x01n\x78\x01\x82\x01\x02zz"[..]).unwrap();
    assert_eq!(msg.name, "n");
}

#[test]
fn protojson_names_and_scalars() {
    let (t, _) = task();
    let json = serde_json::to_value(&t).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "id": "7",
            "workflowPayload": "b246IHB1c2g=",
            "context": {"token": "jt"},
            "secrets": {"S": "s"},
            "machine": "m",
            "needs": {"build": {"outputs": {"o": "1"}, "result": "RESULT_SUCCESS"}},
            "vars": {"V": "v"}
        })
    );
    let (state, _) = task_state();
    let json = serde_json::to_value(&state).unwrap();
    assert_eq!(json["result"], "RESULT_FAILURE");
    assert_eq!(json["startedAt"], "1970-01-01T00:01:40Z");
    assert_eq!(json["stoppedAt"], "1970-01-01T00:02:40.000000500Z");
    assert_eq!(json["steps"][0]["logLength"], "4");

    // Input: proto names, numbers for int64 and enums, nulls as defaults.
    let parsed: StepState = serde_json::from_value(serde_json::json!({
        "id": 1, "result": 2, "log_index": "3", "logLength": null, "started_at": null
    }))
    .unwrap();
    assert_eq!(parsed.id, 1);
    assert_eq!(parsed.result, TaskResult::Failure as i32);
    assert_eq!(parsed.log_index, 3);
    assert_eq!(parsed.log_length, 0);
    assert!(parsed.started_at.is_none());
    let runner: Runner =
        serde_json::from_value(serde_json::json!({"status": "RUNNER_STATUS_ACTIVE"})).unwrap();
    assert_eq!(runner.status, RunnerStatus::Active as i32);
    assert!(serde_json::from_value::<Runner>(serde_json::json!({"status": "BOGUS"})).is_err());
    assert!(serde_json::from_value::<Runner>(serde_json::json!({"id": "x1"})).is_err());
}

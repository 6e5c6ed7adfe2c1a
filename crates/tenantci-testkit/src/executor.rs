//! The official runner's part of one Gitea task (act_runner in the executor Pod), played from
//! the executor Secret's two files only: `.runner` (the facade's address, the runner uuid and
//! the per-task capability as its token) and `ca.crt` (the facade's CA). Declare, FetchTask,
//! UpdateLog and UpdateTask go through the dispatcher's facade with tenantci's RunnerClient.
//! For the dispatch tests, the dispatch benchmark and the demo (examples/demo_executor.rs).

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use tenantci_app::dispatch::executor::{CA_KEY, RUNNER_KEY};
use tenantci_app::runner::gitea_files::Registration;
use tenantci_core::forge::gitea::client::{ClientConfig, Credentials, RunnerClient};
use tenantci_core::forge::gitea::proto::{
    DeclareRequest, LogRow, Task, TaskResult, TaskState, UpdateLogRequest, UpdateTaskRequest,
};

use crate::wait::eventually;

/// An executor with the credentials of one task.
pub struct Executor {
    /// The facade's base URL.
    pub address: String,
    pub uuid: String,
    /// The task's capability.
    pub token: String,
    pub labels: Vec<String>,
    pub ephemeral: bool,
    /// The facade's CA certificate.
    pub ca_pem: String,
}

/// What the facade answered to the final reports.
pub struct Finished {
    /// UpdateLog's `ack_index`: the rows the facade stored.
    pub ack_index: i64,
    /// The task's result as UpdateTask answered it (a `TaskResult` value).
    pub result: i32,
}

impl Executor {
    /// From the contents of `.runner` and `ca.crt`.
    pub fn from_files(runner: &[u8], ca_pem: &str) -> Result<Executor, String> {
        let r: Registration =
            serde_json::from_slice(runner).map_err(|e| format!("not a .runner file: {e}"))?;
        Ok(Executor {
            address: r.address,
            uuid: r.uuid,
            token: r.token.expose().to_string(),
            labels: r.labels,
            ephemeral: r.ephemeral,
            ca_pem: ca_pem.to_string(),
        })
    }

    /// From the executor Secret's data.
    pub fn from_secret(secret: &Secret) -> Executor {
        let data = secret.data.as_ref().expect("the executor Secret has data");
        let ca = String::from_utf8(data[CA_KEY].0.clone()).expect("ca.crt is PEM");
        Self::from_files(&data[RUNNER_KEY].0, &ca).unwrap()
    }

    /// A facade client with these credentials, or forged ones.
    pub fn client(&self, uuid: &str, token: &str) -> RunnerClient {
        let mut cfg = ClientConfig::new(&self.address);
        cfg.ca_pem = Some(self.ca_pem.clone());
        cfg.request_timeout = Duration::from_secs(10);
        cfg.retry.initial_backoff = Duration::from_millis(50);
        RunnerClient::new(cfg)
            .unwrap()
            .with_credentials(Credentials {
                uuid: uuid.into(),
                token: token.into(),
            })
    }

    /// A facade client with the task's own credentials.
    pub fn own(&self) -> RunnerClient {
        self.client(&self.uuid, &self.token)
    }

    /// Declare, then FetchTask, until the task arrives (the facade may be starting or
    /// restarting).
    pub async fn fetch(&self) -> Task {
        let c = self.own();
        eventually("the facade to hand out the task", || async {
            c.declare(&DeclareRequest {
                version: "tenantci-testkit".into(),
                labels: self.labels.clone(),
                ..Default::default()
            })
            .await
            .ok()?;
            c.fetch_task(0).await.ok()?.task
        })
        .await
    }

    /// Sends `lines` as the whole log, then the final state SUCCESS, retrying while the
    /// facade is away.
    pub async fn finish(&self, task: i64, lines: &[&str]) -> Finished {
        let c = self.own();
        eventually(
            "the facade to accept the log and the final state",
            || async {
                let log = c
                    .update_log(&UpdateLogRequest {
                        task_id: task,
                        index: 0,
                        rows: lines
                            .iter()
                            .map(|l| LogRow {
                                time: None,
                                content: l.to_string(),
                            })
                            .collect(),
                        no_more: true,
                    })
                    .await
                    .ok()?;
                let done = c
                    .update_task(&UpdateTaskRequest {
                        state: Some(TaskState {
                            id: task,
                            result: TaskResult::Success as i32,
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .await
                    .ok()?;
                Some(Finished {
                    ack_index: log.ack_index,
                    result: done.state.map(|s| s.result).unwrap_or_default(),
                })
            },
        )
        .await
    }

    /// The whole run of `task`: fetch it (it must be this task), log `ran task <id>`, succeed.
    pub async fn run(&self, task: i64) -> Task {
        let t = self.fetch().await;
        assert_eq!(t.id, task, "the facade hands out the caller's own task");
        self.finish(task, &[&format!("ran task {task}")]).await;
        t
    }
}

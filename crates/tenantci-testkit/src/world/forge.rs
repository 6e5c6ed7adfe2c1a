//! A [`World`]'s Gitea double and OpenSandbox double as the tests and benchmarks drive them:
//! jobs enqueued, claims and results read back, webhooks registered, sandboxes listed.

use serde_json::Value;

use super::{Dispatcher, WEBHOOK_SECRET, World};
use crate::executor::Executor;
use crate::wait::eventually;

impl World {
    /// Enqueues a job at the Gitea double; returns the job id.
    pub async fn enqueue(&self, name: &str, secret: &str) -> i64 {
        self.gitea
            .enqueue(&self.http, name, &["self-hosted", "pod"], secret)
            .await
    }

    /// Enqueues a job that runs on the VM backend (`runs-on: [self-hosted, vm]`).
    pub async fn enqueue_vm(&self, name: &str, secret: &str) -> i64 {
        self.gitea
            .enqueue(&self.http, name, &["self-hosted", "vm"], secret)
            .await
    }

    /// Enqueues a job with these `runs-on` labels; returns the job id.
    pub async fn enqueue_on(&self, name: &str, runs_on: &[&str], secret: &str) -> i64 {
        self.gitea.enqueue(&self.http, name, runs_on, secret).await
    }

    /// The Gitea double's record of job `id` (`GET <admin>/jobs/<id>`: its status, `task_id` once
    /// claimed, ...).
    pub async fn job(&self, id: i64) -> Value {
        self.gitea.admin(&self.http, &format!("jobs/{id}")).await
    }

    /// The Gitea double's record of task `id` (`GET <admin>/tasks/<id>`).
    pub async fn task(&self, id: i64) -> Value {
        self.gitea.admin(&self.http, &format!("tasks/{id}")).await
    }

    /// The task id of a job once it is claimed.
    pub async fn claimed(&self, job: i64) -> i64 {
        eventually("the job to be claimed", || async {
            self.job(job).await["task_id"].as_i64()
        })
        .await
    }

    /// Every job of `jobs` is done and its task SUCCESS with one log line: it ran, once.
    pub async fn assert_ran_once(&self, jobs: &[i64]) {
        for job in jobs {
            let j = self.job(*job).await;
            assert_eq!(j["status"], "done", "{j}");
            let t = self.task(j["task_id"].as_i64().unwrap()).await;
            assert_eq!(t["result"], "RESULT_SUCCESS", "{t}");
            assert_eq!(t["logs"].as_array().unwrap().len(), 1, "ran once: {t}");
        }
    }

    /// `task` is SUCCESS at the double and its executor's "ran task N" line is there exactly
    /// once (other lines, such as a replaced attempt's, may be there too).
    pub async fn assert_succeeded_once(&self, task: i64) {
        let t = self.task(task).await;
        assert_eq!(t["result"], "RESULT_SUCCESS", "{t}");
        let line = format!("ran task {task}");
        let n = t["logs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l.as_str() == Some(&line))
            .count();
        assert_eq!(n, 1, "the task ran and logged once: {t}");
    }

    /// Waits until `task` is FAILURE at the double, then asserts one of its log lines says
    /// `why` (the dispatcher's reason).
    pub async fn assert_fails_saying(&self, task: i64, why: &str) {
        let view = crate::wait::eventually("FAILURE at Gitea", || async {
            let v = self.task(task).await;
            (v["result"] == "RESULT_FAILURE").then_some(v)
        })
        .await;
        let logs = view["logs"].as_array().unwrap();
        assert!(
            logs.iter().any(|l| l.as_str().unwrap_or("").contains(why)),
            "{view}"
        );
    }

    /// Cancels `task` at the Gitea double, as a user cancelling the run.
    pub async fn cancel(&self, task: i64) {
        let resp = self
            .http
            .post(format!("{}/tasks/{task}/cancel", self.gitea.admin_url))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{}", resp.status());
    }

    /// FetchTask calls the Gitea double answered so far.
    pub async fn fetch_calls(&self) -> u64 {
        self.gitea.admin(&self.http, "stats").await["fetch_task_calls"]
            .as_u64()
            .unwrap()
    }

    /// Registers `d`'s webhook receiver at the Gitea double, with the right secret.
    pub async fn register_hook(&self, d: &Dispatcher) {
        let addr = d.webhook.expect("the dispatcher has a webhook receiver");
        let url = format!("http://{addr}/webhooks/gitea");
        self.gitea.add_hook(&self.http, &url, WEBHOOK_SECRET).await;
    }

    /// The double's webhook deliveries so far.
    pub async fn deliveries(&self) -> Vec<Value> {
        let all = self.gitea.admin(&self.http, "hooks/deliveries").await;
        all.as_array().unwrap().clone()
    }

    /// The live sandboxes of `task` as the OpenSandbox double's admin view shows them.
    pub async fn sandboxes_of(&self, task: i64) -> Vec<Value> {
        let id = task.to_string();
        self.opensandbox()
            .sandboxes(&self.http)
            .await
            .into_iter()
            .filter(|s| s["metadata"]["tenantci.io/task-id"].as_str() == Some(id.as_str()))
            .collect()
    }

    /// Waits until `task`'s sandbox exists; an executor for it from the sandbox's env.
    pub async fn vm_executor(&self, task: i64) -> Executor {
        let sandbox = eventually("the task's VM sandbox", || async {
            self.sandboxes_of(task).await.into_iter().next()
        })
        .await;
        Executor::from_sandbox(&sandbox)
    }

    /// Waits until no sandbox is left at the double.
    pub async fn no_sandboxes_left(&self) {
        eventually("every VM sandbox to be deleted", || async {
            let left = self.opensandbox().sandboxes(&self.http).await;
            left.is_empty().then_some(())
        })
        .await
    }

    /// The OpenSandbox double's figures (`{created, deleted, live, maxLive, ...}`).
    pub async fn sandbox_stats(&self) -> Value {
        self.opensandbox().stats(&self.http).await
    }
}

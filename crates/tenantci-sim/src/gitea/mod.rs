//! A Gitea double: the RunnerService and PingService over plain HTTP on loopback (Connect,
//! binary protobuf and JSON, via `forge::gitea::facade::router`), keeping the server
//! behaviours of docs/gitea-protocol.md, plus a small admin JSON API to enqueue jobs
//! and read tasks for tests and the demo.
//!
//! Kept behaviours: Register with the registration token (fresh uuid + token; only the token's
//! SHA-256 is stored, compared in constant time); tasks_version as Gitea's FetchTask steps
//! (0 is bumped to 1; a task is picked only when the caller's version differs; enqueue and
//! cancel bump it); label matching (every runs-on label among the runner's); one claim per job
//! (under the state lock: a job leaves Waiting exactly once, task ids are never reused);
//! UpdateLog ack semantics and `no_more` archiving (later writes: `already_exists`);
//! UpdateTask finalisation (result != UNSPECIFIED; a finished task ignores updates), the
//! heartbeat (updated time), CANCELLED answers for cancelled tasks, ephemeral runners deleted
//! after their final update; ownership (another runner's task: `permission_denied`).
//! Webhooks (`hooks`): `workflow_job` deliveries (`queued` on enqueue, `in_progress` on
//! claim) to URLs registered with `POST /admin/hooks`, signed as Gitea signs them.
//! A stall (`stall`, `POST /admin/stall {"millis": N}`): RunnerService calls arriving
//! in the next N ms are served when it ends, a FetchTask even if its client gave up.
//! Forgejo (`GiteaDouble::start_as(.., Forge::Forgejo)`, `forgejo`): its version answer,
//! multi-task FetchTask, request-key recovery and its per-key lock, 14.0.0/14.0.1's answers
//! without `task`, and `POST /admin/drop-fetch` to lose answers.
//! `POST /admin/hold {"hold": bool}` keeps every waiting job unassigned while set.
//! `GET /api/v1/version` answers the forge's version (`POST /admin/version` replaces it).
//! Forgejo's waiting-jobs API (`GET /api/v1/{admin|user|orgs/..|repos/../..}/actions/runners/jobs`,
//! with the handle's `api_token`; `forgejo`).
//! What a job reaches beyond the RunnerService (git, the API, artifacts): `web`.
//! Not kept: scopes (one global tasks version), the zombie sweep, real workflow parsing.
//!
//! Never used in production paths.

// The double's sides take what they share from `wire` and the double from here; none imports
// another, so this file is the only one that sees them all.
pub mod forgejo;
pub mod hooks;
mod runs;
mod stall;
pub mod web;
mod wire;

// Declared in `wire`, below the sides that read them; `gitea::JobView` still names them.
pub use wire::{JobStatus, JobView};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::Router;
use axum::extract::{Path as UrlPath, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use prost_types::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

use crate::served::Served;
use stall::Stall;
use tenantci_core::forge::Forge;
use tenantci_core::forge::gitea::ConnectError;
use tenantci_core::forge::gitea::facade::{self, RunnerServiceHandler};
use tenantci_core::forge::gitea::json::struct_from_json;
use tenantci_core::forge::gitea::proto::{
    DeclareRequest, DeclareResponse, FetchTaskRequest, FetchTaskResponse, ProtoEnum,
    RegisterRequest, RegisterResponse, Runner, RunnerStatus, StepState, Task, TaskResult,
    TaskState, UpdateLogRequest, UpdateLogResponse, UpdateTaskRequest, UpdateTaskResponse,
    timestamp,
};

use forgejo::ForgejoState;
use hooks::{HookSpec, Hooks, JobEvent};
use web::Web;

/// A job to enqueue (the admin API's `POST /admin/jobs` body).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct JobSpec {
    /// The job's name.
    pub name: String,
    /// The `runs-on` labels a runner must all carry to take it.
    pub runs_on: Vec<String>,
    /// The expanded single-job workflow YAML.
    pub workflow_payload: String,
    /// The secrets the task carries.
    pub secrets: BTreeMap<String, String>,
    /// The variables the task carries.
    pub vars: BTreeMap<String, String>,
    /// Extra github-style context fields (merged under the generated ones).
    pub context: serde_json::Map<String, serde_json::Value>,
}

/// A task as the admin API shows it (`GET /admin/tasks/<id>`).
#[derive(Clone, Debug, Serialize)]
pub struct TaskView {
    /// The task's id.
    pub id: i64,
    /// The job it runs.
    pub job_id: i64,
    /// The runner that claimed it.
    pub runner_id: i64,
    /// That runner's name.
    pub runner_name: String,
    /// `running` or `done`.
    pub state: &'static str,
    /// The proto name, e.g. `RESULT_SUCCESS`.
    pub result: &'static str,
    /// Whether its job was cancelled.
    pub cancelled: bool,
    /// The log lines the runner sent (UpdateLog), in order.
    pub logs: Vec<String>,
    /// Whether the log was closed (`no_more`).
    pub log_archived: bool,
    /// The outputs the runner reported.
    pub outputs: BTreeMap<String, String>,
    /// How many step states the runner reported.
    pub steps: usize,
    /// When the runner claimed it (RFC 3339, microseconds).
    pub started_at: String,
    /// When it finished, if it has.
    pub stopped_at: Option<String>,
    /// Last heartbeat (non-final UpdateTask) or claim.
    pub updated_at: String,
}

/// A registered runner as the admin API shows it.
#[derive(Clone, Debug, Serialize)]
pub struct RunnerView {
    /// The runner's id.
    pub id: i64,
    /// The uuid Register gave it.
    pub uuid: String,
    /// Its name.
    pub name: String,
    /// The version it declared.
    pub version: String,
    /// Its labels.
    pub labels: Vec<String>,
    /// Whether it is deleted after its first task's final update.
    pub ephemeral: bool,
    /// `idle`, `active` or `offline`, as Gitea computes it.
    pub status: &'static str,
}

struct RunnerRec {
    id: i64,
    uuid: String,
    token_sha256: [u8; 32],
    name: String,
    version: String,
    labels: Vec<String>,
    ephemeral: bool,
    last_online: SystemTime,
    last_active: Option<SystemTime>,
    took_task: bool,
}

struct JobRec {
    id: i64,
    spec: JobSpec,
    status: JobStatus,
    task_id: Option<i64>,
    created: SystemTime,
}

struct TaskRec {
    id: i64,
    job_id: i64,
    runner_id: i64,
    runner_name: String,
    result: TaskResult,
    done: bool,
    cancelled: bool,
    started: SystemTime,
    stopped: Option<Timestamp>,
    updated: SystemTime,
    steps: Vec<StepState>,
    outputs: BTreeMap<String, String>,
    log: Vec<String>,
    log_archived: bool,
    /// The job's tokens (`token`, `gitea_runtime_token`): the web side accepts them while the
    /// task runs.
    job_tokens: [String; 2],
}

#[derive(Default)]
struct State {
    tasks_version: i64,
    next_runner: i64,
    next_job: i64,
    next_task: i64,
    runners: BTreeMap<i64, RunnerRec>,
    jobs: BTreeMap<i64, JobRec>,
    tasks: BTreeMap<i64, TaskRec>,
    /// FetchTask calls answered, for the pickup tests and benchmark.
    fetch_calls: u64,
    /// FetchTask calls that assigned (or recovered) at least one task.
    fetch_calls_with_tasks: u64,
    /// Answers with tasks in `additional_tasks` only (Forgejo 14.0.0/14.0.1).
    answers_without_task: u64,
    /// `POST /admin/hold`: while true, FetchTask assigns nothing (the jobs wait, as behind a
    /// concurrency group); tests use it to let slots free up before the next claim.
    hold: bool,
}

/// `GET /admin/stats`.
#[derive(Clone, Debug, Serialize)]
pub struct Stats {
    /// The forge the double plays.
    pub forge: Forge,
    /// FetchTask calls answered.
    pub fetch_task_calls: u64,
    /// FetchTask calls that handed out at least one task (the rest were idle).
    pub fetch_task_calls_with_tasks: u64,
    /// The tasks version now.
    pub tasks_version: i64,
    /// Forgejo: FetchTask answers lost on purpose (`/admin/drop-fetch`).
    pub answers_dropped: u64,
    /// Forgejo: tasks handed out again to a repeated request key.
    pub tasks_recovered: u64,
    /// Forgejo: FetchTasks refused because another call held their request key.
    pub refused_locked: u64,
    /// Forgejo 14.0.0/14.0.1: answers that carried tasks in `additional_tasks` only.
    pub answers_without_task: u64,
    /// Every RunnerService and PingService call, by method (`UpdateLog`, `FetchTask`, ...):
    /// what a benchmark reads to say what a client costs Gitea.
    pub calls: BTreeMap<String, u64>,
    /// TCP connections accepted, from every client (a client that keeps its connections
    /// alive adds a few, one that does not adds one per call).
    pub connections: u64,
}

/// The double's state and behaviour; [`GiteaDouble::start`] serves it.
pub struct GiteaDouble {
    registration_token: String,
    /// The API token `GET /api/v1/.../actions/runners/jobs` accepts (Forgejo).
    api_token: String,
    state: Mutex<State>,
    /// The webhooks and their deliveries.
    pub hooks: Hooks,
    /// `POST /admin/stall`.
    pub stall: Stall,
    /// What a job reaches beyond the RunnerService (`web`).
    pub web: Web,
    forge: Forge,
    /// `GET /api/v1/version`'s answer.
    version: Mutex<String>,
    /// Forgejo's request keys and dropped answers.
    pub forgejo: ForgejoState,
    /// RunnerService and PingService calls served, by method (`/admin/stats`).
    calls: Mutex<BTreeMap<String, u64>>,
    /// TCP connections accepted (by the server [`GiteaDouble::start`] runs).
    connections: Arc<AtomicU64>,
}

/// A running double. Dropping it without [`GiteaHandle::shutdown`] aborts the server.
pub struct GiteaHandle {
    /// The double's URL (`http://ADDR`).
    pub base_url: String,
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The token Register accepts.
    pub registration_token: String,
    /// The API token of the waiting-jobs API (Forgejo).
    pub api_token: String,
    /// The double itself, for in-process inspection.
    pub double: Arc<GiteaDouble>,
    served: Served,
}

impl GiteaHandle {
    /// Stops serving (`Served::shutdown`).
    pub async fn shutdown(self) {
        self.served.shutdown().await;
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GiteaJson<'a> {
    url: &'a str,
    address: String,
    registration_token: &'a str,
    api_token: &'a str,
    admin_url: String,
}

/// Writes `<state_dir>/gitea.json` (`url`, `address`, `registrationToken`, `apiToken`,
/// `adminUrl`), mode 0600 because it holds the tokens.
pub fn write_gitea_json(state_dir: &Path, handle: &GiteaHandle) -> tenantci_core::Result<PathBuf> {
    let path = state_dir.join("gitea.json");
    let doc = GiteaJson {
        url: &handle.base_url,
        address: handle.addr.to_string(),
        registration_token: &handle.registration_token,
        api_token: &handle.api_token,
        admin_url: format!("{}/admin", handle.base_url),
    };
    let mut bytes = serde_json::to_vec_pretty(&doc)
        .map_err(|e| tenantci_core::Error::external(format!("cannot encode gitea.json: {e}")))?;
    bytes.push(b'\n');
    tenantci_core::fsutil::write_atomic(&path, &bytes, tenantci_core::fsutil::MODE_SECRET)
        .map_err(|e| {
            tenantci_core::Error::unwritable("the Gitea double's address file", &path, e)
        })?;
    Ok(path)
}

fn random_hex(bytes: usize) -> String {
    let buf: Vec<u8> = (0..bytes).map(|_| rand::random::<u8>()).collect();
    hex::encode(buf)
}

fn sha256(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// Microseconds: the dispatch benchmark measures from a task's claim (`started_at`).
fn rfc3339(ts: &Timestamp) -> String {
    chrono::DateTime::from_timestamp(ts.seconds, ts.nanos.max(0) as u32)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .unwrap_or_default()
}

fn result_name(r: TaskResult) -> &'static str {
    TaskResult::proto_name(r as i32).unwrap_or("RESULT_UNSPECIFIED")
}

impl RunnerRec {
    fn status(&self, now: SystemTime) -> RunnerStatus {
        let since = |t: SystemTime| now.duration_since(t).unwrap_or_default();
        if since(self.last_online) > Duration::from_secs(60) {
            RunnerStatus::Offline
        } else if self
            .last_active
            .is_some_and(|t| since(t) < Duration::from_secs(10))
        {
            RunnerStatus::Active
        } else {
            RunnerStatus::Idle
        }
    }

    fn to_proto(&self, token: String, now: SystemTime) -> Runner {
        Runner {
            id: self.id,
            uuid: self.uuid.clone(),
            token,
            name: self.name.clone(),
            status: self.status(now) as i32,
            version: self.version.clone(),
            labels: self.labels.clone(),
            ephemeral: self.ephemeral,
            ..Default::default()
        }
    }

    fn view(&self, now: SystemTime) -> RunnerView {
        RunnerView {
            id: self.id,
            uuid: self.uuid.clone(),
            name: self.name.clone(),
            version: self.version.clone(),
            labels: self.labels.clone(),
            ephemeral: self.ephemeral,
            status: match self.status(now) {
                RunnerStatus::Active => "active",
                RunnerStatus::Offline => "offline",
                _ => "idle",
            },
        }
    }
}

impl TaskRec {
    fn view(&self) -> TaskView {
        TaskView {
            id: self.id,
            job_id: self.job_id,
            runner_id: self.runner_id,
            runner_name: self.runner_name.clone(),
            state: if self.done { "done" } else { "running" },
            result: result_name(self.result),
            cancelled: self.cancelled,
            logs: self.log.clone(),
            log_archived: self.log_archived,
            outputs: self.outputs.clone(),
            steps: self.steps.len(),
            started_at: rfc3339(&timestamp(self.started)),
            stopped_at: self.stopped.as_ref().map(rfc3339),
            updated_at: rfc3339(&timestamp(self.updated)),
        }
    }
}

impl JobRec {
    fn view(&self) -> JobView {
        JobView {
            id: self.id,
            name: self.spec.name.clone(),
            runs_on: self.spec.runs_on.clone(),
            status: self.status,
            task_id: self.task_id,
            created_at: rfc3339(&timestamp(self.created)),
            repository: self
                .spec
                .context
                .get("repository")
                .and_then(|r| r.as_str())
                .unwrap_or(REPOSITORY)
                .to_string(),
            run_number: self
                .spec
                .context
                .get("run_number")
                .and_then(|n| n.as_i64().or_else(|| n.as_str()?.parse().ok()))
                .unwrap_or(self.id),
        }
    }
}

/// The double's one repository, unless a job's context names another.
const REPOSITORY: &str = "sim/demo";

impl GiteaDouble {
    /// A double that answers as Gitea does.
    pub fn new() -> Self {
        Self::new_as(Forge::Gitea)
    }

    /// A double that answers as `forge` does.
    pub fn new_as(forge: Forge) -> Self {
        GiteaDouble {
            registration_token: random_hex(20),
            api_token: random_hex(20),
            state: Mutex::new(State::default()),
            hooks: Hooks::of(forge),
            stall: Stall::default(),
            web: Web::default(),
            forge,
            version: Mutex::new(forgejo::version_of(forge).to_string()),
            forgejo: ForgejoState::default(),
            calls: Mutex::default(),
            connections: Arc::default(),
        }
    }

    /// The forge it plays.
    pub fn forge(&self) -> Forge {
        self.forge
    }

    /// Whether `presented` is the API token (constant time).
    pub fn is_api_token(&self, presented: &str) -> bool {
        sha256(presented).ct_eq(&sha256(&self.api_token)).into()
    }

    /// The jobs that wait for a runner or run, in id order (the waiting-jobs API's rows).
    pub fn open_jobs(&self) -> Vec<JobView> {
        self.lock()
            .jobs
            .values()
            .filter(|j| matches!(j.status, JobStatus::Waiting | JobStatus::Running))
            .map(JobRec::view)
            .collect()
    }

    /// Every job, in id order (the runs API's rows).
    pub fn all_jobs(&self) -> Vec<JobView> {
        self.lock().jobs.values().map(JobRec::view).collect()
    }

    /// Holds (or releases) every waiting job: FetchTask assigns nothing while held. Releasing
    /// bumps the tasks version, as a job becoming assignable does.
    pub fn hold_jobs(&self, hold: bool) {
        let mut st = self.lock();
        st.hold = hold;
        if !hold {
            st.tasks_version += 1;
        }
    }

    /// Replaces the version answer (e.g. one of neither forge, for `dispatch init`).
    pub fn set_version(&self, version: &str) {
        *self.version.lock().unwrap_or_else(|p| p.into_inner()) = version.to_string();
    }

    /// The `GET /api/v1/version` answer now.
    pub fn version(&self) -> String {
        self.version
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stalls every RunnerService call for `duration`; FetchTasks held meanwhile are served
    /// when it ends, by a task of their own (their clients may be gone).
    pub fn stall_for(self: &Arc<Self>, duration: Duration) {
        let until = self.stall.start(duration);
        let double = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(until).await;
            for held in double.stall.thaw() {
                let key = held.request_key.as_deref();
                let answer = double.fetch_and_leave(held.caller, &held.request, key);
                let _ = held.answer.send(answer);
            }
        });
    }

    /// Serves a fresh Gitea double on `listen` (use port 0 in tests).
    pub async fn start(listen: SocketAddr) -> tenantci_core::Result<GiteaHandle> {
        Self::start_as(listen, Forge::Gitea).await
    }

    /// Serves a fresh double of `forge` on `listen`.
    pub async fn start_as(listen: SocketAddr, forge: Forge) -> tenantci_core::Result<GiteaHandle> {
        let listener = TcpListener::bind(listen).await.map_err(|e| {
            tenantci_core::Error::external(format!(
                "cannot listen on {listen} for the Gitea double: {e}"
            ))
            .hint("pick a free port, or port 0 for any")
        })?;
        let addr = listener.local_addr().map_err(|e| {
            tenantci_core::Error::external(format!("cannot read the listen address: {e}"))
        })?;
        let double = Arc::new(GiteaDouble::new_as(forge));
        let app = Self::router(double.clone());
        let served = Served::counting(
            listener,
            app,
            "the Gitea double",
            double.connections.clone(),
        );
        Ok(GiteaHandle {
            base_url: format!("http://{addr}"),
            addr,
            registration_token: double.registration_token.clone(),
            api_token: double.api_token.clone(),
            double,
            served,
        })
    }

    /// The RunnerService, PingService and admin routes, without transport.
    pub fn router(double: Arc<GiteaDouble>) -> Router {
        let admin = Router::new()
            .route("/admin/jobs", post(admin_enqueue))
            .route("/admin/jobs/{id}", get(admin_job))
            .route("/admin/tasks/{id}", get(admin_task))
            .route("/admin/tasks/{id}/cancel", post(admin_cancel))
            .route("/admin/runners", get(admin_runners))
            .route("/admin/hooks", post(admin_add_hook))
            .route("/admin/hooks/deliveries", get(admin_deliveries))
            .route("/admin/stats", get(admin_stats))
            .route("/admin/stall", post(admin_stall))
            .route("/admin/drop-fetch", post(admin_drop_fetch))
            .route("/admin/hold", post(admin_hold))
            .route("/admin/version", post(admin_set_version))
            .route("/api/v1/version", get(api_version))
            .merge(forgejo::waiting_jobs_router())
            .merge(runs::router())
            .with_state(double.clone());
        facade::router(double.clone())
            .layer(axum::middleware::from_fn_with_state(
                double.clone(),
                count_call,
            ))
            .merge(admin)
            .merge(web::router(double))
    }

    /// The token Register accepts.
    pub fn registration_token(&self) -> &str {
        &self.registration_token
    }

    /// Whether `token` is a job token of a task that has not ended (Gitea revokes a job's
    /// token when its task ends).
    pub fn is_live_job_token(&self, token: &str) -> bool {
        self.lock()
            .tasks
            .values()
            .any(|t| !t.done && t.job_tokens.iter().any(|j| j == token))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Enqueues a Waiting job and bumps the tasks version; returns the job id.
    pub fn enqueue(&self, spec: JobSpec) -> i64 {
        let created = SystemTime::now();
        let (name, labels) = (spec.name.clone(), spec.runs_on.clone());
        let id = {
            let mut st = self.lock();
            st.next_job += 1;
            let id = st.next_job;
            st.jobs.insert(
                id,
                JobRec {
                    id,
                    spec,
                    status: JobStatus::Waiting,
                    task_id: None,
                    created,
                },
            );
            st.tasks_version += 1;
            id
        };
        // After the version bump, as Gitea notifies once the run is stored.
        self.hooks.deliver(&JobEvent {
            action: "queued",
            job_id: id,
            name: &name,
            labels: &labels,
            runner: None,
            created,
        });
        id
    }

    /// The counters `GET /admin/stats` reports.
    pub fn stats(&self) -> Stats {
        let st = self.lock();
        let forgejo = self.forgejo.counts();
        Stats {
            forge: self.forge,
            fetch_task_calls: st.fetch_calls,
            fetch_task_calls_with_tasks: st.fetch_calls_with_tasks,
            tasks_version: st.tasks_version,
            answers_dropped: forgejo.answers_dropped,
            tasks_recovered: forgejo.tasks_recovered,
            refused_locked: forgejo.refused_locked,
            answers_without_task: st.answers_without_task,
            calls: self.calls.lock().unwrap().clone(),
            connections: self.connections.load(Ordering::Relaxed),
        }
    }

    /// Job `id` as the admin API shows it.
    pub fn job(&self, id: i64) -> Option<JobView> {
        self.lock().jobs.get(&id).map(JobRec::view)
    }

    /// Task `id` as the admin API shows it.
    pub fn task(&self, id: i64) -> Option<TaskView> {
        self.lock().tasks.get(&id).map(TaskRec::view)
    }

    /// Every registered runner, in id order.
    pub fn runners(&self) -> Vec<RunnerView> {
        let now = SystemTime::now();
        self.lock().runners.values().map(|r| r.view(now)).collect()
    }

    /// The tasks version now (FetchTask's `tasks_version`).
    pub fn tasks_version(&self) -> i64 {
        self.lock().tasks_version
    }

    /// Cancels a job: a Waiting one never runs; a running task is stopped as CANCELLED and
    /// its runner learns it from its next UpdateTask answer.
    pub fn cancel_job(&self, job_id: i64) -> Result<(), ConnectError> {
        let mut st = self.lock();
        let st = &mut *st;
        let job = st
            .jobs
            .get_mut(&job_id)
            .ok_or_else(|| ConnectError::not_found(format!("no job {job_id}")))?;
        match job.status {
            JobStatus::Waiting => job.status = JobStatus::Cancelled,
            JobStatus::Running => {
                job.status = JobStatus::Cancelled;
                if let Some(task) = job.task_id.and_then(|t| st.tasks.get_mut(&t)) {
                    task.cancelled = true;
                    task.done = true;
                    task.result = TaskResult::Cancelled;
                    task.stopped = Some(timestamp(SystemTime::now()));
                }
            }
            JobStatus::Done | JobStatus::Cancelled => return Ok(()),
        }
        st.tasks_version += 1;
        Ok(())
    }

    /// The request key a call holds: Forgejo's only (Gitea ignores the header).
    fn keyed<'k>(&self, request_key: Option<&'k str>) -> Option<&'k str> {
        request_key.filter(|_| self.forge == Forge::Forgejo)
    }

    /// [`Self::fetch_now`], then the call's key is free again (unless its answer was lost
    /// while it still worked).
    fn fetch_and_leave(
        &self,
        caller: i64,
        req: &FetchTaskRequest,
        request_key: Option<&str>,
    ) -> Result<FetchTaskResponse, ConnectError> {
        let answer = self.fetch_now(caller, req, request_key);
        if let Some(key) = self.keyed(request_key) {
            self.forgejo.leave(caller, key);
        }
        answer
    }

    /// A recovered answer's tasks carry new job tokens: from now on they are the ones the web
    /// side accepts.
    fn accept_renewed_tokens(st: &mut State, tasks: &[Task]) {
        for t in tasks {
            let fields = t.context.as_ref().map(|c| &c.fields);
            let token = |name: &str| {
                fields
                    .and_then(|f| f.get(name))
                    .and_then(|v| match &v.kind {
                        Some(prost_types::value::Kind::StringValue(s)) => Some(s.clone()),
                        _ => None,
                    })
                    .unwrap_or_default()
            };
            if let Some(rec) = st.tasks.get_mut(&t.id) {
                rec.job_tokens = [token("token"), token("gitea_runtime_token")];
            }
        }
    }

    /// FetchTask as the forge answers it: tasks are picked only when the caller's version
    /// differs, one on Gitea, up to `task_capacity` on Forgejo, where a repeated request key
    /// gets its earlier answer's tasks instead. Err: the answer was dropped on purpose.
    fn fetch_now(
        &self,
        caller: i64,
        req: &FetchTaskRequest,
        request_key: Option<&str>,
    ) -> Result<FetchTaskResponse, ConnectError> {
        let keyed = self.keyed(request_key);
        let mut st = self.lock();
        st.fetch_calls += 1;
        if st.tasks_version == 0 {
            st.tasks_version = 1;
        }
        let latest = st.tasks_version;
        if let Some(tasks) = keyed.and_then(|k| self.forgejo.recover(caller, k)) {
            st.fetch_calls_with_tasks += 1;
            Self::accept_renewed_tokens(&mut st, &tasks);
            drop(st);
            return Ok(self.answer(tasks, latest));
        }
        let mut tasks = Vec::new();
        if req.tasks_version != latest && !st.hold {
            let limit = forgejo::pick_limit(self.forge, req.task_capacity);
            while tasks.len() < limit {
                match Self::claim(&mut st, caller, SystemTime::now()) {
                    Some(t) => tasks.push(t),
                    None => break,
                }
            }
        }
        let claimed: Vec<_> = tasks
            .iter()
            .filter_map(|t| {
                let job = st.jobs.values().find(|j| j.task_id == Some(t.id))?;
                let runner = st.runners.get(&caller)?;
                Some((
                    job.id,
                    job.spec.name.clone(),
                    job.spec.runs_on.clone(),
                    job.created,
                    runner.id,
                    runner.name.clone(),
                ))
            })
            .collect();
        if !tasks.is_empty() {
            st.fetch_calls_with_tasks += 1;
        }
        drop(st);
        for (job_id, name, labels, created, runner_id, runner_name) in &claimed {
            self.hooks.deliver(&JobEvent {
                action: "in_progress",
                job_id: *job_id,
                name,
                labels,
                runner: Some((*runner_id, runner_name)),
                created: *created,
            });
        }
        if let Some(k) = keyed {
            self.forgejo.remember(caller, k, &tasks);
        }
        let dropped = (!tasks.is_empty() && self.forge == Forge::Forgejo)
            .then(|| self.forgejo.take_drop())
            .flatten();
        if let Some(how) = dropped {
            if let (forgejo::Drop::WhileWorking, Some(k)) = (how, keyed) {
                self.forgejo.still_working(caller, k);
            }
            return Err(ConnectError::unavailable(
                "the FetchTask answer was lost on its way back (the double's drop-fetch switch)",
            ));
        }
        Ok(self.answer(tasks, latest))
    }

    /// The answer carrying `tasks`: the first in `task`, the rest in `additional_tasks`; all
    /// in `additional_tasks` where the version played is one that did so.
    fn answer(&self, tasks: Vec<Task>, tasks_version: i64) -> FetchTaskResponse {
        let leave_out = !tasks.is_empty()
            && self.forge == Forge::Forgejo
            && forgejo::first_task_left_out(&self.version());
        if leave_out {
            self.lock().answers_without_task += 1;
        }
        let mut tasks = tasks.into_iter();
        let first = if leave_out { None } else { tasks.next() };
        FetchTaskResponse {
            task: first,
            tasks_version,
            additional_tasks: tasks.collect(),
        }
    }

    fn owned_task(st: &mut State, caller: i64, task_id: i64) -> Result<&mut TaskRec, ConnectError> {
        let task = st
            .tasks
            .get_mut(&task_id)
            .ok_or_else(|| ConnectError::not_found(format!("no task {task_id}")))?;
        if task.runner_id != caller {
            return Err(ConnectError::permission_denied(format!(
                "task {task_id} is not assigned to this runner"
            )));
        }
        Ok(task)
    }

    fn claim(st: &mut State, runner_id: i64, now: SystemTime) -> Option<Task> {
        let runner = st.runners.get(&runner_id)?;
        if runner.ephemeral && runner.took_task {
            return None;
        }
        let job_id = st
            .jobs
            .values()
            .find(|j| {
                j.status == JobStatus::Waiting
                    && j.spec.runs_on.iter().all(|l| runner.labels.contains(l))
            })?
            .id;
        let runner_name = runner.name.clone();
        st.next_task += 1;
        let task_id = st.next_task;
        let job = st.jobs.get_mut(&job_id)?;
        job.status = JobStatus::Running;
        job.task_id = Some(task_id);
        let spec = job.spec.clone();
        if let Some(r) = st.runners.get_mut(&runner_id) {
            r.took_task = true;
        }
        st.tasks.insert(
            task_id,
            TaskRec {
                id: task_id,
                job_id,
                runner_id,
                runner_name,
                result: TaskResult::Unspecified,
                done: false,
                cancelled: false,
                started: now,
                stopped: None,
                updated: now,
                steps: Vec::new(),
                outputs: BTreeMap::new(),
                log: Vec::new(),
                log_archived: false,
                job_tokens: [random_hex(20), random_hex(20)],
            },
        );
        let tokens = st.tasks[&task_id].job_tokens.clone();
        let mut context = spec.context.clone();
        context.insert("job".into(), spec.name.clone().into());
        // Gitea's `github.repository` (owner/name); one repository in the double.
        context
            .entry("repository")
            .or_insert_with(|| REPOSITORY.into());
        // A push to the default branch, unless the job says otherwise (Gitea's `ref`, and the
        // event payload's repository, where `github.event.repository.default_branch` is read).
        context
            .entry("ref")
            .or_insert_with(|| "refs/heads/main".into());
        context
            .entry("event")
            .or_insert_with(|| serde_json::json!({"repository": {"default_branch": "main"}}));
        context.insert("run_id".into(), job_id.to_string().into());
        let [token, runtime_token] = tokens;
        context.insert("token".into(), token.into());
        context.insert("gitea_runtime_token".into(), runtime_token.into());
        Some(Task {
            id: task_id,
            workflow_payload: Some(spec.workflow_payload.into_bytes()),
            context: Some(struct_from_json(context)),
            secrets: spec.secrets,
            vars: spec.vars,
            ..Default::default()
        })
    }
}

impl Default for GiteaDouble {
    fn default() -> Self {
        Self::new()
    }
}

impl RunnerServiceHandler for GiteaDouble {
    type Caller = i64;

    async fn authenticate(&self, uuid: &str, token: &str) -> Result<i64, ConnectError> {
        let presented = sha256(token);
        let mut st = self.lock();
        let found = st.runners.values_mut().find(|r| r.uuid == uuid);
        let (expected, id) = match &found {
            Some(r) => (r.token_sha256, Some(r.id)),
            None => ([0u8; 32], None),
        };
        let matches: bool = presented.ct_eq(&expected).into();
        match (id, matches, found) {
            (Some(id), true, Some(r)) => {
                r.last_online = SystemTime::now();
                Ok(id)
            }
            _ => Err(ConnectError::unauthenticated("unregistered runner")),
        }
    }

    async fn register(&self, req: RegisterRequest) -> Result<RegisterResponse, ConnectError> {
        self.stall.wait_out().await;
        let ok: bool = sha256(&req.token)
            .ct_eq(&sha256(&self.registration_token))
            .into();
        if !ok {
            return Err(ConnectError::permission_denied(
                "runner registration token is invalid",
            ));
        }
        if req.name.trim().is_empty() {
            return Err(ConnectError::invalid_argument("runner name is required"));
        }
        let labels = if req.labels.is_empty() {
            // Runners older than the `labels` field send agent + custom labels.
            req.agent_labels
                .iter()
                .chain(&req.custom_labels)
                .cloned()
                .collect()
        } else {
            req.labels.clone()
        };
        let now = SystemTime::now();
        let token = random_hex(20);
        let mut st = self.lock();
        st.next_runner += 1;
        let rec = RunnerRec {
            id: st.next_runner,
            uuid: crate::ids::uuid(),
            token_sha256: sha256(&token),
            name: req.name,
            version: req.version,
            labels,
            ephemeral: req.ephemeral,
            last_online: now,
            last_active: None,
            took_task: false,
        };
        let runner = rec.to_proto(token, now);
        st.runners.insert(rec.id, rec);
        Ok(RegisterResponse {
            runner: Some(runner),
        })
    }

    async fn declare(
        &self,
        caller: &i64,
        req: DeclareRequest,
    ) -> Result<DeclareResponse, ConnectError> {
        self.stall.wait_out().await;
        let mut st = self.lock();
        let r = st
            .runners
            .get_mut(caller)
            .ok_or_else(|| ConnectError::unauthenticated("unregistered runner"))?;
        r.version = req.version;
        r.labels = req.labels;
        Ok(DeclareResponse {
            runner: Some(r.to_proto(String::new(), SystemTime::now())),
        })
    }

    async fn fetch_task(
        &self,
        caller: &i64,
        req: FetchTaskRequest,
    ) -> Result<FetchTaskResponse, ConnectError> {
        self.fetch_task_keyed(caller, req, None).await
    }

    /// A keyed call holds its key until it answers (at the thaw, if a stall holds it), as
    /// Forgejo's per-key lock does; a repeat meanwhile is refused.
    async fn fetch_task_keyed(
        &self,
        caller: &i64,
        req: FetchTaskRequest,
        request_key: Option<&str>,
    ) -> Result<FetchTaskResponse, ConnectError> {
        if let Some(key) = self.keyed(request_key) {
            self.forgejo.enter(*caller, key)?;
        }
        if let Some(thawed) = self.stall.hold_fetch(*caller, &req, request_key) {
            return thawed
                .await
                .map_err(|_| ConnectError::unavailable("the Gitea double stopped"))?;
        }
        self.fetch_and_leave(*caller, &req, request_key)
    }

    async fn update_task(
        &self,
        caller: &i64,
        req: UpdateTaskRequest,
    ) -> Result<UpdateTaskResponse, ConnectError> {
        self.stall.wait_out().await;
        let state = req
            .state
            .ok_or_else(|| ConnectError::invalid_argument("UpdateTask needs a state"))?;
        let now = SystemTime::now();
        let mut guard = self.lock();
        let st = &mut *guard;
        let task = Self::owned_task(st, *caller, state.id)?;
        let mut sent = Vec::new();
        for (k, v) in req.outputs {
            task.outputs.entry(k.clone()).or_insert(v);
            sent.push(k);
        }
        let mut finished = false;
        if !task.done {
            task.updated = now;
            if !state.steps.is_empty() {
                task.steps = state.steps;
            }
            let result = TaskResult::try_from(state.result).unwrap_or(TaskResult::Unspecified);
            if result.is_final() {
                task.done = true;
                task.result = result;
                task.stopped = Some(state.stopped_at.unwrap_or_else(|| timestamp(now)));
                finished = true;
            }
        }
        let answer = TaskState {
            id: task.id,
            result: if task.cancelled {
                TaskResult::Cancelled as i32
            } else {
                task.result as i32
            },
            ..Default::default()
        };
        let job_id = task.job_id;
        if finished && let Some(job) = st.jobs.get_mut(&job_id) {
            job.status = JobStatus::Done;
        }
        let ephemeral_done = finished && st.runners.get(caller).is_some_and(|r| r.ephemeral);
        if ephemeral_done {
            st.runners.remove(caller);
        } else if let Some(r) = st.runners.get_mut(caller) {
            r.last_active = Some(now);
        }
        Ok(UpdateTaskResponse {
            state: Some(answer),
            sent_outputs: sent,
        })
    }

    async fn update_log(
        &self,
        caller: &i64,
        req: UpdateLogRequest,
    ) -> Result<UpdateLogResponse, ConnectError> {
        self.stall.wait_out().await;
        let mut guard = self.lock();
        let st = &mut *guard;
        if let Some(r) = st.runners.get_mut(caller) {
            r.last_active = Some(SystemTime::now());
        }
        let task = Self::owned_task(st, *caller, req.task_id)?;
        let ack = task.log.len() as i64;
        let rows = req.rows.len() as i64;
        if req.index > ack || (rows > 0 && req.index + rows <= ack) {
            return Ok(UpdateLogResponse { ack_index: ack });
        }
        if task.log_archived {
            return Err(ConnectError::already_exists("log file has been archived"));
        }
        let skip = (ack - req.index).max(0) as usize;
        task.log
            .extend(req.rows.into_iter().skip(skip).map(|r| r.content));
        if req.no_more {
            task.log_archived = true;
        }
        Ok(UpdateLogResponse {
            ack_index: task.log.len() as i64,
        })
    }
}

type Double = AxState<Arc<GiteaDouble>>;

/// Counts one RunnerService or PingService call by its method, the path's last segment.
async fn count_call(
    AxState(d): Double,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let method = req
        .uri()
        .path()
        .rsplit('/')
        .next()
        .unwrap_or("")
        .to_string();
    *d.calls.lock().unwrap().entry(method).or_default() += 1;
    next.run(req).await
}

fn not_found(what: String) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(serde_json::json!({ "error": what })),
    )
        .into_response()
}

async fn admin_enqueue(AxState(d): Double, Json(spec): Json<JobSpec>) -> Response {
    let id = d.enqueue(spec);
    (
        StatusCode::CREATED,
        Json(serde_json::json!({ "job_id": id })),
    )
        .into_response()
}

async fn admin_job(AxState(d): Double, UrlPath(id): UrlPath<i64>) -> Response {
    match d.job(id) {
        Some(j) => Json(j).into_response(),
        None => not_found(format!("no job {id}")),
    }
}

async fn admin_task(AxState(d): Double, UrlPath(id): UrlPath<i64>) -> Response {
    match d.task(id) {
        Some(t) => Json(t).into_response(),
        None => not_found(format!("no task {id}")),
    }
}

async fn admin_cancel(AxState(d): Double, UrlPath(id): UrlPath<i64>) -> Response {
    let job_id = match d.task(id) {
        Some(t) => t.job_id,
        None => return not_found(format!("no task {id}")),
    };
    match d.cancel_job(job_id) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => not_found(e.message),
    }
}

async fn admin_runners(AxState(d): Double) -> Response {
    Json(d.runners()).into_response()
}

async fn admin_add_hook(AxState(d): Double, Json(spec): Json<HookSpec>) -> Response {
    if !spec.url.starts_with("http://") {
        return (
            StatusCode::BAD_REQUEST,
            Json(serde_json::json!({ "error": "the double delivers to http:// URLs only" })),
        )
            .into_response();
    }
    let id = d.hooks.add(spec);
    (
        StatusCode::CREATED,
        Json(serde_json::json!({ "hook_id": id })),
    )
        .into_response()
}

async fn admin_deliveries(AxState(d): Double) -> Response {
    Json(d.hooks.deliveries()).into_response()
}

async fn admin_stats(AxState(d): Double) -> Response {
    Json(d.stats()).into_response()
}

/// `POST /admin/stall`'s body.
#[derive(Deserialize)]
struct StallSpec {
    millis: u64,
}

async fn admin_stall(AxState(d): Double, Json(spec): Json<StallSpec>) -> Response {
    d.stall_for(Duration::from_millis(spec.millis));
    StatusCode::NO_CONTENT.into_response()
}

/// `GET /api/v1/version`, as Gitea and Forgejo answer it (no authentication needed).
async fn api_version(AxState(d): Double) -> Response {
    Json(serde_json::json!({ "version": d.version() })).into_response()
}

/// `POST /admin/version`'s body.
#[derive(Deserialize)]
struct VersionSpec {
    version: String,
}

async fn admin_set_version(AxState(d): Double, Json(spec): Json<VersionSpec>) -> Response {
    d.set_version(&spec.version);
    StatusCode::NO_CONTENT.into_response()
}

/// `POST /admin/drop-fetch`'s body.
#[derive(Deserialize)]
struct DropSpec {
    count: u64,
    /// Lost while Forgejo still works on the call (its key stays locked for one repeat).
    #[serde(default)]
    while_working: bool,
}

async fn admin_drop_fetch(AxState(d): Double, Json(spec): Json<DropSpec>) -> Response {
    if d.forge != Forge::Forgejo {
        return (
            StatusCode::CONFLICT,
            "drop-fetch plays Forgejo's request-key recovery; start the double with --forgejo",
        )
            .into_response();
    }
    let how = if spec.while_working {
        forgejo::Drop::WhileWorking
    } else {
        forgejo::Drop::Answered
    };
    d.forgejo.drop_next(spec.count, how);
    StatusCode::NO_CONTENT.into_response()
}

/// `POST /admin/hold`'s body.
#[derive(Deserialize)]
struct HoldSpec {
    hold: bool,
}

async fn admin_hold(AxState(d): Double, Json(spec): Json<HoldSpec>) -> Response {
    d.hold_jobs(spec.hold);
    StatusCode::NO_CONTENT.into_response()
}

//! The testkit's GitLab double as a process, for `scripts/demo.sh` (never production): GitLab's
//! REST API on 127.0.0.1 over plain HTTP (runner creation and verification, a runner's
//! details and managers, a project's jobs and protected branches, gitlab-runner's job request)
//! with its access tokens, and beside it an admin listener the demo queues a CI job with:
//! `POST /jobs` `{"id": N, "name": "build", "ref": "main", "tags": ["gpu"]}` answers
//! `{"id", "web_url"}` (project 42, `tenant/app`). Prints one JSON line on stdout once both
//! listen (`url`, `admin`, and the paths of a `create_runner` and a `read_api` token file it
//! wrote 0600 into DIR), then serves until SIGTERM or SIGINT.
//!
//! Usage: gitlab_double DIR

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use tenantci_testkit::gitlab::jobs::Job;
use tenantci_testkit::gitlab::{DEFAULT_ACCESS_TOKEN, GitlabDouble, READ_ONLY_ACCESS_TOKEN};

const PROJECT: u64 = 42;

fn fail(msg: String) -> ! {
    eprintln!("gitlab_double: {msg}");
    std::process::exit(1)
}

fn private_file(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
}

async fn add_job(State(double): State<Arc<GitlabDouble>>, Json(v): Json<Value>) -> Json<Value> {
    let text = |k: &str, default: &str| v[k].as_str().unwrap_or(default).to_string();
    let tags: Vec<String> = v["tags"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
    let id = v["id"].as_u64().unwrap_or(1);
    let job = Job::pending(
        id,
        PROJECT,
        &text("name", "build"),
        &text("ref", "main"),
        &tags,
    );
    double.add_job(job);
    Json(json!({"id": id, "web_url": format!("{}/tenant/app/-/jobs/{id}", double.url())}))
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir] = args.as_slice() else {
        fail("usage: gitlab_double DIR".into())
    };
    let dir = Path::new(dir);
    let create = dir.join("gitlab-create.token");
    let read = dir.join("gitlab-read.token");
    private_file(&create, DEFAULT_ACCESS_TOKEN);
    private_file(&read, READ_ONLY_ACCESS_TOKEN);
    let double = Arc::new(
        GitlabDouble::start()
            .await
            .unwrap_or_else(|e| fail(format!("cannot start: {e}"))),
    );
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| fail(format!("cannot bind: {e}")));
    let admin_url = format!("http://{}", admin.local_addr().unwrap());
    let app = Router::new()
        .route("/jobs", post(add_job))
        .with_state(double.clone());
    println!(
        "{}",
        json!({"url": double.url(), "admin": admin_url,
               "create_token_file": create, "read_token_file": read})
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .unwrap_or_else(|e| fail(format!("cannot catch SIGTERM: {e}")));
    tokio::select! {
        served = axum::serve(admin, app) => {
            if let Err(e) = served { fail(format!("admin listener: {e}")) }
        }
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

//! `tenantci dispatch explain` reads the job from the forge first (issue 43): its status,
//! runs-on and waiting time from the runs API of the Gitea double as Gitea 1.25 serves it and
//! as Forgejo serves it, with the API token from a 0600 file; a Gitea without that API is one
//! line and explain goes on; an unknown run or a token file others can read is exit 2.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use serde_json::{Value, json};

use super::harness::{Dispatcher, World};
use crate::util::{assert_exit, run, scratch, stderr, stdout, tenantci};

fn explain(d: &Dispatcher, args: &[&str]) -> std::process::Output {
    let address = d.status_address().to_string();
    run(tenantci()
        .args(["dispatch", "explain"])
        .args(args)
        .args(["--status-address", &address]))
}

/// A token file of `mode` holding `token`.
fn token_file(dir: &tempfile::TempDir, token: &str, mode: u32) -> PathBuf {
    let path = dir.path().join(format!("forge-{mode:o}.token"));
    std::fs::write(&path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// A job the forge holds waiting (nothing claims it), enqueued at the double; its web URL.
async fn waiting_job(w: &World, d: &Dispatcher) -> (i64, String) {
    d.wait_leader(true).await;
    w.gitea
        .admin_post(w.http(), "hold", json!({"hold": true}))
        .await;
    let id = w
        .gitea
        .enqueue(w.http(), "build", &["self-hosted", "pod"], "s")
        .await;
    let status = format!("http://{}/v1/status", d.status_address());
    let doc: Value = w
        .http()
        .get(status)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let forge = doc["summary"]["forge"]["url"].as_str().unwrap().to_string();
    (id, format!("{forge}/sim/demo/actions/runs/{id}/jobs/0"))
}

/// The forge's line comes first, with its status, runs-on and waiting time; JSON carries the
/// same; an unknown run and a readable token file are refused in one sentence, exit 2.
async fn forge_view_first(w: &World, d: &Dispatcher, forge: &str, waiting: &str) {
    let (id, url) = waiting_job(w, d).await;
    let dir = scratch();
    let token = token_file(&dir, &w.gitea.api_token, 0o600);
    let token = token.to_str().unwrap();
    let o = explain(d, &[&url, "--forge-token-file", token]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    let first = out.lines().next().unwrap_or_default();
    let says = format!(
        "forge: {forge} has job `build` of run {id} of sim/demo: {waiting}, runs-on self-hosted,pod, waiting since"
    );
    assert!(first.starts_with(&says), "{out}");
    assert!(out.contains("will run"), "{out}");

    let o = explain(d, &[&url, "--forge-token-file", token, "-o", "json"]);
    assert_exit(&o, 0);
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let job = &doc[0]["forge"]["jobs"][0];
    assert_eq!(job["status"], waiting, "{doc}");
    assert_eq!(job["runsOn"], json!(["self-hosted", "pod"]), "{doc}");
    assert!(job["since"].is_string(), "{doc}");

    let unknown = url.replace(&format!("/runs/{id}/"), "/runs/424242/");
    let o = explain(d, &[&unknown, "--forge-token-file", token]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("has no run 424242 in sim/demo"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stderr(&o).trim().lines().count(), 1, "{}", stderr(&o));

    let readable = token_file(&dir, &w.gitea.api_token, 0o644);
    let o = explain(d, &[&url, "--forge-token-file", readable.to_str().unwrap()]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("forge API token file"),
        "{}",
        stderr(&o)
    );
    assert!(
        !stderr(&o).contains(&w.gitea.api_token),
        "the token is never shown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_shows_gitea_s_view_of_the_job_first() {
    let w = World::start(1).await;
    w.gitea
        .admin_post(w.http(), "version", json!({"version": "1.25.0"}))
        .await;
    let d = w.dispatcher("d1").await;
    forge_view_first(&w, &d, "Gitea 1.25.0", "queued").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_shows_forgejo_s_view_of_the_job_first() {
    let w = World::start_forgejo(1).await;
    let d = w.dispatcher("d1").await;
    forge_view_first(&w, &d, "Forgejo 11.0.1+gitea-1.22.0", "waiting").await;
}

/// Gitea before 1.25 has no runs API (404): one line says so and explain goes on from the
/// dispatcher's view; without a token file, one line says how to read the forge.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_says_in_one_line_when_the_forge_has_no_runs_api() {
    let w = World::start(1).await;
    w.gitea
        .admin_post(w.http(), "version", json!({"version": "1.24.3"}))
        .await;
    let d = w.dispatcher("d1").await;
    let (_, url) = waiting_job(&w, &d).await;
    let dir = scratch();
    let token = token_file(&dir, &w.gitea.api_token, 0o600);
    let labels = ["--runs-on", "self-hosted,pod"];
    let o = explain(
        &d,
        &[
            &url,
            "--forge-token-file",
            token.to_str().unwrap(),
            labels[0],
            labels[1],
        ],
    );
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(
        out.starts_with("forge: Gitea 1.24.3 at ") && out.contains("has no runs API"),
        "{out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.starts_with("forge:")).count(),
        1,
        "{out}"
    );
    assert!(out.contains("will run"), "{out}");

    let o = explain(&d, &[&url, labels[0], labels[1]]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).starts_with("forge: not read: give --forge-token-file FILE"),
        "{}",
        stdout(&o)
    );
}

//! A job's own traffic to Gitea through its executor's proxy (issue 29): the runner's
//! `.runner` address is the proxy, so checkout, artifacts and API calls go there and must
//! reach Gitea as from a runner host. The proxy runs with the argv the dispatcher wrote into
//! the Pod spec; the Gitea double serves real `git http-backend`, an API route and an
//! artifact sink that hashes what arrives.

use std::process::Command;

use futures::StreamExt;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tenantci_core::forge::gitea::json::struct_to_json;
use tenantci_testkit::executor::{Executor, PodProxy};

use super::harness::World;
use crate::util::{scratch, tenantci};

/// The artifact size the issue asks for.
const UPLOAD: usize = 64 << 20;
/// Chunks the upload streams in.
const CHUNK: usize = 256 << 10;

fn git(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A bare repository `sim/demo.git` under `root` with one commit holding `README.md`.
fn repository(root: &std::path::Path) {
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("README.md"), "hello from the double\n").unwrap();
    git(&work, &["add", "README.md"]);
    git(&work, &["commit", "-q", "-m", "first"]);
    std::fs::create_dir_all(root.join("sim")).unwrap();
    git(root, &["clone", "-q", "--bare", "work", "sim/demo.git"]);
}

/// The deterministic bytes of the upload, chunk `i`.
fn chunk(i: usize) -> Vec<u8> {
    (0..CHUNK).map(|j| ((i * 31 + j * 7) % 251) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checkout_artifacts_and_the_api_reach_gitea_through_the_executors_proxy() {
    let w = World::start(1).await;
    let _d = w.dispatcher("d1").await;
    let repos = scratch();
    repository(repos.path());
    let http = w.http();
    let admin = &w.gitea.admin_url;
    let set = http
        .post(format!("{admin}/web/git-root"))
        .json(&serde_json::json!({"path": repos.path()}))
        .send()
        .await
        .unwrap();
    assert!(set.status().is_success());

    let task = w.claimed(w.enqueue("checkout", "s3cr3t").await).await;
    let (secret, pod) = w.objects(task).await;
    let proxy = PodProxy::start(tenantci(), &secret, &pod);
    let ex = Executor::through(&secret, &proxy);
    // The RunnerService beside the passthrough: the task and its job tokens.
    let fetched = ex.fetch().await;
    let context = struct_to_json(fetched.context.as_ref().unwrap());
    let token = context["token"].as_str().unwrap().to_string();
    let runtime_token = context["gitea_runtime_token"].as_str().unwrap().to_string();

    // actions/checkout's way: git over the server URL with the token as basic auth.
    let basic = base64_basic(&token);
    let clone_dir = scratch();
    let url = format!("{}/sim/demo", proxy.address);
    git(
        clone_dir.path(),
        &[
            "-c",
            &format!("http.extraheader=AUTHORIZATION: basic {basic}"),
            "clone",
            "-q",
            &url,
            "checkout",
        ],
    );
    assert_eq!(
        std::fs::read_to_string(clone_dir.path().join("checkout/README.md")).unwrap(),
        "hello from the double\n"
    );

    // The API with the job's token; a forged one is Gitea's 401, passed on as it is.
    let api = format!("{}/api/v1/repos/sim/demo", proxy.address);
    let ok: Value = http
        .get(&api)
        .header("authorization", format!("token {token}"))
        .header("x-runner-token", "must-not-reach-gitea")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ok["full_name"], "sim/demo");
    let forged = http
        .get(&api)
        .header("authorization", "token forged")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);

    // A 64 MiB artifact upload, streamed; it arrives intact.
    let mut expected = Sha256::new();
    for i in 0..UPLOAD / CHUNK {
        expected.update(chunk(i));
    }
    let body = futures::stream::iter(0..UPLOAD / CHUNK).map(|i| Ok::<_, std::io::Error>(chunk(i)));
    let uploaded: Value = http
        .put(format!(
            "{}/api/actions_pipeline/_apis/pipelines/workflows/1/artifacts/big?itemPath=big/blob",
            proxy.address
        ))
        .header("authorization", format!("Bearer {runtime_token}"))
        .header("content-type", "application/octet-stream")
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(uploaded["bytes"], UPLOAD as u64, "{uploaded}");
    assert_eq!(uploaded["sha256"], hex::encode(expected.finalize()));
    let peak = proxy.peak_rss_kib();
    assert!(peak > 0, "the proxy's VmHWM is readable");
    assert!(
        peak < 48 << 10,
        "the proxy streams, it does not hold a 64 MiB body: peak RSS {peak} KiB"
    );

    ex.finish(task, &[&format!("ran task {task}")]).await;
    w.assert_succeeded_once(task).await;

    // Nothing of the runner's own headers reached Gitea's web side.
    let seen: Vec<Value> = http
        .get(format!("{admin}/web/requests"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let paths: Vec<&str> = seen.iter().filter_map(|r| r["path"].as_str()).collect();
    assert!(paths.contains(&"/sim/demo/info/refs"), "{paths:?}");
    assert!(paths.contains(&"/sim/demo/git-upload-pack"), "{paths:?}");
    for r in &seen {
        let headers = r["headers"].as_array().unwrap();
        assert!(
            headers
                .iter()
                .all(|h| !h.as_str().unwrap().starts_with("x-runner-")),
            "{r}"
        );
    }
}

fn base64_basic(token: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"))
}

//! A job's own traffic to Gitea through its executor's proxy (issue 29): the runner's
//! `.runner` address is the proxy, so checkout, artifacts and API calls go there and must
//! reach Gitea as from a runner host. The proxy runs with the argv the dispatcher wrote into
//! the Pod spec; the Gitea double serves real `git http-backend`, an API route and an
//! artifact sink that hashes what arrives. The same through a VM sandbox's boot script, run
//! for real; and Gitea's redirects and signed URLs, which lead the job to Gitea itself.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use futures::StreamExt;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tenantci_core::forge::gitea::json::struct_to_json;
use tenantci_sim::gitea::web::ARTIFACT_V4;
use tenantci_testkit::boot::BootedSandbox;
use tenantci_testkit::executor::{Executor, PodProxy};
use tenantci_testkit::wait::eventually;

use super::harness::World;
use crate::util::{bin, scratch, tenantci};

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

/// Points the double's `git http-backend` at a fresh root holding `sim/demo.git`; the root.
async fn serve_repository(w: &World) -> tempfile::TempDir {
    let repos = scratch();
    repository(repos.path());
    w.gitea
        .admin_post(
            w.http(),
            "web/git-root",
            serde_json::json!({"path": repos.path()}),
        )
        .await;
    repos
}

/// The task's job tokens as the runner hands them to the job: `token` (`github.token`) and
/// `gitea_runtime_token` (`ACTIONS_RUNTIME_TOKEN`).
fn job_tokens(task: &tenantci_core::forge::gitea::proto::Task) -> (String, String) {
    let context = struct_to_json(task.context.as_ref().unwrap());
    (
        context["token"].as_str().unwrap().to_string(),
        context["gitea_runtime_token"].as_str().unwrap().to_string(),
    )
}

/// What a job does through its runner's `.runner` address `proxy`, with the RunnerService
/// beside it (`ex` fetches the task, then finishes it): a real `git clone`, an API call with
/// the job's token (and a forged one), a 64 MiB artifact upload arriving intact; then no
/// `x-runner-*` header reached the double's web side.
async fn job_traffic(w: &World, proxy: &str, ex: &Executor, task: i64) {
    let http = w.http();
    let fetched = ex.fetch().await;
    assert_eq!(fetched.id, task);
    let (token, runtime_token) = job_tokens(&fetched);

    // actions/checkout's way: git over the server URL with the token as basic auth.
    let basic = base64_basic(&token);
    let clone_dir = scratch();
    let url = format!("{proxy}/sim/demo");
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
    let api = format!("{proxy}/api/v1/repos/sim/demo");
    let ok: Value = json(
        http.get(&api)
            .header("authorization", format!("token {token}"))
            .header("x-runner-token", "must-not-reach-gitea"),
    )
    .await;
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
    let uploaded: Value = json(http
        .put(format!(
            "{proxy}/api/actions_pipeline/_apis/pipelines/workflows/1/artifacts/big?itemPath=big/blob"
        ))
        .header("authorization", format!("Bearer {runtime_token}"))
        .header("content-type", "application/octet-stream")
        .body(reqwest::Body::wrap_stream(body))).await;
    assert_eq!(uploaded["bytes"], UPLOAD as u64, "{uploaded}");
    assert_eq!(uploaded["sha256"], hex::encode(expected.finalize()));

    ex.finish(task, &[&format!("ran task {task}")]).await;
    w.assert_succeeded_once(task).await;

    gitea_saw_the_clone_and_no_runner_header(w).await;
}

/// The clone reached Gitea's web side, and nothing of the runner's own headers did.
async fn gitea_saw_the_clone_and_no_runner_header(w: &World) {
    let seen = web_requests(w).await;
    let paths: Vec<&str> = seen.iter().filter_map(|r| r["path"].as_str()).collect();
    assert!(paths.contains(&"/sim/demo/info/refs"), "{paths:?}");
    assert!(paths.contains(&"/sim/demo/git-upload-pack"), "{paths:?}");
    for r in &seen {
        assert!(
            header_names(r).iter().all(|h| !h.starts_with("x-runner-")),
            "{r}"
        );
    }
}

/// The JSON answer to `request`.
async fn json<T: serde::de::DeserializeOwned>(request: reqwest::RequestBuilder) -> T {
    request.send().await.unwrap().json().await.unwrap()
}

/// Every web request the double saw: method, path, header names.
async fn web_requests(w: &World) -> Vec<Value> {
    serde_json::from_value(w.gitea.admin(w.http(), "web/requests").await).unwrap()
}

fn header_names(request: &Value) -> Vec<&str> {
    request["headers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checkout_artifacts_and_the_api_reach_gitea_through_the_executors_proxy() {
    let w = World::start(1).await;
    let _d = w.dispatcher("d1").await;
    let _repos = serve_repository(&w).await;
    let task = w.claimed(w.enqueue("checkout", "s3cr3t").await).await;
    let (secret, pod) = w.objects(task).await;
    let proxy = PodProxy::start(tenantci(), &secret, &pod);
    let ex = Executor::through(&secret, &proxy);
    job_traffic(&w, &proxy.address, &ex, task).await;
    let peak = proxy.peak_rss_kib();
    assert!(peak > 0, "the proxy's VmHWM is readable");
    assert!(
        peak < 48 << 10,
        "the proxy streams, it does not hold a 64 MiB body: peak RSS {peak} KiB"
    );
}

/// The runner's and the job's part inside the VM, run by the stand-in runner with the
/// runner's argv and environment (tenantci_testkit::boot), with real clients: the
/// RunnerService over Connect JSON (Declare, FetchTask until the task arrives, UpdateLog,
/// UpdateTask) to the `.runner` address its config names, `actions/checkout`'s git clone with
/// the job token, an API call with it, a 64 MiB artifact upload with the runtime token. Its
/// results are files in its working directory (the runner's HOME).
const VM_JOB: &str = r#"
config="$4"
runner_file=$(sed -n 's/^ *file: *//p' "$config")
addr=$(jq -r .address "$runner_file")
uuid=$(jq -r .uuid "$runner_file")
capability=$(jq -r .token "$runner_file")
labels=$(jq -c '[.labels[] | split(":")[0]]' "$runner_file")
rpc() {
  curl -sS --fail-with-body -X POST -H 'content-type: application/json' \
    -H 'connect-protocol-version: 1' -H "x-runner-uuid: $uuid" -H "x-runner-token: $capability" \
    --data "$2" "$addr/api/actions/runner.v1.RunnerService/$1"
}
rpc Declare "{\"version\":\"stand-in\",\"labels\":$labels}" > /dev/null
tries=0
until rpc FetchTask '{}' > fetched.json && jq -e .task.id fetched.json > /dev/null; do
  tries=$((tries + 1))
  [ "$tries" -lt 300 ]
  sleep 0.2
done
task=$(jq -r .task.id fetched.json)
token=$(jq -r .task.context.token fetched.json)
runtime=$(jq -r .task.context.gitea_runtime_token fetched.json)
basic=$(printf 'x-access-token:%s' "$token" | base64 -w0)
git -c "http.extraheader=AUTHORIZATION: basic $basic" clone -q "$addr/sim/demo" checkout
curl -sS --fail-with-body -H "authorization: token $token" -H 'x-runner-token: must-not-reach-gitea' \
  "$addr/api/v1/repos/sim/demo" > api.json
head -c 67108864 /dev/urandom > blob
sha256sum blob | cut -d ' ' -f 1 > blob.sha256
curl -sS --fail-with-body -T blob -H "authorization: Bearer $runtime" \
  -H 'content-type: application/octet-stream' \
  "$addr/api/actions_pipeline/_apis/pipelines/workflows/1/artifacts/big?itemPath=big/blob" > upload.json
rm blob
rpc UpdateLog "{\"taskId\":$task,\"index\":0,\"rows\":[{\"content\":\"ran task $task\"}],\"noMore\":true}" > /dev/null
rpc UpdateTask "{\"state\":{\"id\":$task,\"result\":\"RESULT_SUCCESS\"}}" > /dev/null
"#;

/// The same through a VM sandbox: the boot script of the create request the dispatcher sent
/// to the OpenSandbox double, run for real with `/bin/sh` (tenantci_testkit::boot). It wrote
/// `.runner` and the config 0600, unset every variable that carried a secret or an address
/// before the runner started (the runner and so the job inherit none), and started the proxy
/// with the sandbox's Gitea URL; the stand-in runner's job ([`VM_JOB`]) then clones, calls
/// the API, uploads 64 MiB intact and reports SUCCESS through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checkout_artifacts_and_the_api_reach_gitea_through_a_vm_sandboxs_boot_script() {
    let w = super::vm::world(1, 1).await;
    let _d = w.dispatcher("d1").await;
    let _repos = serve_repository(&w).await;
    let task = w
        .claimed(w.enqueue_vm("vm-checkout", "vm-s3cr3t").await)
        .await;
    let sandbox = eventually("the task's VM sandbox", || async {
        w.sandboxes_of(task).await.into_iter().next()
    })
    .await;
    let booted = BootedSandbox::boot(&bin(), &sandbox, VM_JOB);
    let start = booted.runner_start();
    let vm_dir = booted.vm_dir.to_str().unwrap().to_string();
    let home = booted.vm_dir.join("home");
    assert_eq!(
        start.args,
        [
            "daemon",
            "--once",
            "--config",
            &format!("{vm_dir}/config.yaml")
        ]
    );
    assert_eq!(start.cwd, home.to_str().unwrap());
    assert_eq!(start.env.get("HOME").map(String::as_str), home.to_str());
    let capability = booted.executor().token;
    let leaked: Vec<&String> = start
        .env
        .iter()
        .filter(|(k, v)| k.starts_with("TENANTCI_") || v.contains(&capability))
        .map(|(k, _)| k)
        .collect();
    assert!(
        leaked.is_empty(),
        "the runner inherits no sandbox variable: {leaked:?}"
    );
    for file in [".runner", "config.yaml"] {
        let mode = std::fs::metadata(booted.vm_dir.join(file))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }

    let (status, output) = booted.job_result();
    assert_eq!(status, 0, "the stand-in runner's job: {output}");
    let read = |f: &str| std::fs::read_to_string(home.join(f)).unwrap();
    assert_eq!(read("checkout/README.md"), "hello from the double\n");
    let api: Value = serde_json::from_str(&read("api.json")).unwrap();
    assert_eq!(api["full_name"], "sim/demo");
    let uploaded: Value = serde_json::from_str(&read("upload.json")).unwrap();
    assert_eq!(uploaded["bytes"], UPLOAD as u64, "{uploaded}");
    assert_eq!(uploaded["sha256"], read("blob.sha256").trim());
    w.assert_succeeded_once(task).await;
    gitea_saw_the_clone_and_no_runner_header(&w).await;
    assert!(
        !booted.log_text().contains(&capability),
        "no capability in the boot script's or the proxy's output"
    );

    let proxy = booted.address.trim_start_matches("http://").to_string();
    booted.stop();
    // The proxy is not this test's child to reap: its port closes once the kill lands.
    eventually("the boot script's proxy to be gone", || async {
        std::net::TcpStream::connect(&proxy).is_err().then_some(())
    })
    .await;
    w.no_sandboxes_left().await;
}

/// Absolute URLs and redirects Gitea hands out reach the job unchanged, and the job then
/// reaches Gitea directly, as on a host: the API's artifact download answers 302 to a signed
/// URL, passed on with its Location as Gitea wrote it (not followed by the proxy); artifact
/// v4's CreateArtifact (a twirp path, not the RunnerService) answers a signed upload URL on
/// Gitea's own address. Both signed URLs work without a token, straight at the double.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redirects_and_signed_urls_lead_the_job_to_gitea_itself() {
    let w = World::start(1).await;
    let _d = w.dispatcher("d1").await;
    let task = w.claimed(w.enqueue("signed", "s").await).await;
    let (secret, pod) = w.objects(task).await;
    let proxy = PodProxy::start(tenantci(), &secret, &pod);
    let ex = Executor::through(&secret, &proxy);
    let (token, runtime_token) = job_tokens(&ex.fetch().await);
    let gitea = w.gitea.url.trim_end_matches('/');
    let no_follow = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    let zip = "/api/v1/repos/sim/demo/actions/artifacts/7/zip";
    let answer = no_follow
        .get(format!("{}{zip}", proxy.address))
        .header("authorization", format!("token {token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 302, "the redirect is the job's to follow");
    let location = answer.headers()["location"].to_str().unwrap().to_string();
    assert!(
        location.starts_with(&format!("{gitea}{zip}/raw?sig=")),
        "Gitea's own address, unchanged: {location}"
    );
    // A client following it (as the toolkit does) reaches Gitea directly.
    let followed = no_follow.get(&location).send().await.unwrap();
    assert_eq!(followed.status(), 200);
    assert_eq!(
        followed.text().await.unwrap(),
        format!("the bytes of {zip}/raw")
    );

    let create = format!("{ARTIFACT_V4}/CreateArtifact");
    let created: Value = json(
        no_follow
            .post(format!("{}{create}", proxy.address))
            .header("authorization", format!("Bearer {runtime_token}"))
            .json(&serde_json::json!({"name": "v4", "version": 4})),
    )
    .await;
    let upload = created["signedUploadUrl"].as_str().unwrap();
    assert!(
        upload.starts_with(&format!("{gitea}{ARTIFACT_V4}/UploadArtifact?sig=")),
        "{created}"
    );
    let blob = vec![7u8; 1 << 20];
    let stored: Value = json(
        no_follow
            .put(format!("{upload}&comp=block"))
            .body(blob.clone()),
    )
    .await;
    assert_eq!(stored["sha256"], hex::encode(Sha256::digest(&blob)));
    ex.finish(task, &["signed"]).await;

    // The double saw each signed request without a token: the job went there itself.
    let seen = web_requests(&w).await;
    for path in [
        format!("{zip}/raw"),
        format!("{ARTIFACT_V4}/UploadArtifact"),
    ] {
        let r = seen
            .iter()
            .find(|r| r["path"] == path.as_str())
            .unwrap_or_else(|| panic!("{path} reached the double: {seen:?}"));
        assert!(!header_names(r).contains(&"authorization"), "{r}");
    }
    assert!(seen.iter().any(|r| r["path"] == create.as_str()));
}

fn base64_basic(token: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"))
}

//! `tenantci dispatch check` (issue 55) against a real nats-server and the simulator's
//! apiserver: on an installation set up the old way (ci-worker's grants without the direct
//! get the status API's catch-up of the claim ledger needs) it names exactly that grant and
//! the command that adds it; after that command and a reload, nothing; and on a healthy
//! installation of this release it exits 0 and changes nothing at NATS.

use async_nats::jetstream;

use super::harness::World;
use crate::util::{assert_exit, run, stdout, tenantci};

/// `tenantci dispatch check --config <d1's config>`, with the dispatchers' environment.
fn check(w: &World) -> std::process::Output {
    let config = w.config_only("d1");
    run(tenantci()
        .args(["dispatch", "check", "--config"])
        .arg(config)
        .envs(w.dispatcher_env().iter().map(|(k, v)| (k, v))))
}

/// Each queue stream's message count and last sequence, and each consumer's config: what a
/// check must leave as it found it.
async fn queue_state(w: &World) -> Vec<String> {
    let js = jetstream::new(w.nats.client("ci-admin").await);
    let mut out = Vec::new();
    for name in ["CI_RUNNER", "KV_CI_CLAIMS", "KV_CI_HISTORY"] {
        let mut s = js.get_stream(name).await.unwrap();
        let i = s.info().await.unwrap();
        out.push(format!(
            "{name} {} {}",
            i.state.messages, i.state.last_sequence
        ));
    }
    for consumer in ["pod", "vm"] {
        let mut c: jetstream::consumer::PullConsumer = js
            .get_consumer_from_stream(consumer, "CI_RUNNER")
            .await
            .unwrap();
        out.push(format!("{consumer} {:?}", c.info().await.unwrap().config));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_grant_the_old_fragment_lacks_is_named_with_its_fix_then_nothing_is_needed() {
    let w = World::start(1).await;
    let d = w.dispatcher("d1").await;
    d.wait_up().await;
    // The fragment as an earlier release's `queue nats-config` wrote it.
    let auth = w.nats.auth_file().to_path_buf();
    let ours = std::fs::read_to_string(&auth).unwrap();
    let grant = "$JS.API.DIRECT.GET.KV_CI_CLAIMS";
    let old = ours.replace(&format!("\"{grant}\", "), "");
    assert_ne!(old, ours, "the fragment grants it today");
    std::fs::write(&auth, &old).unwrap();
    w.nats.reload().await;

    let o = check(&w);
    assert_exit(&o, 1);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "exactly the missing grant: {out}");
    assert!(
        lines[0].starts_with(&format!(
            "NATS user `ci-worker` may not publish to `{grant}`"
        )),
        "{out}"
    );
    let fix = lines[0].split("; fix: ").nth(1).expect("the fix follows");
    assert!(
        fix.starts_with("tenantci queue nats-config --secrets-dir "),
        "{fix}"
    );
    assert!(fix.ends_with("&& nats-server --signal reload"), "{fix}");

    // The fix it names: this release's fragment, then a reload.
    let secrets = w.nats.secrets_dir();
    let o = run(tenantci()
        .args(["queue", "nats-config", "--secrets-dir"])
        .arg(&secrets)
        .arg("--out")
        .arg(&auth));
    assert_exit(&o, 0);
    w.nats.reload().await;
    let o = check(&w);
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o),
        "nothing needed: this installation has what this release needs\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_healthy_installation_needs_nothing_and_the_check_changes_nothing() {
    let w = World::start(1).await;
    let d = w.dispatcher("d1").await;
    d.wait_up().await;
    let before = queue_state(&w).await;
    let o = check(&w);
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o),
        "nothing needed: this installation has what this release needs\n"
    );
    assert_eq!(
        queue_state(&w).await,
        before,
        "nothing stored, nothing changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_config_that_is_not_there_or_not_toml_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("dispatch.toml");
    let o = run(tenantci()
        .args(["dispatch", "check", "--config"])
        .arg(&missing));
    assert_exit(&o, 2);
    std::fs::write(&missing, "[nats\n").unwrap();
    let o = run(tenantci()
        .args(["dispatch", "check", "--config"])
        .arg(&missing));
    assert_exit(&o, 2);
    assert!(
        crate::util::stderr(&o).contains("is not valid TOML"),
        "{o:?}"
    );
}

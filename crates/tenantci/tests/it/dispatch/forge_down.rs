//! The forge going away under a running dispatcher (issue 45): the log said `ERROR failed with
//! error client error (Connect)`, naming neither the component, the URL nor what comes next.
//! The simulator serves the forge double and the tenant apiserver from one process, as the
//! reporter ran it; stopping it takes both away.

use tenantci_testkit::wait::eventually;

use super::harness::World;

/// The first line of `log` holding every one of `needles`.
fn line_with(log: &str, needles: &[&str]) -> Option<String> {
    log.lines()
        .find(|l| needles.iter().all(|n| l.contains(n)))
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_the_forge_stopped_the_log_names_its_url_and_what_happens_next() {
    let mut w = World::start(1).await;
    // The operator's default filter (`tenantci dispatch run` without -v), dependencies included.
    w.push_dispatcher_env("RUST_LOG", "warn,tenantci=warn");
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    eventually("the term's first FetchTask", || async {
        (w.fetch_calls().await >= 1).then_some(())
    })
    .await;
    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &w.sim().pid().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let forge = w.base().gitea.url.clone();
    let fetch = eventually("the FetchTask failure line", || async {
        line_with(&d.log_text(), &["FetchTask at", "failed"])
    })
    .await;
    assert!(fetch.contains(&forge), "names the forge's URL: {fetch}");
    assert!(
        fetch.contains("asking again in"),
        "says what comes next: {fetch}"
    );
    let lease = eventually("the lease failure line", || async {
        line_with(&d.log_text(), &["scheduler lease", "tenant apiserver"])
    })
    .await;
    assert!(lease.contains("trying again in"), "{lease}");
    let log = d.log_text();
    assert!(
        !log.contains("failed with error"),
        "a line without context is left: {log}"
    );
}

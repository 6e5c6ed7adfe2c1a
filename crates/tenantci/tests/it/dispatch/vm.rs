//! The VM backend under `tenantci dispatch run`, against the simulator's OpenSandbox double.

use super::harness::World;
use crate::util::{assert_exit, run, stderr, tenantci};

/// A Lifecycle API key OpenSandbox refuses stops `dispatch run` at start (exit 2), in one
/// sentence naming the key file and never showing a key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_a_wrong_opensandbox_key_at_start_naming_the_file() {
    let mut w = World::start(1).await;
    let wrong = w.dir.path().join("wrong-opensandbox.key");
    // 0600: a key file open to other accounts is refused before the API is asked.
    tenantci_core::fsutil::write_atomic(&wrong, b"not-the-key\n", 0o600).unwrap();
    w.with_vm(1, &wrong);
    let config = w.config_only("d1");
    let out = run(tenantci()
        .args(["dispatch", "run", "--config"])
        .arg(&config));
    assert_exit(&out, 2);
    let err = stderr(&out);
    let first = err
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default();
    assert!(first.contains(wrong.to_str().unwrap()), "{err}");
    assert!(err.contains("help:"), "{err}");
    assert!(
        !err.contains("not-the-key") && !err.contains(&w.opensandbox.api_key()),
        "{err}"
    );
}

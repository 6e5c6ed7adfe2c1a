//! The status page (`/` on the status listener) in a real browser: Debian's headless
//! Chromium (scripts/lib/ensure.sh installs it) loads it from a running dispatcher with a
//! running task, and the DOM it built shows the task under Running with its executor Pod, and
//! Chromium logged no console message (the page has no script, so any message is a failed
//! load or a parse error). A planted console error proves the log is read.
//! With TENANTCI_STATUS_SCREENSHOT=FILE the test also writes the page's screenshot there (how
//! docs/status-page.png is made).

use std::path::Path;
use std::process::{Command, Output};

use super::harness::World;
use crate::util::{run, scratch};

/// Chromium headless on `url` with `extra` flags, its profile in `profile`; a minute at most
/// (a deadlock guard: `timeout` kills it).
pub(super) fn chromium(profile: &Path, url: &str, extra: &[&str]) -> Output {
    run(Command::new("timeout")
        .args([
            "60",
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--enable-logging=stderr", "--v=0", "--no-first-run"])
        .args(extra)
        .arg(url))
}

/// The console lines Chromium logged.
pub(super) fn console(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_status_page_renders_in_chromium_with_the_running_task_and_no_console_error() {
    let profile = scratch();
    let planted = chromium(
        profile.path(),
        "data:text/html,<script>console.error('planted-console-error')</script>",
        &["--dump-dom"],
    );
    assert!(
        console(&planted)
            .iter()
            .any(|l| l.contains("planted-console-error")),
        "the console log is read: {}",
        String::from_utf8_lossy(&planted.stderr)
    );

    let w = World::start(2).await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    let task = w.claimed(w.enqueue("shown-in-browser", "s").await).await;
    w.executor(task).await.fetch().await;
    let url = format!("http://{}/", d.status_address());
    let o = chromium(profile.path(), &url, &["--dump-dom"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dom = String::from_utf8_lossy(&o.stdout);
    let fetched = dom.split("<h2 id=\"Fetched\">").nth(1).unwrap_or_default();
    assert!(
        fetched.contains(&format!("gitea-task-{task}")) && fetched.contains("shown-in-browser"),
        "the running task under its state: {dom}"
    );
    assert!(dom.contains("class=\"bar\""), "a capacity bar: {dom}");
    assert_eq!(console(&o), Vec::<String>::new(), "no console message");

    if let Some(file) = std::env::var_os("TENANTCI_STATUS_SCREENSHOT") {
        let shot = format!("--screenshot={}", Path::new(&file).display());
        let o = chromium(
            profile.path(),
            &url,
            &[&shot, "--window-size=1280,640", "--hide-scrollbars"],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let png = std::fs::read(&file).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
    }
}

//! `bootstrap runner` killed (SIGKILL, by the debug build's `TENANTCI_TEST_CRASH_AT` hook)
//! while it creates the runner at GitLab's double, then run again: exactly one runner is left
//! at GitLab, config.toml holds its token, and the output says what the re-run did with the
//! interrupted run's runner. And two runs on one config.toml at the same moment: the second
//! waits for the first's lock and reuses its runner.

use std::ffi::OsString;
use std::io::BufRead;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use crate::util::{assert_exit, bootstrap_gitlab, mode, run, scratch, stderr, stdout, tenantci};
use nix::fcntl::{Flock, FlockArg};
use tenantci_testkit::gitlab::{DEFAULT_ACCESS_TOKEN, GitlabDouble, MANAGE_ACCESS_TOKEN};
use tenantci_testkit::sim::SimProcess;

/// Fields drop in order: the simulator stops before its directory is removed.
struct World {
    gitlab: GitlabDouble,
    _sim: SimProcess,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

impl World {
    async fn start() -> World {
        let dir = scratch();
        let root = dir.path().to_path_buf();
        let sim = SimProcess::start(tenantci(), &root.join("state"), &["ci"], &[]);
        World {
            gitlab: GitlabDouble::start().await.unwrap(),
            _sim: sim,
            root,
            _dir: dir,
        }
    }

    fn config(&self) -> PathBuf {
        self.root.join("gitlab-runner/config.toml")
    }

    fn record(&self) -> PathBuf {
        self.root.join("gitlab-runner/config.toml.tenantci-pending")
    }

    /// The bootstrap command line, creating a group runner with `access_token`.
    fn args(&self, access_token: &str) -> Vec<OsString> {
        let token_file = self.root.join("api-token");
        std::fs::write(&token_file, access_token).unwrap();
        let mut args: Vec<OsString> = ["bootstrap", "runner", "--forge", "gitlab"]
            .map(OsString::from)
            .to_vec();
        let paths: [(&str, PathBuf); 4] = [
            ("--state-dir", self.root.join("state")),
            ("--credential-dir", self.root.join("creds-ci")),
            ("--config", self.config()),
            ("--gitlab-api-token-file", token_file),
        ];
        for (flag, path) in paths {
            args.push(flag.into());
            args.push(path.into());
        }
        let rest = ["--cluster", "ci", "--gitlab-url", &self.gitlab.url()];
        args.extend(rest.map(OsString::from));
        let runner = ["--runner-type", "group_type", "--group-id", "7"];
        args.extend(runner.map(OsString::from));
        args.extend(["--tag-list", "tenant,k8s"].map(OsString::from));
        args
    }

    fn lock(&self) -> PathBuf {
        self.root.join("gitlab-runner/config.toml.tenantci-lock")
    }

    /// A bootstrap with a given token and another config.toml: the credential is minted and
    /// the RBAC applied, so the runs after it keep them.
    async fn mint_credential(&self) {
        let token_file = self.root.join("given-token");
        std::fs::write(&token_file, "glrt-given-0123456789abcdef").unwrap();
        let mut cmd = bootstrap_gitlab(
            &self.root.join("state"),
            &self.root.join("creds-ci"),
            &self.root.join("other/config.toml"),
        );
        cmd.arg("--runner-token-file")
            .arg(token_file)
            .args(["--gitlab-url", &self.gitlab.url()]);
        let o = tokio::task::spawn_blocking(move || run(&mut cmd))
            .await
            .unwrap();
        assert_exit(&o, 0);
        assert!(self.gitlab.runners().is_empty());
    }

    /// Runs bootstrap, killed by SIGKILL at `crash_at` when given.
    async fn bootstrap(&self, access_token: &str, crash_at: Option<&str>) -> Output {
        let mut cmd = tenantci();
        cmd.args(self.args(access_token));
        if let Some(point) = crash_at {
            cmd.env("TENANTCI_TEST_CRASH_AT", point);
        }
        tokio::task::spawn_blocking(move || run(&mut cmd))
            .await
            .unwrap()
    }

    /// The token of our entry in config.toml, if it has one.
    fn config_token(&self) -> Option<String> {
        let text = std::fs::read_to_string(self.config()).ok()?;
        let doc: toml_edit::DocumentMut = text.parse().unwrap();
        let runners = doc.get("runners")?.as_array_of_tables()?;
        let ours = runners
            .iter()
            .find(|r| r["name"].as_str() == Some("tenant-ci"))?;
        ours.get("token")?.as_str().map(str::to_string)
    }
}

#[track_caller]
fn assert_killed(o: &Output) {
    assert_eq!(
        o.status.signal(),
        Some(9),
        "killed by its crash hook\n--- stdout\n{}\n--- stderr\n{}",
        stdout(o),
        stderr(o)
    );
}

/// Neither output stream carries a runner token.
#[track_caller]
fn assert_no_token(o: &Output, gitlab: &GitlabDouble) {
    for r in gitlab.runners() {
        assert!(!stdout(o).contains(&r.token) && !stderr(o).contains(&r.token));
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// Killed after GitLab answered and the answer was recorded, before config.toml was written:
/// the re-run verifies the recorded runner and reuses it instead of creating a second one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_creating_the_runner_and_writing_config_reuses_it() {
    let w = World::start().await;
    let o = w
        .bootstrap(MANAGE_ACCESS_TOKEN, Some("gitlab-runner-recorded"))
        .await;
    assert_killed(&o);
    let created = w.gitlab.runners();
    assert_eq!(created.len(), 1, "the killed run created one runner");
    assert_eq!(w.config_token(), None, "killed before config.toml");
    assert_eq!(mode(&w.record()), 0o600, "the record holds the token");
    assert!(read(&w.record()).contains(&created[0].token));

    let o = w.bootstrap(MANAGE_ACCESS_TOKEN, None).await;
    assert_exit(&o, 0);
    let after = w.gitlab.runners();
    assert_eq!(after.len(), 1, "no second runner: {after:?}");
    assert_eq!(after[0].id, created[0].id);
    assert_eq!(w.config_token().as_deref(), Some(after[0].token.as_str()));
    let line = stderr(&o)
        .lines()
        .find(|l| l.starts_with("gitlab "))
        .map(str::to_string);
    let line = line.expect("a gitlab step line");
    assert!(line.contains("reused"), "{line}");
    assert!(
        line.contains(&format!("runner id {}", after[0].id)),
        "{line}"
    );
    assert!(
        !w.record().exists(),
        "the record is removed once config.toml holds the token"
    );
    assert_no_token(&o, &w.gitlab);
}

/// Killed after GitLab created the runner but before its answer (the only copy of the token)
/// was recorded: the re-run finds that runner by the intent's marker, deletes it at GitLab and
/// creates one whose token it records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_create_answer_is_recorded_deletes_and_replaces_the_runner() {
    let w = World::start().await;
    let o = w
        .bootstrap(MANAGE_ACCESS_TOKEN, Some("gitlab-runner-created"))
        .await;
    assert_killed(&o);
    let orphan = w.gitlab.runners();
    assert_eq!(orphan.len(), 1, "GitLab created it; its answer was lost");
    assert!(!read(&w.record()).contains(&orphan[0].token));

    let o = w.bootstrap(MANAGE_ACCESS_TOKEN, None).await;
    assert_exit(&o, 0);
    let after = w.gitlab.runners();
    assert_eq!(after.len(), 1, "exactly one runner at GitLab: {after:?}");
    assert_ne!(after[0].id, orphan[0].id, "the orphan is gone");
    let deleted = format!("DELETE /api/v4/runners/{}", orphan[0].id);
    assert!(w.gitlab.requests().contains(&deleted));
    assert_eq!(w.config_token().as_deref(), Some(after[0].token.as_str()));
    assert!(
        stderr(&o).contains("deleted and replaced"),
        "{}",
        stderr(&o)
    );
    assert!(!w.record().exists());
    assert_no_token(&o, &w.gitlab);

    // And a further run reuses config.toml's token: still one runner.
    let o = w.bootstrap(MANAGE_ACCESS_TOKEN, None).await;
    assert_exit(&o, 0);
    assert_eq!(w.gitlab.runners().len(), 1);
}

/// The same lost answer with an access token that may only create runners: the re-run cannot
/// look the runner up, so it refuses (exit 2) before changing anything, naming the scope, and
/// leaves the record for a run with a token that may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_creation_is_refused_without_a_token_that_may_delete_runners() {
    let w = World::start().await;
    let o = w
        .bootstrap(DEFAULT_ACCESS_TOKEN, Some("gitlab-runner-created"))
        .await;
    assert_killed(&o);
    let record = read(&w.record());

    let o = w.bootstrap(DEFAULT_ACCESS_TOKEN, None).await;
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("manage_runner"), "{}", stderr(&o));
    assert!(stderr(&o).contains("config.toml.tenantci-pending"));
    assert_eq!(w.gitlab.runners().len(), 1, "nothing created or deleted");
    assert_eq!(read(&w.record()), record);
    assert_eq!(w.config_token(), None);

    let o = w.bootstrap(MANAGE_ACCESS_TOKEN, None).await;
    assert_exit(&o, 0);
    assert_eq!(w.gitlab.runners().len(), 1);
}

/// Killed after the intent was recorded, before the create request was sent: the re-run
/// looks for a runner with the marker, finds none, deletes nothing and creates one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_create_request_creates_one_runner() {
    let w = World::start().await;
    let o = w
        .bootstrap(MANAGE_ACCESS_TOKEN, Some("gitlab-intent-recorded"))
        .await;
    assert_killed(&o);
    assert!(w.gitlab.runners().is_empty(), "no request was sent");
    assert_eq!(mode(&w.record()), 0o600);

    let o = w.bootstrap(MANAGE_ACCESS_TOKEN, None).await;
    assert_exit(&o, 0);
    let after = w.gitlab.runners();
    assert_eq!(after.len(), 1);
    assert!(stderr(&o).contains(&format!("created      runner id {}", after[0].id)));
    let deletes = w.gitlab.requests();
    assert!(
        !deletes.iter().any(|r| r.starts_with("DELETE")),
        "{deletes:?}"
    );
    assert_eq!(w.config_token().as_deref(), Some(after[0].token.as_str()));
    assert!(!w.record().exists());
}

/// Killed after config.toml was written, before the record was removed: the re-run changes
/// nothing at GitLab or in config.toml and only removes the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_writing_config_only_leaves_the_record_to_remove() {
    let w = World::start().await;
    let o = w
        .bootstrap(MANAGE_ACCESS_TOKEN, Some("config-written"))
        .await;
    assert_killed(&o);
    let created = w.gitlab.runners();
    assert_eq!(created.len(), 1);
    assert_eq!(w.config_token().as_deref(), Some(created[0].token.as_str()));
    assert!(w.record().exists());
    let config = read(&w.config());
    let requests = w.gitlab.requests().len();

    let o = w.bootstrap(MANAGE_ACCESS_TOKEN, None).await;
    assert_exit(&o, 0);
    assert_eq!(w.gitlab.runners().len(), 1);
    assert_eq!(w.gitlab.requests().len(), requests, "GitLab not asked");
    assert_eq!(read(&w.config()), config);
    assert!(!w.record().exists());
}

/// What a run prints once when another holds config.toml's lock.
const WAITING: &str = "another tenantci run holds it";

/// A `tenantci` child whose stderr is read line by line as it comes; killed if dropped early.
struct Spawned {
    child: Option<Child>,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    stderr: Vec<String>,
}

impl Spawned {
    fn start(mut cmd: Command) -> Spawned {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Spawned {
            child: Some(child),
            lines,
            stderr: Vec::new(),
        }
    }

    /// The next stderr line; `None` once the child closed stderr.
    async fn next_line(&mut self) -> Option<String> {
        let line = self.lines.recv().await?;
        self.stderr.push(line.clone());
        Some(line)
    }

    /// Reads stderr to its end and waits for the exit.
    async fn finish(mut self) -> Output {
        while self.next_line().await.is_some() {}
        let child = self.child.take().unwrap();
        let mut output = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        output.stderr = self.stderr.join("\n").into_bytes();
        output
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Two runs at once on a fresh host: without the lock both decide to mint the credential, and
/// the second fails (exit 2) when the first's files appear; with it the second keeps them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_at_once_on_a_fresh_host_create_one_runner_and_the_second_reuses_it() {
    let w = World::start().await;
    two_runs_at_once(&w).await;
}

/// Two runs at once where the credential already exists (both keep it): exactly the GitLab
/// race. Without the lock both create requests reach GitLab, which ends with two runners.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_at_once_with_a_kept_credential_create_one_runner() {
    let w = World::start().await;
    w.mint_credential().await;
    two_runs_at_once(&w).await;
}

/// Two runs started together against one config.toml, lined up at the exact moment the race
/// is about: one has asked GitLab to create its runner (held there by the double) while the
/// other has passed its checks and is about to decide. With the lock the second is then
/// waiting for it; it reads what the first wrote and reuses its runner.
async fn two_runs_at_once(w: &World) {
    let hold = w.gitlab.hold_creates();
    let start = || {
        let mut cmd = tenantci();
        cmd.args(w.args(MANAGE_ACCESS_TOKEN));
        Spawned::start(cmd)
    };
    let (mut a, mut b) = (start(), start());
    let mut arrivals = hold.arrivals();
    let barrier = async {
        let mut waiting = 0;
        loop {
            let created = *arrivals.borrow_and_update();
            if created >= 2 || (created == 1 && waiting == 1) {
                return;
            }
            // A run that ended (stderr closed) ends the wait too: its exit is the finding.
            let line = tokio::select! {
                changed = arrivals.changed() => {
                    changed.unwrap();
                    continue;
                }
                line = a.next_line() => line,
                line = b.next_line() => line,
            };
            match line {
                Some(line) => waiting += usize::from(line.contains(WAITING)),
                None => return,
            }
        }
    };
    // A bound against a hang only (a run that failed early never reaches the barrier).
    tokio::time::timeout(std::time::Duration::from_secs(120), barrier)
        .await
        .unwrap_or_else(|_| panic!("the runs never lined up: {:?} {:?}", a.stderr, b.stderr));
    hold.release();
    let (a, b) = (a.finish().await, b.finish().await);
    assert_exit(&a, 0);
    assert_exit(&b, 0);

    let runners = w.gitlab.runners();
    assert_eq!(
        runners.len(),
        1,
        "exactly one runner at GitLab: {runners:?}"
    );
    let creates = w.gitlab.requests();
    let creates = creates.iter().filter(|r| *r == "POST /api/v4/user/runners");
    assert_eq!(creates.count(), 1, "one create request");
    assert_eq!(w.config_token().as_deref(), Some(runners[0].token.as_str()));
    let created = format!("created      runner id {}", runners[0].id);
    let (first, second) = match stderr(&a).contains(&created) {
        true => (a, b),
        false => (b, a),
    };
    assert!(stderr(&first).contains(&created), "{}", stderr(&first));
    let second_err = stderr(&second);
    assert!(
        second_err.contains(WAITING),
        "it said it waited: {second_err}"
    );
    assert!(
        second_err.contains("config.toml.tenantci-lock"),
        "{second_err}"
    );
    assert!(!second_err.contains("created      runner"), "{second_err}");
    let kept = |l: &str| l.starts_with("credential ") && l.contains("kept");
    assert!(
        second_err.lines().any(kept),
        "the first's credential: {second_err}"
    );
    let config_line = second_err.lines().find(|l| l.starts_with("config "));
    let config_line = config_line.expect("a config step line");
    assert!(config_line.contains("unchanged"), "reused: {config_line}");
    assert!(!w.record().exists());
    assert_eq!(mode(&w.lock()), 0o600, "the lock file stays, private");
    for o in [&first, &second] {
        assert_no_token(o, &w.gitlab);
    }
}

/// Another run holds the lock for longer than the bound: exit 3, one sentence naming the lock
/// file and how to wait longer, and nothing created at GitLab or written to config.toml.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_cannot_get_the_lock_in_time_changes_nothing() {
    let w = World::start().await;
    std::fs::create_dir_all(w.lock().parent().unwrap()).unwrap();
    let file = std::fs::File::create(w.lock()).unwrap();
    let held = Flock::lock(file, FlockArg::LockExclusive).unwrap();

    let mut cmd = tenantci();
    cmd.args(w.args(MANAGE_ACCESS_TOKEN))
        .env("TENANTCI_CONFIG_LOCK_WAIT", "1s");
    let o = tokio::task::spawn_blocking(move || run(&mut cmd))
        .await
        .unwrap();
    drop(held);
    assert_exit(&o, 3);
    let err = stderr(&o);
    assert!(err.contains(WAITING), "{err}");
    assert!(err.contains("held the config.toml lock"), "{err}");
    assert!(err.contains("TENANTCI_CONFIG_LOCK_WAIT"), "{err}");
    let requests = w.gitlab.requests();
    assert!(
        !requests.iter().any(|r| r == "POST /api/v4/user/runners"),
        "no runner creation asked: {requests:?}"
    );
    assert!(w.gitlab.runners().is_empty());
    assert!(!w.config().exists());
    assert!(!w.record().exists());
}

/// The order of events this guards against: run A writes the credential one file after the
/// other; run B, not yet under the lock, reads the directory between two of those files. B
/// must not refuse it as incomplete (it did, exit 2: the test above failed so once in three
/// clean runs): it waits for the lock and decides from what A finished writing. The test is
/// A: it holds the lock with half the files in place, and finishes them once B waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_half_written_by_another_run_is_decided_under_the_lock() {
    let w = World::start().await;
    w.mint_credential().await;
    let creds = w.root.join("creds-ci");
    let aside = w.root.join("aside");
    std::fs::create_dir_all(&aside).unwrap();
    for f in ["tls.key", "kubeconfig"] {
        std::fs::rename(creds.join(f), aside.join(f)).unwrap();
    }
    let cert_before = read(&creds.join("tls.crt"));
    std::fs::create_dir_all(w.lock().parent().unwrap()).unwrap();
    let held = Flock::lock(
        std::fs::File::create(w.lock()).unwrap(),
        FlockArg::LockExclusive,
    )
    .unwrap();

    let mut cmd = tenantci();
    cmd.args(w.args(MANAGE_ACCESS_TOKEN));
    let mut b = Spawned::start(cmd);
    loop {
        let line = b.next_line().await;
        let line = line.unwrap_or_else(|| panic!("B ended before waiting: {:?}", b.stderr));
        if line.contains(WAITING) {
            break;
        }
    }
    for f in ["tls.key", "kubeconfig"] {
        std::fs::rename(aside.join(f), creds.join(f)).unwrap();
    }
    drop(held);
    let o = b.finish().await;
    assert_exit(&o, 0);
    assert_eq!(
        read(&creds.join("tls.crt")),
        cert_before,
        "the credential is kept"
    );
    assert_eq!(w.gitlab.runners().len(), 1);
}

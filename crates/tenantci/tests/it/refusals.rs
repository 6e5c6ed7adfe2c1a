//! Every command that writes refuses bad input before its first write: each case exits with
//! its documented code, one `error:` sentence naming the input and a `help:` line, and the
//! watched state (files with their modes, the simulator's objects, NATS's streams) is the same
//! before and after. A positive control per command shows the watch sees a real write.
//!
//! `credential mint`, `dispatch init`, `runner gitlab-config` and `bootstrap runner` have
//! theirs beside their other tests (credential.rs, dispatch/init.rs, runner/cli.rs,
//! bootstrap.rs); docs/cli.md has the table of what
//! each command checks before its first write.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Output;

use tenantci_testkit::kube::Kubectl;
use tenantci_testkit::nats::NatsServer;
use tenantci_testkit::sim::SimProcess;
use tenantci_testkit::snapshot::{ClusterSnapshot, files_and_modes};
use tenantci_testkit::wait::eventually_blocking;

use crate::util::{assert_exit, run, scratch, stderr, tenantci};

/// One bad input: the arguments after the command, the exit code, and what the error names.
pub(crate) struct Case {
    name: &'static str,
    args: Vec<OsString>,
    code: i32,
    needle: String,
}

/// Arguments of any `AsRef<OsStr>` (`&str`, `&PathBuf`, `&String`) as one vector.
macro_rules! args {
    ($($a:expr),* $(,)?) => { vec![$(OsString::from($a)),*] };
}

pub(crate) fn case(name: &'static str, args: Vec<OsString>, code: i32, needle: &str) -> Case {
    Case {
        name,
        args,
        code,
        needle: needle.to_string(),
    }
}

/// What a refusal must leave as it was.
#[derive(Debug, PartialEq)]
pub(crate) struct Watched {
    files: Vec<(PathBuf, u32, Vec<u8>)>,
    cluster: Option<ClusterSnapshot>,
    streams: Option<Vec<String>>,
}

pub(crate) struct Watch<'a> {
    pub dir: &'a Path,
    pub kubectl: Option<&'a Kubectl>,
    pub nats: Option<&'a NatsServer>,
}

impl Watch<'_> {
    pub fn take(&self) -> Watched {
        Watched {
            files: files_and_modes(self.dir),
            cluster: self.kubectl.map(ClusterSnapshot::take),
            streams: self.nats.map(streams),
        }
    }

    /// Runs `command` + each case's arguments; returns how many inputs were refused.
    pub fn refuse_each(&self, command: &[&str], cases: &[Case]) -> usize {
        let before = self.take();
        for c in cases {
            let o = run(tenantci().args(command).args(&c.args));
            assert_refused(c, &o);
            assert_eq!(self.take(), before, "{}: something changed", c.name);
        }
        cases.len()
    }
}

#[track_caller]
fn assert_refused(c: &Case, o: &Output) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(c.code), "{}: {err}", c.name);
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{}: one sentence: {err}", c.name);
    assert!(
        err.contains(&c.needle),
        "{}: names {:?}: {err}",
        c.name,
        c.needle
    );
    assert!(err.contains("\nhelp: "), "{}: says the fix: {err}", c.name);
}

/// Every JetStream stream's name (the claim ledger's bucket is stream `KV_CI_CLAIMS`).
fn streams(server: &NatsServer) -> Vec<String> {
    use futures::StreamExt as _;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let js = async_nats::jetstream::new(server.client("ci-admin").await);
        let mut names: Vec<String> = js
            .stream_names()
            .map(|n| n.expect("list the streams"))
            .collect()
            .await;
        names.sort();
        names
    })
}

#[test]
fn refusals_pki_init_cluster() {
    let dir = scratch();
    let state = dir.path().join("state");
    let watch = Watch {
        dir: dir.path(),
        kubectl: None,
        nats: None,
    };
    let at = |cluster: &str, extra: &[&str]| {
        let mut a = args!["--state-dir", &state, "--cluster", cluster];
        a.extend(extra.iter().map(OsString::from));
        a
    };
    let cases = [
        case("traversal", at("../evil", &[]), 2, "../evil"),
        case("upper-case", at("CI", &[]), 2, "`CI`"),
        case("years", at("ci", &["--valid-for", "10y"]), 2, "10y"),
        case("zero", at("ci", &["--valid-for", "0"]), 2, "`0`"),
    ];
    let mut refused = watch.refuse_each(&["pki", "init-cluster"], &cases);
    // Positive control; then the PKI that exists is never replaced.
    assert_exit(
        &run(tenantci().args(["pki", "init-cluster"]).args(at("ci", &[]))),
        0,
    );
    let exists = [case("exists", at("ci", &[]), 2, "already has a PKI")];
    refused += watch.refuse_each(&["pki", "init-cluster"], &exists);
    assert_eq!(refused, 5);
}

#[test]
fn refusals_tenant_prewarm() {
    let dir = scratch();
    let root = dir.path();
    let sim = SimProcess::start(tenantci(), &root.join("state"), &["ci"], &[]);
    let kubeconfig = sim.tenant_admin("ci");
    let kubectl = Kubectl::new(&kubeconfig, root);
    assert_exit(&kubectl.run(&["create", "namespace", "ci"]), 0);
    // The simulator gives a new namespace its `default` ServiceAccount a moment later, as
    // Kubernetes does: the snapshots start after that write, not racing it.
    eventually_blocking("the namespace's default ServiceAccount", || {
        let o = kubectl.run(&["get", "serviceaccount", "default", "-n", "ci"]);
        o.status.success().then_some(())
    });
    let kubeconfig_arg = kubeconfig.display().to_string();
    // The good flags as `--flag=value` (a negative value stays a value), each replaced by the
    // same flag in `extra`.
    let prewarm = |extra: &[(&str, &str)]| {
        let mut flags = vec![
            ("--kubeconfig", kubeconfig_arg.as_str()),
            ("--replicas", "1"),
            ("--namespace", "ci"),
            ("--cpu", "500m"),
            ("--memory", "512Mi"),
        ];
        flags.retain(|(f, _)| !extra.iter().any(|(e, _)| e == f));
        flags
            .iter()
            .chain(extra)
            .map(|(f, v)| OsString::from(format!("{f}={v}")))
            .collect::<Vec<_>>()
    };
    let missing_config = root.join("no-such-config.toml").display().to_string();
    let cases = [
        // Applied before: the PriorityClass, then a Deployment the apiserver refused.
        case(
            "namespace-missing",
            prewarm(&[("--namespace", "gitlab-runner")]),
            2,
            "the namespace `gitlab-runner` does not exist",
        ),
        case(
            "namespace-name",
            prewarm(&[("--namespace", "Bad_NS")]),
            2,
            "--namespace `Bad_NS`",
        ),
        case(
            "negative",
            prewarm(&[("--replicas", "-1")]),
            2,
            "--replicas -1",
        ),
        case("cpu", prewarm(&[("--cpu", "lots")]), 2, "--cpu"),
        case("memory", prewarm(&[("--memory", "1 GB")]), 2, "--memory"),
        case("label", prewarm(&[("--label", "novalue")]), 2, "--label"),
        case(
            "toleration",
            prewarm(&[("--toleration", "::")]),
            2,
            "toleration",
        ),
        case(
            "dispatch-config",
            args![
                "--kubeconfig",
                &kubeconfig,
                "--dispatch-config",
                &missing_config
            ],
            2,
            "no-such-config.toml",
        ),
        case(
            "kubeconfig",
            prewarm(&[("--kubeconfig", "/nonexistent/kubeconfig")]),
            2,
            "/nonexistent/kubeconfig",
        ),
    ];
    let state = root.join("state");
    let watch = Watch {
        dir: &state,
        kubectl: Some(&kubectl),
        nats: None,
    };
    let refused = watch.refuse_each(&["tenant", "prewarm"], &cases);
    assert_eq!(refused, 9);
    let before = watch.take();
    assert_exit(
        &run(tenantci().args(["tenant", "prewarm"]).args(prewarm(&[]))),
        0,
    );
    assert_ne!(
        watch.take(),
        before,
        "the positive control applied its objects"
    );
}

#[test]
fn refusals_queue_init() {
    let server = NatsServer::start();
    let dir = scratch();
    let root = dir.path();
    let admin = server.password_file("ci-admin");
    let wrong = root.join("wrong.password");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    let init = |user: &str, password: &Path, extra: &[&str]| {
        let mut a = args![
            "--nats",
            &server.url,
            "--user",
            user,
            "--password-file",
            password
        ];
        a.extend(extra.iter().map(OsString::from));
        a
    };
    let cases = [
        case(
            "capacity",
            init("ci-admin", &admin, &["--pod-capacity", "0"]),
            2,
            "capacity must be at least 1",
        ),
        case(
            "ack-wait",
            init("ci-admin", &admin, &["--ack-wait", "soon"]),
            2,
            "soon",
        ),
        case(
            "replicas",
            init("ci-admin", &admin, &["--replicas", "0"]),
            2,
            "invalid queue topology",
        ),
        case(
            "password-missing",
            init("ci-admin", &root.join("nope"), &[]),
            2,
            "nope",
        ),
        case(
            "password-directory",
            init("ci-admin", root, &[]),
            2,
            "a directory",
        ),
        case(
            "wrong-password",
            init("ci-admin", &wrong, &[]),
            3,
            "refused the credentials of user `ci-admin`",
        ),
        case(
            "producer",
            init("ci-producer", &server.password_file("ci-producer"), &[]),
            3,
            "cannot apply the queue topology",
        ),
        case(
            "more-replicas-than-servers",
            init("ci-admin", &admin, &["--replicas", "3"]),
            3,
            "replicas",
        ),
    ];
    let watch = Watch {
        dir: root,
        kubectl: None,
        nats: Some(&server),
    };
    let refused = watch.refuse_each(&["queue", "init"], &cases);
    assert_eq!(refused, 8);
    let before = watch.take();
    assert_exit(
        &run(tenantci()
            .args(["queue", "init"])
            .args(init("ci-admin", &admin, &[]))),
        0,
    );
    assert_ne!(
        watch.take(),
        before,
        "the positive control created the stream"
    );
}

//! `tenantci dispatch init` with the real binary against `tenantci sim --gitea` (tenant
//! apiserver + Gitea double) and a NATS secrets dir from `tenantci queue nats-config`.
//! Checked from outside: the double's runner list, kubectl with the minted kubeconfig, the
//! files' modes and bytes.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use tenantci_testkit::kube::Kubectl;
use tenantci_testkit::sim::SimProcess;
use tenantci_testkit::snapshot::{ClusterSnapshot, files_and_modes};
use tenantci_testkit::spire::entry_yaml;

use crate::util::{
    assert_exit, mode, repo_file, run, run_args, scratch, snapshot, stderr, stdout, tenantci,
};

const IMAGE: &str =
    "gitea/act_runner@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A default flag replaced (Some) or dropped (None).
pub(super) type Edit<'a> = (&'a str, Option<&'a str>);

pub(super) struct Setup {
    _dir: tempfile::TempDir,
    pub(super) root: PathBuf,
    pub(super) sim: SimProcess,
    pub(super) gitea_url: String,
    admin_url: String,
    pub(super) token: String,
    nats: PathBuf,
}

pub(super) fn setup() -> Setup {
    setup_with(&["--opensandbox"])
}

/// A simulator with the Gitea double and `sim_flags`.
fn setup_with(sim_flags: &[&str]) -> Setup {
    let dir = scratch();
    let root = dir.path().to_path_buf();
    let mut flags = vec!["--gitea"];
    flags.extend_from_slice(sim_flags);
    let sim = SimProcess::start(tenantci(), &root.join("state"), &["ci"], &flags);
    let gitea = sim.gitea();
    let token = gitea.registration_token;
    std::fs::write(root.join("registration-token"), format!("{token}\n")).unwrap();
    let nats = root.join("nats");
    let o = run_args([
        "queue".as_ref(),
        "nats-config".as_ref(),
        "--secrets-dir".as_ref(),
        nats.as_os_str(),
        "--out".as_ref(),
        root.join("nats-auth.conf").as_os_str(),
    ]);
    assert_exit(&o, 0);
    Setup {
        gitea_url: gitea.url,
        admin_url: gitea.admin_url,
        _dir: dir,
        root,
        sim,
        token,
        nats,
    }
}

impl Setup {
    pub(super) fn out(&self, name: &str) -> PathBuf {
        self.root.join(name).join("config.toml")
    }

    /// `dispatch init -o json` with working defaults; `edits` replace (Some) or drop (None) a
    /// default flag, `extra` adds flags.
    pub(super) fn init(&self, out: &str, edits: &[Edit], extra: &[&str]) -> Output {
        let root = |p: &str| self.root.join(p).display().to_string();
        let mut flags: Vec<(String, String)> = vec![
            ("--gitea-url".into(), self.gitea_url.clone()),
            (
                "--registration-token-file".into(),
                root("registration-token"),
            ),
            ("--state-dir".into(), root("state")),
            ("--cluster".into(), "ci".into()),
            ("--nats".into(), "nats://127.0.0.1:4222".into()),
            ("--nats-secrets-dir".into(), self.nats.display().to_string()),
            ("--facade-listen".into(), "127.0.0.1:18443".into()),
            ("--executor-image".into(), IMAGE.into()),
            ("--proxy-image".into(), super::harness::PROXY_IMAGE.into()),
            ("--out".into(), self.out(out).display().to_string()),
        ];
        for (flag, value) in edits {
            let pos = flags.iter().position(|(f, _)| f == flag);
            match (pos, value) {
                (Some(i), Some(v)) => flags[i].1 = v.to_string(),
                (Some(i), None) => {
                    flags.remove(i);
                }
                (None, Some(v)) => flags.push((flag.to_string(), v.to_string())),
                (None, None) => {}
            }
        }
        let mut cmd = tenantci();
        cmd.args(["dispatch", "init", "-o", "json"]);
        for (f, v) in flags {
            cmd.arg(f).arg(v);
        }
        run(cmd.args(extra))
    }

    pub(super) fn runners(&self) -> Vec<Value> {
        let url = format!("{}/runners", self.admin_url);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            reqwest::get(&url)
                .await
                .unwrap()
                .json::<Vec<Value>>()
                .await
                .unwrap()
        })
    }

    pub(super) fn admin(&self) -> Kubectl {
        Kubectl::new(&self.sim.tenant_admin("ci"), &self.root)
    }

    pub(super) fn namespace_exists(&self) -> bool {
        self.admin()
            .run(&["get", "namespace", "dynamic-runner"])
            .status
            .success()
    }

    /// Whether the tenant-admin sees `kind/name` (cluster-scoped).
    fn exists(&self, kind: &str, name: &str) -> bool {
        self.admin().run(&["get", kind, name]).status.success()
    }
}

pub(super) fn hand_back(o: &Output) -> Value {
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

pub(super) fn outcomes(hb: &Value) -> Vec<(String, String)> {
    hb["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["step"].as_str().unwrap().to_string(),
                s["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    snapshot(dir)
}

pub(super) fn can_i(k: &Kubectl, args: &[&str]) -> (bool, String) {
    let mut a = vec!["auth", "can-i"];
    a.extend_from_slice(args);
    let o = k.run(&a);
    (o.status.success(), stdout(&o).trim().to_string())
}

#[test]
fn init_registers_once_writes_private_files_and_a_rerun_keeps_everything() {
    let s = setup();
    let o = s.init("d", &[], &[]);
    assert_exit(&o, 0);
    for text in [stdout(&o), stderr(&o)] {
        assert!(
            !text.contains(&s.token),
            "the registration token is never printed"
        );
    }
    let hb = hand_back(&o);
    let uuid = hb["runner"]["uuid"].as_str().unwrap().to_string();
    assert!(!uuid.is_empty());
    assert_eq!(hb["namespace"], "dynamic-runner");
    assert_eq!(hb["runner"]["name"], "tenantci-dispatch-ci");
    let steps = outcomes(&hb);
    assert!(
        steps.contains(&("registration".into(), "created".into())),
        "{steps:?}"
    );
    assert!(
        steps.contains(&("rbac".into(), "applied".into())),
        "{steps:?}"
    );
    assert!(steps.contains(&("verify".into(), "ok".into())), "{steps:?}");

    let runners = s.runners();
    assert_eq!(runners.len(), 1, "exactly one registration: {runners:?}");
    assert_eq!(runners[0]["uuid"], uuid.as_str());
    assert_eq!(
        runners[0]["labels"],
        serde_json::json!(["self-hosted", "pod"])
    );
    assert_eq!(runners[0]["ephemeral"], false);

    let dir = s.root.join("d");
    let cfg = tenantci_dispatch::config::Config::load(&dir.join("config.toml")).unwrap();
    assert_eq!(
        (
            cfg.executor.resources.cpu.as_str(),
            cfg.executor.resources.memory.as_str()
        ),
        ("1800m", "1728Mi"),
        "executor requests derived from the cluster's node image (2 vCPU, 2048 MiB)"
    );
    let before = files(&dir);
    let names: Vec<String> = before
        .iter()
        .map(|(p, _)| p.strip_prefix(&dir).unwrap().display().to_string())
        .collect();
    for f in [
        "config.toml",
        "scheduler.json",
        "capability.key",
        "sealing.key",
        "facade-ca.crt",
        "facade-ca.key",
        "facade.crt",
        "facade.key",
        "kube/ca.crt",
        "kube/tls.crt",
        "kube/tls.key",
        "kube/kubeconfig",
    ] {
        assert!(names.contains(&f.to_string()), "{f} in {names:?}");
    }
    assert_eq!(mode(&dir), 0o700);
    for (p, bytes) in &before {
        if p.is_dir() {
            assert_eq!(mode(p), 0o700, "{}", p.display());
            continue;
        }
        assert_eq!(mode(p), 0o600, "{}", p.display());
        assert!(
            !String::from_utf8_lossy(bytes).contains(&s.token),
            "the registration token is in {}",
            p.display()
        );
    }
    let scheduler: Value =
        serde_json::from_slice(&std::fs::read(dir.join("scheduler.json")).unwrap()).unwrap();
    assert_eq!(scheduler["uuid"], uuid.as_str());
    assert!(scheduler["token"].as_str().is_some_and(|t| !t.is_empty()));

    let cfg = tenantci_dispatch::config::Config::load(&dir.join("config.toml")).unwrap();
    assert_eq!(cfg.cluster.kubeconfig, Some(dir.join("kube/kubeconfig")));
    assert_eq!(cfg.gitea.credential_file, dir.join("scheduler.json"));
    assert_eq!(cfg.facade.url, "https://127.0.0.1:18443");
    assert_eq!(cfg.capacity.of(tenantci_dispatch::backend::pod::KIND), 4);
    assert_eq!(cfg.nats.secrets_dir, s.nats);

    let own = Kubectl::new(&dir.join("kube/kubeconfig"), &s.root);
    assert_eq!(
        can_i(&own, &["create", "pods", "-n", "dynamic-runner"]),
        (true, "yes".into())
    );
    assert_eq!(
        can_i(
            &own,
            &[
                "create",
                "leases.coordination.k8s.io",
                "-n",
                "dynamic-runner"
            ]
        ),
        (true, "yes".into())
    );
    assert_eq!(
        can_i(&own, &["get", "secrets", "-n", "kube-system"]),
        (false, "no".into())
    );
    assert_eq!(
        can_i(&own, &["list", "secrets", "--all-namespaces"]),
        (false, "no".into())
    );

    // The re-run needs no token: the registration, keys, certs and config are kept as they are.
    let o = s.init("d", &[("--registration-token-file", None)], &[]);
    assert_exit(&o, 0);
    let hb = hand_back(&o);
    assert_eq!(hb["runner"]["uuid"], uuid.as_str());
    for (step, outcome) in outcomes(&hb) {
        assert!(
            ["ok", "kept", "unchanged"].contains(&outcome.as_str()),
            "{step}: {outcome}"
        );
    }
    assert_eq!(files(&dir), before, "a re-run rewrites nothing");
    assert_eq!(s.runners().len(), 1, "a re-run registers nothing");
}

#[test]
fn init_reissues_the_facade_cert_from_the_same_ca_when_the_host_changes() {
    let s = setup();
    assert_exit(&s.init("d", &[], &[]), 0);
    let dir = s.root.join("d");
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
    let (ca, ca_key, cert) = (
        read("facade-ca.crt"),
        read("facade-ca.key"),
        read("facade.crt"),
    );
    let o = s.init(
        "d",
        &[
            ("--facade-listen", Some("0.0.0.0:18443")),
            ("--facade-url", Some("https://dispatch.ci.internal:18443")),
        ],
        &[],
    );
    assert_exit(&o, 0);
    let steps = outcomes(&hand_back(&o));
    assert!(
        steps.contains(&("facade-cert".into(), "re-issued".into())),
        "{steps:?}"
    );
    assert!(
        steps.contains(&("config".into(), "updated".into())),
        "{steps:?}"
    );
    assert_eq!((read("facade-ca.crt"), read("facade-ca.key")), (ca, ca_key));
    assert_ne!(read("facade.crt"), cert);
    let sans = tenantci_core::pki::inspect::subject_alt_names(
        &String::from_utf8(read("facade.crt")).unwrap(),
    )
    .unwrap();
    assert_eq!(sans, ["dispatch.ci.internal"]);
    assert_eq!(mode(&dir.join("facade.key")), 0o600);
}

#[test]
fn init_refuses_bad_input_writing_applying_and_registering_nothing() {
    let s = setup();
    let kubectl = Kubectl::new(&s.sim.tenant_admin("ci"), &s.root);
    let cluster = ClusterSnapshot::take(&kubectl);
    let state = files_and_modes(&s.root.join("state"));
    let partial = s.root.join("nats-partial");
    std::fs::create_dir(&partial).unwrap();
    std::fs::copy(
        s.nats.join("ci-producer.password"),
        partial.join("ci-producer.password"),
    )
    .unwrap();
    let wrong_token = s.root.join("wrong-token.txt");
    std::fs::write(&wrong_token, "not-the-token\n").unwrap();
    let partial = partial.display().to_string();
    let wrong_token = wrong_token.display().to_string();
    let empty_secret = s.root.join("empty-webhook.secret");
    std::fs::write(&empty_secret, "\n").unwrap();
    let empty_secret = empty_secret.display().to_string();
    let missing_secret = s.root.join("no-such.secret").display().to_string();
    let cases: Vec<(&str, Vec<Edit>, &str)> = vec![
        (
            "tag",
            vec![("--executor-image", Some("gitea/act_runner:0.2.11"))],
            "not pinned by digest",
        ),
        (
            "http-facade",
            vec![("--facade-url", Some("http://127.0.0.1:18443"))],
            "--facade-url",
        ),
        (
            "any-address",
            vec![("--facade-listen", Some("0.0.0.0:18443"))],
            "--facade-listen",
        ),
        (
            "executor-bigger-than-the-node",
            vec![("--executor-cpu", Some("4"))],
            "the executor Pod requests 4010m CPU (runner 4, executor-proxy 10m) but a rented node has 1900m allocatable: the node image has vcpu 2",
        ),
        (
            "executor-memory-not-a-quantity",
            vec![("--executor-memory", Some("2 GB"))],
            "executor.resources.memory",
        ),
        (
            "no-proxy-image",
            vec![("--proxy-image", None)],
            "--proxy-image",
        ),
        (
            "proxy-image-tag",
            vec![("--proxy-image", Some("tenantci:0.1.0"))],
            "executor.proxy_image",
        ),
        ("unknown-cluster", vec![("--cluster", Some("nope"))], "nope"),
        (
            "missing-worker-password",
            vec![("--nats-secrets-dir", Some(partial.as_str()))],
            "ci-worker.password",
        ),
        (
            "no-token",
            vec![("--registration-token-file", None)],
            "registration token",
        ),
        (
            "wrong-token",
            vec![("--registration-token-file", Some(wrong_token.as_str()))],
            "refused the registration token",
        ),
        (
            "webhook-secret-missing",
            vec![
                ("--webhook-listen", Some("127.0.0.1:18090")),
                ("--webhook-secret-file", Some(missing_secret.as_str())),
            ],
            "the webhook secret file",
        ),
        (
            "webhook-secret-empty",
            vec![
                ("--webhook-listen", Some("127.0.0.1:18090")),
                ("--webhook-secret-file", Some(empty_secret.as_str())),
            ],
            "is empty",
        ),
    ];
    assert_eq!(cases.len(), 13, "the count in docs/cli.md's table note");
    for (name, edits, needle) in cases {
        let o = s.init(name, &edits, &[]);
        assert_exit(&o, 2);
        let err = stderr(&o);
        assert!(err.contains(needle), "{name}: {err}");
        assert!(err.contains("help:"), "{name}: a fix is given: {err}");
        assert_eq!(
            err.lines().filter(|l| l.starts_with("error:")).count(),
            1,
            "{name}: one sentence"
        );
        assert!(
            !s.root.join(name).exists(),
            "{name}: nothing written: {:?}",
            files(&s.root.join(name))
        );
    }
    assert!(s.runners().is_empty(), "nothing registered");
    assert!(!s.namespace_exists(), "nothing applied");
    assert_eq!(
        ClusterSnapshot::take(&kubectl),
        cluster,
        "no object written"
    );
    assert_eq!(files_and_modes(&s.root.join("state")), state);
}

/// A state directory whose serving CA did not sign the apiserver's certificate: the
/// credential's ca.crt would fail every request, so phase one's TLS handshake refuses it.
#[test]
fn init_refuses_a_serving_ca_that_does_not_verify_the_apiserver() {
    let s = setup();
    let kubectl = Kubectl::new(&s.sim.tenant_admin("ci"), &s.root);
    let cluster = ClusterSnapshot::take(&kubectl);
    let serving_ca = s.root.join("state/clusters/ci/pki/serving-ca.crt");
    let original = std::fs::read(&serving_ca).unwrap();
    let stranger = tenantci_core::pki::CertificateAuthority::generate(
        "stranger",
        std::time::Duration::from_secs(3600),
    )
    .unwrap();
    std::fs::write(&serving_ca, stranger.cert_pem()).unwrap();
    let o = s.init("stranger-ca", &[], &[]);
    std::fs::write(&serving_ca, original).unwrap();
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "the state directory's serving CA `{}` does not verify the tenant apiserver at {}",
            serving_ca.display(),
            s.sim.cluster_url("ci")
        )),
        "{err}"
    );
    assert!(
        err.contains("help: pass the --state-dir of the gateway"),
        "{err}"
    );
    assert!(!s.root.join("stranger-ca").exists(), "nothing written");
    assert!(s.runners().is_empty(), "nothing registered");
    assert_eq!(
        ClusterSnapshot::take(&kubectl),
        cluster,
        "no object written"
    );
}

#[test]
fn init_dry_run_changes_nothing_anywhere() {
    let s = setup();
    let o = s.init("d", &[], &["--dry-run"]);
    assert_exit(&o, 0);
    let hb = hand_back(&o);
    assert_eq!(hb["dryRun"], true);
    assert!(hb["runner"].is_null());
    let steps = outcomes(&hb);
    for step in [
        "registration",
        "credential",
        "rbac",
        "capability-key",
        "facade-cert",
        "config",
    ] {
        let outcome = &steps.iter().find(|(s, _)| s == step).unwrap().1;
        assert!(outcome.starts_with("would "), "{step}: {outcome}");
    }
    assert!(!s.root.join("d").exists(), "nothing written");
    assert!(s.runners().is_empty(), "nothing registered");
    assert!(!s.namespace_exists(), "nothing applied");

    assert_exit(&s.init("d", &[], &[]), 0);
    let before = files(&s.root.join("d"));
    let o = s.init("d", &[("--pod-capacity", Some("7"))], &["--dry-run"]);
    assert_exit(&o, 0);
    let steps = outcomes(&hand_back(&o));
    assert!(
        steps.contains(&("config".into(), "would update".into())),
        "{steps:?}"
    );
    assert!(
        steps.contains(&("rbac".into(), "unchanged".into())),
        "{steps:?}"
    );
    assert_eq!(files(&s.root.join("d")), before, "a dry run writes nothing");
    assert_eq!(s.runners().len(), 1);
}

#[test]
fn init_says_how_to_re_register_when_gitea_no_longer_knows_the_registration() {
    let s = setup();
    let dir = s.root.join("d");
    std::fs::create_dir(&dir).unwrap();
    // A registration Gitea does not know: what scheduler.json holds after the runner was
    // deleted in Gitea's admin UI.
    // 0600 as init writes it: a credential open to other accounts is refused before this.
    tenantci_core::fsutil::write_atomic(
        &dir.join("scheduler.json"),
        br#"{"id": 41, "uuid": "6d1f3c9e-0000-4000-8000-000000000041", "token": "0123abcd", "name": "tenantci-dispatch-ci"}"#,
        0o600,
    )
    .unwrap();
    let o = s.init("d", &[], &[]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(err.contains("deleted at Gitea"), "{err}");
    assert!(
        err.contains("delete") && err.contains("scheduler.json"),
        "{err}"
    );
    assert_eq!(files(&dir).len(), 1, "nothing else written");
    assert!(!s.namespace_exists(), "nothing applied");
    assert!(s.runners().is_empty());
}

#[test]
fn dispatch_manifests_apply_with_kubectl_as_they_are() {
    let s = setup();
    // kubectl validates against the simulator's OpenAPI documents, as against kube-apiserver.
    let o = s.admin().run(&[
        "apply",
        "--server-side",
        "-f",
        repo_file("manifests/dispatch/rbac.yaml").to_str().unwrap(),
        "-f",
        repo_file("manifests/dispatch/identity/rbac.yaml")
            .to_str()
            .unwrap(),
        "-f",
        repo_file("manifests/dispatch/pause/rbac.yaml")
            .to_str()
            .unwrap(),
        "-f",
        repo_file("manifests/dispatch/deployment.yaml")
            .to_str()
            .unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(s.exists("clusterrolebinding", IDENTITY_RBAC));
    assert!(s.exists(
        "clusterrolebinding",
        "tenantci-dispatcher-pause:dynamic-runner"
    ));
    let o = s.admin().run(&[
        "-n",
        "tenantci-system",
        "get",
        "deployment/tenantci-dispatcher",
        "-o",
        "jsonpath={.spec.strategy.rollingUpdate.maxUnavailable}",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "0");
    // `dispatch init` applies the same RBAC (given the file's two namespaces): nothing to
    // change.
    let o = s.init("d", &[], &["--dispatcher-namespace", "tenantci-system"]);
    assert_exit(&o, 0);
    let steps = outcomes(&hand_back(&o));
    assert!(
        steps.contains(&("rbac".into(), "unchanged".into())),
        "{steps:?}"
    );
}

/// The VM backend's flags: without `--opensandbox-url`, `vm` is not registered and the line
/// says so; with it, the API is reached with the key and `[vm]` names the key file (never the
/// key); a key the API refuses is exit 2 naming the file, with nothing written or registered.
#[test]
fn init_turns_the_vm_backend_on_only_with_a_reachable_opensandbox() {
    let s = setup();
    let o = tenantci_testkit::opensandbox::OpenSandbox::from_state_dir(&s.root.join("state"));
    let key_file = o.api_key_file.display().to_string();
    let labels = ("--labels", Some("self-hosted,pod,vm"));

    let wrong = s.root.join("wrong-opensandbox-key");
    // 0600: a key file open to other accounts is refused before the API is asked.
    tenantci_core::fsutil::write_atomic(&wrong, b"not-the-key\n", 0o600).unwrap();
    let refused = s.init(
        "refused",
        &[labels],
        &[
            "--opensandbox-url",
            &o.url,
            "--opensandbox-api-key-file",
            wrong.to_str().unwrap(),
        ],
    );
    assert_exit(&refused, 2);
    let err = stderr(&refused);
    assert!(
        err.contains(wrong.to_str().unwrap()) && !err.contains("not-the-key"),
        "{err}"
    );
    assert!(!s.root.join("refused").exists(), "nothing written");
    assert!(s.runners().is_empty(), "nothing registered");

    let off = s.init("off", &[labels], &[]);
    assert_exit(&off, 0);
    let hb = hand_back(&off);
    assert!(
        outcomes(&hb).contains(&("opensandbox".into(), "skipped".into())),
        "{hb}"
    );
    assert_eq!(
        hb["runner"]["labels"],
        serde_json::json!(["self-hosted", "pod"])
    );
    assert_eq!(
        s.runners()[0]["labels"],
        serde_json::json!(["self-hosted", "pod"])
    );
    let text = std::fs::read_to_string(s.out("off")).unwrap();
    assert!(!text.contains("[vm]"), "{text}");

    let on = s.init(
        "on",
        &[labels, ("--name", Some("with-vm"))],
        &[
            "--opensandbox-url",
            &o.url,
            "--opensandbox-api-key-file",
            &key_file,
            "--vm-capacity",
            "1",
            "--vm-memory",
            "2Gi",
        ],
    );
    assert_exit(&on, 0);
    let hb = hand_back(&on);
    assert!(
        outcomes(&hb).contains(&("opensandbox".into(), "ok".into())),
        "{hb}"
    );
    assert_eq!(
        hb["runner"]["labels"],
        serde_json::json!(["self-hosted", "pod", "vm"])
    );
    let cfg = tenantci_dispatch::config::Config::load(&s.out("on")).unwrap();
    let vm = cfg.vm.expect("a [vm] section");
    assert_eq!(vm.opensandbox_url, o.url);
    assert_eq!(vm.api_key_file, o.api_key_file);
    assert_eq!(
        (vm.cpu.as_str(), vm.memory.as_str(), vm.timeout.as_str()),
        ("2", "2Gi", "3h10m")
    );
    let text = std::fs::read_to_string(s.out("on")).unwrap();
    assert!(!text.contains(&o.api_key()), "the key stays in its file");
}

/// Executor identity's flags: refused before anything is written or registered when they
/// cannot work (a template that renders no ID, identity beside the VM backend without the
/// SPIRE server that mints the sandboxes' SVIDs, a server that is no HOST:PORT, a stray flag);
/// `--spiffe-trust-domain` alone writes `[identity]` with the defaults and the namespace's
/// facade ID; without it there is no `[identity]`.
#[test]
fn init_writes_the_identity_section_only_from_valid_spiffe_flags() {
    let s = setup();
    for (name, extra, needle) in [
        (
            "bad-template",
            vec![
                "--spiffe-trust-domain",
                "example.org",
                "--spiffe-id-template",
                "spiffe://{trust_domain}/gitea/{repo}",
            ],
            "identity.id_template",
        ),
        (
            "with-vm",
            vec![
                "--spiffe-trust-domain",
                "example.org",
                "--opensandbox-url",
                "https://sandbox.example",
                "--opensandbox-api-key-file",
                "/nonexistent",
            ],
            "without --spiffe-server",
        ),
        (
            "bad-server",
            vec![
                "--spiffe-trust-domain",
                "example.org",
                "--spiffe-server",
                "https://spire-server:8081",
            ],
            "identity.server_address",
        ),
        (
            "stray",
            vec!["--spiffe-source", "workload-api"],
            "without --spiffe-trust-domain",
        ),
    ] {
        let o = s.init(name, &[], &extra);
        assert_exit(&o, 2);
        assert!(stderr(&o).contains(needle), "{name}: {}", stderr(&o));
        assert!(!s.root.join(name).exists(), "{name}: nothing written");
    }
    assert!(s.runners().is_empty(), "nothing registered");

    let on = s.init("on", &[], &["--spiffe-trust-domain", "example.org"]);
    assert_exit(&on, 0);
    let cfg = tenantci_dispatch::config::Config::load(&s.out("on")).unwrap();
    let identity = cfg.identity.expect("an [identity] section");
    assert_eq!(identity.trust_domain, "example.org");
    assert_eq!(
        identity.id_template,
        "spiffe://{trust_domain}/gitea/{repository}/{job}"
    );
    assert_eq!(
        identity.facade_id,
        "spiffe://example.org/ns/dynamic-runner/sa/tenantci-dispatcher"
    );
    assert_eq!(identity.source, "workload-api");
    assert_eq!(identity.server_address, None);

    // With the VM backend and the SPIRE server (init does not reach the server: the
    // dispatcher's SVID is needed for that, and `dispatch run` does it).
    let o = tenantci_testkit::opensandbox::OpenSandbox::from_state_dir(&s.root.join("state"));
    let key_file = o.api_key_file.display().to_string();
    let vm = s.init(
        "vm",
        &[
            ("--name", Some("vm-identity")),
            ("--labels", Some("self-hosted,pod,vm")),
        ],
        &[
            "--spiffe-trust-domain",
            "example.org",
            "--spiffe-server",
            "spire-server.spire:8081",
            "--opensandbox-url",
            &o.url,
            "--opensandbox-api-key-file",
            &key_file,
        ],
    );
    assert_exit(&vm, 0);
    let cfg = tenantci_dispatch::config::Config::load(&s.out("vm")).unwrap();
    let identity = cfg.identity.expect("an [identity] section");
    assert!(cfg.vm.is_some(), "a [vm] section");
    assert_eq!(
        identity.server_address.as_deref(),
        Some("spire-server.spire:8081")
    );

    let off = s.init("off", &[("--name", Some("no-identity"))], &[]);
    assert_exit(&off, 0);
    let text = std::fs::read_to_string(s.out("off")).unwrap();
    assert!(!text.contains("[identity]"), "{text}");
}

/// The cluster-scoped RBAC of executor identity in the default namespace.
const IDENTITY_RBAC: &str = "tenantci-dispatcher:dynamic-runner";
const TRUST_DOMAIN: [&str; 2] = ["--spiffe-trust-domain", "example.org"];
const TRUST_DOMAIN_DRY_RUN: [&str; 3] = ["--spiffe-trust-domain", "example.org", "--dry-run"];

fn step<'h>(steps: &'h [(String, String)], name: &str) -> Option<&'h str> {
    steps
        .iter()
        .find(|(s, _)| s == name)
        .map(|(_, o)| o.as_str())
}

/// Executor identity on: phase one finds the ClusterStaticEntry CRD, the cluster-scoped
/// ClusterRole and binding are applied (a dry run only says it would), and the dispatcher's
/// own credential (kubectl with the kubeconfig init wrote, an independent client) can create
/// and delete an entry and get a node, and nothing more of nodes; a re-run changes nothing.
/// Identity off: no ClusterRole, no `spire` or `rbac-identity` line.
#[test]
fn init_with_identity_applies_the_cluster_scoped_rbac_the_dispatcher_can_use() {
    let s = setup();
    let off = s.init("off", &[("--name", Some("no-identity"))], &[]);
    assert_exit(&off, 0);
    let steps = outcomes(&hand_back(&off));
    assert_eq!(step(&steps, "spire"), None, "{steps:?}");
    assert_eq!(step(&steps, "rbac-identity"), None, "{steps:?}");
    assert!(
        !s.exists("clusterrole", IDENTITY_RBAC),
        "identity off: none"
    );
    assert!(!s.exists("clusterrolebinding", IDENTITY_RBAC));

    let dry = s.init("d", &[], &TRUST_DOMAIN_DRY_RUN);
    assert_exit(&dry, 0);
    let steps = outcomes(&hand_back(&dry));
    assert_eq!(step(&steps, "spire"), Some("ok"), "{steps:?}");
    assert_eq!(
        step(&steps, "rbac-identity"),
        Some("would apply"),
        "{steps:?}"
    );
    assert!(
        !s.exists("clusterrole", IDENTITY_RBAC),
        "a dry run applies nothing"
    );

    let o = s.init("d", &[], &TRUST_DOMAIN);
    assert_exit(&o, 0);
    let hb = hand_back(&o);
    let steps = outcomes(&hb);
    assert_eq!(step(&steps, "spire"), Some("ok"), "{steps:?}");
    assert_eq!(step(&steps, "rbac-identity"), Some("applied"), "{steps:?}");
    assert_eq!(step(&steps, "verify"), Some("ok"), "{steps:?}");
    let detail = |name: &str| {
        hb["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["step"] == name)
            .unwrap()["detail"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(detail("rbac-identity").contains("cluster-scoped"), "{hb}");
    assert!(
        detail("verify").contains("cluster-scoped ones included"),
        "{hb}"
    );

    let o = s.admin().run(&[
        "get",
        "clusterrole",
        IDENTITY_RBAC,
        "-o",
        "jsonpath={range .rules[*]}{.apiGroups}{.resources}{.verbs};{end}",
    ]);
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o),
        r#"["spire.spiffe.io"]["clusterstaticentries"]["get","list","watch","create","update","delete"];[""]["nodes"]["get"];"#
    );
    let o = s.admin().run(&[
        "get",
        "clusterrolebinding",
        IDENTITY_RBAC,
        "-o",
        "jsonpath={.roleRef.name} {range .subjects[*]}{.kind}/{.name}/{.namespace} {end}",
    ]);
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o).trim(),
        "tenantci-dispatcher:dynamic-runner ServiceAccount/tenantci-dispatcher/dynamic-runner User/tenantci-dispatcher/"
    );

    let own = Kubectl::new(&s.root.join("d/kube/kubeconfig"), &s.root);
    for verb in ["get", "list", "watch", "create", "update", "delete"] {
        assert_eq!(
            can_i(&own, &[verb, "clusterstaticentries.spire.spiffe.io"]),
            (true, "yes".into()),
            "{verb}"
        );
    }
    assert_eq!(can_i(&own, &["get", "nodes"]), (true, "yes".into()));
    assert_eq!(can_i(&own, &["list", "nodes"]), (false, "no".into()));
    assert_eq!(can_i(&own, &["delete", "nodes"]), (false, "no".into()));
    let entry = entry_yaml(
        "init-probe",
        "spiffe://example.org/gitea/acme/widgets/build",
        "spiffe://example.org/spire/agent/k8s_psat/ci/node-uid-1",
        "pod-uid-1",
    );
    let o = own.run_stdin(&["create", "-f", "-"], &entry);
    assert_exit(&o, 0);
    let o = own.run(&["delete", "clusterstaticentry", "init-probe"]);
    assert_exit(&o, 0);
    // No node is rented yet: NotFound (authorized, absent), never Forbidden.
    let o = own.run(&["get", "node", "no-such-node"]);
    assert!(stderr(&o).contains("NotFound"), "{}", stderr(&o));

    let before = files(&s.root.join("d"));
    let again = s.init("d", &[("--registration-token-file", None)], &TRUST_DOMAIN);
    assert_exit(&again, 0);
    for (step, outcome) in outcomes(&hand_back(&again)) {
        assert!(
            ["ok", "kept", "unchanged"].contains(&outcome.as_str()),
            "{step}: {outcome}"
        );
    }
    assert_eq!(
        files(&s.root.join("d")),
        before,
        "a re-run rewrites nothing"
    );
}

/// A cluster without SPIRE's ClusterStaticEntry CRD (`sim --without-spire-crd`): identity is
/// refused in phase one, exit 2, one sentence naming the missing resource and what to install,
/// with nothing written, applied or registered; without identity init works there.
#[test]
fn init_refuses_identity_on_a_cluster_without_the_spire_crd() {
    let s = setup_with(&["--without-spire-crd"]);
    for extra in [&TRUST_DOMAIN[..], &TRUST_DOMAIN_DRY_RUN[..]] {
        let o = s.init("d", &[], extra);
        assert_exit(&o, 2);
        let err = stderr(&o);
        assert!(
            err.contains("does not serve clusterstaticentries.spire.spiffe.io/v1alpha1"),
            "{err}"
        );
        assert!(
            err.contains("help:") && err.contains("spire-controller-manager with its CRDs"),
            "{err}"
        );
        assert_eq!(
            err.lines().filter(|l| l.starts_with("error:")).count(),
            1,
            "one sentence: {err}"
        );
        assert!(!s.root.join("d").exists(), "nothing written");
        assert!(s.runners().is_empty(), "nothing registered");
        assert!(!s.namespace_exists(), "nothing applied");
        assert!(!s.exists("clusterrole", IDENTITY_RBAC), "nothing applied");
    }

    let off = s.init("d", &[], &[]);
    assert_exit(&off, 0);
    assert_eq!(step(&outcomes(&hand_back(&off)), "spire"), None);
}

/// `POST <admin>/version`: the double answers `version` from `GET /api/v1/version`.
fn set_version(s: &Setup, version: &str) {
    let url = format!("{}/version", s.admin_url);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let r = reqwest::Client::new()
            .post(&url)
            .json(&serde_json::json!({ "version": version }))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    });
}

fn forge_in(config: &Path) -> String {
    let text = std::fs::read_to_string(config).unwrap();
    let doc: toml_edit::DocumentMut = text.parse().unwrap();
    doc["gitea"]["forge"].as_str().unwrap().to_string()
}

/// Forgejo's version answer (`11.0.1+gitea-1.22.0`) makes the config record `forgejo`.
#[test]
fn init_reads_forgejo_from_the_version_api_and_records_it() {
    let s = setup_with(&["--forgejo"]);
    let o = s.init("d", &[], &[]);
    assert_exit(&o, 0);
    assert_eq!(forge_in(&s.out("d")), "forgejo");
}

fn runner_command_in(config: &Path) -> String {
    let text = std::fs::read_to_string(config).unwrap();
    let doc: toml_edit::DocumentMut = text.parse().unwrap();
    doc["executor"]["runner_command"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The detail of init's `step` line.
fn detail(o: &Output, step: &str) -> String {
    let hb = hand_back(o);
    let line = hb["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["step"] == step);
    line.unwrap_or_else(|| panic!("no `{step}` line: {hb}"))["detail"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Issue 45: a detected Forgejo's executors get Forgejo's runner (`forgejo-runner one-job`),
/// and the `runner` line says so and why; a runner command given with `--runner-command` is
/// kept (the line says what the image must then ship), and so is the config's on a re-run.
#[test]
fn init_gives_a_forgejo_its_own_runner_and_keeps_a_given_runner_command() {
    let s = setup_with(&["--forgejo"]);
    let o = s.init("d", &[], &[]);
    assert_exit(&o, 0);
    assert_eq!(runner_command_in(&s.out("d")), "forgejo-runner");
    let line = detail(&o, "runner");
    assert!(
        line.contains("forgejo-runner (Forgejo's own runner; --runner-command changes it)"),
        "{line}"
    );
    let given = [("--name", Some("given"))];
    let o = s.init("e", &given, &["--runner-command", "act_runner"]);
    assert_exit(&o, 0);
    assert_eq!(runner_command_in(&s.out("e")), "act_runner");
    let line = detail(&o, "runner");
    assert!(line.contains("as --runner-command says"), "{line}");
    assert!(
        line.contains("Forgejo's own runner is forgejo-runner"),
        "{line}"
    );
    let again = s.init("e", &[("--registration-token-file", None), given[0]], &[]);
    assert_exit(&again, 0);
    assert_eq!(runner_command_in(&s.out("e")), "act_runner", "kept");
    assert!(detail(&again, "runner").contains("kept from the existing config"));
    let bad = s.init("f", &given, &["--runner-command", "forgejo"]);
    assert_exit(&bad, 2);
    assert!(!s.out("f").exists(), "nothing written");
}

/// A version answer of neither kind is bad input (exit 2) naming `--forge`, with nothing
/// written, applied or registered; `--forge` then says which forge it is.
#[test]
fn init_refuses_a_version_of_neither_forge_and_forge_overrides_it() {
    let s = setup();
    set_version(&s, "development");
    let o = s.init("d", &[], &[]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(err.contains("\"development\""), "{err}");
    assert!(err.contains("--forge gitea|forgejo"), "{err}");
    assert!(!s.out("d").exists(), "no config written");
    assert!(!s.namespace_exists(), "nothing applied");
    assert!(s.runners().is_empty(), "nothing registered");
    let o = s.init("d", &[], &["--forge", "forgejo"]);
    assert_exit(&o, 0);
    assert_eq!(forge_in(&s.out("d")), "forgejo");
    assert_eq!(
        runner_command_in(&s.out("d")),
        "forgejo-runner",
        "--forge too"
    );
    let o = s.init("e", &[], &["--forge", "gitlab"]);
    assert_exit(&o, 2);
}

/// `--cache-*` turn the shared cache on: bad ones are refused before anything is written or
/// registered (a credentials file open to others, a size with no cache to size); `--cache-dir`
/// writes `[cache]` with the directory made absolute and the default limits, without creating
/// it (`run` does); a re-run without the flags keeps the section and its tuned size; a bucket
/// replaces the directory and keeps the limits.
#[test]
fn init_turns_the_shared_cache_on_from_its_flags_and_a_rerun_keeps_it() {
    let s = setup();
    let open = s.root.join("s3-open.credentials");
    std::fs::write(&open, "AKID\nsecret-key-value\n").unwrap();
    let refused = [
        (
            vec![
                "--cache-s3-bucket",
                "ci-cache",
                "--cache-s3-credentials-file",
                open.to_str().unwrap(),
            ],
            "S3 credentials file",
        ),
        (
            vec!["--cache-max-size-mib", "100"],
            "no shared cache to size",
        ),
    ];
    for (extra, says) in refused {
        let o = s.init("refused", &[], &extra);
        assert_exit(&o, 2);
        let err = stderr(&o);
        assert!(err.contains(says) && err.contains("help:"), "{err}");
        assert!(!err.contains("secret-key-value"), "{err}");
        assert!(!s.root.join("refused").exists(), "nothing written");
    }
    assert!(s.runners().is_empty(), "nothing registered");

    let dir = s.root.join("actions-cache");
    let o = s.init(
        "d",
        &[],
        &[
            "--cache-dir",
            dir.to_str().unwrap(),
            "--cache-max-size-mib",
            "1024",
        ],
    );
    assert_exit(&o, 0);
    let cache = |name: &str| {
        tenantci_dispatch::config::Config::load(&s.out(name))
            .unwrap()
            .cache
    };
    let on = cache("d").expect("a [cache] section");
    assert_eq!(on.dir.as_deref(), Some(dir.as_path()));
    assert_eq!((on.max_size_mib, on.max_entry_size_mib), (1024, 1024));
    assert!(!dir.exists(), "init creates no cache directory");

    assert_exit(&s.init("d", &[], &[]), 0);
    assert_eq!(cache("d"), Some(on.clone()), "a re-run keeps the section");

    let private = s.root.join("s3.credentials");
    tenantci_core::fsutil::write_atomic(&private, b"AKID\nsecret-key-value\n", 0o600).unwrap();
    let o = s.init(
        "d",
        &[],
        &[
            "--cache-s3-bucket",
            "ci-cache",
            "--cache-s3-endpoint",
            "http://127.0.0.1:9000",
            "--cache-s3-credentials-file",
            private.to_str().unwrap(),
        ],
    );
    assert_exit(&o, 0);
    let bucket = cache("d").unwrap();
    assert_eq!(
        (bucket.dir, bucket.s3_bucket.as_deref(), bucket.max_size_mib),
        (None, Some("ci-cache"), 1024)
    );
    let text = std::fs::read_to_string(s.out("d")).unwrap();
    assert!(
        !text.contains("secret-key-value"),
        "the key stays in its file"
    );
}

/// `--waiting-jobs-*` (Forgejo): init reads the API once with the token before it writes: a
/// token the forge refuses, a scope it cannot parse, a token file open to others are each exit
/// 2 with nothing written or registered; a good pair writes `[waiting_jobs]`, which a re-run
/// without the flags keeps.
#[test]
fn init_checks_the_waiting_jobs_token_at_the_forge_and_writes_the_section() {
    let s = setup_with(&["--forgejo"]);
    let good = s.root.join("forgejo-api.token");
    let refused = s.root.join("refused-api.token");
    let open = s.root.join("open-api.token");
    for (file, token, mode) in [
        (&good, s.sim.gitea().api_token, 0o600),
        (&refused, "not-the-token".to_string(), 0o600),
        (&open, s.sim.gitea().api_token, 0o644),
    ] {
        std::fs::write(file, format!("{token}\n")).unwrap();
        std::fs::set_permissions(file, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    }
    let flags = |scope: &str, file: &Path| {
        vec![
            "--waiting-jobs-scope".to_string(),
            scope.to_string(),
            "--waiting-jobs-token-file".to_string(),
            file.display().to_string(),
        ]
    };
    for (scope, file, says) in [
        ("orgs/acme", &refused, "refuses the token"),
        ("orgs/a b", &good, "is not a waiting-jobs scope"),
        ("admin", &open, "open-api.token"),
    ] {
        let extra = flags(scope, file);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let o = s.init("d", &[], &extra);
        assert_exit(&o, 2);
        assert!(stderr(&o).contains(says), "{says}: {}", stderr(&o));
        assert!(!s.out("d").exists(), "no config written");
        assert!(s.runners().is_empty(), "nothing registered");
    }
    let extra = flags("orgs/acme", &good);
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    assert_exit(&s.init("d", &[], &extra), 0);
    let written = || tenantci_dispatch::config::Config::load(&s.out("d")).unwrap();
    let w = written().waiting_jobs.expect("a [waiting_jobs] section");
    assert_eq!(
        (w.scope.as_str(), w.token_file.as_path()),
        ("orgs/acme", good.as_path())
    );
    assert_exit(&s.init("d", &[], &[]), 0);
    assert_eq!(written().waiting_jobs, Some(w), "a re-run keeps it");
}

//! `tenantci dispatch init`: everything `dispatch run` needs, in one idempotent run.
//!
//! Phase one changes nothing: the flags (`plan::check`), the NATS password files, the files
//! already beside the config (scheduler credential, keys, facade PKI, the old config), the
//! cluster (resolved through the gateway, its serving CA verifying the apiserver in a TLS
//! handshake; with executor identity, serving SPIRE's ClusterStaticEntry: `spire`), the
//! dispatcher's credential decision, a kept registration (Declare: it must still exist at
//! Gitea), and with `--opensandbox-url` the VM backend's Lifecycle API and key. Any refusal
//! there is exit 2 with nothing written, applied or registered. `--dry-run` stops after it
//! and reports the plan.
//!
//! Phase two acts. Registration comes first: a wrong registration token is the one input that
//! only Gitea can judge, and Register is the only way to ask, so it must fail before anything
//! else changed. Then the credential (`<dir>/kube/`), the RBAC (tenant-admin; with executor
//! identity also the cluster-scoped ClusterRole and binding for the per-task entries, with a
//! warm pool the one for reading the pause PriorityClass) and its verification (the
//! dispatcher's own credential), the keys, the facade PKI, the config last, so a config on
//! disk always names files that exist, and after it the in-cluster objects (`in_cluster`).
//!
//! Every file is 0600 in a 0700 directory; the registration token is sent once and never
//! written or logged. Kept on re-run: the registration, both keys, the facade CA, a valid
//! credential and a serving cert that still covers the facade host.
//!
//! Layout: `local::check` is phase one on this host, `check_cluster` phase one against the
//! cluster and Gitea; then one function per step over the shared `Context`, in the order of
//! [`run`]. The outcome and detail of a line come from pure functions (`apply::summary`,
//! `credential_change`, `facade_line`, `config_outcome`). Gitea's calls are in `gitea`, the
//! RBAC and its checks in `provision::access`, the SPIRE CRD check in `spire`, the facade's
//! CA and cert in `provision::facade_pki`, the VM backend's flags in `backend::vm::init`.

mod gitea;
pub mod in_cluster;
mod local;
pub mod manifests;
pub mod plan;
pub mod spire;
pub mod target;

use std::path::{Path, PathBuf};

use serde::Serialize;
use time::OffsetDateTime;

use crate::backend::vm;
use crate::capability::{self, CapabilityKey};
use crate::claim::registration::SchedulerCredential;
use crate::identity;
use crate::provision::{access, facade_pki};
use crate::queue::assignment::SealingKey;
use crate::queue::users;
use local::{Local, Registration};
use tenantci_core::fsutil::{self, MODE_PRIVATE_DIR, MODE_SECRET};
use tenantci_core::gateway::{StateDir, resolve};
use tenantci_core::kube_client as client;
use tenantci_core::pki::inspect::{CertInfo, rfc3339};
use tenantci_core::pki::{CertificateAuthority, KeyType};
use tenantci_core::tls::probe::ServingCa;
use tenantci_core::{Error, Result};
use tenantci_runner::credential::decision::{self as cred, Decision, Wanted};
use tenantci_runner::credential::{CaSource, MintRequest};
use tenantci_runner::tenant::access::Reviewer;
use tenantci_runner::tenant::apply::summary;

pub use plan::{CapacityFlag, Inputs, RegistrationToken};
pub use target::ClusterAccess;
use target::Target;

/// One step's line, as `bootstrap runner` prints them. Outcomes here: `ok`, `created`,
/// `kept`, `applied`, `unchanged`, `updated`, `rotated`, `re-issued`, `skipped`, or
/// `would ...` in a dry run.
pub use tenantci_runner::steps::Step;
use tenantci_runner::steps::{Outcome, Steps};

/// The registration, without its token.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunnerInfo {
    /// Its runner id at Gitea.
    pub id: i64,
    /// Its runner UUID.
    pub uuid: String,
    /// Its runner name.
    pub name: String,
    /// The labels declared for it (every class label included).
    pub labels: Vec<String>,
}

/// Where everything is (absolute paths).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Files {
    /// The config and the files `init` keeps beside it.
    #[serde(flatten)]
    pub beside_the_config: crate::config::Paths,
    /// The dispatcher's own kubeconfig; null with `--kubeconfig` (it runs as its
    /// ServiceAccount).
    pub kubeconfig: Option<PathBuf>,
    /// The directory of the NATS users' password files (`nats.secrets_dir`).
    pub nats_secrets_dir: PathBuf,
}

/// `-o json`'s shape (docs/cli.md). Never holds a secret.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HandBack {
    /// The config file written (or, in a dry run, that would be).
    pub config: PathBuf,
    /// `--dry-run`: nothing was changed.
    pub dry_run: bool,
    /// The tenant cluster's name (`--cluster`).
    pub cluster: String,
    /// Its apiserver's URL.
    pub server: String,
    /// The executors' namespace.
    pub namespace: String,
    /// The dispatcher's own namespace (its Lease; in the cluster its Deployment, ConfigMap
    /// and Secret): `namespace` unless `--dispatcher-namespace` or `--kubeconfig` set another.
    pub dispatcher_namespace: String,
    /// Gitea's base URL.
    pub gitea_url: String,
    /// The URL executors reach the facade at.
    pub facade_url: String,
    /// None only in a dry run before the first registration.
    pub runner: Option<RunnerInfo>,
    /// Every file init keeps, absolute.
    pub files: Files,
    /// In the cluster (`--kubeconfig`): the `bao kv put` that loads the Secret's keys into
    /// OpenBao for `manifests/components/openbao` (file names, never values); else null.
    pub bao_kv_put: Option<String>,
    /// Every step's line, in order.
    pub steps: Vec<Step>,
}

/// Runs init; `on_step` sees each line as it completes (the CLI prints them).
pub async fn run(i: &Inputs, mut on_step: impl FnMut(&Step)) -> Result<HandBack> {
    let mut steps = Steps::new(&mut on_step, i.dry_run);
    // Phase one: nothing changes.
    let vm = vm::init::section(&i.vm)?;
    identity::init::section(&i.identity, &i.namespace, &i.cluster, vm.is_some())?;
    let gitea_ca = gitea::ca_pem(i)?;
    let forge = gitea::forge(&i.gitea_url, i.forge, gitea_ca.as_deref()).await?;
    let registered = Inputs {
        labels: vm::init::registered_labels(&i.labels, vm.as_ref())?,
        forge: Some(forge),
        ..i.clone()
    };
    let vm_dropped = registered.labels.len() < i.labels.len();
    let i = &registered;
    let local = local::check(i)?;
    let cluster = &local.config.cluster;
    plan::check_facade_service(&local.config.facade.url, cluster.dispatcher_namespace())?;
    steps.record("runner", Outcome::Ok, runner_line(i, &local));
    if let Some(w) = &local.config.waiting_jobs {
        gitea::check_waiting_jobs(&i.gitea_url, gitea_ca.as_deref(), w).await?;
    }
    // Every class label is registered too, or its jobs would wait for a runner forever.
    let declared = Inputs {
        labels: local.config.declared_labels(),
        ..i.clone()
    };
    let i = &declared;
    let cx = check_cluster(i, local, gitea_ca, &mut steps).await?;
    opensandbox(&cx, vm_dropped, &mut steps).await?;
    // Phase two (or, in a dry run, what it would do).
    let runner = registration(&cx, &mut steps).await?;
    if !i.dry_run {
        make_dir(&cx.paths().dir)?;
    }
    let minted = credential(&cx, &mut steps)?;
    rbac(&cx, &mut steps).await?;
    rbac_identity(&cx, &mut steps).await?;
    rbac_warm_pools(&cx, &mut steps).await?;
    verify(&cx, minted, &mut steps).await?;
    keys(&cx, &mut steps)?;
    facade_cert(&cx, &mut steps)?;
    config(&cx, &mut steps)?;
    in_cluster_objects(&cx, &mut steps).await?;
    Ok(hand_back(cx, runner, steps.into_vec()))
}

/// The `runner` line: which runner command the executors get and why (a Forgejo gets
/// `forgejo-runner` unless told otherwise).
fn runner_line(i: &Inputs, local: &Local) -> String {
    let chosen = (
        local.config.executor.runner_command,
        local.runner_command_from,
    );
    plan::runner_command_detail(i.forge.unwrap_or_default(), chosen)
}

/// Everything phase one found and decided; the steps of phase two read it.
struct Context<'i> {
    i: &'i Inputs,
    local: Local,
    cluster: Target,
    /// None: in-cluster (`--kubeconfig`), no credential of its own.
    credential: Option<Decision>,
    /// The tenant-admin client, or `--kubeconfig`'s (applies the RBAC).
    admin: kube::Client,
    /// The Gitea CA init's calls trust (`--gitea-ca` or the kept config's).
    gitea_ca: Option<String>,
}

impl Context<'_> {
    fn paths(&self) -> &crate::config::Paths {
        &self.local.checked.paths
    }

    /// Executor identity is on: the config gets `[identity]`.
    fn identity(&self) -> bool {
        self.local.config.identity.is_some()
    }

    /// Some class of the config has a warm pool.
    fn warm_pools(&self) -> bool {
        warm_pools(&self.local.config)
    }

    /// The executors' namespace and the dispatcher's, as the config init writes names them.
    fn namespaces(&self) -> access::Namespaces<'_> {
        access::Namespaces::of(&self.local.config.cluster)
    }
}

/// Whether some class of `config` has `[executor.class.warm]`: only then does the dispatcher
/// read the pause PriorityClass, the one cluster-scoped access a warm pool needs.
fn warm_pools(config: &crate::config::Config) -> bool {
    config.executor.classes.iter().any(|c| c.warm.is_some())
}

/// Phase one against the cluster and Gitea: the cluster resolved, the credential decided, a
/// kept registration declared (skipped in a dry run: Declare updates its labels).
async fn check_cluster<'i>(
    i: &'i Inputs,
    local: Local,
    gitea_ca: Option<String>,
    steps: &mut Steps<'_>,
) -> Result<Context<'i>> {
    let (cluster, admin, credential) = match &i.access {
        ClusterAccess::Gateway { state_dir } => {
            let cluster = resolve::resolve(&StateDir::new(state_dir), &i.cluster).await?;
            serving_ca(i, &cluster).require().await?;
            steps.record("resolve", Outcome::Ok, resolve_detail(&cluster));
            let credential = credential_decision(&cluster, &local.checked, local.now)?;
            let admin = client::from_kubeconfig(&cluster.tenant_admin_kubeconfig).await?;
            (Target::Gateway(cluster), admin, Some(credential))
        }
        ClusterAccess::Kubeconfig(file) => {
            let (_, url) = target::current_cluster(file)?;
            let admin = client::from_kubeconfig(file).await?;
            let identity = local.config.identity.is_some();
            let needs = access::AdminNeeds {
                identity,
                warm_pools: warm_pools(&local.config),
                in_cluster_objects: i.apply_secret,
            };
            let ns = access::Namespaces::of(&local.config.cluster);
            access::check_admin(&admin, file, &url, ns, needs).await?;
            let detail = format!(
                "cluster {} at {url}; the kubeconfig {} may apply the RBAC",
                i.cluster,
                file.display()
            );
            steps.record("resolve", Outcome::Ok, detail);
            let name = i.cluster.clone();
            let file = file.clone();
            (Target::Kubeconfig { name, url, file }, admin, None)
        }
    };
    steps.record(
        "nats",
        Outcome::Ok,
        nats_detail(&local.checked.nats_secrets_dir, local.admin_password),
    );
    check_native_sidecars(&admin, cluster.url()).await?;
    if local.config.identity.is_some() {
        spire::check(&admin, cluster.url()).await?;
        steps.record("spire", Outcome::Ok, spire::detail(cluster.url()));
    }
    if let (Some(k), false) = (local.registration.kept(), i.dry_run) {
        gitea::declare(i, k, &local.checked.paths, gitea_ca.as_deref()).await?;
    }
    Ok(Context {
        i,
        local,
        cluster,
        credential,
        admin,
        gitea_ca,
    })
}

/// The state directory's serving CA, which the dispatcher's credential will carry, must
/// verify the cluster's apiserver: checked with a TLS handshake before anything is written.
fn serving_ca<'a>(i: &Inputs, cluster: &'a resolve::ResolvedCluster) -> ServingCa<'a> {
    ServingCa {
        what: "the state directory's serving CA",
        path: &cluster.serving_ca,
        server: "the tenant apiserver",
        url: &cluster.url,
        fix: format!(
            "pass the --state-dir of the gateway that runs cluster `{}` at {}; nothing was written",
            i.cluster, cluster.url
        ),
        unreachable_hint: "check that the gateway runs the cluster (`tenantci check-host --role gateway`); nothing was written",
    }
}

/// The VM backend: its Lifecycle API reached with the key (phase one), or, when `--labels`
/// asked for `vm` without it, why `vm` is not registered.
async fn opensandbox(cx: &Context<'_>, vm_dropped: bool, steps: &mut Steps<'_>) -> Result<()> {
    let Some(v) = &cx.local.config.vm else {
        if vm_dropped {
            steps.record("opensandbox", Outcome::Skipped, vm::init::VM_DROPPED);
        }
        return Ok(());
    };
    vm::api::check_access(&vm::api::client(v)?).await?;
    steps.record(
        "opensandbox",
        Outcome::Ok,
        format!(
            "{} answers; the API key in {} is accepted",
            v.opensandbox_url,
            v.api_key_file.display()
        ),
    );
    Ok(())
}

/// Executor Pods run their proxy as a native sidecar (Kubernetes 1.29+). An older apiserver
/// drops the init container's `restartPolicy` without an error, and every executor would
/// then wait in Init forever behind a proxy that never exits: refuse before writing anything.
async fn check_native_sidecars(admin: &kube::Client, url: &str) -> Result<()> {
    let v = admin.apiserver_version().await.map_err(|e| {
        Error::external(format!("cannot read the Kubernetes version of {url}"))
            .caused_by(e)
            .hint("is the tenant apiserver up? (`tenantci check-host`)")
    })?;
    if native_sidecars(&v.major, &v.minor) {
        return Ok(());
    }
    Err(Error::bad_input(format!(
        "the tenant cluster at {url} runs Kubernetes {}.{}, but executor Pods need native sidecar containers (Kubernetes 1.29 or later)",
        v.major, v.minor
    ))
    .hint("upgrade the tenant cluster's control plane to 1.29 or later"))
}

/// `major`/`minor` as /version reports them (`"1"`, `"29+"`).
fn native_sidecars(major: &str, minor: &str) -> bool {
    let num = |s: &str| s.trim_end_matches('+').parse::<u32>().unwrap_or(0);
    (num(major), num(minor)) >= (1, 29)
}

fn resolve_detail(r: &resolve::ResolvedCluster) -> String {
    format!("cluster {} at {} (Ready)", r.name, r.url)
}

fn nats_detail(dir: &Path, admin_password: bool) -> String {
    let admin = if admin_password {
        format!(
            " ({}.password too: `run` applies the capacities)",
            users::ADMIN
        )
    } else {
        String::new()
    };
    format!(
        "{} has {}.password and {}.password{admin}",
        dir.display(),
        users::PRODUCER,
        users::WORKER,
    )
}

/// First of phase two: a wrong registration token is the one input only Gitea can judge, and
/// Register is the only way to ask. Returns the registration (None: a dry run's new one).
async fn registration(
    cx: &Context<'_>,
    steps: &mut Steps<'_>,
) -> Result<Option<SchedulerCredential>> {
    let (i, p) = (cx.i, cx.paths());
    match &cx.local.registration {
        Registration::Kept(k) => {
            steps.record("registration", Outcome::Kept, kept_detail(k, i.dry_run));
            Ok(Some(k.clone()))
        }
        Registration::New(_) if i.dry_run => {
            let detail = format!(
                "register runner `{}` with labels {:?} at {}",
                cx.local.runner_name, i.labels, i.gitea_url
            );
            steps.act("registration", Outcome::Created, detail);
            Ok(None)
        }
        Registration::New(token) => {
            let k =
                gitea::register(i, &cx.local.runner_name, token, p, cx.gitea_ca.as_deref()).await?;
            let detail = format!(
                "runner `{}` id {} uuid {} -> {}",
                k.name,
                k.id,
                k.uuid,
                p.scheduler.display()
            );
            steps.record("registration", Outcome::Created, detail);
            Ok(Some(k))
        }
    }
}

fn kept_detail(k: &SchedulerCredential, dry_run: bool) -> String {
    let how = if dry_run {
        "not re-declared in a dry run"
    } else {
        "Gitea knows it; labels declared"
    };
    format!("runner `{}` id {} uuid {} ({how})", k.name, k.id, k.uuid)
}

/// Keep, mint or rotate the dispatcher's client credential (`bootstrap`'s decision).
fn credential_decision(
    r: &resolve::ResolvedCluster,
    c: &plan::Checked,
    now: OffsetDateTime,
) -> Result<Decision> {
    let kube_dir = &c.paths.kube_dir;
    let ca = CertificateAuthority::load(&r.client_ca_cert, &r.client_ca_key)?;
    let ca_info = CertInfo::from_pem(ca.cert_pem()).map_err(|e| {
        Error::bad_input(format!(
            "the ClientCA `{}` cannot be read back",
            r.client_ca_cert.display()
        ))
        .caused_by(e)
    })?;
    let existing = cred::inspect(kube_dir)?;
    let groups = [manifests::GROUP.to_string()];
    let wanted = Wanted {
        server: &r.url,
        common_name: crate::provision::access::NAME,
        groups: &groups,
        client_ca_key_id: ca_info.subject_key_id.as_deref(),
    };
    // decide's refusals are bad input already; only the fix differs here.
    let decision = cred::decide(&existing, &wanted, now, false, kube_dir).map_err(|e| {
        e.hint(format!(
            "move {} aside (or delete it) and re-run `tenantci dispatch init`: it mints a new credential",
            kube_dir.display()
        ))
    })?;
    if decision != Decision::Keep {
        tenantci_core::pki::policy::check_within_ca(c.credential_valid_for, now, ca.not_after())?;
    }
    Ok(decision)
}

/// The change a decision makes, and why (a `; why` suffix for a rotation); None: kept.
fn credential_change(decision: &Decision) -> Option<(Outcome, String)> {
    match decision {
        Decision::Keep => None,
        Decision::Mint => Some((Outcome::Created, String::new())),
        Decision::Rotate { why } => Some((Outcome::Rotated, format!("; {why}"))),
    }
}

/// The dispatcher's credential in `<dir>/kube/`; returns whether a new one was minted. In the
/// cluster (`--kubeconfig`) there is none: the ServiceAccount's token is the credential.
fn credential(cx: &Context<'_>, steps: &mut Steps<'_>) -> Result<bool> {
    let Some(decision) = &cx.credential else {
        let detail = format!(
            "none to mint or renew: `dispatch run` in the cluster uses the ServiceAccount {} (in-cluster config)",
            crate::provision::access::NAME
        );
        steps.record("credential", Outcome::Skipped, detail);
        return Ok(false);
    };
    let kube_dir = &cx.paths().kube_dir;
    let dir = kube_dir.display();
    let subject = format!(
        "CN={} O={}",
        crate::provision::access::NAME,
        manifests::GROUP
    );
    let Some((outcome, why)) = credential_change(decision) else {
        let until = cred::inspect(kube_dir)?
            .cert
            .map(|c| rfc3339(c.not_after))
            .unwrap_or_default();
        let detail = format!("{dir} ({subject}, valid until {until})");
        steps.record("credential", Outcome::Kept, detail);
        return Ok(false);
    };
    if cx.i.dry_run {
        steps.act("credential", outcome, format!("{dir} ({subject}{why})"));
        return Ok(false);
    }
    let until = mint_credential(cx)?;
    let detail = format!("{dir} ({subject}, valid until {until}{why})");
    steps.record("credential", outcome, detail);
    Ok(true)
}

/// Mints (after moving an old credential aside); returns the new one's expiry.
fn mint_credential(cx: &Context<'_>) -> Result<String> {
    let (i, kube_dir) = (cx.i, &cx.paths().kube_dir);
    let ClusterAccess::Gateway { state_dir } = &i.access else {
        unreachable!("a credential is decided on the gateway path only");
    };
    if matches!(cx.credential, Some(Decision::Rotate { .. })) {
        cred::move_aside(kube_dir, OffsetDateTime::now_utc())?;
    }
    let minted = tenantci_runner::credential::mint(&MintRequest {
        ca: CaSource::StateDir {
            state_dir: state_dir.clone(),
            cluster: i.cluster.clone(),
        },
        server: cx.cluster.url().to_string(),
        common_name: crate::provision::access::NAME.into(),
        organizations: vec![manifests::GROUP.into()],
        out_dir: kube_dir.clone(),
        valid_for: Some(i.credential_valid_for.clone()),
        key_type: KeyType::EcdsaP256,
    })?;
    Ok(minted.not_after)
}

/// The RBAC objects, with the tenant-admin client.
async fn rbac(cx: &Context<'_>, steps: &mut Steps<'_>) -> Result<()> {
    let ns = cx.namespaces();
    let objects = manifests::rbac(ns.executors, ns.dispatcher);
    let applied = access::apply(&cx.admin, &objects.objects(), cx.i.dry_run).await?;
    let (outcome, detail) = summary(&applied);
    steps.act("rbac", outcome, detail);
    Ok(())
}

/// With executor identity, the cluster-scoped ClusterRole and binding for the per-task
/// ClusterStaticEntry objects; without it, nothing (and no line).
async fn rbac_identity(cx: &Context<'_>, steps: &mut Steps<'_>) -> Result<()> {
    if !cx.identity() {
        return Ok(());
    }
    let ns = cx.namespaces();
    let objects = manifests::rbac_identity(ns.executors, ns.dispatcher);
    let what = "ClusterStaticEntry objects, node get";
    cluster_rbac(cx, steps, "rbac-identity", &objects, what).await
}

/// With a warm pool, the ClusterRole and binding that let the dispatcher `get` the pause
/// PriorityClass by name; without one, nothing (and no line): the dispatcher then needs
/// nothing cluster-wide.
async fn rbac_warm_pools(cx: &Context<'_>, steps: &mut Steps<'_>) -> Result<()> {
    if !cx.warm_pools() {
        return Ok(());
    }
    let ns = cx.namespaces();
    let objects = manifests::rbac_pause(ns.executors, ns.dispatcher);
    let what = format!(
        "get of the PriorityClass `{}` by name",
        tenantci_runner::tenant::prewarm::NAME
    );
    cluster_rbac(cx, steps, "rbac-warm-pools", &objects, &what).await
}

/// Applies cluster-scoped `objects` with the tenant-admin client: the line `step`, saying
/// `what` they grant.
async fn cluster_rbac(
    cx: &Context<'_>,
    steps: &mut Steps<'_>,
    step: &'static str,
    objects: &manifests::ClusterRbacObjects,
    what: &str,
) -> Result<()> {
    let applied = access::apply(&cx.admin, &objects.objects(), cx.i.dry_run).await?;
    let (outcome, detail) = summary(&applied);
    steps.act(step, outcome, format!("{detail} (cluster-scoped: {what})"));
    Ok(())
}

/// The RBAC as the dispatcher's own credential sees it (none on disk in a dry run).
async fn verify(cx: &Context<'_>, minted: bool, steps: &mut Steps<'_>) -> Result<()> {
    if cx.i.dry_run {
        steps.record("verify", Outcome::Skipped, "dry run");
        return Ok(());
    }
    // The ServiceAccount lives in the dispatcher's namespace; its Role is in the executors'.
    let ns = cx.namespaces();
    let (user, groups) = (
        target::service_account_user(ns.dispatcher),
        target::service_account_groups(ns.dispatcher),
    );
    let n = if cx.cluster.in_cluster() {
        let who = Reviewer::Subject {
            admin: &cx.admin,
            user: &user,
            groups: &groups,
        };
        access::verify(&who, ns, cx.identity()).await?
    } else {
        let own = client::from_kubeconfig(&cx.paths().kube_dir.join("kubeconfig")).await?;
        access::verify(&Reviewer::Own(&own), ns, cx.identity()).await?
    };
    let (reviews, who, which) = match (cx.cluster.in_cluster(), minted) {
        (true, _) => ("SubjectAccessReviews", user.as_str(), "its ServiceAccount"),
        (false, true) => (
            "SelfSubjectAccessReviews",
            crate::provision::access::NAME,
            "new credential",
        ),
        (false, false) => (
            "SelfSubjectAccessReviews",
            crate::provision::access::NAME,
            "kept credential",
        ),
    };
    let scope = if cx.identity() {
        ", cluster-scoped ones included"
    } else {
        ""
    };
    let detail = format!("{n} {reviews} as {who} ({which}{scope}) as expected");
    steps.record("verify", Outcome::Ok, detail);
    Ok(())
}

/// The capability and sealing keys: kept when there (executors and other dispatchers hold
/// them), else created.
fn keys(cx: &Context<'_>, steps: &mut Steps<'_>) -> Result<()> {
    let (p, dry_run) = (cx.paths(), cx.i.dry_run);
    key(
        steps,
        "capability-key",
        &p.capability_key,
        "32 random bytes",
        dry_run,
        |path| {
            let text = capability::encode_key(&CapabilityKey::generate());
            fsutil::write_new_atomic(path, text.as_bytes(), MODE_SECRET)
                .map_err(|e| Error::unwritable("the capability key", path, e))
        },
    )?;
    key(
        steps,
        "sealing-key",
        &p.sealing_key,
        "256-bit",
        dry_run,
        |path| SealingKey::load_or_create(path).map(drop),
    )
}

fn key(
    steps: &mut Steps<'_>,
    step: &'static str,
    path: &Path,
    what: &str,
    dry_run: bool,
    create: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    if path.exists() {
        steps.record(step, Outcome::Kept, path.display().to_string());
        return Ok(());
    }
    if !dry_run {
        create(path)?;
    }
    steps.act(
        step,
        Outcome::Created,
        format!("{} ({what})", path.display()),
    );
    Ok(())
}

/// The facade's serving cert (and CA), as phase one planned.
fn facade_cert(cx: &Context<'_>, steps: &mut Steps<'_>) -> Result<()> {
    let (local, p) = (&cx.local, cx.paths());
    let (outcome, detail) = facade_line(&local.facade_plan, p, &local.checked);
    steps.act("facade-cert", outcome, detail);
    if !cx.i.dry_run {
        let host = &local.checked.facade_host;
        facade_pki::apply(&local.facade_plan, &local.facade, p, host)?;
    }
    Ok(())
}

fn facade_line(
    plan: &facade_pki::Plan,
    p: &crate::config::Paths,
    c: &plan::Checked,
) -> (Outcome, String) {
    let detail = format!(
        "{} for {} ({})",
        p.facade_cert.display(),
        c.facade_host,
        c.facade_url
    );
    match plan {
        facade_pki::Plan::Keep => (Outcome::Kept, detail),
        facade_pki::Plan::NewCa { why } => (Outcome::Created, format!("{detail}; new CA: {why}")),
        facade_pki::Plan::Reissue { why } => (
            Outcome::Reissued,
            format!("{detail}, from the kept CA: {why}"),
        ),
    }
}

/// Last, so a config on disk always names files that exist.
fn config(cx: &Context<'_>, steps: &mut Steps<'_>) -> Result<()> {
    let path = &cx.paths().config;
    let text = cx.local.config.to_toml();
    let existed = path.exists();
    let changed = if cx.i.dry_run {
        !same_file(path, text.as_bytes())
    } else {
        fsutil::write_if_changed(path, text.as_bytes(), MODE_SECRET)
            .map_err(|e| Error::unwritable("the dispatcher config", path, e))?
    };
    let outcome = config_outcome(changed, existed);
    steps.act("config", outcome, path.display().to_string());
    Ok(())
}

/// The ConfigMap and Secret the in-cluster Deployment mounts (`in_cluster`): applied with the
/// admin client (`--apply-secret`) and/or written as a manifest (`--secret-out`), the Pod's
/// config alone written for an overlay's generator (`--pod-config-out`); after the config, so
/// every file they hold exists. None of the flags: nothing (and no line).
async fn in_cluster_objects(cx: &Context<'_>, steps: &mut Steps<'_>) -> Result<()> {
    let (i, p, c) = (cx.i, cx.paths(), &cx.local.checked);
    if !i.apply_secret && c.secret_out.is_none() && c.pod_config_out.is_none() {
        return Ok(());
    }
    let bundle = in_cluster::plan(&cx.local.config, &p.dir, cx.local.admin_password);
    if let Some(out) = &c.pod_config_out {
        // No secret in it (file names only), but written as every config init writes.
        let text = bundle.config.to_toml();
        let existed = out.exists();
        let changed = if i.dry_run {
            !same_file(out, text.as_bytes())
        } else {
            fsutil::write_if_changed(out, text.as_bytes(), MODE_SECRET)
                .map_err(|e| Error::unwritable("the Pod's config (--pod-config-out)", out, e))?
        };
        let outcome = config_outcome(changed, existed);
        steps.act("pod-config-out", outcome, out.display().to_string());
    }
    if !i.apply_secret && c.secret_out.is_none() {
        return Ok(());
    }
    let keys: Vec<&str> = bundle.entries.iter().map(|e| e.key.as_str()).collect();
    let shape = format!(
        "ConfigMap {} ({}), Secret {} ({})",
        in_cluster::CONFIG_MAP,
        in_cluster::CONFIG_KEY,
        in_cluster::SECRET,
        keys.join(", ")
    );
    if i.dry_run {
        // The keys and certificates may not exist yet: nothing is read. The same steps as a
        // real run's, one per flag given.
        if let Some(out) = &c.secret_out {
            let outcome = config_outcome(true, out.exists());
            steps.act(
                "secret-out",
                outcome,
                format!("{} ({shape})", out.display()),
            );
        }
        if i.apply_secret {
            steps.act("in-cluster", Outcome::Applied, shape);
        }
        return Ok(());
    }
    // Beside the Deployment that mounts them, in the dispatcher's namespace.
    let own = cx.namespaces().dispatcher;
    let objects = in_cluster::objects(&bundle, own)?;
    if let Some(out) = &cx.local.checked.secret_out {
        let text = in_cluster::manifest(&objects);
        let existed = out.exists();
        let changed = fsutil::write_if_changed(out, text.as_bytes(), MODE_SECRET)
            .map_err(|e| Error::unwritable("the in-cluster manifest (--secret-out)", out, e))?;
        let outcome = config_outcome(changed, existed);
        steps.act(
            "secret-out",
            outcome,
            format!("{} ({shape})", out.display()),
        );
    }
    if i.apply_secret {
        let applied = access::apply(&cx.admin, &objects, false).await?;
        let (outcome, detail) = summary(&applied);
        steps.act("in-cluster", outcome, format!("{detail} in {own}"));
    }
    Ok(())
}

fn config_outcome(changed: bool, existed: bool) -> Outcome {
    match (changed, existed) {
        (false, _) => Outcome::Unchanged,
        (true, false) => Outcome::Created,
        (true, true) => Outcome::Updated,
    }
}

fn hand_back(cx: Context<'_>, runner: Option<SchedulerCredential>, steps: Vec<Step>) -> HandBack {
    let (i, c) = (cx.i, &cx.local.checked);
    let p = &c.paths;
    let bao_kv_put = cx.cluster.in_cluster().then(|| {
        let bundle = in_cluster::plan(&cx.local.config, &p.dir, cx.local.admin_password);
        in_cluster::bao_put(&bundle, &i.namespace)
    });
    HandBack {
        bao_kv_put,
        config: p.config.clone(),
        dry_run: i.dry_run,
        cluster: cx.cluster.name().to_string(),
        server: cx.cluster.url().to_string(),
        namespace: i.namespace.clone(),
        dispatcher_namespace: cx.namespaces().dispatcher.to_string(),
        gitea_url: cx.local.config.gitea.url.clone(),
        facade_url: c.facade_url.clone(),
        runner: runner.map(|k| RunnerInfo {
            id: k.id,
            uuid: k.uuid,
            name: k.name,
            labels: i.labels.clone(),
        }),
        files: Files {
            beside_the_config: p.clone(),
            kubeconfig: (!cx.cluster.in_cluster()).then(|| p.kube_dir.join("kubeconfig")),
            nats_secrets_dir: c.nats_secrets_dir.clone(),
        },
        steps,
    }
}

fn make_dir(dir: &Path) -> Result<()> {
    fsutil::create_dir_all(dir, MODE_PRIVATE_DIR)
        .map_err(|e| Error::unwritable("the config directory", dir, e))
}

fn same_file(path: &Path, contents: &[u8]) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o7777 == MODE_SECRET)
        && tenantci_core::fsutil::read_bounded(path, contents.len() as u64)
            .is_ok_and(|b| b == contents)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenantci_runner::tenant::apply::Applied;

    #[test]
    fn the_files_of_the_hand_back_are_the_documented_ones() {
        let files = Files {
            beside_the_config: crate::config::Paths::beside(Path::new(
                "/etc/tenantci/dispatch.toml",
            )),
            kubeconfig: Some("/etc/tenantci/kube/kubeconfig".into()),
            nats_secrets_dir: "/etc/tenantci/nats".into(),
        };
        let json = serde_json::to_value(&files).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        // docs/cli.md, `dispatch init -o json`.
        let documented = [
            "schedulerCredential",
            "capabilityKey",
            "sealingKey",
            "facadeCaCert",
            "facadeCaKey",
            "facadeCert",
            "facadeKey",
            "kubeconfig",
            "natsSecretsDir",
        ];
        let mut sorted = documented;
        sorted.sort_unstable();
        assert_eq!(keys, sorted, "{json}");
        assert_eq!(json["sealingKey"], "/etc/tenantci/sealing.key", "{json}");
    }

    fn applied(kind: &str, outcome: Outcome) -> Applied {
        Applied {
            kind: kind.into(),
            name: "tenantci-dispatcher".into(),
            outcome,
        }
    }

    #[test]
    fn native_sidecars_need_1_29() {
        assert!(native_sidecars("1", "29"));
        assert!(native_sidecars("1", "32+"));
        assert!(!native_sidecars("1", "28"));
        assert!(!native_sidecars("1", ""));
    }

    #[test]
    fn rbac_is_unchanged_only_when_every_object_is() {
        let all = [
            applied("Namespace", Outcome::Unchanged),
            applied("Role", Outcome::Unchanged),
        ];
        let (outcome, detail) = summary(&all);
        assert_eq!(outcome, Outcome::Unchanged);
        assert_eq!(
            detail,
            "Namespace tenantci-dispatcher unchanged, Role tenantci-dispatcher unchanged"
        );
        let one = [all[0].clone(), applied("Role", Outcome::Updated)];
        assert_eq!(summary(&one).0, Outcome::Applied);
    }

    #[test]
    fn the_credential_line_follows_the_decision() {
        assert_eq!(credential_change(&Decision::Keep), None);
        assert_eq!(
            credential_change(&Decision::Mint),
            Some((Outcome::Created, String::new()))
        );
        let rotate = Decision::Rotate {
            why: "expires soon".into(),
        };
        assert_eq!(
            credential_change(&rotate),
            Some((Outcome::Rotated, "; expires soon".into()))
        );
    }

    #[test]
    fn the_facade_line_says_why_and_the_config_line_what_changed() {
        let i = plan::tests::inputs();
        let c = plan::check(&i).unwrap();
        let keep = facade_line(&facade_pki::Plan::Keep, &c.paths, &c);
        assert_eq!(
            keep,
            (
                Outcome::Kept,
                "/etc/tenantci/dispatch/facade.crt for 127.0.0.1 (https://127.0.0.1:8443)".into()
            )
        );
        let reissue = facade_pki::Plan::Reissue {
            why: "moved".into(),
        };
        let (outcome, detail) = facade_line(&reissue, &c.paths, &c);
        assert_eq!(outcome, Outcome::Reissued);
        assert!(detail.ends_with(", from the kept CA: moved"), "{detail}");
        assert_eq!(config_outcome(false, true), Outcome::Unchanged);
        assert_eq!(config_outcome(true, false), Outcome::Created);
        assert_eq!(config_outcome(true, true), Outcome::Updated);
    }

    #[test]
    fn the_nats_line_mentions_the_admin_password_only_when_there() {
        let dir = Path::new("/etc/tenantci/nats");
        assert_eq!(
            nats_detail(dir, false),
            "/etc/tenantci/nats has ci-producer.password and ci-worker.password"
        );
        assert!(
            nats_detail(dir, true)
                .ends_with("(ci-admin.password too: `run` applies the capacities)")
        );
    }
}

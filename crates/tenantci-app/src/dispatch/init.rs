//! `tenantci dispatch init`: everything `dispatch run` needs, in one idempotent run.
//!
//! Phase one changes nothing: the flags (`plan::check`), the NATS password files, the files
//! already beside the config (scheduler credential, keys, facade PKI, the old config), the
//! cluster (resolved through the gateway), the dispatcher's credential decision, and a kept
//! registration (Declare: it must still exist at Gitea). Any refusal there is exit 2 with
//! nothing written, applied or registered. `--dry-run` stops after it and reports the plan.
//!
//! Phase two acts. Registration comes first: a wrong registration token is the one input that
//! only Gitea can judge, and Register is the only way to ask, so it must fail before anything
//! else changed. Then the credential (`<dir>/kube/`), the RBAC (tenant-admin) and its
//! verification (the dispatcher's own credential), the keys, the facade PKI, and the config
//! last, so a config on disk always names files that exist.
//!
//! Every file is 0600 in a 0700 directory; the registration token is sent once and never
//! written or logged. Kept on re-run: the registration, both keys, the facade CA, a valid
//! credential and a serving cert that still covers the facade host.

pub mod access;
pub mod facade_pki;
pub mod plan;

use std::path::{Path, PathBuf};

use serde::Serialize;
use time::OffsetDateTime;

use crate::credential::decision::{self as cred, Decision, Wanted};
use crate::credential::{CaSource, MintRequest};
use crate::dispatch::capability::{self, CapabilityKey};
use crate::dispatch::config::Config;
use crate::dispatch::manifests;
use crate::dispatch::registration::SchedulerCredential;
use crate::queue::assignment::SealingKey;
use crate::queue::{permissions, users};
use tenantci_core::forge::gitea::proto::{DeclareRequest, RegisterRequest};
use tenantci_core::forge::gitea::{ClientConfig, ClientError, Code, RunnerClient};
use tenantci_core::fsutil::{self, MODE_PRIVATE_DIR, MODE_SECRET};
use tenantci_core::gateway::{StateDir, resolve};
use tenantci_core::kube_client as client;
use tenantci_core::pki::inspect::{CertInfo, rfc3339};
use tenantci_core::pki::{CertificateAuthority, KeyType};
use tenantci_core::{Error, Result};

pub use plan::{Inputs, RegistrationToken};

/// One step's line, as `bootstrap runner` prints them. Outcomes here: `ok`, `created`,
/// `kept`, `applied`, `unchanged`, `updated`, `rotated`, `re-issued`, `skipped`, or
/// `would ...` in a dry run.
pub use crate::steps::Step;
use crate::steps::{Outcome, Steps};

/// The registration, without its token.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunnerInfo {
    pub id: i64,
    pub uuid: String,
    pub name: String,
    pub labels: Vec<String>,
}

/// Where everything is (absolute paths).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Files {
    pub scheduler_credential: PathBuf,
    pub capability_key: PathBuf,
    pub sealing_key: PathBuf,
    pub facade_ca_cert: PathBuf,
    pub facade_ca_key: PathBuf,
    pub facade_cert: PathBuf,
    pub facade_key: PathBuf,
    pub kubeconfig: PathBuf,
    pub nats_secrets_dir: PathBuf,
}

/// `-o json`'s shape (docs/cli.md). Never holds a secret.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HandBack {
    pub config: PathBuf,
    pub dry_run: bool,
    pub cluster: String,
    pub server: String,
    pub namespace: String,
    pub gitea_url: String,
    pub facade_url: String,
    /// None only in a dry run before the first registration.
    pub runner: Option<RunnerInfo>,
    pub files: Files,
    pub steps: Vec<Step>,
}

/// Runs init; `on_step` sees each line as it completes (the CLI prints them).
pub async fn run(i: &Inputs, mut on_step: impl FnMut(&Step)) -> Result<HandBack> {
    let mut steps = Steps::new(&mut on_step, i.dry_run);

    // ---- Phase one: nothing changes.
    let c = plan::check(i)?;
    let p = &c.paths;
    check_out_dir(&p.dir)?;
    let old_config = read_existing_config(&p.config)?;
    let admin_password = check_nats(&c.nats_secrets_dir)?;
    let kept = if p.scheduler.exists() {
        Some(SchedulerCredential::load(&p.scheduler)?)
    } else {
        None
    };
    if kept.is_none() && i.registration_token.is_none() {
        return Err(Error::bad_input(format!(
            "no registration token given, and `{}` holds no registration yet",
            p.scheduler.display()
        ))
        .hint("pass --registration-token-file FILE (or TENANTCI_GITEA_REGISTRATION_TOKEN) with a token from Gitea's Site Administration > Actions > Runners > Create new runner"));
    }
    let runner_name = runner_name(i, kept.as_ref(), &p.scheduler)?;
    if p.capability_key.exists() {
        capability::load_key(&p.capability_key)?;
    }
    if p.sealing_key.exists() {
        SealingKey::load_or_create(&p.sealing_key)?;
    }
    let facade = facade_pki::inspect(p)?;
    let now = OffsetDateTime::now_utc();
    let facade_plan = facade_pki::decide(
        facade.ca.as_ref().map(|(_, info)| info),
        facade.serving.as_ref(),
        &c.facade_host,
        now,
    );
    let config = plan::config(i, &c, &runner_name, old_config.as_ref());
    config.validate().map_err(|e| {
        Error::bad_input(format!("the config `dispatch init` would write {e}"))
            .hint("fix the flag that sets it")
    })?;

    let r = resolve::resolve(&StateDir::new(&i.state_dir), &i.cluster).await?;
    steps.record(
        "resolve",
        Outcome::Ok,
        format!("cluster {} at {} (Ready)", r.name, r.url),
    );
    steps.record(
        "nats",
        Outcome::Ok,
        format!(
            "{} has {}.password and {}.password{}",
            c.nats_secrets_dir.display(),
            users::PRODUCER,
            users::WORKER,
            if admin_password {
                format!(
                    " ({}.password too: `run` applies the capacities)",
                    users::ADMIN
                )
            } else {
                String::new()
            }
        ),
    );
    let decision = credential_decision(&r, p, &c, now)?;
    let admin = client::from_kubeconfig(&r.tenant_admin_kubeconfig).await?;
    if let (Some(k), false) = (&kept, i.dry_run) {
        declare(i, k, p).await?;
    }

    // ---- Phase two (or, in a dry run, what it would do).
    let registration = match (&kept, &i.registration_token) {
        (Some(k), _) => {
            let how = if i.dry_run {
                "not re-declared in a dry run"
            } else {
                "Gitea knows it; labels declared"
            };
            steps.record(
                "registration",
                Outcome::Kept,
                format!("runner `{}` id {} uuid {} ({how})", k.name, k.id, k.uuid),
            );
            Some(k.clone())
        }
        (None, Some(_)) if i.dry_run => {
            steps.act(
                "registration",
                Outcome::Created,
                format!(
                    "register runner `{runner_name}` with labels {:?} at {}",
                    i.labels, i.gitea_url
                ),
            );
            None
        }
        (None, Some(token)) => {
            let k = register(i, &runner_name, token, p).await?;
            steps.record(
                "registration",
                Outcome::Created,
                format!(
                    "runner `{}` id {} uuid {} -> {}",
                    k.name,
                    k.id,
                    k.uuid,
                    p.scheduler.display()
                ),
            );
            Some(k)
        }
        (None, None) => unreachable!("checked in phase one"),
    };
    if !i.dry_run {
        make_dir(&p.dir)?;
    }

    let minted = apply_credential(&decision, &r, p, i, &mut steps)?;

    let objects = manifests::rbac(&i.namespace);
    let applied = access::apply(&admin, &objects, i.dry_run).await?;
    let unchanged = applied.iter().all(|a| a.outcome == Outcome::Unchanged);
    let detail = applied
        .iter()
        .map(|a| format!("{} {} {}", a.kind, a.name, a.outcome))
        .collect::<Vec<_>>()
        .join(", ");
    if unchanged {
        steps.record("rbac", Outcome::Unchanged, detail);
    } else {
        steps.act("rbac", Outcome::Applied, detail);
    }
    if i.dry_run {
        steps.record("verify", Outcome::Skipped, "dry run");
    } else {
        let own = client::from_kubeconfig(&p.kube_dir.join("kubeconfig")).await?;
        let n = access::verify(&own, &i.namespace).await?;
        steps.record(
            "verify",
            Outcome::Ok,
            format!(
                "{n} SelfSubjectAccessReviews as {} ({}) as expected",
                manifests::NAME,
                if minted {
                    "new credential"
                } else {
                    "kept credential"
                }
            ),
        );
    }

    if p.capability_key.exists() {
        steps.record(
            "capability-key",
            Outcome::Kept,
            p.capability_key.display().to_string(),
        );
    } else {
        if !i.dry_run {
            let text = capability::encode_key(&CapabilityKey::generate());
            fsutil::write_new_atomic(&p.capability_key, text.as_bytes(), MODE_SECRET)
                .map_err(|e| Error::unwritable("the capability key", &p.capability_key, e))?;
        }
        steps.act(
            "capability-key",
            Outcome::Created,
            format!("{} (32 random bytes)", p.capability_key.display()),
        );
    }
    if p.sealing_key.exists() {
        steps.record(
            "sealing-key",
            Outcome::Kept,
            p.sealing_key.display().to_string(),
        );
    } else {
        if !i.dry_run {
            SealingKey::load_or_create(&p.sealing_key)?;
        }
        steps.act(
            "sealing-key",
            Outcome::Created,
            format!("{} (256-bit)", p.sealing_key.display()),
        );
    }

    let facade_detail = format!(
        "{} for {} ({})",
        p.facade_cert.display(),
        c.facade_host,
        c.facade_url
    );
    match &facade_plan {
        facade_pki::Plan::Keep => steps.record("facade-cert", Outcome::Kept, facade_detail),
        facade_pki::Plan::NewCa { why } => steps.act(
            "facade-cert",
            Outcome::Created,
            format!("{facade_detail}; new CA: {why}"),
        ),
        facade_pki::Plan::Reissue { why } => steps.act(
            "facade-cert",
            Outcome::Reissued,
            format!("{facade_detail}, from the kept CA: {why}"),
        ),
    }
    if !i.dry_run {
        facade_pki::apply(&facade_plan, facade, p, &c.facade_host)?;
    }

    let text = config.to_toml();
    let existed = p.config.exists();
    let changed = if i.dry_run {
        !same_file(&p.config, text.as_bytes())
    } else {
        fsutil::write_if_changed(&p.config, text.as_bytes(), MODE_SECRET)
            .map_err(|e| Error::unwritable("the dispatcher config", &p.config, e))?
    };
    let detail = p.config.display().to_string();
    match (changed, existed) {
        (false, _) => steps.record("config", Outcome::Unchanged, detail),
        (true, false) => steps.act("config", Outcome::Created, detail),
        (true, true) => steps.act("config", Outcome::Updated, detail),
    }

    Ok(HandBack {
        config: p.config.clone(),
        dry_run: i.dry_run,
        cluster: r.name,
        server: r.url,
        namespace: i.namespace.clone(),
        gitea_url: config.gitea.url.clone(),
        facade_url: c.facade_url.clone(),
        runner: registration.map(|k| RunnerInfo {
            id: k.id,
            uuid: k.uuid,
            name: k.name,
            labels: i.labels.clone(),
        }),
        files: Files {
            scheduler_credential: p.scheduler.clone(),
            capability_key: p.capability_key.clone(),
            sealing_key: p.sealing_key.clone(),
            facade_ca_cert: p.facade_ca_cert.clone(),
            facade_ca_key: p.facade_ca_key.clone(),
            facade_cert: p.facade_cert.clone(),
            facade_key: p.facade_key.clone(),
            kubeconfig: p.kube_dir.join("kubeconfig"),
            nats_secrets_dir: c.nats_secrets_dir.clone(),
        },
        steps: steps.into_vec(),
    })
}

fn make_dir(dir: &Path) -> Result<()> {
    fsutil::create_dir_all(dir, MODE_PRIVATE_DIR)
        .map_err(|e| Error::unwritable("the config directory", dir, e))
}

fn same_file(path: &Path, contents: &[u8]) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o7777 == MODE_SECRET)
        && std::fs::read(path).is_ok_and(|b| b == contents)
}

/// The directory the config goes into must exist or be creatable by this user.
fn check_out_dir(dir: &Path) -> Result<()> {
    let mut probe = dir;
    while !probe.exists() {
        match probe.parent() {
            Some(parent) => probe = parent,
            None => break,
        }
    }
    if !probe.is_dir() {
        return Err(Error::bad_input(format!(
            "`{}` is not a directory, so --out cannot be written below it",
            probe.display()
        ))
        .hint("pass --out in a directory (it is created 0700 when missing)"));
    }
    if nix::unistd::access(probe, nix::unistd::AccessFlags::W_OK).is_err() {
        return Err(Error::bad_input(format!(
            "`{}` is not writable by this user, so --out cannot be written there",
            probe.display()
        ))
        .hint("run as the user that owns the dispatcher's directory, or pass another --out"));
    }
    Ok(())
}

/// The config already at --out (its tuning keys are kept), read without env overrides.
fn read_existing_config(path: &Path) -> Result<Option<Config>> {
    if !path.exists() {
        return Ok(None);
    }
    Config::load_with_env(path, &|_| None)
        .map(Some)
        .map_err(|e| {
            Error::bad_input(e.message().to_string())
                .caused_by(e)
                .hint("fix it, or move it aside: init then writes a fresh config from its flags")
        })
}

/// The producer and worker passwords must exist; returns whether ci-admin's does too.
fn check_nats(dir: &Path) -> Result<bool> {
    for user in [users::PRODUCER, users::WORKER] {
        let f = permissions::password_file(dir, user);
        if !f.exists() {
            return Err(Error::bad_input(format!(
                "the NATS secrets dir `{}` has no {user}.password",
                dir.display()
            ))
            .hint(format!(
                "run `tenantci queue nats-config --secrets-dir {} --out <nats-server include file>` (it creates the password files), or pass the --nats-secrets-dir it used",
                dir.display()
            )));
        }
        permissions::read_password(&f)?;
    }
    Ok(permissions::password_file(dir, users::ADMIN).exists())
}

fn runner_name(i: &Inputs, kept: Option<&SchedulerCredential>, file: &Path) -> Result<String> {
    match (kept, &i.name) {
        (Some(k), Some(n)) if &k.name != n => Err(Error::bad_input(format!(
            "--name `{n}` differs from the registration in `{}`, runner `{}`; Gitea cannot rename a runner",
            file.display(),
            k.name
        ))
        .hint("leave --name out to keep the registration, or delete scheduler.json and re-run with a registration token to register anew (then delete the old runner in Gitea)")),
        (Some(k), _) => Ok(k.name.clone()),
        (None, Some(n)) => Ok(n.clone()),
        (None, None) => Ok(format!("tenantci-dispatch-{}", i.cluster)),
    }
}

fn gitea_client(url: &str) -> Result<RunnerClient> {
    RunnerClient::new(ClientConfig::new(url)).map_err(|e| {
        Error::bad_input(format!("cannot build a client for Gitea at {url}")).caused_by(e)
    })
}

fn gitea_error(url: &str, e: ClientError) -> Error {
    Error::external(format!("Gitea at {url} failed"))
        .caused_by(e)
        .hint("check that --gitea-url is reachable from this host and Gitea is up")
}

fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// A kept registration must still exist at Gitea; Declare also updates its labels.
async fn declare(i: &Inputs, k: &SchedulerCredential, p: &plan::Paths) -> Result<()> {
    let client = gitea_client(&i.gitea_url)?.with_credentials(k.credentials());
    let req = DeclareRequest {
        version: version(),
        labels: i.labels.clone(),
        capabilities: Vec::new(),
    };
    match client.declare(&req).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_unauthenticated() => Err(Error::bad_input(format!(
            "Gitea at {} does not know the registration in `{}` (runner `{}`, uuid {}): it was deleted at Gitea, or the file belongs to another Gitea",
            i.gitea_url,
            p.scheduler.display(),
            k.name,
            k.uuid
        ))
        .hint(format!(
            "to register anew, delete {} and re-run `tenantci dispatch init` with a registration token (--registration-token-file)",
            p.scheduler.display()
        ))),
        Err(e) => Err(gitea_error(&i.gitea_url, e)),
    }
}

/// Registers once and stores the credential before anything else can fail.
async fn register(
    i: &Inputs,
    name: &str,
    token: &RegistrationToken,
    p: &plan::Paths,
) -> Result<SchedulerCredential> {
    let req = RegisterRequest {
        name: name.to_string(),
        token: token.expose().to_string(),
        version: version(),
        labels: i.labels.clone(),
        ephemeral: false,
        ..Default::default()
    };
    let runner = gitea_client(&i.gitea_url)?
        .register(&req)
        .await
        .map_err(|e| match e.code() {
            Some(Code::PermissionDenied | Code::Unauthenticated | Code::NotFound) => {
                Error::bad_input(format!("Gitea at {} refused the registration token", i.gitea_url))
                    .hint("create a fresh one (Site Administration > Actions > Runners > Create new runner, or `gitea actions generate-runner-token`) and pass it with --registration-token-file")
            }
            Some(Code::InvalidArgument) => Error::bad_input(format!("Gitea at {} refused the registration", i.gitea_url)).caused_by(e)
            .hint("check --name and --labels"),
            _ => gitea_error(&i.gitea_url, e),
        })?;
    let k = SchedulerCredential::from_runner(&runner);
    let lost = |e: Error| {
        e.hint(format!(
            "Gitea registered runner id {} (`{}`) but its credential could not be stored: delete that runner in Gitea, fix the directory, and re-run",
            k.id, k.name
        ))
    };
    make_dir(&p.dir).map_err(lost)?;
    fsutil::write_new_atomic(&p.scheduler, &k.to_json(), MODE_SECRET).map_err(|e| {
        lost(Error::unwritable(
            "the scheduler credential",
            &p.scheduler,
            e,
        ))
    })?;
    tracing::info!(runner_id = k.id, uuid = %k.uuid, name = %k.name, "registered the dispatcher at Gitea");
    Ok(k)
}

/// Keep, mint or rotate the dispatcher's client credential (`bootstrap`'s decision).
fn credential_decision(
    r: &resolve::ResolvedCluster,
    p: &plan::Paths,
    c: &plan::Checked,
    now: OffsetDateTime,
) -> Result<Decision> {
    let ca = CertificateAuthority::load(&r.client_ca_cert, &r.client_ca_key)?;
    let ca_info = CertInfo::from_pem(ca.cert_pem()).map_err(|e| {
        Error::bad_input(format!(
            "the ClientCA `{}` cannot be read back",
            r.client_ca_cert.display()
        ))
        .caused_by(e)
    })?;
    let existing = cred::inspect(&p.kube_dir)?;
    let groups = [manifests::GROUP.to_string()];
    let decision = cred::decide(
        &existing,
        &Wanted {
            server: &r.url,
            common_name: manifests::NAME,
            groups: &groups,
            client_ca_key_id: ca_info.subject_key_id.as_deref(),
        },
        now,
        false,
        &p.kube_dir,
    )
    .map_err(|e| {
        Error::bad_input(e.message().to_string()).caused_by(e).hint(format!(
            "move {} aside (or delete it) and re-run `tenantci dispatch init`: it mints a new credential",
            p.kube_dir.display()
        ))
    })?;
    if decision != Decision::Keep {
        tenantci_core::pki::policy::check_within_ca(c.credential_valid_for, now, ca.not_after())?;
    }
    Ok(decision)
}

fn apply_credential(
    decision: &Decision,
    r: &resolve::ResolvedCluster,
    p: &plan::Paths,
    i: &Inputs,
    steps: &mut Steps<'_>,
) -> Result<bool> {
    let dir = p.kube_dir.display().to_string();
    let subject = format!("CN={} O={}", manifests::NAME, manifests::GROUP);
    if *decision == Decision::Keep {
        let until = cred::inspect(&p.kube_dir)?
            .cert
            .map(|c| rfc3339(c.not_after))
            .unwrap_or_default();
        steps.record(
            "credential",
            Outcome::Kept,
            format!("{dir} ({subject}, valid until {until})"),
        );
        return Ok(false);
    }
    let why = match decision {
        Decision::Rotate { why } => format!("; {why}"),
        _ => String::new(),
    };
    if i.dry_run {
        let done = if why.is_empty() {
            Outcome::Created
        } else {
            Outcome::Rotated
        };
        steps.act("credential", done, format!("{dir} ({subject}{why})"));
        return Ok(false);
    }
    if matches!(decision, Decision::Rotate { .. }) {
        cred::move_aside(&p.kube_dir, OffsetDateTime::now_utc())?;
    }
    let hb = crate::credential::mint(&MintRequest {
        ca: CaSource::StateDir {
            state_dir: i.state_dir.clone(),
            cluster: i.cluster.clone(),
        },
        server: r.url.clone(),
        common_name: manifests::NAME.into(),
        organizations: vec![manifests::GROUP.into()],
        out_dir: p.kube_dir.clone(),
        valid_for: Some(i.credential_valid_for.clone()),
        key_type: KeyType::EcdsaP256,
    })?;
    let done = if why.is_empty() {
        Outcome::Created
    } else {
        Outcome::Rotated
    };
    steps.record(
        "credential",
        done,
        format!("{dir} ({subject}, valid until {}{why})", hb.not_after),
    );
    Ok(true)
}

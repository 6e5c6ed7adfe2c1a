//! `bootstrap runner --forge gitlab`: runbook 01 steps 2, 4 and 5 plus the runner config of 02,
//! in order, each step's outcome recorded. Nothing is written to the runner config until every
//! earlier step held; an error in any step leaves the config untouched.
//!
//! The steps live in their own modules (`credential`, `tenant::rbac`, `tenant::verify`,
//! `tenant::sizing`, `tenant::prewarm`, `runner::gitlab_config`); this file only orders them.
//!
//! Pause pods ([`PausePods`]) are kept by tenantci's Deployment or, with
//! `--gitlab-native-pause-pods`, by gitlab-runner itself; never by both: switching to native
//! removes the Deployment, and a Deployment run refuses while config.toml still has the
//! runner keep its own (switching back is the explicit `--remove-gitlab-native-pause-pods`).

use std::path::PathBuf;

use serde::Serialize;
use time::OffsetDateTime;

use crate::credential::decision::{self as cred, Decision, Wanted};
use crate::credential::{CaSource, CredentialFiles, MintRequest};
use crate::runner::gitlab_config::entry::{Autoscaler, NativePausePods};
use crate::runner::gitlab_config::{self, MergeOptions, RunnerEntry, RunnerToken};
use crate::tenant::prewarm::{self, PrewarmSpec};
use crate::tenant::rbac::{self, RbacSpec};
use crate::tenant::sizing::{self, JobPodRequests};
use crate::tenant::verify;
use tenantci_core::gateway::StateDir;
use tenantci_core::gateway::resolve;
use tenantci_core::kube_client as client;
use tenantci_core::node_image::NodeImage;
use tenantci_core::pki::KeyType;
use tenantci_core::pki::inspect::{CertInfo, rfc3339};
use tenantci_core::{Error, Result};

/// Where the cluster comes from.
#[derive(Debug, Clone)]
pub enum Target {
    /// Resolve through gateway.json and the admin apiserver.
    StateDir { state_dir: PathBuf, cluster: String },
    /// Everything given directly.
    Direct {
        server: String,
        server_ca: PathBuf,
        client_ca_cert: PathBuf,
        client_ca_key: PathBuf,
        tenant_kubeconfig: PathBuf,
        cluster: String,
    },
}

/// Where the runner token comes from (already read from flag, file or environment).
pub enum TokenSource {
    Given(RunnerToken),
    /// Create the runner through the GitLab API unless config.toml already holds our entry.
    Create {
        client: crate::runner::gitlab_api::Client,
        request: crate::runner::gitlab_api::CreateRunner,
        /// Create a new runner even when config.toml has a token for ours.
        recreate: bool,
    },
}

pub struct Inputs {
    pub target: Target,
    pub tenant_kubeconfig: Option<PathBuf>,
    pub runner_name: String,
    pub namespace: String,
    pub group: String,
    pub common_name: String,
    pub credential_dir: PathBuf,
    pub config_path: PathBuf,
    pub gitlab_url: String,
    pub token: TokenSource,
    pub job: JobPodRequests,
    /// gitlab-runner resource keys (cpu_request, memory_limit, ...) to quantities.
    pub resources: std::collections::BTreeMap<String, String>,
    pub prewarm: Option<i32>,
    pub pause_pods: PausePods,
    pub pause_pod_image: String,
    pub valid_for: Option<String>,
    pub rotate: bool,
    pub dry_run: bool,
    pub force: bool,
}

/// Who keeps the `--prewarm N` pause pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PausePods {
    /// tenantci's Deployment (`tenant::prewarm`); config.toml's autoscaler table is not
    /// touched.
    Deployment,
    /// gitlab-runner's own autoscaler (`[runners.kubernetes.autoscaler]`, Runner 18.10+):
    /// no Deployment, and the runner's RBAC gets deployments and priorityclasses.
    GitlabNative(NativePausePods),
    /// Leaving native mode: remove tenantci's autoscaler keys and the runner's pause-pod RBAC;
    /// with `--prewarm N` tenantci's Deployment takes over.
    LeaveGitlabNative,
}

pub use crate::steps::Step;
use crate::steps::{Outcome, Steps};

/// The hand-back (runbook 01's "what 02 needs"), `-o json`'s shape.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HandBack {
    pub cluster: String,
    pub server: String,
    pub credential: CredentialFiles,
    pub common_name: String,
    pub group: String,
    pub namespace: String,
    pub config: PathBuf,
    pub runner_name: String,
    pub dry_run: bool,
    pub steps: Vec<Step>,
    /// Requests this run sent to the admin and tenant apiservers.
    pub apiserver_requests: u64,
    pub warning: &'static str,
}

pub const LOOPBACK_WARNING: &str = "the tenant apiserver binds loopback on this host: gitlab-runner must run here. A GitLab Runner on another VM cannot reach it, and publishing an authenticated front for the apiserver is a deliberate trust-boundary change (docs/runbooks/gitlab-runner.md), not a config step.";

/// The token of our entry in an existing config.toml: a re-run that creates runners through
/// the GitLab API must reuse it, or every run would register another runner.
fn existing_token(config: &std::path::Path, name: &str) -> Result<Option<RunnerToken>> {
    let Some(text) = gitlab_config::write::read_existing(config)? else {
        return Ok(None);
    };
    gitlab_config::merge::existing_token(&text, name)
        .map(|t| RunnerToken::parse(&t))
        .transpose()
}

/// tenantci's Deployment and gitlab-runner's own autoscaler would each keep N pause pods,
/// renting twice the headroom: a Deployment run is refused, before anything changes, while
/// our config.toml entry still has the runner keep pause pods. The table is never deleted
/// without being asked (`--remove-gitlab-native-pause-pods`).
fn refuse_double_pause_pods(inputs: &Inputs) -> Result<()> {
    if inputs.pause_pods != PausePods::Deployment || inputs.prewarm.is_none_or(|n| n <= 0) {
        return Ok(());
    }
    let Some(text) = gitlab_config::write::read_existing(&inputs.config_path)? else {
        return Ok(());
    };
    if gitlab_config::merge::keeps_native_pause_pods(&text, &inputs.runner_name) {
        return Err(Error::bad_input(format!(
            "the runner `{}` in `{}` keeps its own pause pods ([runners.kubernetes.autoscaler]), so tenantci's Deployment would rent that headroom twice: pass --gitlab-native-pause-pods to stay native, or --remove-gitlab-native-pause-pods to switch to the Deployment",
            inputs.runner_name,
            inputs.config_path.display()
        )));
    }
    Ok(())
}

struct Resolved {
    cluster: String,
    server: String,
    ca: CaSource,
    client_ca_cert: PathBuf,
    tenant_kubeconfig: PathBuf,
    node_image: Option<PathBuf>,
}

async fn resolve_target(inputs: &Inputs) -> Result<Resolved> {
    match &inputs.target {
        Target::StateDir { state_dir, cluster } => {
            let state = StateDir::new(state_dir);
            let r = resolve::resolve(&state, cluster).await?;
            Ok(Resolved {
                cluster: cluster.clone(),
                server: r.url,
                ca: CaSource::StateDir {
                    state_dir: state_dir.clone(),
                    cluster: cluster.clone(),
                },
                client_ca_cert: r.client_ca_cert,
                tenant_kubeconfig: inputs
                    .tenant_kubeconfig
                    .clone()
                    .unwrap_or(r.tenant_admin_kubeconfig),
                node_image: Some(state.cluster(cluster).node_image).filter(|p| p.exists()),
            })
        }
        Target::Direct {
            server,
            server_ca,
            client_ca_cert,
            client_ca_key,
            tenant_kubeconfig,
            cluster,
        } => Ok(Resolved {
            cluster: cluster.clone(),
            server: server.clone(),
            ca: CaSource::Files {
                client_ca_cert: client_ca_cert.clone(),
                client_ca_key: client_ca_key.clone(),
                server_ca: server_ca.clone(),
            },
            client_ca_cert: client_ca_cert.clone(),
            tenant_kubeconfig: inputs
                .tenant_kubeconfig
                .clone()
                .unwrap_or(tenant_kubeconfig.clone()),
            node_image: None,
        }),
    }
}

/// Runs every step; `on_step` sees each line as it completes (the CLI prints them).
pub async fn run(inputs: &Inputs, mut on_step: impl FnMut(&Step)) -> Result<HandBack> {
    let mut steps = Steps::new(&mut on_step, inputs.dry_run);
    let groups = vec![inputs.group.clone()];
    let requests_before = client::requests();

    // 0. Inputs that need nothing external, so bad input fails before any request.
    if let Some(raw) = &inputs.valid_for {
        tenantci_core::pki::policy::parse_valid_for(raw)?;
    }
    tenantci_core::pki::policy::check_common_name(&inputs.common_name)?;
    tenantci_core::pki::policy::check_organizations(&groups)?;
    refuse_double_pause_pods(inputs)?;

    // 1. Resolve the cluster.
    let r = resolve_target(inputs).await?;
    steps.record(
        "resolve",
        Outcome::Ok,
        format!("cluster {} at {} (Ready)", r.cluster, r.server),
    );

    // Sizing is pure and cheap: check it before anything is written.
    let image = match &r.node_image {
        Some(p) => Some(NodeImage::load(p)?),
        None => None,
    };
    let sizing_report = match &image {
        Some(img) => Some(sizing::check(&inputs.job, img, None)?),
        None => None,
    };

    // 2. Credential.
    let now = OffsetDateTime::now_utc();
    let ca_cert = CertInfo::from_pem(
        &std::fs::read_to_string(&r.client_ca_cert)
            .map_err(|e| Error::unreadable("the ClientCA", &r.client_ca_cert, e))?,
    )
    .map_err(|e| {
        Error::bad_input(format!(
            "the ClientCA `{}` is not a certificate",
            r.client_ca_cert.display()
        ))
        .caused_by(e)
    })?;
    let existing = cred::inspect(&inputs.credential_dir)?;
    let decision = cred::decide(
        &existing,
        &Wanted {
            server: &r.server,
            common_name: &inputs.common_name,
            groups: &groups,
            client_ca_key_id: ca_cert.subject_key_id.as_deref(),
        },
        now,
        inputs.rotate,
        &inputs.credential_dir,
    )?;
    let files = CredentialFiles::in_dir(
        &std::path::absolute(&inputs.credential_dir).unwrap_or(inputs.credential_dir.clone()),
    );
    let minted = match (&decision, inputs.dry_run) {
        (Decision::Keep, _) => {
            let c = existing
                .cert
                .as_ref()
                .expect("kept credentials have a cert");
            steps.record(
                "credential",
                Outcome::Kept,
                format!(
                    "{} (valid until {})",
                    inputs.credential_dir.display(),
                    rfc3339(c.not_after)
                ),
            );
            false
        }
        (d, true) => {
            steps.act(
                "credential",
                Outcome::Minted,
                format!("{} ({d:?})", inputs.credential_dir.display()),
            );
            false
        }
        (d, false) => {
            if let Decision::Rotate { why } = d {
                let moved = cred::move_aside(&inputs.credential_dir, now)?;
                steps.act(
                    "credential",
                    Outcome::Rotated,
                    format!("{why}; moved aside {} file(s)", moved.len()),
                );
            }
            let hb = crate::credential::mint(&MintRequest {
                ca: r.ca.clone(),
                server: r.server.clone(),
                common_name: inputs.common_name.clone(),
                organizations: groups.clone(),
                out_dir: inputs.credential_dir.clone(),
                valid_for: inputs.valid_for.clone(),
                key_type: KeyType::EcdsaP256,
            })?;
            steps.act(
                "credential",
                Outcome::Minted,
                format!(
                    "{} (valid until {})",
                    inputs.credential_dir.display(),
                    hb.not_after
                ),
            );
            true
        }
    };

    // 3. RBAC with the tenant-admin kubeconfig.
    let admin = client::from_kubeconfig(&r.tenant_kubeconfig).await?;
    let native = matches!(inputs.pause_pods, PausePods::GitlabNative(_));
    let rbac_spec = RbacSpec {
        namespace: inputs.namespace.clone(),
        role_name: inputs.group.clone(),
        group: inputs.group.clone(),
        pause_pods: native,
    };
    let objects = rbac::desired(&rbac_spec);
    let mut applied = rbac::apply(&admin, &objects, inputs.dry_run).await?;
    if inputs.pause_pods == PausePods::LeaveGitlabNative {
        let removed = rbac::remove_pause_pod_objects(&admin, &rbac_spec, inputs.dry_run).await?;
        // Absent objects are what a re-run expects; only a deletion is a change.
        applied.extend(removed.into_iter().map(|mut a| {
            if a.outcome == Outcome::Absent {
                a.outcome = Outcome::Unchanged;
            }
            a
        }));
    }
    let rbac_unchanged = applied.iter().all(|a| a.outcome == Outcome::Unchanged);
    steps.act(
        "rbac",
        if rbac_unchanged {
            Outcome::Unchanged
        } else {
            Outcome::Applied
        },
        applied
            .iter()
            .map(|a| format!("{} {} {}", a.kind, a.name, a.outcome))
            .collect::<Vec<_>>()
            .join(", "),
    );

    // 4. Verify both halves (needs the credential on disk).
    if files.cert.exists() {
        let cert = CertInfo::from_pem(
            &std::fs::read_to_string(&files.cert)
                .map_err(|e| Error::unreadable("the credential", &files.cert, e))?,
        )
        .map_err(|e| {
            Error::bad_input(format!(
                "the credential `{}` is not a certificate",
                files.cert.display()
            ))
            .caused_by(e)
        })?;
        verify::check_subject(&cert, &inputs.common_name, &inputs.group)?;
        let runner = client::from_kubeconfig(&files.kubeconfig).await?;
        let positive = minted || !rbac_unchanged;
        let reviews = verify::verify(
            &admin,
            &runner,
            &inputs.common_name,
            &groups,
            &inputs.namespace,
            positive,
            native,
        )
        .await?;
        steps.record(
            "verify",
            Outcome::Ok,
            format!(
                "subject {}; {} access review(s) as expected; list pods with the credential ok",
                cert.subject,
                reviews.len()
            ),
        );
    } else {
        steps.record("verify", Outcome::Skipped, "dry run: no credential yet");
    }

    // 5. Sizing and pre-warm.
    match &sizing_report {
        Some(s) => steps.record(
            "sizing",
            Outcome::Ok,
            format!(
                "job pod {} CPU / {} fits {} / {} allocatable",
                s.cpu_request, s.memory_request, s.allocatable_cpu, s.allocatable_memory
            ),
        ),
        None => steps.record(
            "sizing",
            Outcome::Skipped,
            "no node-image.json for this cluster",
        ),
    }
    match (&inputs.pause_pods, inputs.prewarm) {
        (PausePods::GitlabNative(native), _) => {
            let switch =
                prewarm::remove_for_native(&admin, &inputs.namespace, inputs.dry_run).await?;
            let verb = if inputs.dry_run {
                "would remove"
            } else {
                "removed"
            };
            let removed = match (switch.deployment_removed, switch.priority_class_removed) {
                (false, _) => String::new(),
                (true, pc) => format!(
                    "; {verb} tenantci's Deployment {}/{}{}",
                    inputs.namespace,
                    prewarm::NAME,
                    if pc {
                        format!(" and PriorityClass {}", prewarm::NAME)
                    } else {
                        String::new()
                    }
                ),
            };
            steps.record(
                "prewarm",
                Outcome::Native,
                format!(
                    "gitlab-runner keeps {} pause pod(s) sized like the build container ([runners.kubernetes.autoscaler]){removed}",
                    native.count
                ),
            );
        }
        (_, Some(replicas)) => {
            let spec = PrewarmSpec {
                namespace: inputs.namespace.clone(),
                replicas,
                cpu: inputs.job.cpu(),
                memory: inputs.job.memory(),
                node_selector: Default::default(),
                tolerations: Vec::new(),
                labels: Default::default(),
                image: inputs.pause_pod_image.clone(),
            };
            let rep = prewarm::apply(&admin, &spec, inputs.dry_run).await?;
            steps.act(
                "prewarm",
                rep.action,
                format!(
                    "{} pause pod(s) of {} CPU / {}",
                    rep.replicas, rep.cpu, rep.memory
                ),
            );
        }
        (_, None) => {}
    }

    // 6. The runner config, last.
    let mut registration = None;
    let token = match &inputs.token {
        TokenSource::Given(t) => t.clone(),
        TokenSource::Create {
            client,
            request,
            recreate,
        } => {
            let existing = if *recreate {
                None
            } else {
                existing_token(&inputs.config_path, &inputs.runner_name)?
            };
            match existing {
                Some(t) => t,
                None if inputs.dry_run => RunnerToken::EnvRef("$TENANTCI_DRY_RUN_TOKEN".into()),
                None => {
                    let created = client.create_and_verify(request).await?;
                    steps.act(
                        "gitlab",
                        Outcome::Created,
                        format!("runner id {}", created.id),
                    );
                    registration = Some(gitlab_config::entry::TokenMetadata {
                        id: created.id,
                        obtained_at: rfc3339(OffsetDateTime::now_utc()),
                        expires_at: created.token_expires_at.clone(),
                    });
                    RunnerToken::Literal(created.token)
                }
            }
        }
    };
    let entry = RunnerEntry {
        name: inputs.runner_name.clone(),
        url: inputs.gitlab_url.clone(),
        token,
        registration,
        limit: 0,
        request_concurrency: 1,
        kubernetes: gitlab_config::KubernetesSettings {
            host: Some(r.server.clone()),
            cert_file: Some(files.cert.clone()),
            key_file: Some(files.key.clone()),
            ca_file: Some(files.ca.clone()),
            namespace: inputs.namespace.clone(),
            resources: inputs.resources.clone(),
            autoscaler: match &inputs.pause_pods {
                PausePods::Deployment => Autoscaler::LeaveAlone,
                PausePods::GitlabNative(native) => Autoscaler::Native(native.clone()),
                PausePods::LeaveGitlabNative => Autoscaler::Remove,
            },
            ..Default::default()
        },
    };
    let outcome = gitlab_config::configure(
        &inputs.config_path,
        &entry,
        MergeOptions {
            force: inputs.force,
        },
        inputs.dry_run,
    )?;
    steps.act(
        "config",
        if outcome.written || outcome.plan.changed() {
            Outcome::Written
        } else {
            Outcome::Unchanged
        },
        inputs.config_path.display().to_string(),
    );

    Ok(HandBack {
        cluster: r.cluster,
        server: r.server,
        credential: files,
        common_name: inputs.common_name.clone(),
        group: inputs.group.clone(),
        namespace: inputs.namespace.clone(),
        config: inputs.config_path.clone(),
        runner_name: inputs.runner_name.clone(),
        dry_run: inputs.dry_run,
        steps: steps.into_vec(),
        apiserver_requests: client::requests() - requests_before,
        warning: LOOPBACK_WARNING,
    })
}

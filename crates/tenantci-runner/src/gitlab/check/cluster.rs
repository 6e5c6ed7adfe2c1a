//! Checks against the tenant apiserver, with the entry's own credential only: its `ca_file`
//! verifies the apiserver at `host`, the apiserver answers, SelfSubjectAccessReviews allow
//! what the Kubernetes executor needs (and gitlab-runner's own pause pods, when the entry keeps
//! them) and deny what a runner must never do, and a job pod fits the node image, tenantci's
//! pause pods (if any) sized like it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;

use super::local::ClusterFiles;
use crate::checklist::Check;
use crate::gitlab::entry::EntryView;
use crate::tenant::access::{self, Reviewer};
use crate::tenant::prewarm;
use crate::tenant::sizing::{self, JobPodRequests};
use crate::tenant::verify;
use tenantci_core::kubeconfig::{self, Material};
use tenantci_core::node_image::NodeImage;
use tenantci_core::pki::inspect::CertInfo;
use tenantci_core::quantity;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn check(
    view: &EntryView,
    cert: Option<&CertInfo>,
    cluster: Option<&ClusterFiles>,
    lines: &mut Vec<Check>,
) {
    let (Some(host), Some(ca)) = (view.host.as_deref(), view.ca_file.as_deref()) else {
        lines.push(Check::skip("apiserver", "no host or ca_file"));
        return;
    };
    if !serving_ca(host, ca, lines).await {
        return;
    }
    let Some(cert) = cert else {
        lines.push(Check::skip("access", "the certificate is not usable"));
        return;
    };
    let (Some(cert_file), Some(key_file)) = (view.cert_file.as_deref(), view.key_file.as_deref())
    else {
        return;
    };
    let material = Material::Files {
        ca,
        cert: cert_file,
        key: key_file,
    };
    let yaml = kubeconfig::render(&view.name, host, &material);
    let client =
        match tenantci_core::kube_client::from_kubeconfig_yaml(&yaml, "the entry's credential")
            .await
        {
            Ok(c) => c,
            Err(e) => {
                lines.push(Check::fail(
                    "apiserver",
                    e.message().to_string(),
                    "check cert_file, key_file and ca_file",
                ));
                return;
            }
        };
    match client.apiserver_version().await {
        Ok(v) => lines.push(Check::ok(
            "apiserver",
            format!("{host} answers ({}) to the credential", v.git_version),
        )),
        Err(e) => {
            lines.push(Check::fail(
                "apiserver",
                format!("{host} refused the credential: {e}"),
                "an expired or foreign certificate is refused with 401: run the checks above, or re-mint with --rotate",
            ));
            return;
        }
    }
    access_reviews(&client, view, cert, lines).await;
    pause_pods(&client, view, cluster, lines).await;
}

/// A TLS handshake trusting only `ca_file`, as gitlab-runner makes it. Returns whether the
/// apiserver was reached and verified.
async fn serving_ca(host: &str, ca: &std::path::Path, lines: &mut Vec<Check>) -> bool {
    match handshake(host, ca).await {
        Ok(()) => {
            lines.push(Check::ok(
                "apiserver-ca",
                format!("ca_file verifies {host}"),
            ));
            true
        }
        Err(Handshake::Unreachable(e)) => {
            lines.push(Check::fail(
                "apiserver",
                format!("{host} does not answer: {e}"),
                "the tenant apiserver is down or its port changed: check the Cluster's status.url (`tenantci tenant resolve`) and the gateway",
            ));
            false
        }
        Err(Handshake::Untrusted(e)) => {
            lines.push(Check::fail(
                "apiserver-ca",
                format!("ca_file `{}` does not verify {host}: {e}", ca.display()),
                "ca_file must be this cluster's serving CA (its tenant-admin kubeconfig's certificate-authority); re-run `tenantci bootstrap runner`",
            ));
            false
        }
    }
}

enum Handshake {
    Unreachable(String),
    Untrusted(String),
}

async fn handshake(host: &str, ca: &std::path::Path) -> Result<(), Handshake> {
    let uri: http::Uri = host
        .parse()
        .map_err(|e| Handshake::Unreachable(format!("`{host}` is not a URL: {e}")))?;
    let name = uri.host().unwrap_or_default().trim_matches(['[', ']']);
    let port = uri.port_u16().unwrap_or(443);
    let roots = tenantci_core::tls::read_ca_bundle("ca_file", ca)
        .map_err(|e| Handshake::Untrusted(e.message().to_string()))?;
    tenantci_core::tls::ensure_crypto_provider();
    let mut store = rustls::RootCertStore::empty();
    store.add_parsable_certificates(roots);
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(store)
        .with_no_client_auth();
    let server_name = rustls::pki_types::ServerName::try_from(name.to_string())
        .map_err(|e| Handshake::Unreachable(e.to_string()))?;
    let tcp = tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio::net::TcpStream::connect((name, port)),
    )
    .await
    .map_err(|_| Handshake::Unreachable(format!("no answer within {CONNECT_TIMEOUT:?}")))?
    .map_err(|e| Handshake::Unreachable(e.to_string()))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(server_name, tcp))
        .await
        .map_err(|_| Handshake::Unreachable("the TLS handshake timed out".into()))?
        .map(|_| ())
        .map_err(|e| Handshake::Untrusted(e.to_string()))
}

async fn access_reviews(
    client: &kube::Client,
    view: &EntryView,
    cert: &CertInfo,
    lines: &mut Vec<Check>,
) {
    let mut needs = verify::executor_needs();
    let mut never = verify::must_deny();
    if view.native_pause_pods.is_some() {
        needs.extend(verify::autoscaler_needs());
        never.extend(verify::autoscaler_must_deny());
    }
    let checks = access::checks(needs, never);
    let results = match access::review(&Reviewer::Own(client), checks, &view.namespace).await {
        Ok(r) => r,
        Err(e) => {
            lines.push(Check::fail(
                "access",
                format!("the apiserver did not answer the access reviews: {e}"),
                "retry; check the apiserver",
            ));
            return;
        }
    };
    let who = format!(
        "user `{}` in group(s) [{}]",
        cert.common_name.as_deref().unwrap_or("?"),
        cert.organizations.join(", ")
    );
    let describe = |expected: bool| -> Vec<String> {
        results
            .iter()
            .filter(|r| r.expected == expected && r.allowed != expected)
            .map(|r| r.describe())
            .collect()
    };
    let (denied, excess) = (describe(true), describe(false));
    if !denied.is_empty() {
        lines.push(Check::fail(
            "access",
            format!("{who} may not {}: every job fails with 403", denied.join(", ")),
            format!(
                "the RoleBinding's group must match the certificate's organization ({}): re-run `tenantci bootstrap runner --group {}` or fix the binding",
                cert.organizations.join(", "),
                cert.organizations.first().map(String::as_str).unwrap_or("GROUP")
            ),
        ));
    } else if !excess.is_empty() {
        lines.push(Check::fail(
            "access",
            format!("{who} may {}, which a runner must never do", excess.join(", ")),
            "remove the broader binding that grants it; never bind a runner to cluster-admin or system:masters",
        ));
    } else {
        lines.push(Check::ok(
            "access",
            format!(
                "{who} may do the {} thing(s) the Kubernetes executor needs in namespace {} and none of the {} a runner must not",
                results.iter().filter(|r| r.expected).count(),
                view.namespace,
                results.iter().filter(|r| !r.expected).count()
            ),
        ));
    }
}

/// The job pod the entry describes (build, helper and one service's requests).
fn job_requests(view: &EntryView) -> Result<JobPodRequests, String> {
    let get = |key: &str| -> Result<quantity::Milli, String> {
        match view.resources.get(key) {
            None => Ok(quantity::Milli(0)),
            Some(v) => {
                quantity::parse_resource(v).ok_or_else(|| format!("{key} `{v}` is not a quantity"))
            }
        }
    };
    Ok(JobPodRequests {
        build_cpu: get("cpu_request")?,
        build_memory: get("memory_request")?,
        helper_cpu: get("helper_cpu_request")?,
        helper_memory: get("helper_memory_request")?,
        service_cpu: get("service_cpu_request")?,
        service_memory: get("service_memory_request")?,
        services: 0,
        build_ephemeral_storage: get("ephemeral_storage_request")?,
    })
}

async fn pause_pods(
    client: &kube::Client,
    view: &EntryView,
    cluster: Option<&ClusterFiles>,
    lines: &mut Vec<Check>,
) {
    let Some(image) = cluster
        .filter(|c| c.node_image.is_file())
        .and_then(|c| NodeImage::load(&c.node_image).ok())
    else {
        lines.push(Check::skip("prewarm", "no node image for this cluster"));
        return;
    };
    let job = match job_requests(view) {
        Ok(j) => j,
        Err(e) => {
            lines.push(Check::fail("prewarm", e, "fix the entry's resources"));
            return;
        }
    };
    if let Err(e) = sizing::check(&job, &image, None) {
        lines.push(Check::fail(
            "prewarm",
            e.message().to_string(),
            e.hint_text().unwrap_or("lower the job's requests"),
        ));
        return;
    }
    let sized = format!(
        "a job pod of {} CPU / {} fits a rented node ({} vCPU, {} MiB)",
        quantity::format_cpu(job.cpu()),
        quantity::format_memory(job.memory()),
        image.vcpu,
        image.mem_mib
    );
    if let Some(n) = view.native_pause_pods {
        lines.push(Check::ok(
            "prewarm",
            format!("gitlab-runner keeps {n} pause pod(s) sized as job pods; {sized}"),
        ));
        return;
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &view.namespace);
    match deployments.get_opt(prewarm::NAME).await {
        Ok(Some(d)) => lines.push(deployment_line(&d, &job, &sized)),
        Ok(None) => lines.push(Check::ok("prewarm", format!("no pause pods; {sized}"))),
        Err(_) => lines.push(Check::ok(
            "prewarm",
            format!("{sized}; the pause Deployment's size was not compared (the runner's credential may not read it)"),
        )),
    }
}

/// tenantci's pause Deployment reserves whole job pods: its requests must be the entry's.
fn deployment_line(d: &Deployment, job: &JobPodRequests, sized: &str) -> Check {
    let requests = d
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.resources.as_ref())
        .and_then(|r| r.requests.clone())
        .unwrap_or_default();
    let get = |k: &str| {
        requests
            .get(k)
            .and_then(|q| quantity::parse_resource(&q.0))
            .unwrap_or(quantity::Milli(0))
    };
    let replicas = d.spec.replicas.unwrap_or(0);
    if get("cpu") == job.cpu() && get("memory") == job.memory() {
        Check::ok(
            "prewarm",
            format!("{replicas} pause pod(s) reserve whole job pods; {sized}"),
        )
    } else {
        Check::fail(
            "prewarm",
            format!(
                "the pause pods request {} CPU / {} but a job pod needs {} / {}: a warm node may not fit the job",
                quantity::format_cpu(get("cpu")),
                quantity::format_memory(get("memory")),
                quantity::format_cpu(job.cpu()),
                quantity::format_memory(job.memory())
            ),
            "re-run `tenantci bootstrap runner --prewarm N` with the entry's requests",
        )
    }
}

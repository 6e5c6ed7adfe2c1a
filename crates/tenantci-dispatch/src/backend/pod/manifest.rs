//! The executor of one task: Secret `gitea-task-<id>` and Pod `gitea-task-<id>` running the
//! official runner for exactly one task. Pure: `desired_secret` / `desired_pod`; `objects`
//! creates them when the worker starts the executor.
//!
//! The Pod has two containers. The runner (the executor image, in host mode: the job runs in
//! that image) reads `.runner` and a generated `config.yaml`; its `.runner` address is the
//! `tenantci executor-proxy` sidecar on 127.0.0.1, which alone holds the facade's CA and
//! speaks HTTPS to the facade. So no trust-store variable is set: the runner and the job's
//! steps keep the image's own CA bundle for Gitea, GitHub and package registries. The proxy
//! is a native sidecar (an init container with `restartPolicy: Always`): the kubelet starts it
//! first, holds the runner back until its startup probe answers, and stops it once the runner
//! has exited, so the Pod still ends with its task. HOME, work and cache dirs are an emptyDir
//! bounded by the ephemeral-storage limit.
//!
//! The task's own secrets are in neither object: the executor fetches them from the facade,
//! which decrypts them only then. The Pod spec holds no secret either; the capability is in
//! the Secret, whose `.runner` only the runner container mounts (read-only), and whose sealed
//! assignment no container mounts.
//!
//! Executor identity (`[identity]`, issue 15): the Pod gets the SPIFFE Workload API socket
//! through the SPIFFE CSI driver (`csi.spiffe.io`, an inline read-only volume: allowed under
//! the `restricted` Pod Security Standard, unlike a hostPath) in both containers, with
//! `SPIFFE_ENDPOINT_SOCKET` naming it; the sidecar fetches the Pod's SVID from it and speaks
//! mTLS to the facade, accepting only the facade's SPIFFE ID (no facade CA then); the job can
//! use the same socket (e.g. to log in to OpenBao with its SVID). The Pod is annotated with
//! the task's SPIFFE ID. The runner side does not change: it only talks to the loopback proxy.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    CSIVolumeSource, Capabilities, Container, EmptyDirVolumeSource, EnvVar, ExecAction, KeyToPath,
    LocalObjectReference, Pod, PodSecurityContext, PodSpec, Probe, SeccompProfile, Secret,
    SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::sizing::resources;
use crate::task::spec::{
    ATTEMPT_LABEL, CLASS_LABEL, CONFIG_KEY, ExecutorSpec, PROXY_LISTEN, RUNNER_KEY, TASK_ID_LABEL,
    runner_config_at, runner_file,
};
use crate::task_id::TaskId;
use tenantci_core::record_version::Kind;

/// On both objects: the version of their format (names, annotations, Secret keys), read by
/// the one rule (`tenantci_core::record_version`): none is 1, a newer one is left alone.
pub const FORMAT_ANNOTATION: &str = "tenantci.io/format";
/// The executor objects' kind for the version rule, and the format this release writes.
pub const KIND: Kind = Kind::new("executor_objects", 1);
/// On both objects: the assignment id (task and attempt) they were created for.
pub const ASSIGNMENT_ANNOTATION: &str = "tenantci.io/assignment-id";
/// Set on the Pod once Gitea accepted the task's final state; the reconciler then deletes.
pub const TERMINAL_ANNOTATION: &str = "tenantci.io/terminal";
/// Set on the Secret by the facade when the executor fetched its task.
pub const FETCHED_ANNOTATION: &str = "tenantci.io/fetched-at";
/// Set on the Secret with the removal of its sealed assignment (the executor's first report),
/// so a watch of the Secrets' metadata tells a consumed assignment from one still held.
pub const CONSUMED_ANNOTATION: &str = "tenantci.io/consumed-at";
/// The Secret key holding the sealed assignment until the executor's first report consumes
/// it. Only the dispatcher can open it; no container mounts it.
pub const ASSIGNMENT_KEY: &str = "assignment";
/// The Secret's key for the facade's CA, which the proxy trusts (only with identity off).
pub const CA_KEY: &str = "ca.crt";

/// The Secret's key for Gitea's private CA (only when `gitea.ca_file` is set).
pub const GITEA_CA_KEY: &str = "gitea-ca.crt";

/// Where the proxy container sees `gitea-ca.crt`.
pub const GITEA_CA_DIR: &str = "/etc/gitea-task/gitea-ca";
/// Selects every executor object (Pods and Secrets).
pub const COMPONENT_SELECTOR: &str = "app.kubernetes.io/component=gitea-executor";
/// Where the runner container sees `.runner` and `config.yaml`.
pub const RUNNER_DIR: &str = "/etc/gitea-task/runner";
/// Where the proxy container sees `ca.crt`.
pub const PROXY_DIR: &str = "/etc/gitea-task/proxy";
/// HOME of the runner: an emptyDir for its cache, the job's work dirs and tools' dotfiles.
pub const HOME_DIR: &str = "/home/runner";
/// The uid, gid and fsGroup both containers run as (non-root, as `restricted` asks).
pub const RUN_AS_USER: i64 = 2000;
/// The runner's container name.
pub const RUNNER_CONTAINER: &str = "runner";
/// The `tenantci executor-proxy` sidecar's container name.
pub const PROXY_CONTAINER: &str = "executor-proxy";
/// Annotation on the Pod (identity on): the SPIFFE ID its executor must present.
pub const SPIFFE_ID_ANNOTATION: &str = "tenantci.io/spiffe-id";
/// Where both containers see the Workload API socket (identity on).
pub const WORKLOAD_API_DIR: &str = "/spiffe-workload-api";
/// The socket's name in the SPIFFE CSI driver's volume.
pub const WORKLOAD_API_SOCKET: &str = "spire-agent.sock";
/// The SPIFFE CSI driver (github.com/spiffe/spiffe-csi).
pub const SPIFFE_CSI_DRIVER: &str = "csi.spiffe.io";
/// Time for the final UpdateLog/UpdateTask after the runner's own shutdown timeout.
const REPORT_GRACE_SECONDS: i64 = 15;

/// `gitea-task-<id>`, for both objects.
pub fn object_name(task_id: TaskId) -> String {
    format!("gitea-task-{task_id}")
}

fn labels(spec: &ExecutorSpec) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (TASK_ID_LABEL.to_string(), spec.task_id.to_string()),
        (ATTEMPT_LABEL.to_string(), spec.attempt.to_string()),
        (
            "app.kubernetes.io/managed-by".to_string(),
            "tenantci".to_string(),
        ),
        (
            "app.kubernetes.io/component".to_string(),
            "gitea-executor".to_string(),
        ),
    ]);
    // Which class sized it: `kubectl get pods -l tenantci.io/class=large`, and the warm
    // pool's hit/miss count.
    if let Some(c) = &spec.class {
        labels.insert(CLASS_LABEL.to_string(), c.name.clone());
    }
    labels
}

fn meta(spec: &ExecutorSpec) -> ObjectMeta {
    ObjectMeta {
        name: Some(object_name(spec.task_id)),
        namespace: Some(spec.namespace.clone()),
        labels: Some(labels(spec)),
        annotations: Some(BTreeMap::from([
            (
                ASSIGNMENT_ANNOTATION.to_string(),
                spec.assignment_id.clone(),
            ),
            (FORMAT_ANNOTATION.to_string(), KIND.current_text()),
        ])),
        ..Default::default()
    }
}

/// The Pod's metadata: the objects' own, and the task's SPIFFE ID with identity on.
fn pod_meta(spec: &ExecutorSpec) -> ObjectMeta {
    let mut m = meta(spec);
    if let (Some(i), Some(a)) = (&spec.identity, m.annotations.as_mut()) {
        a.insert(SPIFFE_ID_ANNOTATION.to_string(), i.spiffe_id.clone());
    }
    m
}

/// `SPIFFE_ENDPOINT_SOCKET` for a container that mounts the Workload API volume.
fn workload_api_env() -> EnvVar {
    EnvVar {
        name: "SPIFFE_ENDPOINT_SOCKET".into(),
        value: Some(format!("unix://{WORKLOAD_API_DIR}/{WORKLOAD_API_SOCKET}")),
        ..Default::default()
    }
}

fn workload_api_volume() -> Volume {
    Volume {
        name: "spiffe-workload-api".into(),
        csi: Some(CSIVolumeSource {
            driver: SPIFFE_CSI_DRIVER.into(),
            read_only: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The runner's config: one task, the registration in the Secret mount, work and cache under
/// HOME, the first fetch at once and the next one a second later.
pub fn runner_config(spec: &ExecutorSpec) -> String {
    runner_config_at(spec, &format!("{RUNNER_DIR}/{RUNNER_KEY}"), HOME_DIR)
}

/// The Secret: `.runner` and `config.yaml` for the runner, `ca.crt` for the proxy (not with
/// identity on: the proxy then trusts the trust domain's bundle from its SVID), and the
/// sealed assignment (the queue's JSON, ciphertext for everyone but the dispatcher) for the
/// facade to hand out once.
pub fn desired_secret(spec: &ExecutorSpec, sealed_assignment: &[u8]) -> Secret {
    let mut data = BTreeMap::from([
        (RUNNER_KEY.to_string(), ByteString(runner_file(spec))),
        (
            CONFIG_KEY.to_string(),
            ByteString(runner_config(spec).into_bytes()),
        ),
        (
            ASSIGNMENT_KEY.to_string(),
            ByteString(sealed_assignment.to_vec()),
        ),
    ]);
    if spec.identity.is_none() {
        data.insert(
            CA_KEY.to_string(),
            ByteString(spec.facade_ca_pem.clone().into_bytes()),
        );
    }
    if let Some(pem) = &spec.gitea.ca_pem {
        data.insert(
            GITEA_CA_KEY.to_string(),
            ByteString(pem.clone().into_bytes()),
        );
    }
    Secret {
        metadata: meta(spec),
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Default::default()
    }
}

/// A read-only projection of some of the Secret's keys.
fn secret_volume(name: &str, secret: &str, keys: &[&str]) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.into()),
            default_mode: Some(0o400),
            items: Some(
                keys.iter()
                    .map(|k| KeyToPath {
                        key: (*k).into(),
                        path: (*k).into(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Only what each container reads; the sealed assignment stays out of the Pod.
fn volumes(spec: &ExecutorSpec, secret: &str) -> Vec<Volume> {
    let mut volumes = vec![
        secret_volume("runner", secret, &[RUNNER_KEY, CONFIG_KEY]),
        match spec.identity {
            None => secret_volume("facade-ca", secret, &[CA_KEY]),
            Some(_) => workload_api_volume(),
        },
        Volume {
            name: "home".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(Quantity(
                    spec.executor
                        .resources
                        .ephemeral_storage_limit()
                        .to_string(),
                )),
                ..Default::default()
            }),
            ..Default::default()
        },
    ];
    if spec.gitea.ca_pem.is_some() {
        volumes.push(secret_volume("gitea-ca", secret, &[GITEA_CA_KEY]));
    }
    volumes
}

fn mount(volume: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: volume.into(),
        mount_path: path.into(),
        read_only: Some(read_only),
        ..Default::default()
    }
}

fn locked_down(read_only_root: bool) -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        run_as_non_root: Some(true),
        read_only_root_filesystem: read_only_root.then_some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The proxy's argv (no secret: the facade URL and the CA path, or with identity on the
/// SVID source and the facade's SPIFFE ID).
pub fn proxy_args(spec: &ExecutorSpec) -> Vec<String> {
    let mut args: Vec<String> = [
        "tenantci",
        "executor-proxy",
        "--listen",
        PROXY_LISTEN,
        "--facade-url",
        &spec.facade_url,
        "--gitea-url",
        &spec.gitea.url,
    ]
    .map(str::to_string)
    .to_vec();
    if spec.gitea.ca_pem.is_some() {
        args.extend([
            "--gitea-ca".into(),
            format!("{GITEA_CA_DIR}/{GITEA_CA_KEY}"),
        ]);
    }
    match &spec.identity {
        None => args.extend(["--facade-ca".into(), format!("{PROXY_DIR}/{CA_KEY}")]),
        Some(i) => args.extend([
            "--spiffe-source".into(),
            "workload-api".into(),
            "--facade-id".into(),
            i.facade_id.clone(),
        ]),
    }
    args
}

fn proxy_container(spec: &ExecutorSpec) -> Container {
    Container {
        name: PROXY_CONTAINER.into(),
        image: Some(spec.executor.proxy_image.clone()),
        command: Some(proxy_args(spec)),
        // A native sidecar: started before the runner, stopped after it.
        restart_policy: Some("Always".into()),
        startup_probe: Some(Probe {
            exec: Some(ExecAction {
                command: Some(
                    [
                        "tenantci",
                        "executor-proxy",
                        "--probe",
                        "--listen",
                        PROXY_LISTEN,
                    ]
                    .map(str::to_string)
                    .to_vec(),
                ),
            }),
            period_seconds: Some(1),
            // With identity on the proxy listens once it has the Pod's SVID, which may take
            // its entry's reconcile and the agent's sync; it gives up itself after its
            // --retry-for (2m), before the probe would.
            failure_threshold: Some(if spec.identity.is_some() { 150 } else { 30 }),
            ..Default::default()
        }),
        resources: Some(resources::proxy_requirements()),
        env: spec.identity.is_some().then(|| vec![workload_api_env()]),
        volume_mounts: Some({
            let mut mounts = match spec.identity {
                None => vec![mount("facade-ca", PROXY_DIR, true)],
                Some(_) => vec![mount("spiffe-workload-api", WORKLOAD_API_DIR, true)],
            };
            if spec.gitea.ca_pem.is_some() {
                mounts.push(mount("gitea-ca", GITEA_CA_DIR, true));
            }
            mounts
        }),
        security_context: Some(locked_down(true)),
        ..Default::default()
    }
}

fn runner_container(spec: &ExecutorSpec) -> Container {
    let x = &spec.executor;
    Container {
        name: RUNNER_CONTAINER.into(),
        image: Some(x.image.clone()),
        // One task, then exit: the registration is ephemeral and bound to this task.
        command: Some(
            x.runner_command
                .run_once()
                .iter()
                .map(|s| s.to_string())
                .chain(["--config".into(), format!("{RUNNER_DIR}/{CONFIG_KEY}")])
                .collect(),
        ),
        working_dir: Some(HOME_DIR.into()),
        // HOME only: a uid the image does not know would get `/`, which it cannot write. No
        // trust-store variable: the job keeps the image's CA bundle.
        // With identity on, the job gets the Workload API too (its SVID is the task's).
        env: Some(
            std::iter::once(EnvVar {
                name: "HOME".into(),
                value: Some(HOME_DIR.into()),
                ..Default::default()
            })
            .chain(spec.identity.as_ref().map(|_| workload_api_env()))
            .collect(),
        ),
        resources: Some(x.resources.runner_requirements()),
        volume_mounts: Some(
            [
                mount("runner", RUNNER_DIR, true),
                mount("home", HOME_DIR, false),
            ]
            .into_iter()
            .chain(
                spec.identity
                    .as_ref()
                    .map(|_| mount("spiffe-workload-api", WORKLOAD_API_DIR, true)),
            )
            .collect(),
        ),
        security_context: Some(locked_down(false)),
        ..Default::default()
    }
}

/// The Pod: the proxy sidecar and the runner, locked down, sized by the spec's resources,
/// placed by its node selector and tolerations, never restarted.
pub fn desired_pod(spec: &ExecutorSpec) -> Pod {
    let name = object_name(spec.task_id);
    let x = &spec.executor;
    let grace = x.shutdown_timeout.get().as_secs() as i64 + REPORT_GRACE_SECONDS;
    Pod {
        metadata: pod_meta(spec),
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(grace),
            node_selector: (!x.node_selector.is_empty()).then(|| x.node_selector.clone()),
            tolerations: (!x.tolerations.is_empty()).then(|| x.tolerations.clone()),
            runtime_class_name: x.runtime_class_name.clone(),
            image_pull_secrets: (!x.image_pull_secrets.is_empty()).then(|| {
                x.image_pull_secrets
                    .iter()
                    .map(|name| LocalObjectReference { name: name.clone() })
                    .collect()
            }),
            // Pod Security `restricted` (the namespace may enforce it): non-root, the
            // runtime's default seccomp profile; each container drops every capability.
            security_context: Some(PodSecurityContext {
                run_as_user: Some(RUN_AS_USER),
                run_as_group: Some(RUN_AS_USER),
                fs_group: Some(RUN_AS_USER),
                run_as_non_root: Some(true),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            volumes: Some(volumes(spec, &name)),
            init_containers: Some(vec![proxy_container(spec)]),
            containers: vec![runner_container(spec)],
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::spec::{ExecutorIdentity, check_image_digest, runner_labels};

    fn spec() -> ExecutorSpec {
        crate::task::spec::example(1, "a-42-1", "pod")
    }

    #[test]
    fn the_proxy_reaches_gitea_with_its_private_ca_from_the_secret() {
        let mut s = spec();
        let args = proxy_args(&s);
        let at = |flag: &str| args.iter().position(|a| a == flag);
        assert_eq!(
            args[at("--gitea-url").unwrap() + 1],
            "https://gitea.example"
        );
        assert!(
            at("--gitea-ca").is_none(),
            "no CA unless gitea.ca_file is set"
        );
        assert!(
            !desired_secret(&s, b"{}")
                .data
                .unwrap()
                .contains_key(GITEA_CA_KEY)
        );

        s.gitea.ca_pem = Some("-----BEGIN CERTIFICATE-----\nGITEA\n".into());
        let args = proxy_args(&s);
        let ca = &args[args.iter().position(|a| a == "--gitea-ca").unwrap() + 1];
        assert_eq!(ca, &format!("{GITEA_CA_DIR}/{GITEA_CA_KEY}"));
        assert!(
            desired_secret(&s, b"{}")
                .data
                .unwrap()
                .contains_key(GITEA_CA_KEY)
        );
        let pod = desired_pod(&s);
        assert_eq!(projected(&pod, "gitea-ca"), [GITEA_CA_KEY]);
        let proxy = &pod.spec.unwrap().init_containers.unwrap()[0];
        assert!(
            proxy
                .volume_mounts
                .as_ref()
                .unwrap()
                .iter()
                .any(|m| m.name == "gitea-ca" && m.mount_path == GITEA_CA_DIR)
        );
    }

    #[test]
    fn images_must_be_pinned_by_digest() {
        assert!(check_image_digest(&format!("gitea/act_runner@sha256:{}", "0".repeat(64))).is_ok());
        for bad in [
            "gitea/act_runner:0.2.11",
            "gitea/act_runner",
            "x@sha256:abc",
            &format!("@sha256:{}", "0".repeat(64)),
        ] {
            assert_eq!(check_image_digest(bad).unwrap_err().exit_code(), 2, "{bad}");
        }
    }

    fn projected(pod: &Pod, volume: &str) -> Vec<String> {
        let v = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap();
        let v = v.iter().find(|v| v.name == volume).unwrap();
        let items = v.secret.as_ref().unwrap().items.clone().unwrap();
        items.into_iter().map(|i| i.key).collect()
    }

    #[test]
    fn the_capability_is_in_the_secret_only() {
        let s = spec();
        let secret = desired_secret(&s, b"{sealed}");
        let runner: serde_json::Value =
            serde_json::from_slice(&secret.data.as_ref().unwrap()[".runner"].0).unwrap();
        assert_eq!(runner["token"], s.capability);
        assert_eq!(runner["uuid"], "a-42-1");
        assert_eq!(runner["address"], "http://127.0.0.1:8431");
        assert_eq!(runner["ephemeral"], true);
        let pod = desired_pod(&s);
        let text = serde_json::to_string(&pod).unwrap();
        assert!(
            !text.contains(&s.capability),
            "no capability in the Pod spec"
        );
        assert_eq!(projected(&pod, "runner"), [RUNNER_KEY, CONFIG_KEY]);
        assert_eq!(
            projected(&pod, "facade-ca"),
            [CA_KEY],
            "the sealed assignment is not projected"
        );
    }

    #[test]
    fn labels_carry_host_mode_in_the_runners_normalised_form() {
        assert_eq!(
            runner_labels(&[
                "self-hosted".into(),
                "pod".into(),
                "x:docker://node:20".into()
            ]),
            ["self-hosted:host", "pod:host", "x:docker://node:20"]
        );
    }

    #[test]
    fn no_trust_store_variable_and_a_writable_home() {
        let pod = desired_pod(&spec());
        let ps = pod.spec.as_ref().unwrap();
        let runner = &ps.containers[0];
        let env = runner.env.clone().unwrap();
        assert!(
            env.iter()
                .all(|e| e.name != "SSL_CERT_FILE" && e.name != "SSL_CERT_DIR"),
            "{env:?}"
        );
        assert!(
            env.iter()
                .any(|e| e.name == "HOME" && e.value.as_deref() == Some(HOME_DIR))
        );
        let home = runner
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.mount_path == HOME_DIR)
            .unwrap();
        assert_eq!(home.read_only, Some(false));
        let config = runner_config(&spec());
        assert!(
            config.contains("/etc/gitea-task/runner/.runner"),
            "{config}"
        );
        assert!(config.contains("capacity: 1"), "{config}");
        assert!(
            config.contains("workdir_parent: /home/runner/work"),
            "{config}"
        );
    }

    #[test]
    fn the_proxy_is_a_native_sidecar_pointing_at_the_facade() {
        let pod = desired_pod(&spec());
        let ps = pod.spec.as_ref().unwrap();
        let proxy = &ps.init_containers.as_ref().unwrap()[0];
        assert_eq!(proxy.restart_policy.as_deref(), Some("Always"));
        let args = proxy.command.clone().unwrap();
        assert_eq!(
            args[args.iter().position(|a| a == "--facade-url").unwrap() + 1],
            "https://10.0.0.5:8443"
        );
        assert!(
            proxy.startup_probe.is_some(),
            "the runner waits for the proxy"
        );
        assert_eq!(ps.termination_grace_period_seconds, Some(45));
    }

    #[test]
    fn with_identity_both_containers_get_the_workload_api_and_the_proxy_its_ids() {
        let mut s = spec();
        s.identity = Some(ExecutorIdentity {
            spiffe_id: "spiffe://example.org/gitea/acme/w/build".into(),
            facade_id: "spiffe://example.org/ns/dynamic-runner/sa/tenantci-dispatcher".into(),
        });
        let pod = desired_pod(&s);
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()[SPIFFE_ID_ANNOTATION],
            "spiffe://example.org/gitea/acme/w/build"
        );
        let ps = pod.spec.unwrap();
        let volumes = ps.volumes.unwrap();
        let csi = volumes
            .iter()
            .find_map(|v| v.csi.as_ref())
            .expect("the Workload API volume");
        assert_eq!(
            (csi.driver.as_str(), csi.read_only),
            (SPIFFE_CSI_DRIVER, Some(true))
        );
        assert!(
            volumes.iter().all(|v| v.name != "facade-ca"),
            "no facade CA with identity on"
        );
        let data = desired_secret(&s, b"sealed").data.unwrap();
        assert!(!data.contains_key(CA_KEY), "nor in the Secret");
        assert!(
            desired_secret(&spec(), b"sealed")
                .data
                .unwrap()
                .contains_key(CA_KEY)
        );
        let proxy = &ps.init_containers.unwrap()[0];
        let args = proxy.command.clone().unwrap();
        let after = |flag: &str| args[args.iter().position(|a| a == flag).unwrap() + 1].clone();
        assert_eq!(after("--spiffe-source"), "workload-api");
        assert_eq!(
            after("--facade-id"),
            "spiffe://example.org/ns/dynamic-runner/sa/tenantci-dispatcher"
        );
        assert!(!args.iter().any(|a| a == "--facade-ca"), "{args:?}");
        let socket = format!("unix://{WORKLOAD_API_DIR}/{WORKLOAD_API_SOCKET}");
        for c in [proxy, &ps.containers[0]] {
            let env = c.env.as_ref().unwrap();
            assert!(
                env.iter()
                    .any(|e| e.name == "SPIFFE_ENDPOINT_SOCKET"
                        && e.value.as_deref() == Some(&socket)),
                "{}",
                c.name
            );
            assert!(
                c.volume_mounts
                    .as_ref()
                    .unwrap()
                    .iter()
                    .any(|m| m.mount_path == WORKLOAD_API_DIR && m.read_only == Some(true)),
                "{}",
                c.name
            );
        }
        let plain = desired_pod(&spec());
        assert!(
            !plain
                .metadata
                .annotations
                .unwrap()
                .contains_key(SPIFFE_ID_ANNOTATION)
        );
    }

    #[test]
    fn the_runner_command_follows_the_config() {
        let mut s = spec();
        s.executor.runner_command = crate::sizing::RunnerCommand::GiteaRunner;
        let pod = desired_pod(&s);
        let cmd = pod.spec.unwrap().containers[0].command.clone().unwrap();
        assert_eq!(
            cmd,
            [
                "gitea-runner",
                "daemon",
                "--once",
                "--config",
                "/etc/gitea-task/runner/config.yaml"
            ]
        );
        s.executor.runner_command = crate::sizing::RunnerCommand::ForgejoRunner;
        let pod = desired_pod(&s);
        let cmd = pod.spec.unwrap().containers[0].command.clone().unwrap();
        assert_eq!(
            cmd,
            [
                "forgejo-runner",
                "one-job",
                "--config",
                "/etc/gitea-task/runner/config.yaml"
            ]
        );
    }

    /// Admitted where the namespace enforces Pod Security `restricted`, with identity on
    /// (the SPIFFE CSI volume) and off, with every optional Pod field the config sets.
    #[test]
    fn the_pod_passes_pod_security_restricted() {
        let mut s = spec();
        s.executor.image_pull_secrets = vec!["registry".into()];
        s.executor.runtime_class_name = Some("gvisor".into());
        let off = desired_pod(&s).spec.unwrap();
        assert_eq!(
            tenantci_core::pod_security::restricted(&off),
            Vec::<String>::new()
        );
        let pulls = off.image_pull_secrets.unwrap();
        assert_eq!(pulls[0].name, "registry");
        s.identity = Some(ExecutorIdentity {
            spiffe_id: "spiffe://example.org/gitea/acme/w/build".into(),
            facade_id: "spiffe://example.org/ns/dynamic-runner/sa/tenantci-dispatcher".into(),
        });
        let on = desired_pod(&s).spec.unwrap();
        assert_eq!(
            tenantci_core::pod_security::restricted(&on),
            Vec::<String>::new()
        );
        assert!(
            desired_pod(&spec())
                .spec
                .unwrap()
                .image_pull_secrets
                .is_none(),
            "none unless configured"
        );
    }

    #[test]
    fn the_pod_is_locked_down_and_labelled() {
        let pod = desired_pod(&spec());
        assert_eq!(pod.metadata.name.as_deref(), Some("gitea-task-42"));
        assert_eq!(pod.metadata.labels.as_ref().unwrap()[TASK_ID_LABEL], "42");
        let ps = pod.spec.as_ref().unwrap();
        let sc = ps.security_context.as_ref().unwrap();
        assert_eq!(sc.run_as_user, Some(2000));
        assert_eq!(sc.run_as_non_root, Some(true));
        for c in ps
            .containers
            .iter()
            .chain(ps.init_containers.as_ref().unwrap())
        {
            assert_eq!(
                c.security_context
                    .as_ref()
                    .unwrap()
                    .allow_privilege_escalation,
                Some(false),
                "{}",
                c.name
            );
            assert!(
                c.resources.as_ref().unwrap().requests.is_some(),
                "{}",
                c.name
            );
        }
    }
}

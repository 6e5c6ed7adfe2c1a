//! The dispatcher's manifests (`manifests/dispatch/`, usable with kubectl as they are): the RBAC
//! `dispatch init` applies, with the namespace substituted (the namespaced RBAC always; the
//! cluster-scoped RBAC of executor identity only with `[identity]`, and the read of the warm
//! pools' PriorityClass only with a `[executor.class.warm]`), and the Deployment for running
//! the dispatcher in the cluster. Pure: parsing and substitution; `init` applies.

use crate::provision::access::{identity_rbac_name, pause_rbac_name};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, Subject};
use serde::Deserialize as _;

use tenantci_runner::tenant::apply::Object;

/// `manifests/dispatch/rbac.yaml`: the namespace, ServiceAccount, Role and RoleBinding.
pub const RBAC: &str = include_str!("../../../../manifests/dispatch/rbac.yaml");
/// `manifests/dispatch/identity/rbac.yaml`: executor identity's ClusterRole and binding.
pub const RBAC_IDENTITY: &str = include_str!("../../../../manifests/dispatch/identity/rbac.yaml");
/// `manifests/dispatch/pause/rbac.yaml`: the read of the warm pools' PriorityClass.
pub const RBAC_PAUSE: &str = include_str!("../../../../manifests/dispatch/pause/rbac.yaml");
/// `manifests/dispatch/deployment.yaml`: the dispatcher as a Deployment in the cluster.
pub const DEPLOYMENT: &str = include_str!("../../../../manifests/dispatch/deployment.yaml");

/// The organization of the dispatcher's client certificate.
pub const GROUP: &str = "tenantci:gitea-dispatchers";
/// The executors' namespace the manifests name (replaced by `--namespace`).
pub const DEFAULT_NAMESPACE: &str = "dynamic-runner";
/// The dispatcher's namespace the manifests name (replaced by `--dispatcher-namespace`;
/// `dispatch init --kubeconfig`'s default).
pub const DEFAULT_DISPATCHER_NAMESPACE: &str = "tenantci-system";
/// The Role and RoleBinding of the leader Lease in the dispatcher's namespace.
pub const LEADER_RBAC: &str = "tenantci-dispatcher-leader";

/// The RBAC objects of the dispatcher's two namespaces (one, when they are the same).
#[derive(Debug, Clone, PartialEq)]
pub struct RbacObjects {
    /// The dispatcher's namespace (its ServiceAccount, the Lease, the Deployment).
    pub dispatcher_namespace: Namespace,
    /// The executors' namespace.
    pub namespace: Namespace,
    /// The dispatcher's ServiceAccount (its identity in the cluster).
    pub service_account: ServiceAccount,
    /// The leader Lease, in the dispatcher's namespace.
    pub leader_role: Role,
    /// The leader Role bound to the ServiceAccount and the client-certificate user.
    pub leader_binding: RoleBinding,
    /// What the dispatcher may do in the executors' namespace.
    pub role: Role,
    /// That Role bound, across namespaces, to the ServiceAccount and the client-certificate
    /// user.
    pub binding: RoleBinding,
}

impl RbacObjects {
    /// The objects in apply order: the namespaces, then the dispatcher's own (so a running
    /// dispatcher keeps its Lease access while an older Role that held it is replaced), then
    /// the executors' Role and binding.
    pub fn objects(&self) -> Vec<Object> {
        let mut v = vec![Object::Namespace(self.dispatcher_namespace.clone())];
        if self.namespace.metadata.name != self.dispatcher_namespace.metadata.name {
            v.push(Object::Namespace(self.namespace.clone()));
        }
        v.extend([
            Object::ServiceAccount(self.service_account.clone()),
            Object::Role(self.leader_role.clone()),
            Object::RoleBinding(self.leader_binding.clone()),
            Object::Role(self.role.clone()),
            Object::RoleBinding(self.binding.clone()),
        ]);
        v
    }
}

/// A ClusterRole and its ClusterRoleBinding to the dispatcher, named per namespace: executor
/// identity's (per-task ClusterStaticEntry objects and the Node's UID for their parent ID,
/// [`rbac_identity`]) or the warm pools' read of their PriorityClass ([`rbac_pause`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterRbacObjects {
    /// What it grants, cluster-wide.
    pub role: ClusterRole,
    /// The ClusterRole bound to the dispatcher.
    pub binding: ClusterRoleBinding,
}

impl ClusterRbacObjects {
    /// The objects in apply order.
    pub fn objects(&self) -> Vec<Object> {
        vec![
            Object::ClusterRole(self.role.clone()),
            Object::ClusterRoleBinding(self.binding.clone()),
        ]
    }
}

/// Every document of a multi-document YAML string.
pub fn documents(yaml: &str) -> Vec<serde_yaml::Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| serde_yaml::Value::deserialize(d).expect("the embedded manifest is YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

fn kind<T: serde::de::DeserializeOwned>(docs: &[serde_yaml::Value], kind: &str) -> T {
    pick(docs, kind, None)
}

/// The document of `kind` (named `name`, when given).
fn pick<T: serde::de::DeserializeOwned>(
    docs: &[serde_yaml::Value],
    kind: &str,
    name: Option<&str>,
) -> T {
    let doc = docs
        .iter()
        .find(|d| {
            d.get("kind").and_then(|k| k.as_str()) == Some(kind)
                && name.is_none_or(|n| d["metadata"]["name"].as_str() == Some(n))
        })
        .unwrap_or_else(|| panic!("the embedded manifest has a {kind} {name:?}"));
    serde_yaml::from_value(doc.clone()).unwrap_or_else(|e| panic!("{kind}: {e}"))
}

/// The objects of `manifests/dispatch/rbac.yaml` for executors in `namespace` and the
/// dispatcher in `dispatcher_namespace` (the same namespace on a gateway host by default).
pub fn rbac(namespace: &str, dispatcher_namespace: &str) -> RbacObjects {
    let docs = documents(RBAC);
    let mut o = RbacObjects {
        dispatcher_namespace: pick(&docs, "Namespace", Some(DEFAULT_DISPATCHER_NAMESPACE)),
        namespace: pick(&docs, "Namespace", Some(DEFAULT_NAMESPACE)),
        service_account: kind(&docs, "ServiceAccount"),
        leader_role: pick(&docs, "Role", Some(LEADER_RBAC)),
        leader_binding: pick(&docs, "RoleBinding", Some(LEADER_RBAC)),
        role: pick(&docs, "Role", Some(crate::provision::access::NAME)),
        binding: pick(&docs, "RoleBinding", Some(crate::provision::access::NAME)),
    };
    o.dispatcher_namespace.metadata.name = Some(dispatcher_namespace.to_string());
    o.namespace.metadata.name = Some(namespace.to_string());
    for meta in [
        &mut o.service_account.metadata,
        &mut o.leader_role.metadata,
        &mut o.leader_binding.metadata,
    ] {
        meta.namespace = Some(dispatcher_namespace.to_string());
    }
    for meta in [&mut o.role.metadata, &mut o.binding.metadata] {
        meta.namespace = Some(namespace.to_string());
    }
    in_namespace(&mut o.leader_binding.subjects, dispatcher_namespace);
    in_namespace(&mut o.binding.subjects, dispatcher_namespace);
    o
}

/// The ServiceAccount subject is the one in the dispatcher's namespace.
fn in_namespace(subjects: &mut Option<Vec<Subject>>, namespace: &str) {
    for s in subjects.iter_mut().flatten() {
        if s.kind == "ServiceAccount" {
            s.namespace = Some(namespace.to_string());
        }
    }
}

/// The objects of `manifests/dispatch/identity/rbac.yaml` for the dispatcher of the executors
/// in `namespace` (the names carry it), its ServiceAccount in `dispatcher_namespace`.
pub fn rbac_identity(namespace: &str, dispatcher_namespace: &str) -> ClusterRbacObjects {
    let name = identity_rbac_name(namespace);
    cluster_rbac(RBAC_IDENTITY, name, dispatcher_namespace)
}

/// The objects of `manifests/dispatch/pause/rbac.yaml` for the dispatcher of the executors in
/// `namespace`, its ServiceAccount in `dispatcher_namespace`: `get` of the warm pools'
/// PriorityClass by name.
pub fn rbac_pause(namespace: &str, dispatcher_namespace: &str) -> ClusterRbacObjects {
    cluster_rbac(RBAC_PAUSE, pause_rbac_name(namespace), dispatcher_namespace)
}

/// The ClusterRole and binding of `yaml`, both called `name`, bound to the dispatcher's
/// ServiceAccount in `namespace` (and its User).
fn cluster_rbac(yaml: &str, name: String, namespace: &str) -> ClusterRbacObjects {
    let docs = documents(yaml);
    let mut o = ClusterRbacObjects {
        role: kind(&docs, "ClusterRole"),
        binding: kind(&docs, "ClusterRoleBinding"),
    };
    o.role.metadata.name = Some(name.clone());
    o.binding.metadata.name = Some(name.clone());
    o.binding.role_ref.name = name;
    in_namespace(&mut o.binding.subjects, namespace);
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provision::access::NAME;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;

    /// Every field of every document survives a round trip through its k8s-openapi type, so
    /// no field is misspelled or misplaced (the types ignore unknown fields when parsing).
    #[test]
    fn every_field_is_known_to_the_schema() {
        fn check<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &serde_yaml::Value) {
            let yaml: serde_json::Value = serde_json::to_value(doc).unwrap();
            let typed: T = serde_yaml::from_value(doc.clone()).unwrap();
            let back = serde_json::to_value(&typed).unwrap();
            assert!(
                tenantci_runner::tenant::apply::is_subset(&yaml, &back),
                "a field was dropped:\n{yaml:#}\nvs\n{back:#}"
            );
        }
        let docs = [RBAC, RBAC_IDENTITY, RBAC_PAUSE, DEPLOYMENT].map(documents);
        for doc in docs.iter().flatten() {
            match doc["kind"].as_str().unwrap() {
                "Namespace" => check::<Namespace>(doc),
                "ServiceAccount" => check::<ServiceAccount>(doc),
                "Role" => check::<Role>(doc),
                "RoleBinding" => check::<RoleBinding>(doc),
                "ClusterRole" => check::<ClusterRole>(doc),
                "ClusterRoleBinding" => check::<ClusterRoleBinding>(doc),
                "Deployment" => check::<Deployment>(doc),
                "Service" => check::<Service>(doc),
                other => panic!("unexpected kind {other}"),
            }
        }
    }

    /// The subjects of a binding as (kind, name, namespace), sorted.
    fn subjects(b: &RoleBinding) -> Vec<(&str, &str, Option<&str>)> {
        let mut got: Vec<_> = b
            .subjects
            .iter()
            .flatten()
            .map(|s| (s.kind.as_str(), s.name.as_str(), s.namespace.as_deref()))
            .collect();
        got.sort();
        got
    }

    /// (groups, resources, verbs) of each rule, in order.
    fn role_rules(role: &Role) -> Vec<(Vec<String>, Vec<String>, Vec<String>)> {
        role.rules
            .iter()
            .flatten()
            .map(|r| {
                (
                    r.api_groups.clone().unwrap_or_default(),
                    r.resources.clone().unwrap_or_default(),
                    r.verbs.clone(),
                )
            })
            .collect()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// Two namespaces: the ServiceAccount and the Lease's Role in the dispatcher's, the Role on
    /// the executors' bound across to that ServiceAccount; both Pod Security `restricted`.
    #[test]
    fn rbac_puts_the_dispatcher_apart_and_binds_across() {
        let o = rbac("ci-executors", "ci-dispatch");
        assert_eq!(
            o.dispatcher_namespace.metadata.name.as_deref(),
            Some("ci-dispatch")
        );
        assert_eq!(o.namespace.metadata.name.as_deref(), Some("ci-executors"));
        for n in [&o.namespace, &o.dispatcher_namespace] {
            let labels = n.metadata.labels.as_ref().unwrap();
            assert_eq!(labels["pod-security.kubernetes.io/enforce"], "restricted");
        }
        let own = [
            &o.service_account.metadata,
            &o.leader_role.metadata,
            &o.leader_binding.metadata,
        ];
        for m in own {
            assert_eq!(m.namespace.as_deref(), Some("ci-dispatch"));
        }
        assert_eq!(o.service_account.metadata.name.as_deref(), Some(NAME));
        assert_eq!(o.leader_role.metadata.name.as_deref(), Some(LEADER_RBAC));
        for m in [&o.role.metadata, &o.binding.metadata] {
            assert_eq!(m.namespace.as_deref(), Some("ci-executors"));
            assert_eq!(m.name.as_deref(), Some(NAME));
        }
        let verbs = strings(&["get", "list", "watch", "create", "delete", "patch"]);
        assert_eq!(
            role_rules(&o.role),
            [
                (strings(&[""]), strings(&["pods"]), verbs.clone()),
                (strings(&[""]), strings(&["secrets"]), verbs),
                (
                    strings(&["apps"]),
                    strings(&["deployments"]),
                    strings(&["get", "create", "patch"])
                ),
            ],
            "nothing else in the executors' namespace, no Lease there"
        );
        assert_eq!(
            role_rules(&o.leader_role),
            [(
                strings(&["coordination.k8s.io"]),
                strings(&["leases"]),
                strings(&["get", "create", "update"])
            )],
            "only the Lease in the dispatcher's"
        );
        assert_eq!(o.binding.role_ref.name, NAME);
        assert_eq!(o.leader_binding.role_ref.name, LEADER_RBAC);
        let both = [
            ("ServiceAccount", NAME, Some("ci-dispatch")),
            ("User", NAME, None),
        ];
        assert_eq!(subjects(&o.binding), both, "bound across namespaces");
        assert_eq!(subjects(&o.leader_binding), both);
        let kinds: Vec<&str> = o.objects().iter().map(Object::kind).collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "Namespace",
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "Role",
                "RoleBinding"
            ],
            "namespaces first, the Lease's Role before the executors' (no cluster-scoped RBAC)"
        );
        // The file as kubectl applies it names the default namespaces.
        let file = rbac(DEFAULT_NAMESPACE, DEFAULT_DISPATCHER_NAMESPACE);
        assert_eq!(
            file.binding.subjects.as_ref().unwrap()[0]
                .namespace
                .as_deref(),
            Some(DEFAULT_DISPATCHER_NAMESPACE)
        );
    }

    /// One namespace (a gateway host's default): one Namespace object, every object in it.
    #[test]
    fn rbac_in_one_namespace_applies_it_once() {
        let o = rbac("dynamic-runner", "dynamic-runner");
        let objects = o.objects();
        assert_eq!(
            objects.iter().filter(|o| o.kind() == "Namespace").count(),
            1
        );
        assert_eq!(
            subjects(&o.binding)[0],
            ("ServiceAccount", NAME, Some("dynamic-runner"))
        );
        assert_eq!(
            o.leader_role.metadata.namespace.as_deref(),
            Some("dynamic-runner")
        );
    }

    /// Cluster-wide, one read of one object: the warm pools' PriorityClass by name, bound to
    /// both identities of the dispatcher in its namespace.
    #[test]
    fn pause_rbac_reads_only_the_pause_priority_class() {
        let o = rbac_pause("ci-dispatch", "ci-own");
        let pause = "tenantci-dispatcher-pause:ci-dispatch";
        assert_eq!(o.role.metadata.name.as_deref(), Some(pause));
        assert_eq!(o.binding.metadata.name.as_deref(), Some(pause));
        assert_eq!(o.binding.role_ref.name, pause);
        assert_eq!(o.role.metadata.namespace, None, "cluster-scoped");
        let rules = o.role.rules.as_ref().unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].verbs, ["get"]);
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["priorityclasses".to_string()][..])
        );
        assert_eq!(
            rules[0].resource_names.as_deref(),
            Some(&[tenantci_runner::tenant::prewarm::NAME.to_string()][..])
        );
        let mut got: Vec<(&str, &str, Option<&str>)> = o
            .binding
            .subjects
            .iter()
            .flatten()
            .map(|s| (s.kind.as_str(), s.name.as_str(), s.namespace.as_deref()))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("ServiceAccount", NAME, Some("ci-own")),
                ("User", NAME, None)
            ]
        );
        // The file as kubectl applies it names the default namespace.
        let docs = documents(RBAC_PAUSE);
        let file = ClusterRbacObjects {
            role: kind(&docs, "ClusterRole"),
            binding: kind(&docs, "ClusterRoleBinding"),
        };
        assert_eq!(
            rbac_pause(DEFAULT_NAMESPACE, DEFAULT_DISPATCHER_NAMESPACE),
            file
        );
    }

    /// (verbs, groups, resources) of each rule, in order.
    fn rules_of(role: &ClusterRole) -> Vec<(Vec<String>, Vec<String>, Vec<String>)> {
        role.rules
            .iter()
            .flatten()
            .map(|r| {
                (
                    r.verbs.clone(),
                    r.api_groups.clone().unwrap_or_default(),
                    r.resources.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    #[test]
    fn identity_rbac_grants_exactly_the_entries_and_node_get() {
        let o = rbac_identity("ci-dispatch", "ci-own");
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            rules_of(&o.role),
            [
                (
                    strings(&["get", "list", "watch", "create", "update", "delete"]),
                    strings(&["spire.spiffe.io"]),
                    strings(&["clusterstaticentries"]),
                ),
                (strings(&["get"]), strings(&[""]), strings(&["nodes"])),
            ],
            "exactly these rules, nothing else"
        );
        for r in o.role.rules.iter().flatten() {
            assert!(r.resource_names.is_none() && r.non_resource_urls.is_none());
        }
        let managed = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            m.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"].clone()
        };
        assert_eq!(managed(&o.role.metadata), "tenantci");
        assert_eq!(managed(&o.binding.metadata), "tenantci");
    }

    #[test]
    fn identity_rbac_names_carry_the_namespace_and_bind_both_identities() {
        let o = rbac_identity("ci-dispatch", "ci-own");
        let name = "tenantci-dispatcher:ci-dispatch";
        assert_eq!(identity_rbac_name("ci-dispatch"), name);
        assert_eq!(o.role.metadata.name.as_deref(), Some(name));
        assert_eq!(o.binding.metadata.name.as_deref(), Some(name));
        assert_eq!(o.role.metadata.namespace, None, "cluster-scoped");
        assert_eq!(o.binding.metadata.namespace, None, "cluster-scoped");
        assert_eq!(o.binding.role_ref.kind, "ClusterRole");
        assert_eq!(o.binding.role_ref.name, name);
        let mut got: Vec<(&str, &str, Option<&str>)> = o
            .binding
            .subjects
            .iter()
            .flatten()
            .map(|s| (s.kind.as_str(), s.name.as_str(), s.namespace.as_deref()))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("ServiceAccount", NAME, Some("ci-own")),
                ("User", NAME, None)
            ]
        );
        // Two namespaces, two bindings: neither dispatcher's init touches the other's.
        assert_ne!(rbac_identity("other", "ci-own").role, o.role);
        // The file as kubectl applies it names the default namespace.
        assert_eq!(
            rbac_identity(DEFAULT_NAMESPACE, DEFAULT_DISPATCHER_NAMESPACE),
            {
                let docs = documents(RBAC_IDENTITY);
                ClusterRbacObjects {
                    role: kind(&docs, "ClusterRole"),
                    binding: kind(&docs, "ClusterRoleBinding"),
                }
            }
        );
        let kinds: Vec<Object> = o.objects();
        assert_eq!(
            kinds.iter().map(Object::kind).collect::<Vec<_>>(),
            ["ClusterRole", "ClusterRoleBinding"]
        );
    }

    #[test]
    fn deployment_never_leaves_zero_dispatchers_and_runs_locked_down() {
        let docs = documents(DEPLOYMENT);
        let d: Deployment = kind(&docs, "Deployment");
        let _service: Service = kind(&docs, "Service");
        assert_eq!(
            d.metadata.namespace.as_deref(),
            Some(DEFAULT_DISPATCHER_NAMESPACE)
        );
        let spec = d.spec;
        assert_eq!(
            spec.replicas,
            Some(2),
            "a standby takes over within the lease"
        );
        let strategy = spec.strategy.unwrap();
        assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
        let ru = strategy.rolling_update.unwrap();
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        assert_eq!(ru.max_surge, Some(IntOrString::Int(1)));
        assert_eq!(ru.max_unavailable, Some(IntOrString::Int(0)));
        let pod = spec.template.spec.unwrap();
        assert_eq!(pod.service_account_name.as_deref(), Some(NAME));
        // Never on a rented executor node; the replicas on different nodes when possible.
        let affinity = pod.affinity.as_ref().unwrap();
        let term = &affinity
            .node_affinity
            .as_ref()
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap()
            .node_selector_terms[0];
        let e = &term.match_expressions.as_ref().unwrap()[0];
        assert_eq!(
            (e.key.as_str(), e.operator.as_str(), e.values.as_deref()),
            (
                "tenantci.io/rented",
                "NotIn",
                Some(&["true".to_string()][..])
            )
        );
        let anti = affinity.pod_anti_affinity.as_ref().unwrap();
        assert_eq!(
            anti.preferred_during_scheduling_ignored_during_execution
                .as_ref()
                .unwrap()[0]
                .pod_affinity_term
                .topology_key,
            "kubernetes.io/hostname"
        );
        assert_eq!(
            pod.security_context.as_ref().unwrap().run_as_non_root,
            Some(true)
        );
        assert_eq!(
            tenantci_core::pod_security::restricted(&pod),
            Vec::<String>::new(),
            "admitted under Pod Security `restricted`"
        );
        let c = &pod.containers[0];
        let mut argv = c.command.clone().unwrap();
        argv.extend(c.args.clone().unwrap());
        assert_eq!(
            argv,
            [
                "tenantci",
                "dispatch",
                "run",
                "--config",
                "/etc/tenantci/dispatch/config.toml"
            ]
        );
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(
            sc.capabilities.as_ref().unwrap().drop.as_deref(),
            Some(&["ALL".to_string()][..])
        );
        let requests = c.resources.as_ref().unwrap().requests.as_ref().unwrap();
        assert!(requests.contains_key("cpu") && requests.contains_key("memory"));
        // The status API is loopback-only: probes must exec, not httpGet the Pod IP.
        for probe in [&c.liveness_probe, &c.readiness_probe] {
            let p = probe.as_ref().expect("probe");
            assert!(p.http_get.is_none() && p.tcp_socket.is_none());
            let cmd = p.exec.as_ref().unwrap().command.as_ref().unwrap();
            assert_eq!(&cmd[..3], ["tenantci", "dispatch", "probe"]);
        }
        // The config and the secret files: read-only, 0400, no secret in env values.
        let mount = c.volume_mounts.as_ref().unwrap();
        assert!(
            mount
                .iter()
                .find(|m| m.mount_path == "/etc/tenantci/dispatch")
                .is_some_and(|m| m.read_only == Some(true))
        );
        let vols = pod.volumes.as_ref().unwrap();
        let projected = vols
            .iter()
            .find_map(|v| v.projected.as_ref())
            .expect("a projected config volume");
        assert_eq!(projected.default_mode, Some(0o400));
        let sources = projected.sources.as_ref().unwrap();
        assert!(sources.iter().any(|s| s.config_map.is_some()));
        assert!(sources.iter().any(|s| s.secret.is_some()));
        for e in c.env.iter().flatten() {
            assert!(
                e.value_from
                    .as_ref()
                    .is_none_or(|v| v.secret_key_ref.is_none()),
                "{}: secrets are files, never env",
                e.name
            );
        }
    }
}

//! What the in-cluster Deployment mounts, made by `dispatch init`, so that nobody copies a file
//! into a key by hand: the ConfigMap `tenantci-dispatcher-config` (key `config.toml`) and the
//! Secret `tenantci-dispatcher` (one key per file the config names), in exactly the shape
//! `manifests/dispatch/deployment.yaml` projects into one directory, [`MOUNT_DIR`].
//!
//! The host's config names files by absolute host paths (the NATS password directory, the
//! webhook secret, the OpenSandbox key, the CAs); the Pod's config names the same files by
//! their key, relative to the config, so they resolve in the projected directory. Its
//! listeners are the ports the Deployment and its components name (`0.0.0.0`, the Pod IP),
//! and it names no kubeconfig (the ServiceAccount is the credential).
//!
//! [`plan`] is pure; [`objects`] reads the files (bounded, regular files only) into the two
//! objects; `init` applies them (`--apply-secret`) or writes them as a manifest
//! (`--secret-out`), and [`bao_put`] is the same Secret as an OpenBao command line for the
//! ExternalSecret of `manifests/components/openbao` (file names in argv, never a value).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::config::{Config, files};
use crate::queue::{permissions, users};
use tenantci_core::Result;
use tenantci_runner::tenant::apply::Object;

/// The ConfigMap the Deployment mounts `config.toml` from.
pub const CONFIG_MAP: &str = "tenantci-dispatcher-config";
/// The Secret every other file comes from.
pub const SECRET: &str = "tenantci-dispatcher";
/// The ConfigMap's one key.
pub const CONFIG_KEY: &str = "config.toml";
/// Where the Deployment projects the ConfigMap and the Secret (the config's directory).
pub const MOUNT_DIR: &str = "/etc/tenantci/dispatch";
/// The facade's container port (the Service `tenantci-dispatcher-facade` targets it).
pub const FACADE_PORT: u16 = 8443;
/// The webhook component's container port.
pub const WEBHOOK_PORT: u16 = 8090;
/// The KV v2 mount `manifests/components/openbao` reads (`ClusterSecretStore` `openbao`).
pub const BAO_MOUNT: &str = "ci";

/// The Secret's keys for the files the host's config names by absolute path.
pub mod keys {
    /// `webhook.secret_file`.
    pub const WEBHOOK_SECRET: &str = "webhook.secret";
    /// `vm.api_key_file`.
    pub const OPENSANDBOX_API_KEY: &str = "opensandbox-api.key";
    /// `nats.ca_file`.
    pub const NATS_CA: &str = "nats-ca.crt";
    /// `gitea.ca_file`.
    pub const GITEA_CA: &str = "gitea-ca.crt";
    /// `waiting_jobs.token_file`.
    pub const WAITING_JOBS_TOKEN: &str = "waiting-jobs.token";
    /// `cache.s3_credentials_file`.
    pub const CACHE_S3_CREDENTIALS: &str = "cache-s3.credentials";
}

/// Where `manifests/components/cache-volume` mounts the cache's claim: the Pod's `cache.dir`.
pub const CACHE_DIR: &str = "/var/cache/tenantci";

/// The largest file a key holds: keys, certificates, a CA bundle.
const MAX_FILE: u64 = tenantci_core::input::MAX_PEM;

/// One key of the Secret and the file on this host that fills it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Entry {
    /// The Secret's key, which is also the file's name in [`MOUNT_DIR`].
    pub key: String,
    /// The file on this host, absolute.
    pub source: PathBuf,
}

/// The Pod's config and the Secret's keys.
#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    /// The config as the Pod reads it: files by key, in-cluster listeners, no kubeconfig.
    pub config: Config,
    /// Every file the Secret holds, one per key.
    pub entries: Vec<Entry>,
}

/// The Pod's view of `host` (the config init writes, its relative names against `dir`).
/// `admin_password`: ci-admin's password is there too (then the Pod gets it as well).
pub fn plan(host: &Config, dir: &Path, admin_password: bool) -> Bundle {
    let abs = host.clone().resolved(dir);
    let mut pod = host.clone();
    let mut entries = Vec::new();
    let mut put = |key: &str, source: &Path| -> PathBuf {
        entries.push(Entry {
            key: key.to_string(),
            source: source.to_path_buf(),
        });
        PathBuf::from(key)
    };
    pod.gitea.credential_file = put(files::SCHEDULER_CREDENTIAL, &abs.gitea.credential_file);
    pod.facade.capability_key_file = put(files::CAPABILITY_KEY, &abs.facade.capability_key_file);
    pod.nats.sealing_key_file = put(files::SEALING_KEY, &abs.nats.sealing_key_file);
    pod.facade.ca_cert_file = put(files::FACADE_CA_CERT, &abs.facade.ca_cert_file);
    pod.facade.cert_file = put(files::FACADE_CERT, &abs.facade.cert_file);
    pod.facade.key_file = put(files::FACADE_KEY, &abs.facade.key_file);
    let mut nats_users = vec![users::PRODUCER, users::WORKER];
    if admin_password {
        nats_users.push(users::ADMIN);
    }
    for user in nats_users {
        let file = permissions::password_file(&abs.nats.secrets_dir, user);
        put(&format!("{user}.password"), &file);
    }
    // The password files sit beside the config in the Pod.
    pod.nats.secrets_dir = PathBuf::from(".");
    if let (Some(ca), Some(f)) = (pod.nats.ca_file.as_mut(), &abs.nats.ca_file) {
        *ca = put(keys::NATS_CA, f);
    }
    if let (Some(ca), Some(f)) = (pod.gitea.ca_file.as_mut(), &abs.gitea.ca_file) {
        *ca = put(keys::GITEA_CA, f);
    }
    if let (Some(w), Some(f)) = (pod.webhook.as_mut(), abs.webhook.as_ref()) {
        w.secret_file = put(keys::WEBHOOK_SECRET, &f.secret_file);
        w.listen = SocketAddr::from(([0, 0, 0, 0], WEBHOOK_PORT));
    }
    if let (Some(v), Some(f)) = (pod.vm.as_mut(), abs.vm.as_ref()) {
        v.api_key_file = put(keys::OPENSANDBOX_API_KEY, &f.api_key_file);
    }
    // Set by hand in the host's config (init keeps it across re-runs): the Pod needs it too.
    if let (Some(w), Some(f)) = (pod.waiting_jobs.as_mut(), abs.waiting_jobs.as_ref()) {
        w.token_file = put(keys::WAITING_JOBS_TOKEN, &f.token_file);
    }
    if let (Some(c), Some(f)) = (pod.cache.as_mut(), abs.cache.as_ref()) {
        if let (Some(creds), Some(file)) = (c.s3_credentials_file.as_mut(), &f.s3_credentials_file)
        {
            *creds = put(keys::CACHE_S3_CREDENTIALS, file);
        }
        // The host's directory is not in the Pod: the cache-volume component's claim is.
        if let Some(dir) = c.dir.as_mut() {
            *dir = PathBuf::from(CACHE_DIR);
        }
    }
    pod.cluster.kubeconfig = None;
    pod.facade.listen = SocketAddr::from(([0, 0, 0, 0], FACADE_PORT));
    Bundle {
        config: pod,
        entries,
    }
}

fn meta(name: &str, namespace: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        labels: Some(BTreeMap::from([
            (
                "app.kubernetes.io/name".to_string(),
                "tenantci-dispatcher".to_string(),
            ),
            (
                "app.kubernetes.io/managed-by".to_string(),
                "tenantci".to_string(),
            ),
        ])),
        ..ObjectMeta::default()
    }
}

/// The ConfigMap and the Secret, in apply order, with every file read (bounded).
pub fn objects(b: &Bundle, namespace: &str) -> Result<Vec<Object>> {
    let config_map = ConfigMap {
        metadata: meta(CONFIG_MAP, namespace),
        data: Some(BTreeMap::from([(
            CONFIG_KEY.to_string(),
            b.config.to_toml(),
        )])),
        ..ConfigMap::default()
    };
    let mut data = BTreeMap::new();
    for e in &b.entries {
        let what = format!("the file of the Secret key `{}`", e.key);
        let bytes = tenantci_core::input::read_bytes(&what, &e.source, MAX_FILE)?;
        data.insert(e.key.clone(), ByteString(bytes));
    }
    let secret = Secret {
        metadata: meta(SECRET, namespace),
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Secret::default()
    };
    Ok(vec![Object::ConfigMap(config_map), Object::Secret(secret)])
}

/// The objects as one YAML manifest (`kubectl apply -f`), for `--secret-out`.
pub fn manifest(objects: &[Object]) -> String {
    let docs: Vec<String> = objects
        .iter()
        .map(|o| {
            // k8s-openapi writes apiVersion and kind itself.
            match o {
                Object::ConfigMap(c) => serde_yaml::to_string(c),
                Object::Secret(s) => serde_yaml::to_string(s),
                other => unreachable!("only the ConfigMap and the Secret: {}", other.kind()),
            }
            .expect("a k8s object serializes as YAML")
        })
        .collect();
    format!(
        "# The in-cluster dispatcher's config and secrets, written by `tenantci dispatch init`\n\
         # (0600: it holds the keys). `kubectl apply -f` it, then apply manifests/dispatch.\n{}",
        docs.join("---\n")
    )
}

/// The Secret as one `bao kv put` for `manifests/components/openbao` (its ExternalSecret takes
/// every key of `<namespace>/dispatcher`): each value as `key=@file`, read by the CLI, so no
/// secret is in argv. (`vault kv put` takes the same arguments.)
pub fn bao_put(b: &Bundle, namespace: &str) -> String {
    let mut line = format!("bao kv put -mount={BAO_MOUNT} {namespace}/dispatcher");
    for e in &b.entries {
        line.push_str(&format!(" {}=@{}", e.key, e.source.display()));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Config {
        let mut c = crate::config::tests::sample();
        c.gitea.credential_file = files::SCHEDULER_CREDENTIAL.into();
        c.facade.capability_key_file = files::CAPABILITY_KEY.into();
        c.nats.sealing_key_file = files::SEALING_KEY.into();
        c.nats.secrets_dir = "/etc/tenantci/nats".into();
        c.nats.ca_file = Some("/etc/tenantci/nats-ca.pem".into());
        c.gitea.ca_file = Some("/etc/ssl/gitea.pem".into());
        c.webhook = Some(crate::claim::settings::Webhook::new(
            "127.0.0.1:8090".parse().unwrap(),
            "/root/webhook-secret".into(),
        ));
        c.waiting_jobs = Some(crate::claim::settings::WaitingJobs {
            scope: "admin".into(),
            token_file: "/root/forgejo-token".into(),
            interval: crate::claim::settings::defaults::waiting_jobs_interval(),
        });
        c
    }

    #[test]
    fn every_file_the_pod_config_names_is_a_key_of_the_secret() {
        let b = plan(&host(), Path::new("/root/dispatch"), false);
        let pod = b.config.clone().resolved(Path::new(MOUNT_DIR));
        let keys: Vec<&str> = b.entries.iter().map(|e| e.key.as_str()).collect();
        let named = |p: &Path| {
            let rel = p
                .strip_prefix(MOUNT_DIR)
                .unwrap()
                .to_str()
                .unwrap()
                .to_string();
            assert!(keys.contains(&rel.as_str()), "{rel} in {keys:?}");
        };
        named(&pod.gitea.credential_file);
        named(&pod.facade.capability_key_file);
        named(&pod.nats.sealing_key_file);
        named(&pod.facade.ca_cert_file);
        named(&pod.facade.cert_file);
        named(&pod.facade.key_file);
        named(pod.nats.ca_file.as_ref().unwrap());
        named(pod.gitea.ca_file.as_ref().unwrap());
        named(&pod.webhook.as_ref().unwrap().secret_file);
        named(&pod.waiting_jobs.as_ref().unwrap().token_file);
        assert_eq!(
            pod.cache.as_ref().unwrap().dir.as_deref(),
            Some(Path::new(CACHE_DIR)),
            "the cache-volume component's mount"
        );
        let mut s3 = host();
        s3.cache = Some(crate::cache::settings::CacheSettings {
            dir: None,
            s3_bucket: Some("ci-cache".into()),
            s3_credentials_file: Some("/root/s3.credentials".into()),
            ..crate::cache::settings::CacheSettings::in_dir("unused")
        });
        let b3 = plan(&s3, Path::new("/root/dispatch"), false);
        let pod3 = b3.config.clone().resolved(Path::new(MOUNT_DIR));
        assert_eq!(
            pod3.cache.unwrap().s3_credentials_file.unwrap(),
            Path::new(MOUNT_DIR).join(keys::CACHE_S3_CREDENTIALS)
        );
        assert!(
            b3.entries
                .iter()
                .any(|e| e.key == keys::CACHE_S3_CREDENTIALS)
        );
        for user in [users::PRODUCER, users::WORKER] {
            named(&permissions::password_file(&pod.nats.secrets_dir, user));
        }
        assert!(!keys.contains(&"ci-admin.password"), "{keys:?}");
        assert_eq!(pod.cluster.kubeconfig, None);
        assert_eq!(pod.facade.listen.to_string(), "0.0.0.0:8443");
        assert_eq!(pod.webhook.unwrap().listen.to_string(), "0.0.0.0:8090");
        // The host files fill them.
        let source = |k: &str| {
            b.entries
                .iter()
                .find(|e| e.key == k)
                .unwrap()
                .source
                .clone()
        };
        assert_eq!(
            source("sealing.key"),
            Path::new("/root/dispatch/sealing.key")
        );
        assert_eq!(
            source("ci-worker.password"),
            Path::new("/etc/tenantci/nats/ci-worker.password")
        );
        assert_eq!(
            source(keys::WEBHOOK_SECRET),
            Path::new("/root/webhook-secret")
        );
        let with_admin = plan(&host(), Path::new("/root/dispatch"), true);
        assert!(
            with_admin
                .entries
                .iter()
                .any(|e| e.key == "ci-admin.password")
        );
    }

    #[test]
    fn the_bao_line_names_files_never_values() {
        let b = plan(&host(), Path::new("/root/dispatch"), false);
        let line = bao_put(&b, "dynamic-runner");
        assert!(
            line.starts_with("bao kv put -mount=ci dynamic-runner/dispatcher scheduler.json=@/root/dispatch/scheduler.json "),
            "{line}"
        );
        assert_eq!(line.matches("=@").count(), b.entries.len(), "{line}");
    }
}

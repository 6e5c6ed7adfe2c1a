//! The dispatcher's Deployment as the kubelet would run it, without a kubelet: its projected
//! `config` volume materialized from the ConfigMap and Secret in the simulator (what
//! `dispatch init --apply-secret` applied), and its container's environment with the mount
//! path pointing there. A key the volume names that no object has, or a file the config or
//! an environment override names that the volume does not hold, fails the test naming it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::Value;

use tenantci_dispatch::config::Config;
use tenantci_testkit::kube::Kubectl;

use crate::util::stdout;

/// Where the Deployment mounts the volume (its `volumeMounts`), and the directory standing in.
pub struct Mounted {
    pub mount_path: String,
    pub dir: PathBuf,
    /// The container's literal `env` values, the mount path replaced by `dir`.
    pub env: BTreeMap<String, String>,
}

impl Mounted {
    /// The config as `dispatch run` in the Pod loads it (the environment applied).
    pub fn config(&self) -> Config {
        let env = self.env.clone();
        Config::load_with_env(&self.dir.join("config.toml"), &move |k| env.get(k).cloned())
            .unwrap_or_else(|e| panic!("the mounted config loads: {}", e.message()))
    }

    /// Every file the loaded config names is in the volume (the NATS passwords included).
    pub fn assert_every_file_resolves(&self) {
        let c = self.config();
        let mut named: Vec<PathBuf> = vec![
            c.gitea.credential_file.clone(),
            c.nats.sealing_key_file.clone(),
            c.facade.capability_key_file.clone(),
            c.facade.ca_cert_file.clone(),
            c.facade.cert_file.clone(),
            c.facade.key_file.clone(),
            c.nats.secrets_dir.join("ci-producer.password"),
            c.nats.secrets_dir.join("ci-worker.password"),
        ];
        named.extend(c.gitea.ca_file.clone());
        named.extend(c.nats.ca_file.clone());
        named.extend(c.webhook.as_ref().map(|w| w.secret_file.clone()));
        named.extend(c.vm.as_ref().map(|v| v.api_key_file.clone()));
        for f in named {
            assert!(
                f.starts_with(&self.dir) && f.is_file(),
                "{} is not in the projected volume {}",
                f.display(),
                self.dir.display()
            );
        }
    }
}

/// The one object `kind/name` in `namespace`, as JSON.
fn get(k: &Kubectl, namespace: &str, kind: &str, name: &str) -> Value {
    let o = k.run(&["-n", namespace, "get", kind, name, "-o", "json"]);
    assert!(
        o.status.success(),
        "the Deployment mounts {kind} {name}, which is not in {namespace}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(&stdout(&o)).unwrap()
}

/// The bytes of each key of a ConfigMap or Secret.
fn data(object: &Value) -> BTreeMap<String, Vec<u8>> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut out = BTreeMap::new();
    for (k, v) in object["data"].as_object().into_iter().flatten() {
        let text = v.as_str().unwrap();
        let bytes = match object["kind"].as_str() {
            Some("Secret") => b64.decode(text).unwrap(),
            _ => text.as_bytes().to_vec(),
        };
        out.insert(k.clone(), bytes);
    }
    out
}

/// Materializes `deployment`'s (rendered or read back, JSON) `config` volume into `dir` from
/// the objects in `namespace`, each item key checked to exist.
pub fn mount(k: &Kubectl, namespace: &str, deployment: &Value, dir: &Path) -> Mounted {
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let mount_path = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "config")
        .expect("a `config` volume mount")["mountPath"]
        .as_str()
        .unwrap()
        .to_string();
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "config")
        .expect("a `config` volume");
    std::fs::create_dir_all(dir).unwrap();
    for source in volume["projected"]["sources"].as_array().unwrap() {
        let (kind, spec) = match (source.get("configMap"), source.get("secret")) {
            (Some(c), _) => ("configmap", c),
            (_, Some(s)) => ("secret", s),
            _ => panic!("an unexpected projected source {source}"),
        };
        let name = spec["name"].as_str().unwrap();
        let keys = data(&get(k, namespace, kind, name));
        let items: Vec<(String, String)> = match spec["items"].as_array() {
            Some(items) => items
                .iter()
                .map(|i| {
                    let key = i["key"].as_str().unwrap().to_string();
                    (key, i["path"].as_str().unwrap().to_string())
                })
                .collect(),
            None => keys.keys().map(|k| (k.clone(), k.clone())).collect(),
        };
        for (key, path) in items {
            let bytes = keys
                .get(&key)
                .unwrap_or_else(|| panic!("{kind} {name} has no key `{key}`: {:?}", keys.keys()));
            let file = dir.join(path);
            tenantci_core::fsutil::write_new_atomic(&file, bytes, 0o600).unwrap();
        }
    }
    let mut env = BTreeMap::new();
    for e in container["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().unwrap().to_string();
        if let Some(v) = e["value"].as_str() {
            let local = v.replace(&mount_path, &dir.display().to_string());
            env.insert(name, local);
        } else if e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace" {
            // The downward API: the Pod's namespace is its Deployment's.
            let ns = deployment["metadata"]["namespace"].as_str().unwrap();
            env.insert(name, ns.to_string());
        }
    }
    Mounted {
        mount_path,
        dir: dir.to_path_buf(),
        env,
    }
}

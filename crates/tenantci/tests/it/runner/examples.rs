//! runner-configs/: the examples parse, the example config.toml passes the key check, and
//! the examples agree with the code: job sizes with the runbook's node (`tenant size`), the
//! pool label and taint with the executor Pods tenantci creates, the documented
//! organization with the RBAC group.

use std::path::{Path, PathBuf};

use tenantci_core::node_image::NodeImage;
use tenantci_runner::gitlab::config::{keys, merge};

use crate::util::{assert_exit, repo_file, run, scratch, stderr, stdout, tenantci};

fn example(rel: &str) -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../runner-configs")
        .join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (path, text)
}

#[test]
fn runner_examples_config_toml_uses_only_known_keys() {
    let (path, text) = example("gitlab-runner/config.toml");
    let doc = merge::parse(&path, &text).unwrap();
    assert_eq!(keys::check_document(&doc), vec![]);
    let k8s = &doc["runners"][0]["kubernetes"];
    assert_eq!(k8s["poll_timeout"].as_integer(), Some(600));
    for key in [
        "cpu_request_overwrite_max_allowed",
        "memory_request_overwrite_max_allowed",
    ] {
        assert!(
            k8s[key].is_str(),
            "{key} missing: the .gitlab-ci.yml example relies on it"
        );
    }
}

#[test]
fn runner_examples_pipelines_and_act_runner_config_parse() {
    let (_, ci) = example(".gitlab-ci.yml");
    let ci: serde_yaml::Value = serde_yaml::from_str(&ci).unwrap();
    assert!(ci["build"]["variables"]["KUBERNETES_CPU_REQUEST"].is_string());
    assert!(ci["default"]["tags"].as_sequence().is_some());

    let (_, wf) = example(".gitea/workflows/build.yaml");
    let wf: serde_yaml::Value = serde_yaml::from_str(&wf).unwrap();
    assert_eq!(
        wf["jobs"]["build"]["runs-on"],
        serde_yaml::from_str::<serde_yaml::Value>("[self-hosted, pod]").unwrap()
    );

    let (_, act) = example("act_runner/config.yaml");
    let config: tenantci_runner::act_runner::ActRunnerConfig = serde_yaml::from_str(&act).unwrap();
    config.validate().unwrap();
    let names: Vec<String> = config
        .runner
        .labels
        .iter()
        .map(|l| tenantci_runner::act_runner::Label::parse(l).unwrap().name)
        .collect();
    assert_eq!(
        names,
        vec!["self-hosted", "pod"],
        "must match runs-on in the workflow"
    );
}

/// `tenant size` of one job Pod (build container + the example's helper) on `image`.
fn size(image: &Path, k8s: &toml_edit::Item, cpu: &str, memory: &str) -> std::process::Output {
    run(tenantci()
        .args(["tenant", "size", "--node-image"])
        .arg(image)
        .args(["--cpu-request", cpu, "--memory-request", memory])
        .args([
            "--helper-cpu-request",
            k8s["helper_cpu_request"].as_str().unwrap(),
        ])
        .args([
            "--helper-memory-request",
            k8s["helper_memory_request"].as_str().unwrap(),
        ]))
}

/// Every job of .gitlab-ci.yml, and the largest job the config.toml ceilings allow, fits the
/// runbook's node (2 vCPU / 2048 MiB); each job stays within the ceilings (beyond them
/// gitlab-runner ignores the variable). The control: the sizes the example used to ask
/// (2 CPU / 4Gi) are refused, so this test can fail.
#[test]
fn runner_examples_jobs_fit_the_runbook_s_node() {
    let dir = scratch();
    let image = dir.path().join("node-image.json");
    std::fs::write(
        &image,
        serde_json::to_string(&NodeImage::default()).unwrap(),
    )
    .unwrap();
    let (path, text) = example("gitlab-runner/config.toml");
    let doc = merge::parse(&path, &text).unwrap();
    let k8s = &doc["runners"][0]["kubernetes"];
    let quantity = |q: &str| tenantci_core::quantity::parse_resource(q).unwrap();
    let max_cpu = k8s["cpu_request_overwrite_max_allowed"].as_str().unwrap();
    let max_memory = k8s["memory_request_overwrite_max_allowed"]
        .as_str()
        .unwrap();
    assert_exit(&size(&image, k8s, max_cpu, max_memory), 0);

    let (_, ci) = example(".gitlab-ci.yml");
    let ci: serde_yaml::Value = serde_yaml::from_str(&ci).unwrap();
    let jobs = ci
        .as_mapping()
        .unwrap()
        .iter()
        .filter(|(_, job)| job["script"].is_sequence());
    let mut count = 0;
    for (name, job) in jobs {
        let var =
            |v: &str, default: &str| job["variables"][v].as_str().unwrap_or(default).to_string();
        let cpu = var(
            "KUBERNETES_CPU_REQUEST",
            k8s["cpu_request"].as_str().unwrap(),
        );
        let memory = var(
            "KUBERNETES_MEMORY_REQUEST",
            k8s["memory_request"].as_str().unwrap(),
        );
        assert!(
            quantity(&cpu) <= quantity(max_cpu),
            "{name:?}: {cpu} over {max_cpu}"
        );
        assert!(
            quantity(&memory) <= quantity(max_memory),
            "{name:?}: {memory} over {max_memory}"
        );
        let o = size(&image, k8s, &cpu, &memory);
        assert_exit(&o, 0);
        assert!(stdout(&o).contains("fits"), "{name:?}: {}", stdout(&o));
        count += 1;
    }
    assert!(count >= 2, "{count} jobs");
    let o = size(&image, k8s, "2", "4Gi");
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("2048"), "{}", stderr(&o));
}

/// The GitLab job Pods land where the Gitea executor Pods do: the example's node selector is
/// the golden executor Pod's, and its tolerations cover that Pod's (a rented node's taint).
#[test]
fn runner_examples_select_the_pool_the_executor_pods_use() {
    let golden = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/dispatch/golden/executor-pod.yaml"),
    )
    .unwrap();
    let pod: serde_yaml::Value = serde_yaml::from_str(&golden).unwrap();
    let (path, text) = example("gitlab-runner/config.toml");
    let doc = merge::parse(&path, &text).unwrap();
    let k8s = &doc["runners"][0]["kubernetes"];
    let selector: std::collections::BTreeMap<String, String> = k8s["node_selector"]
        .as_table()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_str().unwrap().to_string()))
        .collect();
    let golden_selector: std::collections::BTreeMap<String, String> =
        serde_yaml::from_value(pod["spec"]["nodeSelector"].clone()).unwrap();
    assert_eq!(selector, golden_selector);
    let tolerations = k8s["node_tolerations"].as_table().unwrap();
    for t in pod["spec"]["tolerations"].as_sequence().unwrap() {
        let key = t["key"].as_str().unwrap();
        let effect = t["effect"].as_str().unwrap();
        let ours = match t["operator"].as_str() {
            Some("Exists") => key.to_string(),
            _ => format!("{key}={}", t["value"].as_str().unwrap()),
        };
        assert_eq!(
            tolerations.get(&ours).and_then(|v| v.as_str()),
            Some(effect),
            "the example tolerates {ours}:{effect} as the executor Pod does"
        );
    }
}

/// Every organization the docs mint a runner credential with is a group the shipped RBAC
/// binds, and `bootstrap runner --group` defaults to it: a reader following any page gets no 403.
#[test]
fn runner_examples_mint_the_organization_the_rbac_binds() {
    let rbac = std::fs::read_to_string(repo_file("manifests/gitlab-runner-rbac.yaml")).unwrap();
    let mut groups = std::collections::BTreeSet::new();
    for doc in serde_yaml::Deserializer::from_str(&rbac) {
        let object = <serde_yaml::Value as serde::Deserialize>::deserialize(doc).unwrap();
        for subject in object["subjects"].as_sequence().into_iter().flatten() {
            assert_eq!(subject["kind"], "Group");
            groups.insert(subject["name"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(groups.len(), 1, "{groups:?}");
    let group = groups.first().unwrap();

    let help = stdout(&run(tenantci().args(["bootstrap", "runner", "--help"])));
    let line = help
        .lines()
        .skip_while(|l| !l.contains("--group <GROUP>"))
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with("--"))
        .collect::<String>();
    assert!(line.contains(&format!("[default: {group}]")), "{line}");

    let mut found = 0;
    for page in docs() {
        let text = std::fs::read_to_string(&page).unwrap();
        let words: Vec<&str> = text.split_whitespace().collect();
        let mut organizations: Vec<&str> = words
            .windows(2)
            .filter(|w| w[0] == "--organization")
            .map(|w| w[1])
            .collect();
        organizations.extend(
            words
                .iter()
                .filter_map(|w| w.strip_prefix("SOCIALWEB_TENANTCREDENTIAL_ORGANIZATIONS=")),
        );
        for o in organizations
            .into_iter()
            .filter(|o| !o.chars().all(|c| c.is_ascii_uppercase()))
        {
            found += 1;
            assert_eq!(
                o,
                group,
                "{}: --organization {o} is not the bound group",
                page.display()
            );
        }
    }
    assert!(found >= 2, "{found} organizations in the docs");
}

fn docs() -> Vec<PathBuf> {
    let mut pages = vec![repo_file("README.md")];
    let mut dirs = vec![repo_file("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages
}

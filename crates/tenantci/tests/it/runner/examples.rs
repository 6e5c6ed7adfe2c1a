//! runner-configs/: the examples parse, and the example config.toml passes the key check.

use std::path::{Path, PathBuf};

use tenantci_app::runner::gitlab_config::{keys, merge};

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
    assert_eq!(ci["build"]["variables"]["KUBERNETES_CPU_REQUEST"], "2");
    assert!(ci["default"]["tags"].as_sequence().is_some());

    let (_, wf) = example(".gitea/workflows/build.yaml");
    let wf: serde_yaml::Value = serde_yaml::from_str(&wf).unwrap();
    assert_eq!(
        wf["jobs"]["build"]["runs-on"],
        serde_yaml::from_str::<serde_yaml::Value>("[self-hosted, pod]").unwrap()
    );

    let (_, act) = example("act_runner/config.yaml");
    let config: tenantci_app::runner::gitea_files::ActRunnerConfig =
        serde_yaml::from_str(&act).unwrap();
    config.validate().unwrap();
    let names: Vec<String> = config
        .runner
        .labels
        .iter()
        .map(|l| {
            tenantci_app::runner::gitea_files::Label::parse(l)
                .unwrap()
                .name
        })
        .collect();
    assert_eq!(
        names,
        vec!["self-hosted", "pod"],
        "must match runs-on in the workflow"
    );
}

//! Which backend runs a task: by its `runs-on` labels, each backend's own label
//! (`backend::catalog::route`: `vm` selects the VM backend), everything else on the default
//! backend (the first registered).

pub use crate::backend::catalog::route;

/// The `runs-on` labels of a task's workflow payload (the expanded single-job YAML Gitea
/// sends): `runs-on: label` or `runs-on: [a, b]`. Unknown shapes yield no labels.
pub fn runs_on(workflow_payload: &[u8]) -> Vec<String> {
    let Ok(doc) = serde_yaml::from_slice::<serde_yaml::Value>(workflow_payload) else {
        return Vec::new();
    };
    let jobs = doc.get("jobs").and_then(|j| j.as_mapping());
    let runs_on = jobs
        .and_then(|m| m.values().next())
        .and_then(|job| job.get("runs-on"))
        .or_else(|| doc.get("runs-on"));
    match runs_on {
        Some(serde_yaml::Value::String(s)) => vec![s.clone()],
        Some(serde_yaml::Value::Sequence(seq)) => seq
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_runs_on_from_the_payload() {
        let p = b"name: build\njobs:\n  build:\n    runs-on: [self-hosted, pod]\n    steps: []\n";
        assert_eq!(runs_on(p), vec!["self-hosted", "pod"]);
        assert_eq!(runs_on(b"jobs:\n  b:\n    runs-on: vm\n"), vec!["vm"]);
        assert!(runs_on(b"not: [yaml").is_empty());
    }
}

//! Executor identity (issue 15, the `[identity]` section): which SPIFFE ID a task's executor
//! must present at the facade, and how the executor gets its SVID. `settings` is the config
//! section, `init` the `--spiffe-*` flags; `entries` (pure) plans one ClusterStaticEntry per
//! scheduled executor Pod, for the node's SPIRE agent to serve, and the pod backend's
//! `registrar` (`backend::pod::registrar`) writes them; `own` is the dispatcher's SVID at run
//! time, which the facade presents and with which, for an executor that runs no SPIRE agent
//! (a VM sandbox), the dispatcher mints the executor's SVID at the SPIRE server.
//!
//! A task's ID is rendered from its own Gitea context (`repository`, `job`), which only the
//! sealed assignment carries. The executor's spec (`task::spec`, from the assignment opened
//! once in `task::opened`) renders the ID and binds it into the capability
//! (`capability::CapabilityKey::token_for`): the facade then checks the client's SPIFFE ID
//! with the capability alone, statelessly, on every request, including those after the
//! sealed assignment is dropped at the executor's first report.

pub mod entries;
pub mod init;
pub mod own;
pub mod settings;

use crate::queue::assignment::context_str;
use tenantci_core::forge::gitea::proto::Task;
use tenantci_core::spiffe::SpiffeId;
use tenantci_core::spiffe::id::Values;

pub use settings::{Identity, Parsed};

/// The SPIFFE ID of `task`'s executor. An error (a context without `repository` or `job`, or
/// values that make no SPIFFE ID) says why; the task then fails at its start instead of
/// running under an ID nobody can check.
pub fn task_id(identity: &Parsed, task: &Task) -> Result<SpiffeId, String> {
    let td = identity.trust_domain.to_string();
    let values = Values {
        trust_domain: Some(&td),
        repository: context_str(task, "repository"),
        job: context_str(task, "job"),
        ..Values::default()
    };
    identity
        .id_template
        .render(&values)
        .map_err(|e| format!("no SPIFFE ID for task {}: {}", task.id, e.message()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_types::value::Kind;

    fn task(fields: &[(&str, &str)]) -> Task {
        let mut context = prost_types::Struct::default();
        for (k, v) in fields {
            context.fields.insert(
                k.to_string(),
                prost_types::Value {
                    kind: Some(Kind::StringValue(v.to_string())),
                },
            );
        }
        Task {
            id: 9,
            context: Some(context),
            ..Default::default()
        }
    }

    #[test]
    fn a_task_s_id_comes_from_its_repository_and_job() {
        let p = settings::tests::identity().parse().unwrap();
        let id = task_id(
            &p,
            &task(&[("repository", "acme/widgets"), ("job", "build")]),
        )
        .unwrap();
        assert_eq!(
            id.to_string(),
            "spiffe://example.org/gitea/acme/widgets/build"
        );
        let e = task_id(&p, &task(&[("repository", "acme/widgets")])).unwrap_err();
        assert!(e.contains("{job}") && e.contains("task 9"), "{e}");
        let e = task_id(&p, &task(&[("repository", "acme/w"), ("job", "a b")])).unwrap_err();
        assert!(e.contains("not a SPIFFE ID"), "{e}");
    }
}

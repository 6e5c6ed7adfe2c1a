//! The executor objects on the tenant cluster: Secret and Pod `gitea-task-<id>` in the
//! dispatch namespace. Every read and write of them goes through here, so the worker, the
//! facade and the reconciler agree on names, labels and the order of operations.
//!
//! Idempotent by name: creating what exists already is success when it carries the same
//! assignment id, and a refusal when it carries another (a task id is never reused by Gitea,
//! so that means someone else's object). The sealed assignment stays in the Secret, handed only
//! to the attempt named by the Secret, until that executor's first report consumes it
//! ([`ExecutorObjects::consume_assignment`], guarded by a JSON-patch `test`): an executor
//! whose FetchTask answer was lost gets its task again on retry, and nobody gets it after.
//!
//! An object of a newer format ([`manifest::KIND`]) is not this release's to read: it is
//! reported once ([`readable`]), seen by no watch and changed by no write here.

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::backend::pod::manifest::{
    self, ASSIGNMENT_ANNOTATION, ASSIGNMENT_KEY, CONSUMED_ANNOTATION, FETCHED_ANNOTATION,
    FORMAT_ANNOTATION, TERMINAL_ANNOTATION,
};
use crate::backend::{Created, Presence};
use crate::capability;
use crate::task::spec::ExecutorSpec;
use crate::task_id::TaskId;

/// Why a task's Secret and Pod could not be created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// An object of that name carries another assignment: someone else's, left alone.
    #[error("`{name}` exists for another assignment (`{found}`); it is left alone")]
    Foreign {
        /// The object's name, `gitea-task-<id>`.
        name: String,
        /// The assignment id it carries (empty: none).
        found: String,
    },
    /// The apiserver refused or could not be reached.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// The executor Secrets and Pods in one namespace of the tenant cluster.
#[derive(Clone)]
pub struct ExecutorObjects {
    pub(super) pods: Api<Pod>,
    pub(super) secrets: Api<Secret>,
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

pub(super) fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Whether this release reads the object (`what`: `Pod`, `Secret`) whose metadata is `meta`;
/// one of a newer format is reported (once) and not.
pub(super) fn readable(meta: &ObjectMeta, what: &str) -> bool {
    match manifest::KIND.check_text(annotation(meta, FORMAT_ANNOTATION)) {
        Ok(_) => true,
        Err(newer) => {
            let ns = meta.namespace.as_deref().unwrap_or_default();
            let name = meta.name.as_deref().unwrap_or_default();
            crate::newer_records::report(&newer, &format!("{what} {ns}/{name}"));
            false
        }
    }
}

/// The task and attempt of an executor object (`what`: `Pod`, `Secret`) this release reads.
pub(super) fn task_of(meta: &ObjectMeta, what: &str) -> Option<(TaskId, u32)> {
    let id = annotation(meta, ASSIGNMENT_ANNOTATION)?;
    readable(meta, what)
        .then(|| capability::parse_assignment_id(id))
        .flatten()
}

impl ExecutorObjects {
    /// The executor objects in `namespace`, through `client`.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        ExecutorObjects {
            pods: Api::namespaced(client.clone(), namespace),
            secrets: Api::namespaced(client, namespace),
        }
    }

    /// Creates the Secret, then the Pod (which mounts it). Safe to repeat.
    pub async fn create(&self, spec: &ExecutorSpec, sealed: &[u8]) -> Result<Created, CreateError> {
        let name = manifest::object_name(spec.task_id);
        let pp = PostParams::default();
        let mut existed = false;
        match self
            .secrets
            .create(&pp, &manifest::desired_secret(spec, sealed))
            .await
        {
            Ok(_) => {}
            Err(e) if is_status(&e, 409) => {
                existed = true;
                let live = self.secrets.get(&name).await?;
                self.check_same(&name, &live.metadata, spec, "Secret")?;
            }
            Err(e) => return Err(e.into()),
        }
        match self.pods.create(&pp, &manifest::desired_pod(spec)).await {
            Ok(_) => {}
            Err(e) if is_status(&e, 409) => {
                existed = true;
                let live = self.pods.get(&name).await?;
                self.check_same(&name, &live.metadata, spec, "Pod")?;
            }
            Err(e) => return Err(e.into()),
        }
        Ok(if existed {
            Created::Existing
        } else {
            Created::New
        })
    }

    fn check_same(
        &self,
        name: &str,
        meta: &ObjectMeta,
        spec: &ExecutorSpec,
        what: &str,
    ) -> Result<(), CreateError> {
        let found = annotation(meta, ASSIGNMENT_ANNOTATION).unwrap_or("");
        if found == spec.assignment_id && readable(meta, what) {
            Ok(())
        } else {
            Err(CreateError::Foreign {
                name: name.to_string(),
                found: found.to_string(),
            })
        }
    }

    /// The sealed assignment in the task's Secret, whoever's attempt it is.
    pub async fn sealed_assignment(&self, task_id: TaskId) -> Result<Option<Vec<u8>>, kube::Error> {
        let secret = self
            .secrets
            .get_opt(&manifest::object_name(task_id))
            .await?;
        Ok(secret
            .and_then(|s| s.data)
            .and_then(|mut d| d.remove(ASSIGNMENT_KEY))
            .map(|b| b.0))
    }

    /// Whether the task's Pod or Secret exists.
    pub async fn any_exists(&self, task_id: TaskId) -> Result<bool, kube::Error> {
        let name = manifest::object_name(task_id);
        Ok(self.pods.get_opt(&name).await?.is_some()
            || self.secrets.get_opt(&name).await?.is_some())
    }

    /// The sealed assignment for the executor `assignment_id` (task and attempt): Some while
    /// the Secret holds it for that attempt and no report consumed it, None otherwise. The
    /// first hand-out stamps the Secret [`FETCHED_ANNOTATION`] (the start deadline stops).
    pub async fn fetch_assignment(
        &self,
        task_id: TaskId,
        assignment_id: &str,
    ) -> Result<Option<Vec<u8>>, kube::Error> {
        let name = manifest::object_name(task_id);
        let Some(secret) = self.secrets.get_opt(&name).await? else {
            return Ok(None);
        };
        if annotation(&secret.metadata, ASSIGNMENT_ANNOTATION) != Some(assignment_id)
            || !readable(&secret.metadata, "Secret")
        {
            // A replaced attempt: the Secret belongs to its successor now (or to a newer
            // release).
            return Ok(None);
        }
        let Some(sealed) = secret.data.as_ref().and_then(|d| d.get(ASSIGNMENT_KEY)) else {
            return Ok(None);
        };
        if annotation(&secret.metadata, FETCHED_ANNOTATION).is_none() {
            let patch = json!({"metadata": {"annotations": {FETCHED_ANNOTATION: chrono::Utc::now().to_rfc3339()}}});
            self.secrets
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        Ok(Some(sealed.0.clone()))
    }

    /// Removes the sealed assignment from the Secret: the executor `assignment_id` reported,
    /// so it has its task. Idempotent; a concurrent consumer loses the `test` harmlessly.
    /// [`Presence::Gone`] when the task has no Secret any more: its executor objects were
    /// deleted, so the task is over (or reported FAILURE by the reconciler).
    pub async fn consume_assignment(
        &self,
        task_id: TaskId,
        assignment_id: &str,
    ) -> Result<Presence, kube::Error> {
        let name = manifest::object_name(task_id);
        let Some(secret) = self.secrets.get_opt(&name).await? else {
            return Ok(Presence::Gone);
        };
        if annotation(&secret.metadata, ASSIGNMENT_ANNOTATION) != Some(assignment_id)
            || !readable(&secret.metadata, "Secret")
        {
            return Ok(Presence::Present);
        }
        let Some(sealed) = secret.data.as_ref().and_then(|d| d.get(ASSIGNMENT_KEY)) else {
            return Ok(Presence::Present);
        };
        let encoded = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(&sealed.0)
        };
        let mut ops = vec![
            json!({"op": "test", "path": format!("/data/{ASSIGNMENT_KEY}"), "value": encoded}),
            json!({"op": "remove", "path": format!("/data/{ASSIGNMENT_KEY}")}),
        ];
        if secret.metadata.annotations.is_none() {
            ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
        }
        let now = chrono::Utc::now().to_rfc3339();
        for key in [FETCHED_ANNOTATION, CONSUMED_ANNOTATION] {
            ops.push(json!({
                "op": "add",
                "path": format!("/metadata/annotations/{}", key.replace('/', "~1")),
                "value": now,
            }));
        }
        let patch: json_patch::Patch =
            serde_json::from_value(json!(ops)).expect("the patch is well-formed");
        match self
            .secrets
            .patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(_) => Ok(Presence::Present),
            // The test failed (consumed already) or the Secret went away meanwhile.
            Err(e) if is_status(&e, 422) || is_status(&e, 409) => Ok(Presence::Present),
            Err(e) if is_status(&e, 404) => Ok(Presence::Gone),
            Err(e) => Err(e),
        }
    }

    /// Puts the terminal marker on the Pod: Gitea has the task's final state.
    pub async fn mark_terminal(&self, task_id: TaskId) -> Result<(), kube::Error> {
        let patch = json!({"metadata": {"annotations": {TERMINAL_ANNOTATION: chrono::Utc::now().to_rfc3339()}}});
        match self
            .pods
            .patch(
                &manifest::object_name(task_id),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes Pod and Secret (immediately: the task is over); absent objects are fine.
    pub async fn delete(&self, task_id: TaskId) -> Result<(), kube::Error> {
        let name = manifest::object_name(task_id);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        for result in [
            self.pods.delete(&name, &dp).await.map(|_| ()),
            self.secrets.delete(&name, &dp).await.map(|_| ()),
        ] {
            match result {
                Ok(()) => {}
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

//! A task's sealed assignment, opened once: the Gitea task decoded and the resource class the
//! scheduler picked resolved against this dispatcher's classes. The worker, a replacement and
//! recovery start an executor from it (`spec::ExecutorTemplate::spec`), which reads the
//! task's SPIFFE ID and cache scope from it rather than opening the assignment again.
//!
//! The facade opens an assignment once more, when its executor fetches it: by then it is
//! sealed again in the executor's Secret or the claim ledger, and the hand-out is its own step.
//!
//! Holds the task's secrets (its runtime token) in memory only: no `Debug`, nothing logged.

use prost::Message as _;

use crate::backend_kind::BackendKind;
use crate::queue::assignment::{Assignment, SealingKey};
use crate::sizing::class::{self, ExecutorClass};
use crate::task_id::TaskId;
use tenantci_core::forge::gitea::proto::Task;

/// A task's assignment, opened and checked ([`Opened::open`]). Holds the task's secrets: no
/// `Debug`, never logged.
pub struct Opened {
    /// The Gitea task id.
    pub task: TaskId,
    /// The attempt the assignment is for.
    pub attempt: u32,
    /// The backend it was queued for.
    pub backend: BackendKind,
    /// The job's runs-on labels (the runner registers with them).
    pub labels: Vec<String>,
    /// The class the scheduler picked (None: this dispatcher has no classes).
    pub class: Option<ExecutorClass>,
    /// The Gitea task as the scheduler sealed it, decoded: what the SPIFFE ID and the cache
    /// grant are read from. It holds the task's secrets: never log it.
    pub gitea_task: Task,
    /// Its bytes as sealed, for the next attempt: decoding and encoding again would drop
    /// fields this build does not know, which the runner may.
    payload: Vec<u8>,
}

impl Opened {
    /// Opens `a` with `key` and resolves its class among `classes`. An error is why the task
    /// can never start here (the caller reports FAILURE with it).
    pub fn open(
        key: &SealingKey,
        classes: &[ExecutorClass],
        a: &Assignment,
    ) -> Result<Opened, String> {
        let task = a.task().map_err(|e| e.to_string())?;
        let payload = a
            .open(key)
            .map_err(|e| format!("the assignment does not open: {e}"))?;
        let gitea_task =
            Task::decode(payload.as_slice()).map_err(|_| "the task does not decode".to_string())?;
        let class = class::named(classes, a.class.as_deref(), &a.labels)?.cloned();
        Ok(Opened {
            task,
            attempt: a.attempt,
            backend: a.backend,
            labels: a.labels.clone(),
            class,
            gitea_task,
            payload,
        })
    }

    /// The same task's attempt `attempt`: its assignment sealed again (the attempt is bound
    /// in), with the same labels and class, and the task as opened for it.
    pub fn next_attempt(
        self,
        key: &SealingKey,
        attempt: u32,
    ) -> Result<(Assignment, Opened), String> {
        let next = Assignment::seal_in_class(
            key,
            &self.task.to_string(),
            attempt,
            self.backend,
            self.labels.clone(),
            self.class.as_ref().map(|c| c.name.clone()),
            &self.payload,
        )
        .map_err(|e| format!("the assignment cannot be sealed again ({e})"))?;
        Ok((next, Opened { attempt, ..self }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sizing::class::tests::class;

    fn classes() -> Vec<ExecutorClass> {
        let mut small = class("small", "500m", "512Mi", 4);
        small.label = "small".into();
        let mut large = class("large", "1", "1Gi", 1);
        large.label = "large".into();
        vec![small, large]
    }

    fn sealed(
        key: &SealingKey,
        labels: &[&str],
        class: Option<&str>,
        payload: &[u8],
    ) -> Assignment {
        let labels = labels.iter().map(|l| l.to_string()).collect();
        Assignment::seal_in_class(
            key,
            "7",
            1,
            BackendKind::new("pod"),
            labels,
            class.map(Into::into),
            payload,
        )
        .unwrap()
    }

    /// The class is the scheduler's: an assignment naming `large` starts as `large` whatever its
    /// labels would pick now; one naming a class the config no longer has (changed while the
    /// task waited), or queued before classes were named, is picked from its labels.
    #[test]
    fn the_class_the_scheduler_named_is_taken_not_picked_again() {
        let key = SealingKey::generate();
        let classes = classes();
        let named = sealed(&key, &["small"], Some("large"), b"");
        let o = Opened::open(&key, &classes, &named).unwrap();
        assert_eq!(o.class.map(|c| c.name), Some("large".to_string()));
        let renamed = sealed(&key, &["small"], Some("gone"), b"");
        let o = Opened::open(&key, &classes, &renamed).unwrap();
        assert_eq!(o.class.map(|c| c.name), Some("small".to_string()));
        let older = sealed(&key, &["small"], None, b"");
        let o = Opened::open(&key, &classes, &older).unwrap();
        assert_eq!(o.class.map(|c| c.name), Some("small".to_string()));
    }

    /// A next attempt seals the very bytes the scheduler sealed (a field this build does not
    /// know survives for the runner), with the attempt and the class bound in.
    #[test]
    fn the_next_attempt_keeps_the_payload_and_the_class() {
        let key = SealingKey::generate();
        // Task id 7 (field 1), then field 99 (a varint), unknown to this build's `Task`.
        let payload = [0x08, 0x07, 0x98, 0x06, 0x01];
        let a = sealed(&key, &["large"], Some("large"), &payload);
        let (next, o) = Opened::open(&key, &classes(), &a)
            .unwrap()
            .next_attempt(&key, 2)
            .unwrap();
        assert_eq!((next.attempt, o.attempt, o.task), (2, 2, TaskId::new(7)));
        assert_eq!(next.class.as_deref(), Some("large"));
        assert_eq!(next.open(&key).unwrap(), payload);
    }
}

//! The backends this build runs, each registered by one line in [`REGISTERED`]: what the rest
//! of the dispatcher knows about it ([`BackendFacts`]) and how it is built for a run.
//!
//! Lower floors key by [`BackendKind`] and get facts as data from here (the queue's subjects
//! and consumers, capacity, routing, recovery's words); the order of [`REGISTERED`] is the
//! order of consumers, permissions and status lines, the default backend first.

use std::sync::Arc;

use super::provider::{Inputs, Provider};
use super::{Backend, BackendFacts, BackendKind};
use crate::sizing::class::ExecutorClass;

/// Every backend of this build, the default backend first: one line each.
pub const REGISTERED: &[&dyn Provider] = &[
    &super::pod::PROVIDER,
    &super::vm::PROVIDER,
    #[cfg(feature = "fake-backend")]
    &super::fake::PROVIDER,
];

/// Every backend's facts, in registration order.
pub fn all() -> impl Iterator<Item = &'static BackendFacts> {
    REGISTERED.iter().map(|p| p.facts())
}

/// Every backend's name, in registration order.
pub fn kinds() -> Vec<BackendKind> {
    all().map(|f| f.kind).collect()
}

/// The facts of `kind`; None: this build has no such backend.
pub fn facts(kind: BackendKind) -> Option<&'static BackendFacts> {
    all().find(|f| f.kind == kind)
}

/// The backend that takes every task no other backend's label selects.
pub fn default_kind() -> BackendKind {
    all()
        .find(|f| f.label.is_none())
        .map(|f| f.kind)
        .expect("one registered backend has no label: the default")
}

/// The backend a task with `runs_on` labels runs on: the first whose label is among them
/// (any case), else the default.
pub fn route<S: AsRef<str>>(runs_on: &[S]) -> BackendKind {
    all()
        .find(|f| {
            f.label.is_some_and(|label| {
                runs_on
                    .iter()
                    .any(|l| l.as_ref().eq_ignore_ascii_case(label))
            })
        })
        .map(|f| f.kind)
        .unwrap_or_else(default_kind)
}

/// The backend a resource class's executors run on (its `backend`, else the default).
pub fn of_class(class: &ExecutorClass) -> BackendKind {
    class.backend.unwrap_or_else(default_kind)
}

/// What turns `kind` on, for the sentence that refuses a job asking for it.
pub fn turned_on_by(kind: BackendKind) -> &'static str {
    facts(kind).map_or("this build has no such backend", |f| f.turned_on_by)
}

/// The names of this build's backends for a sentence: "`pod` or `vm`".
pub fn named_for_a_sentence() -> String {
    let names: Vec<String> = all().map(|f| format!("`{}`", f.kind)).collect();
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Every backend this run's configuration turns on, in registration order.
pub fn build(mut inputs: Inputs) -> Vec<Arc<dyn Backend>> {
    REGISTERED
        .iter()
        .filter_map(|p| p.build(&mut inputs))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_backend_comes_first_and_is_the_only_one_without_a_label() {
        let all: Vec<_> = all().collect();
        assert!(all[0].label.is_none());
        assert_eq!(all.iter().filter(|f| f.label.is_none()).count(), 1);
        assert_eq!(default_kind(), all[0].kind);
    }

    #[test]
    fn names_and_labels_are_unique() {
        let mut names: Vec<_> = kinds().iter().map(|k| k.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), REGISTERED.len());
        for f in all() {
            assert_eq!(BackendKind::learn(f.kind.name()), Ok(f.kind));
        }
    }

    #[test]
    fn a_label_routes_to_its_backend_and_anything_else_to_the_default() {
        for f in all() {
            if let Some(label) = f.label {
                assert_eq!(route(&["self-hosted", &label.to_uppercase()]), f.kind);
            }
        }
        assert_eq!(route(&["self-hosted", "linux"]), default_kind());
        assert_eq!(route::<&str>(&[]), default_kind());
    }
}

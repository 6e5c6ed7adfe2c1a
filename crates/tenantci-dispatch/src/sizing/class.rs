//! Resource classes (`[[executor.class]]`): a `runs-on` label that selects a size, a placement
//! and a backend for a job, with a capacity of its own within the backend's. Pure: the
//! scheduler picks a claimed task's class here, the worker sizes its executor from it, and
//! `dispatch init` declares every class label and checks every class against the node image.
//!
//! Invariant: a job's labels pick exactly one class, or the job is refused with a sentence
//! naming its labels and the classes (never a silent default). Without classes nothing here
//! applies and a job is routed by the backends' own labels alone (`claim::routing::route`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Toleration;
use serde::{Deserialize, Serialize};

use crate::backend_kind::{BackendFacts, BackendKind};
use crate::sizing::resources::Resources;
use tenantci_core::duration::GoDuration;
use tenantci_core::node_image::NodeImage;

/// One class of executors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorClass {
    /// The class's name (a DNS label): metrics, logs and the warm pool's Pods carry it.
    pub name: String,
    /// The `runs-on` label that selects it (registered at Gitea beside `gitea.labels`).
    pub label: String,
    /// Where its executors run; absent: the default backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendKind>,
    /// The runner container's CPU request (pod) or the sandbox's CPU limit (vm).
    pub cpu: String,
    /// The runner container's memory request and limit (pod) or the sandbox's limit (vm).
    pub memory: String,
    /// The runner container's ephemeral storage (pod); absent: `executor.resources`'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<String>,
    /// Executors of this class at once, within the backend's capacity.
    pub capacity: u32,
    /// Pod nodeSelector; absent: `executor.node_selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Pod tolerations; absent: `executor.tolerations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Pod runtimeClassName; absent: `executor.runtime_class_name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    /// A warm pool of pause Pods sized like this class's executors (only on a backend whose
    /// executors run on rented nodes); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<WarmPool>,
}

/// `[executor.class.warm]`: the limits of a class's demand-driven warm pool
/// (`sizing::warm` decides its size).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmPool {
    /// Warm slots kept however quiet it is.
    #[serde(default)]
    pub min: u32,
    /// Warm slots at most (at most the class's capacity).
    pub max: u32,
    /// How long after the last arrival or announcement the pool keeps its size.
    #[serde(default = "warm_idle")]
    pub idle: GoDuration,
    /// How far back arrivals count as the demand of the next moment.
    #[serde(default = "warm_window")]
    pub window: GoDuration,
}

/// 10 min: a quiet spell between two pushes of a working day keeps its nodes; a night does not.
fn warm_idle() -> GoDuration {
    std::time::Duration::from_secs(600).into()
}

/// 5 min: about one CI round trip (push, pipeline, fix, push).
fn warm_window() -> GoDuration {
    std::time::Duration::from_secs(300).into()
}

impl WarmPool {
    /// The decision's limits for a class of `capacity`.
    pub fn limits(&self, capacity: u32) -> crate::sizing::warm::Limits {
        crate::sizing::warm::Limits {
            min: self.min,
            max: self.max,
            idle: self.idle.get(),
            capacity,
        }
    }
}

impl ExecutorClass {
    /// A class on the default backend selected by the `runs-on` label of its own name, with
    /// `[executor]`'s placement and no warm pool: the shape `[[executor.class]]` takes with
    /// only the keys that have no default.
    pub fn pod(name: &str, cpu: &str, memory: &str, capacity: u32) -> Self {
        ExecutorClass {
            name: name.into(),
            label: name.into(),
            backend: None,
            cpu: cpu.into(),
            memory: memory.into(),
            ephemeral_storage: None,
            capacity,
            node_selector: None,
            tolerations: None,
            runtime_class_name: None,
            warm: None,
        }
    }

    /// The runner container's resources for this class (`base` for what it leaves unset).
    pub fn resources(&self, base: &Resources) -> Resources {
        Resources {
            cpu: self.cpu.clone(),
            cpu_limit: None,
            memory: self.memory.clone(),
            memory_limit: None,
            ephemeral_storage: self
                .ephemeral_storage
                .clone()
                .unwrap_or_else(|| base.ephemeral_storage.clone()),
            ephemeral_storage_limit: None,
        }
    }

    /// The executor of a class whose backend runs on rented nodes (`rented_nodes`, its
    /// backend's fact), against a rented node of `image`: exit 2 with one sentence naming the
    /// class when it cannot fit (its jobs would wait for a node that never comes). A class on
    /// another backend (a sandbox) needs no node.
    pub fn check_fits(
        &self,
        base: &Resources,
        image: &NodeImage,
        rented_nodes: bool,
    ) -> tenantci_core::Result<()> {
        if !rented_nodes {
            return Ok(());
        }
        self.resources(base).check_fits_as(
            image,
            &format!("the executor Pod of class `{}`", self.name),
            &format!("executor.class `{}`'s cpu and memory", self.name),
            &format!("executor.class `{}`'s ephemeral_storage", self.name),
        )
    }

    fn validate(&self, base: &Resources, backend: &BackendFacts) -> Result<(), String> {
        let at = format!("executor.class `{}`", self.name);
        if !tenantci_core::dns::is_label(&self.name) {
            return Err(format!(
                "has an executor.class named `{}`, which is not a DNS label (lower-case letters, digits and `-`)",
                tenantci_core::input::shown(&self.name)
            ));
        }
        if self.label.trim().is_empty() || self.label.contains(char::is_whitespace) {
            return Err(format!(
                "has {at} with label `{}`; a runs-on label is one word",
                tenantci_core::input::shown(&self.label)
            ));
        }
        if self.capacity == 0 {
            return Err(format!("has {at} with capacity = 0 (at least 1)"));
        }
        self.resources(base)
            .validate()
            .map_err(|e| e.replace("executor.resources.", &format!("{at}: ")))?;
        if let Some(rc) = &self.runtime_class_name
            && !tenantci_core::dns::is_subdomain(rc)
        {
            return Err(format!(
                "has {at} with runtime_class_name = `{rc}`, which is not a DNS subdomain"
            ));
        }
        if let Some(w) = &self.warm {
            if !backend.rented_nodes {
                return Err(format!(
                    "has {at} with a warm pool on the {} backend; pause Pods keep rented nodes warm, so only pod classes have one",
                    backend.kind
                ));
            }
            if w.max == 0 || w.max > self.capacity || w.min > w.max {
                return Err(format!(
                    "has {at} with warm min = {}, max = {}; want 0 <= min <= max, 1 <= max <= capacity ({})",
                    w.min, w.max, self.capacity
                ));
            }
        }
        Ok(())
    }
}

/// A class's backend as the config sees it (`Config` knows which backends this build has and
/// which it turns on).
pub struct BackendOfClass {
    /// What the backend registered.
    pub facts: &'static BackendFacts,
    /// Its capacity; None: the config leaves it off.
    pub capacity: Option<u32>,
}

/// Every class valid on its own, names and labels unique, each on a backend the config turns
/// on and within its capacity. `backend_of` answers for a class's `backend` (None: the
/// default), or the sentence refusing a name this build does not have. The config's message
/// form ("has ...").
pub fn validate(
    classes: &[ExecutorClass],
    base: &Resources,
    backend_of: impl Fn(Option<BackendKind>) -> Result<BackendOfClass, String>,
) -> Result<(), String> {
    let (mut names, mut labels) = (BTreeSet::new(), BTreeSet::new());
    for c in classes {
        let backend = backend_of(c.backend)?;
        c.validate(base, backend.facts)?;
        if !names.insert(c.name.as_str()) {
            return Err(format!("has two executor classes named `{}`", c.name));
        }
        if !labels.insert(c.label.to_ascii_lowercase()) {
            return Err(format!(
                "has two executor classes selected by the label `{}`; a job could not tell them apart",
                c.label
            ));
        }
        let kind = backend.facts.kind;
        match backend.capacity {
            None => {
                return Err(format!(
                    "has executor.class `{}` on the {kind} backend, which is off ({})",
                    c.name, backend.facts.turned_on_by
                ));
            }
            Some(total) if c.capacity > total => {
                return Err(format!(
                    "has executor.class `{}` with capacity = {} above capacity.{kind} = {total}; a class holds part of its backend's slots",
                    c.name, c.capacity
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The class the scheduler picked for an assignment, by its name. Picked from its labels, as
/// the scheduler would now, when it names none (queued before the scheduler named its class)
/// or one the config no longer has (changed while the task waited).
pub fn named<'c, S: AsRef<str>>(
    classes: &'c [ExecutorClass],
    name: Option<&str>,
    runs_on: &[S],
) -> Result<Option<&'c ExecutorClass>, String> {
    match name.and_then(|n| classes.iter().find(|c| c.name == n)) {
        Some(c) => Ok(Some(c)),
        None => pick(classes, runs_on),
    }
}

/// The class a job's `runs-on` labels pick: None without classes (today's routing), else
/// exactly one class, or why not (the sentence reported at Gitea).
pub fn pick<'c, S: AsRef<str>>(
    classes: &'c [ExecutorClass],
    runs_on: &[S],
) -> Result<Option<&'c ExecutorClass>, String> {
    pick_by(classes, |c| (&c.name, &c.label), runs_on)
}

/// [`pick`] over anything that names a class and its label (the status API's view of the
/// classes, which `dispatch explain` reads).
pub fn pick_by<'c, T, S: AsRef<str>>(
    classes: &'c [T],
    name_label: impl Fn(&T) -> (&str, &str),
    runs_on: &[S],
) -> Result<Option<&'c T>, String> {
    if classes.is_empty() {
        return Ok(None);
    }
    let asks = |c: &T| {
        runs_on
            .iter()
            .any(|l| l.as_ref().eq_ignore_ascii_case(name_label(c).1))
    };
    let matched: Vec<&T> = classes.iter().filter(|c| asks(c)).collect();
    let shown: Vec<&str> = runs_on.iter().map(AsRef::as_ref).collect();
    match matched.as_slice() {
        [one] => Ok(Some(one)),
        [] => Err(format!(
            "this job's runs-on {shown:?} names no executor class of this dispatcher; add one of the labels {:?} to runs-on",
            classes.iter().map(|c| name_label(c).1).collect::<Vec<_>>()
        )),
        many => Err(format!(
            "this job's runs-on {shown:?} names {} executor classes ({}); keep exactly one of their labels",
            many.len(),
            many.iter()
                .map(|c| format!("`{}` by `{}`", name_label(c).0, name_label(c).1))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The labels registered at Gitea: `labels` and every class label not among them, in order.
/// A class label missing there would leave its jobs waiting for a runner that never comes.
pub fn declared_labels(labels: &[String], classes: &[ExecutorClass]) -> Vec<String> {
    let mut out = labels.to_vec();
    for c in classes {
        if !out.iter().any(|l| l.eq_ignore_ascii_case(&c.label)) {
            out.push(c.label.clone());
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn class(name: &str, cpu: &str, memory: &str, capacity: u32) -> ExecutorClass {
        ExecutorClass::pod(name, cpu, memory, capacity)
    }

    const NOUNS: crate::backend_kind::Nouns = crate::backend_kind::Nouns {
        executor: "executor",
        executors: "executors",
        source: "the source",
        gone: "gone",
        lost_partly: "lost",
        lost_whole: "lost",
    };

    /// A backend on the rented nodes (the default, as the pod backend is) and one off them.
    const POD: BackendFacts = BackendFacts {
        kind: BackendKind::new("pod"),
        label: None,
        turned_on_by: "it is always on",
        default_capacity: 4,
        opt_in: false,
        section: None,
        rented_nodes: true,
        nouns: NOUNS,
    };
    static VM: BackendFacts = BackendFacts {
        kind: BackendKind::new("vm"),
        label: Some("vm"),
        turned_on_by: "no `--opensandbox-url`",
        default_capacity: 1,
        opt_in: false,
        section: Some("vm"),
        rented_nodes: false,
        nouns: NOUNS,
    };

    /// The pod backend at capacity 4, the VM backend off.
    fn cap(b: Option<BackendKind>) -> Result<BackendOfClass, String> {
        static POD_FACTS: BackendFacts = POD;
        Ok(match b {
            Some(k) if k == VM.kind => BackendOfClass {
                facts: &VM,
                capacity: None,
            },
            _ => BackendOfClass {
                facts: &POD_FACTS,
                capacity: Some(4),
            },
        })
    }

    fn warm(min: u32, max: u32) -> WarmPool {
        WarmPool {
            min,
            max,
            idle: warm_idle(),
            window: warm_window(),
        }
    }

    fn two() -> Vec<ExecutorClass> {
        vec![
            class("small", "500m", "512Mi", 3),
            class("large", "1800m", "1536Mi", 1),
        ]
    }

    #[test]
    fn labels_pick_exactly_one_class() {
        let classes = two();
        assert_eq!(pick::<&str>(&[], &["self-hosted", "pod"]), Ok(None));
        let small = pick(&classes, &["self-hosted", "pod", "small"]).unwrap();
        assert_eq!(small.unwrap().name, "small");
        assert_eq!(
            pick(&classes, &["LARGE"]).unwrap().unwrap().name,
            "large",
            "labels compare as Gitea does, without case"
        );
        let none = pick(&classes, &["self-hosted", "pod"]).unwrap_err();
        assert!(none.contains("names no executor class"), "{none}");
        assert!(none.contains("\"small\", \"large\""), "{none}");
        let both = pick(&classes, &["small", "large"]).unwrap_err();
        assert!(
            both.contains("names 2 executor classes (`small` by `small`, `large` by `large`)"),
            "{both}"
        );
    }

    #[test]
    fn a_class_sizes_and_places_the_executor() {
        let base = crate::sizing::ExecutorSettings::with_images("i@sha256:x", "p@sha256:y");
        let mut c = class("large", "1800m", "1536Mi", 1);
        c.node_selector = Some(BTreeMap::from([("pool".into(), "big".into())]));
        c.runtime_class_name = Some("gvisor".into());
        let x = base.of_class(&c);
        assert_eq!(
            (x.resources.cpu.as_str(), x.resources.memory.as_str()),
            ("1800m", "1536Mi")
        );
        assert_eq!(
            x.resources.ephemeral_storage, base.resources.ephemeral_storage,
            "unset: the executor's"
        );
        assert_eq!(x.node_selector["pool"], "big");
        assert_eq!(x.runtime_class_name.as_deref(), Some("gvisor"));
        assert_eq!(x.tolerations, base.tolerations, "unset: the executor's");
    }

    #[test]
    fn bad_classes_are_refused_naming_the_class() {
        let base = Resources::default();
        assert_eq!(validate(&two(), &base, cap), Ok(()));
        type Change = Box<dyn Fn(&mut Vec<ExecutorClass>)>;
        let cases: Vec<(Change, &str)> = vec![
            (Box::new(|c| c[0].name = "Small".into()), "not a DNS label"),
            (
                Box::new(|c| c[1].label = "small".into()),
                "two executor classes selected by the label `small`",
            ),
            (
                Box::new(|c| c[1].name = "small".into()),
                "two executor classes named `small`",
            ),
            (Box::new(|c| c[0].capacity = 0), "capacity = 0"),
            (
                Box::new(|c| c[0].capacity = 5),
                "capacity = 5 above capacity.pod = 4",
            ),
            (
                Box::new(|c| c[0].cpu = "lots".into()),
                "executor.class `small`: cpu = `lots`",
            ),
            (Box::new(|c| c[0].label = "a b".into()), "one word"),
            (
                Box::new(|c| c[1].backend = Some(BackendKind::new("vm"))),
                "on the vm backend, which is off",
            ),
            (
                Box::new(|c| c[0].warm = Some(warm(2, 4))),
                "warm min = 2, max = 4; want",
            ),
            (
                Box::new(|c| c[0].warm = Some(warm(3, 2))),
                "warm min = 3, max = 2",
            ),
        ];
        for (change, needle) in cases {
            let mut c = two();
            change(&mut c);
            let e = validate(&c, &base, cap).unwrap_err();
            assert!(e.contains(needle), "{needle}: {e}");
        }
    }

    #[test]
    fn a_class_that_cannot_fit_the_node_image_is_refused_in_one_sentence() {
        let base = Resources::default();
        let node = NodeImage::default();
        for c in two() {
            c.check_fits(&base, &node, true).unwrap();
        }
        let huge = class("huge", "4", "1Gi", 1);
        let e = huge.check_fits(&base, &node, true).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.message()
                .starts_with("the executor Pod of class `huge` requests 4010m CPU"),
            "{}",
            e.message()
        );
        assert!(!e.message().contains('\n'), "one sentence");
        assert!(
            e.hint_text()
                .unwrap()
                .contains("executor.class `huge`'s cpu and memory")
        );
        let vm = ExecutorClass {
            backend: Some(BackendKind::new("vm")),
            ..huge
        };
        vm.check_fits(&base, &node, false).unwrap();
    }

    #[test]
    fn every_class_label_is_declared_once() {
        let labels = vec!["self-hosted".to_string(), "pod".into(), "Small".into()];
        assert_eq!(
            declared_labels(&labels, &two()),
            ["self-hosted", "pod", "Small", "large"]
        );
        assert_eq!(declared_labels(&labels, &[]), labels);
    }
}

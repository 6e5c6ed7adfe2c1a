//! What an executor Pod asks of a rented node: the runner container's CPU, memory and
//! ephemeral-storage requests and limits (`[executor.resources]` in the dispatcher config),
//! their defaults derived from the node image, and whether the whole Pod (runner plus the
//! executor-proxy sidecar) fits one rented node. Pure; `dispatch init` loads the node image.
//!
//! Why the defaults fill the node: a rented node runs one executor at a time. Requests that
//! fill its allocatable make the scheduler rent a node per executor instead of stacking two
//! jobs on 2 vCPU, and a memory limit equal to the request turns a runaway job into an
//! OOM-killed job instead of a node under memory pressure evicting its neighbours.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};

use tenantci_core::node_image::NodeImage;
use tenantci_core::quantity::{self, Milli};
use tenantci_core::{Error, Result};
use tenantci_runner::tenant::sizing::{self, PodTotal};

/// The executor-proxy sidecar's CPU request (a small async forwarder).
pub const PROXY_CPU: &str = "10m";
/// Its memory request.
pub const PROXY_MEMORY: &str = "32Mi";
/// Its memory limit: a runaway proxy is killed, not the node.
pub const PROXY_MEMORY_LIMIT: &str = "64Mi";
/// Ephemeral storage when the node image does not say how large its root filesystem is.
pub const DEFAULT_EPHEMERAL_STORAGE: &str = "2Gi";

/// The runner container's resources. Limits default to the requests for memory and
/// ephemeral storage (the emptyDir for HOME, work and cache is bounded by the latter); CPU
/// has no limit unless set (throttling a job that has the node to itself gains nothing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// The runner container's CPU request, a Kubernetes quantity (`1800m`).
    pub cpu: String,
    /// Its CPU limit; None: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_limit: Option<String>,
    /// Its memory request, a Kubernetes quantity (`1728Mi`).
    pub memory: String,
    /// Its memory limit; None: the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<String>,
    /// Its ephemeral-storage request, a Kubernetes quantity.
    pub ephemeral_storage: String,
    /// Its ephemeral-storage limit, which also bounds the scratch emptyDir; None: the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage_limit: Option<String>,
}

impl Default for Resources {
    /// Sized for the runbook's node (2 vCPU, 2048 MiB).
    fn default() -> Self {
        Resources::for_node(&NodeImage::default())
    }
}

fn floor_to(m: Milli, step: Milli) -> Milli {
    Milli(m.0 - m.0 % step.0)
}

impl Resources {
    /// The node's allocatable less the sidecar, rounded down (CPU to 100m, memory to 64Mi);
    /// ephemeral storage half the root filesystem when the image records it (the other half
    /// holds the executor image, pulled and unpacked).
    pub fn for_node(image: &NodeImage) -> Resources {
        let q = |s: &str| quantity::parse(s).expect("a constant quantity");
        let cpu = floor_to(
            image.allocatable_cpu().saturating_sub(q(PROXY_CPU)),
            Milli(100),
        );
        let memory = floor_to(
            image.allocatable_memory().saturating_sub(q(PROXY_MEMORY)),
            q("64Mi"),
        );
        let ephemeral_storage = match image.rootfs_mib {
            Some(mib) => format!("{}Mi", mib / 2),
            None => DEFAULT_EPHEMERAL_STORAGE.to_string(),
        };
        Resources {
            cpu: quantity::format_cpu(cpu),
            cpu_limit: None,
            memory: quantity::format_memory(memory),
            memory_limit: None,
            ephemeral_storage,
            ephemeral_storage_limit: None,
        }
    }

    fn entries(&self) -> [(&'static str, &str, Option<&str>); 3] {
        [
            ("cpu", &self.cpu, self.cpu_limit.as_deref()),
            ("memory", &self.memory, self.memory_limit.as_deref()),
            (
                "ephemeral_storage",
                &self.ephemeral_storage,
                self.ephemeral_storage_limit.as_deref(),
            ),
        ]
    }

    /// Every value a quantity, every limit at least its request (the config's message form:
    /// "has executor.resources.cpu = ...").
    pub fn validate(&self) -> std::result::Result<(), String> {
        for (key, request, limit) in self.entries() {
            let r = quantity::parse_resource(request).ok_or_else(|| {
                format!("has executor.resources.{key} = `{request}`, which is not a Kubernetes quantity (e.g. `1500m`, `1Gi`)")
            })?;
            if r.0 == 0 {
                return Err(format!(
                    "has executor.resources.{key} = `{request}`; an executor needs more than nothing"
                ));
            }
            if let Some(limit) = limit {
                let l = quantity::parse_resource(limit).ok_or_else(|| {
                    format!("has executor.resources.{key}_limit = `{limit}`, which is not a Kubernetes quantity")
                })?;
                if l < r {
                    return Err(format!(
                        "has executor.resources.{key}_limit = `{limit}` below its request `{request}`"
                    ));
                }
            }
        }
        Ok(())
    }

    pub(crate) fn milli(s: &str) -> Milli {
        quantity::parse_resource(s).unwrap_or_default()
    }

    /// The ephemeral-storage limit, which also bounds the scratch emptyDir.
    pub fn ephemeral_storage_limit(&self) -> &str {
        self.ephemeral_storage_limit
            .as_deref()
            .unwrap_or(&self.ephemeral_storage)
    }

    /// The runner container's requirements.
    pub fn runner_requirements(&self) -> ResourceRequirements {
        let mut limits = BTreeMap::from([
            (
                "memory".to_string(),
                Quantity(
                    self.memory_limit
                        .clone()
                        .unwrap_or_else(|| self.memory.clone()),
                ),
            ),
            (
                "ephemeral-storage".to_string(),
                Quantity(self.ephemeral_storage_limit().to_string()),
            ),
        ]);
        if let Some(cpu) = &self.cpu_limit {
            limits.insert("cpu".into(), Quantity(cpu.clone()));
        }
        ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity(self.cpu.clone())),
                ("memory".to_string(), Quantity(self.memory.clone())),
                (
                    "ephemeral-storage".to_string(),
                    Quantity(self.ephemeral_storage.clone()),
                ),
            ])),
            limits: Some(limits),
            ..Default::default()
        }
    }

    /// The executor Pod's total against a rented node: exit 2 with one sentence when it
    /// cannot fit (then no node the autoscaler can rent would ever run it).
    pub fn check_fits(&self, image: &NodeImage) -> Result<()> {
        self.check_fits_as(
            image,
            "the executor Pod",
            "executor.resources (or --executor-cpu / --executor-memory)",
            "executor.resources.ephemeral_storage (or --executor-ephemeral-storage)",
        )
    }

    /// [`Self::check_fits`] for `what` (a class's executor Pod), whose size the operator
    /// lowers at `lower` (CPU, memory) and `lower_storage`.
    pub fn check_fits_as(
        &self,
        image: &NodeImage,
        what: &str,
        lower: &str,
        lower_storage: &str,
    ) -> Result<()> {
        let proxy_cpu = Self::milli(PROXY_CPU);
        let proxy_mem = Self::milli(PROXY_MEMORY);
        let (cpu, mem) = (Self::milli(&self.cpu), Self::milli(&self.memory));
        sizing::fits(
            &PodTotal {
                what,
                cpu: cpu + proxy_cpu,
                cpu_parts: format!("runner {}, executor-proxy {PROXY_CPU}", self.cpu),
                memory: mem + proxy_mem,
                memory_parts: format!("runner {}, executor-proxy {PROXY_MEMORY}", self.memory),
                lower,
            },
            image,
        )?;
        if let Some(rootfs) = image.rootfs_mib {
            let storage = Self::milli(&self.ephemeral_storage);
            let rootfs_bytes = Milli::from_units(i128::from(rootfs) << 20);
            if storage > rootfs_bytes {
                return Err(Error::bad_input(format!(
                    "{what} requests {} ephemeral storage but a rented node's root filesystem has {rootfs} MiB (rootfsMiB in the node image)",
                    self.ephemeral_storage
                ))
                .hint(format!("lower {lower_storage}, or build a guest image with a larger root filesystem")));
            }
        }
        Ok(())
    }
}

/// The sidecar's requirements.
pub fn proxy_requirements() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity(PROXY_CPU.into())),
            ("memory".to_string(), Quantity(PROXY_MEMORY.into())),
        ])),
        limits: Some(BTreeMap::from([(
            "memory".to_string(),
            Quantity(PROXY_MEMORY_LIMIT.into()),
        )])),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_the_runbook_node_less_the_sidecar() {
        let r = Resources::default();
        assert_eq!((r.cpu.as_str(), r.memory.as_str()), ("1800m", "1728Mi"));
        assert_eq!(r.ephemeral_storage, DEFAULT_EPHEMERAL_STORAGE);
        r.validate().unwrap();
        r.check_fits(&NodeImage::default()).unwrap();
        let big = NodeImage {
            vcpu: 8,
            mem_mib: 16384,
            rootfs_mib: Some(20480),
        };
        let r = Resources::for_node(&big);
        assert_eq!(
            (
                r.cpu.as_str(),
                r.memory.as_str(),
                r.ephemeral_storage.as_str()
            ),
            ("7800m", "16064Mi", "10240Mi")
        );
        r.check_fits(&big).unwrap();
    }

    #[test]
    fn four_cpus_do_not_fit_a_two_vcpu_node() {
        let r = Resources {
            cpu: "4".into(),
            ..Resources::default()
        };
        let e = r.check_fits(&NodeImage::default()).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.message()
                .starts_with("the executor Pod requests 4010m CPU (runner 4, executor-proxy 10m)"),
            "{}",
            e.message()
        );
        assert!(e.message().contains("vcpu 2"), "{}", e.message());
        assert!(!e.message().contains('\n'), "one sentence");
        assert!(e.hint_text().unwrap().contains("--executor-cpu"));
    }

    #[test]
    fn memory_and_storage_are_checked_too() {
        let r = Resources {
            memory: "1792Mi".into(),
            ..Resources::default()
        };
        assert!(
            r.check_fits(&NodeImage::default())
                .unwrap_err()
                .message()
                .contains("memory")
        );
        let image = NodeImage {
            rootfs_mib: Some(1024),
            ..NodeImage::default()
        };
        let e = Resources::default().check_fits(&image).unwrap_err();
        assert!(e.message().contains("rootfsMiB"), "{}", e.message());
    }

    #[test]
    fn bad_values_and_limits_below_requests_are_refused() {
        for (edit, needle) in [
            (
                Resources {
                    cpu: "lots".into(),
                    ..Resources::default()
                },
                "executor.resources.cpu",
            ),
            (
                Resources {
                    memory_limit: Some("1Gi".into()),
                    ..Resources::default()
                },
                "memory_limit",
            ),
            (
                Resources {
                    ephemeral_storage: "0".into(),
                    ..Resources::default()
                },
                "ephemeral_storage",
            ),
        ] {
            let e = edit.validate().unwrap_err();
            assert!(e.contains(needle), "{needle}: {e}");
        }
    }

    #[test]
    fn limits_default_to_the_requests_but_cpu() {
        let req = Resources::default().runner_requirements();
        let limits = req.limits.unwrap();
        assert_eq!(limits["memory"].0, "1728Mi");
        assert_eq!(limits["ephemeral-storage"].0, "2Gi");
        assert!(!limits.contains_key("cpu"));
    }
}

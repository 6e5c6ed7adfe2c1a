//! The guest image a rented node boots, recorded per cluster in
//! `<state>/clusters/<name>/node-image.json` (`{"vcpu": 2, "memMiB": 2048, "rootfsMiB": ...}`).
//! Changing `vcpu` or `memMiB` means building a new guest image, so sizing errors say so.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::quantity::Milli;
use crate::{Error, Result};

/// What the kubelet and system daemons keep for themselves on every node: allocatable =
/// capacity - reserve. Documented in docs/runbooks/prewarm.md; the simulator uses the same.
pub const RESERVED_CPU_MILLI: i128 = 100;
/// Memory reserved on every node, in MiB (see [`RESERVED_CPU_MILLI`]).
pub const RESERVED_MEMORY_MIB: i128 = 256;

/// `node-image.json`: the size of the guest image a rented node boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeImage {
    /// Virtual CPUs of a node.
    pub vcpu: u32,
    /// Memory of a node in MiB (`memMiB`).
    #[serde(rename = "memMiB")]
    pub mem_mib: u64,
    /// Size of a node's root filesystem in MiB (`rootfsMiB`); `None` when the image does not
    /// record it (executors then get a default ephemeral-storage request, unchecked against it).
    #[serde(rename = "rootfsMiB", default, skip_serializing_if = "Option::is_none")]
    pub rootfs_mib: Option<u64>,
}

impl Default for NodeImage {
    /// The runbook's node: 2 vCPU, 2048 MiB.
    fn default() -> Self {
        NodeImage {
            vcpu: 2,
            mem_mib: 2048,
            rootfs_mib: None,
        }
    }
}

impl NodeImage {
    /// Reads the manifest: a regular file of at most 64 KiB (it is three numbers).
    pub fn load(path: &Path) -> Result<Self> {
        const LIMIT: u64 = 64 << 10;
        let text = crate::input::read_text("the node image manifest", path, LIMIT)?;
        serde_json::from_str(&text).map_err(|e| {
            Error::bad_input(format!(
                "the node image manifest `{}` is not valid",
                path.display()
            ))
            .caused_by(e)
            .hint("it must be JSON like {\"vcpu\": 2, \"memMiB\": 2048, \"rootfsMiB\": 10240}")
        })
    }

    /// A node's CPU capacity, `vcpu` cores (in millicores).
    pub fn capacity_cpu(&self) -> Milli {
        Milli::from_units(i128::from(self.vcpu))
    }

    /// A node's memory capacity, `memMiB` MiB (in milli-bytes, as every [`Milli`] of memory).
    pub fn capacity_memory(&self) -> Milli {
        Milli::from_units(i128::from(self.mem_mib) << 20)
    }

    /// The CPU a node's pods may request: capacity less [`RESERVED_CPU_MILLI`], never below zero.
    pub fn allocatable_cpu(&self) -> Milli {
        self.capacity_cpu()
            .saturating_sub(Milli(RESERVED_CPU_MILLI))
    }

    /// The memory a node's pods may request: capacity less [`RESERVED_MEMORY_MIB`], never below
    /// zero.
    pub fn allocatable_memory(&self) -> Milli {
        self.capacity_memory()
            .saturating_sub(Milli::from_units(RESERVED_MEMORY_MIB << 20))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_reads_a_small_regular_file_only() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(NodeImage::load(dir.path()).unwrap_err().exit_code(), 2);
        let big = dir.path().join("big.json");
        std::fs::write(&big, vec![b' '; 70 << 10]).unwrap();
        assert!(
            NodeImage::load(&big)
                .unwrap_err()
                .message()
                .contains("larger than 64 KiB")
        );
        let ok = dir.path().join("node-image.json");
        std::fs::write(&ok, r#"{"vcpu": 4, "memMiB": 8192}"#).unwrap();
        assert_eq!(NodeImage::load(&ok).unwrap().vcpu, 4);
    }
}

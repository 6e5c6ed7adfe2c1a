//! The OpenSandbox Lifecycle API: the simulator's double (`tenantci sim --opensandbox`) over
//! real HTTP, and tenantci's client against it (typed errors for every failure class).

mod client;
mod sim_flag;

use std::collections::BTreeMap;
use std::time::Duration;

use tenantci_core::Secret;
use tenantci_core::opensandbox::{CreateSandbox, ImageSpec, ResourceLimits};
use tenantci_sim::opensandbox::{OpenSandboxDouble, OpenSandboxHandle, write_opensandbox_json};
use tenantci_testkit::opensandbox::OpenSandbox;

/// A double served in-process, described in `dir` as the simulator describes it.
pub async fn double(dir: &std::path::Path, boot: Duration) -> (OpenSandboxHandle, OpenSandbox) {
    let h = OpenSandboxDouble::start("127.0.0.1:0".parse().unwrap(), boot)
        .await
        .expect("start the double");
    write_opensandbox_json(dir, &h).expect("write opensandbox.json");
    let o = OpenSandbox::from_state_dir(dir);
    (h, o)
}

/// A request as the VM backend makes it, for task `task`.
pub fn request(task: &str, secret: &str) -> CreateSandbox {
    CreateSandbox {
        image: ImageSpec {
            uri: "registry.example/tenantci-executor@sha256:0123".into(),
        },
        entrypoint: vec![
            "/usr/local/bin/act_runner".into(),
            "daemon".into(),
            "--once".into(),
        ],
        resource_limits: ResourceLimits {
            cpu: "2".into(),
            memory: "4Gi".into(),
        },
        timeout: 3 * 3600 + 600,
        env: [("TENANTCI_CAPABILITY".to_string(), Secret::new(secret))].into(),
        metadata: BTreeMap::from([
            ("tenantci.io/task-id".to_string(), task.to_string()),
            ("tenantci.io/attempt".to_string(), "1".to_string()),
            ("tenantci.io/dispatcher".to_string(), "7".to_string()),
        ]),
    }
}

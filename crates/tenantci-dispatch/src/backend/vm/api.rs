//! The VM backend's connection to OpenSandbox: the Lifecycle API client built from the `[vm]`
//! section (the key read from its file) and the access check `init` and `run` make before
//! anything else depends on it. A wrong key is refused here, naming the key file.

use tenantci_core::opensandbox::{ClientConfig, LifecycleClient};
use tenantci_core::{Result, Secret};

use crate::backend::vm::settings::Vm;

/// The client for `vm`, with the key from `vm.api_key_file` (refused when other accounts may
/// read it, as every key file the dispatcher reads).
pub fn client(vm: &Vm) -> Result<LifecycleClient> {
    tenantci_core::input::check_private("the OpenSandbox API key file", &vm.api_key_file)?;
    let key = tenantci_core::secret::read_file(
        "the OpenSandbox API key file",
        &vm.api_key_file,
        Some("put the Lifecycle API key (OPEN-SANDBOX-API-KEY) into it"),
    )?;
    LifecycleClient::new(ClientConfig::new(
        &vm.opensandbox_url,
        Secret::new(key),
        vm.api_key_file.clone(),
    ))
}

/// One authenticated call (a list page): the API is reachable and takes the key.
pub async fn check_access(client: &LifecycleClient) -> Result<()> {
    client.check_access().await.map_err(|e| e.into_error())
}

/// `run`'s start: the client when the backend is on, after the access check. A refused key
/// stops the start; an API that is away only delays vm tasks (the other backends must not
/// stop because OpenSandbox is down), so it is logged and the client returned.
pub async fn connect(vm: Option<&Vm>) -> Result<Option<LifecycleClient>> {
    let Some(vm) = vm else {
        return Ok(None);
    };
    let c = client(vm)?;
    match c.check_access().await {
        Ok(()) => {
            tracing::info!(url = %vm.opensandbox_url, "OpenSandbox Lifecycle API reachable; the API key is accepted")
        }
        Err(e) if e.is_retryable() => {
            tracing::warn!(url = %vm.opensandbox_url, error = %e, "OpenSandbox is not answering yet; vm tasks wait in the queue until it does")
        }
        Err(e) => return Err(e.into_error()),
    }
    Ok(Some(c))
}

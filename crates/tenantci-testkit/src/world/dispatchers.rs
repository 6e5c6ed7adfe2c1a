//! A [`World`]'s dispatcher instances: each name's config written from the base one
//! (listening on port 0, the name as its leader identity) and `tenantci dispatch run` started
//! on it, with the world's dispatcher environment and a debug log.

use std::path::PathBuf;
use std::sync::Arc;

use tenantci_dispatch::config::Config;

use super::{Dispatcher, World};
use crate::forward::Forward;

impl World {
    /// Starts a dispatcher instance named `name` and waits until it listens. Its executors
    /// are given the name's fixed facade address, which follows the instance when the same
    /// name is started again (as a restarted Pod keeps its Service).
    pub async fn dispatcher(&self, name: &str) -> Dispatcher {
        self.dispatcher_behind(name, name).await
    }

    /// Starts instance `name` behind `service`'s fixed facade address, as the Pods of a rolling
    /// update are behind one Service: its executors are given that address, and new
    /// connections to it go to this instance once it listens (open ones stay where they are).
    /// The instance runs [`World::bin`] as it is now, so a test can start the releases of an
    /// upgrade one after another.
    pub async fn dispatcher_behind(&self, name: &str, service: &str) -> Dispatcher {
        let known = self.services.lock().unwrap().get(service).cloned();
        let forward = match known.clone() {
            Some(f) => f,
            None => {
                let f = Arc::new(Forward::start().await);
                self.services
                    .lock()
                    .unwrap()
                    .insert(service.to_string(), f.clone());
                f
            }
        };
        // An instance started again runs its config file as it is (a restarted Pod keeps its
        // ConfigMap): a test may have edited it.
        if known.is_none() || !self.config_path(name).exists() {
            let mut cfg = self.base().clone();
            cfg.facade.url = format!("https://{}", forward.addr());
            self.write_config(name, cfg);
        }
        let d = self.spawn(name).await;
        assert_eq!(
            d.facade_url,
            format!("https://{}", forward.addr()),
            "a facade URL with a fixed port is advertised as configured"
        );
        forward.point_at(d.facade);
        d
    }

    /// Starts a dispatcher instance named `name` whose config has port 0 in the facade URL:
    /// executors are given the port its facade was bound to.
    pub async fn dispatcher_on_any_port(&self, name: &str) -> Dispatcher {
        let mut cfg = self.base().clone();
        cfg.facade.url = "https://127.0.0.1:0".into();
        self.write_config(name, cfg);
        self.spawn(name).await
    }

    /// `tenantci dispatch run` with `name`'s config and the dispatchers' environment, to its
    /// exit (for the starts that must be refused).
    pub fn run_dispatcher_to_exit(&self, name: &str) -> std::process::Output {
        let config = self.config_only(name);
        let mut cmd = self.command();
        cmd.args(["dispatch", "run", "--config"])
            .arg(&config)
            .envs(self.dispatcher_env().iter().map(|(k, v)| (k, v)));
        cmd.output()
            .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
    }

    /// Writes `name`'s config as [`World::dispatcher`] would, without starting it.
    pub fn config_only(&self, name: &str) -> PathBuf {
        self.write_config(name, self.base().clone());
        self.config_path(name)
    }

    /// Where instance `name`'s config is written: `<world dir>/dispatch/<name>.toml`.
    pub fn config_path(&self, name: &str) -> PathBuf {
        let file = format!("{name}.toml");
        self.dir.path().join("dispatch").join(file)
    }

    /// Writes `name`'s config: `cfg` listening on port 0, with `name` as its identity.
    fn write_config(&self, name: &str, mut cfg: Config) {
        cfg.facade.listen = "127.0.0.1:0".parse().unwrap();
        cfg.status.listen = "127.0.0.1:0".parse().unwrap();
        cfg.leader.identity = Some(name.to_string());
        std::fs::write(self.config_path(name), cfg.to_toml()).unwrap();
    }

    async fn spawn(&self, name: &str) -> Dispatcher {
        // TENANTCI_TEST_LOG_DIR keeps the dispatcher logs after the test (for debugging).
        let log_dir = std::env::var_os("TENANTCI_TEST_LOG_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| self.dir.path().to_path_buf());
        let mut cmd = self.command();
        cmd.env("RUST_LOG", "tenantci=debug")
            .envs(self.dispatcher_env.iter().map(|(k, v)| (k, v)));
        let log = log_dir.join(format!("{name}.log"));
        Dispatcher::spawn(cmd, name, &self.config_path(name), &log).await
    }
}

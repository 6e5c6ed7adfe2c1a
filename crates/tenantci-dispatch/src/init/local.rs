//! Phase one of `dispatch init` on this host: the flags, the NATS password files and the files
//! already beside the config, read and judged without the network and without changing
//! anything. Every refusal is exit 2 naming the flag or file and the fix.

use crate::backend::catalog;
use std::path::Path;

use time::OffsetDateTime;

use crate::capability;
use crate::claim::registration::SchedulerCredential;
use crate::config::Config;
use crate::init::plan::{self, Checked, Inputs, RegistrationToken};
use crate::init::target::ClusterAccess;
use crate::provision::facade_pki;
use crate::queue::assignment::SealingKey;
use crate::queue::{permissions, users};
use tenantci_core::gateway::StateDir;
use tenantci_core::node_image::NodeImage;
use tenantci_core::{Error, Result};

/// The registration phase two works with.
#[derive(Debug, Clone)]
pub enum Registration {
    /// `scheduler.json` is there: kept (Declare proves Gitea still knows it).
    Kept(SchedulerCredential),
    /// None yet: registered with this token.
    New(RegistrationToken),
}

impl Registration {
    pub fn kept(&self) -> Option<&SchedulerCredential> {
        match self {
            Registration::Kept(k) => Some(k),
            Registration::New(_) => None,
        }
    }
}

/// What phase one found on this host.
pub struct Local {
    pub checked: Checked,
    pub registration: Registration,
    pub runner_name: String,
    /// ci-admin's password is there too (`run` then applies the queue's capacities).
    pub admin_password: bool,
    pub facade: facade_pki::Existing,
    pub facade_plan: facade_pki::Plan,
    /// The config phase two writes, checked.
    pub config: Config,
    /// Why its runner command is the one it is (init's `runner` line).
    pub runner_command_from: plan::RunnerCommandFrom,
    pub now: OffsetDateTime,
}

/// Checks everything that needs neither the cluster nor Gitea.
pub fn check(i: &Inputs) -> Result<Local> {
    let checked = plan::check(i)?;
    let p = &checked.paths;
    check_out_dir(&p.dir)?;
    let old_config = read_existing_config(&p.config)?;
    let admin_password = check_nats(&checked.nats_secrets_dir)?;
    let registration = registration(load_kept(&p.scheduler)?, i, &p.scheduler)?;
    let runner_name = runner_name(i, registration.kept(), &p.scheduler)?;
    check_kept_keys(p)?;
    let facade = facade_pki::inspect(p)?;
    let now = OffsetDateTime::now_utc();
    let facade_plan = facade_pki::decide(
        facade.ca.as_ref().map(|(_, info)| info),
        facade.serving.as_ref(),
        &checked.facade_host,
        now,
    );
    let node = node_image(i)?;
    let runner_command_from = plan::runner_command(i, old_config.as_ref()).1;
    let config = plan::config(
        i,
        &checked,
        &runner_name,
        old_config.as_ref(),
        node.as_ref(),
    )?;
    config.validate().map_err(|e| {
        Error::bad_input(format!("the config `dispatch init` would write {e}"))
            .hint("fix the flag that sets it")
    })?;
    if let Some(image) = &node {
        config.executor.resources.check_fits(image)?;
        for class in &config.executor.classes {
            let on_nodes = catalog::facts(catalog::of_class(class)).is_some_and(|f| f.rented_nodes);
            class.check_fits(&config.executor.resources, image, on_nodes)?;
        }
    }
    if let Some(w) = &config.webhook {
        // `run` reads it at start; refuse now rather than write a config it cannot run.
        tenantci_core::secret::read_file(
            "the webhook secret file",
            &w.secret_file,
            Some("put the secret typed into the Gitea webhook's settings into it"),
        )?;
    }
    if let Some(vm) = &config.vm {
        crate::backend::vm::api::client(vm)?;
    }
    if let Some(cache) = &config.cache {
        check_cache(cache)?;
    }
    Ok(Local {
        checked,
        registration,
        runner_name,
        admin_password,
        facade,
        facade_plan,
        config,
        runner_command_from,
        now,
    })
}

/// The cluster's node image, when the state dir records one (executors are sized for it;
/// with `--kubeconfig` there is none: the defaults or the flags size them).
fn node_image(i: &Inputs) -> Result<Option<NodeImage>> {
    let ClusterAccess::Gateway { state_dir } = &i.access else {
        return Ok(None);
    };
    let path = StateDir::new(state_dir).cluster(&i.cluster).node_image;
    if !path.exists() {
        return Ok(None);
    }
    NodeImage::load(&path).map(Some)
}

/// The directory the config goes into must exist or be creatable by this user.
fn check_out_dir(dir: &Path) -> Result<()> {
    let mut probe = dir;
    while !probe.exists() {
        match probe.parent() {
            Some(parent) => probe = parent,
            None => break,
        }
    }
    if !probe.is_dir() {
        return Err(Error::bad_input(format!(
            "`{}` is not a directory, so --out cannot be written below it",
            probe.display()
        ))
        .hint("pass --out in a directory (it is created 0700 when missing)"));
    }
    if nix::unistd::access(probe, nix::unistd::AccessFlags::W_OK).is_err() {
        return Err(Error::bad_input(format!(
            "`{}` is not writable by this user, so --out cannot be written there",
            probe.display()
        ))
        .hint("run as the user that owns the dispatcher's directory, or pass another --out"));
    }
    Ok(())
}

/// The config already at --out (its tuning keys are kept), read without env overrides.
pub(crate) fn read_existing_config(path: &Path) -> Result<Option<Config>> {
    if !path.exists() {
        return Ok(None);
    }
    Config::load_with_env(path, &|_| None)
        .map(Some)
        // Every load error is bad input already; only the fix differs for init.
        .map_err(|e| {
            e.hint("fix it, or move it aside: init then writes a fresh config from its flags")
        })
}

/// The producer and worker passwords must exist; returns whether ci-admin's does too.
fn check_nats(dir: &Path) -> Result<bool> {
    for user in [users::PRODUCER, users::WORKER] {
        let f = permissions::password_file(dir, user);
        if !f.exists() {
            return Err(Error::bad_input(format!(
                "the NATS secrets dir `{}` has no {user}.password",
                dir.display()
            ))
            .hint(format!(
                "run `tenantci queue nats-config --secrets-dir {} --out <nats-server include file>` (it creates the password files), or pass the --nats-secrets-dir it used",
                dir.display()
            )));
        }
        permissions::read_password(&f)?;
    }
    Ok(permissions::password_file(dir, users::ADMIN).exists())
}

fn load_kept(file: &Path) -> Result<Option<SchedulerCredential>> {
    file.exists()
        .then(|| SchedulerCredential::load(file))
        .transpose()
}

/// A kept registration wins; without one, a token is required.
fn registration(
    kept: Option<SchedulerCredential>,
    i: &Inputs,
    file: &Path,
) -> Result<Registration> {
    match (kept, &i.registration_token) {
        (Some(k), _) => Ok(Registration::Kept(k)),
        (None, Some(token)) => Ok(Registration::New(token.clone())),
        (None, None) => Err(Error::bad_input(format!(
            "no registration token given, and `{}` holds no registration yet",
            file.display()
        ))
        .hint("pass --registration-token-file FILE (or TENANTCI_GITEA_REGISTRATION_TOKEN) with a token from Gitea's Site Administration > Actions > Runners > Create new runner")),
    }
}

fn runner_name(i: &Inputs, kept: Option<&SchedulerCredential>, file: &Path) -> Result<String> {
    match (kept, &i.name) {
        (Some(k), Some(n)) if &k.name != n => Err(Error::bad_input(format!(
            "--name `{n}` differs from the registration in `{}`, runner `{}`; Gitea cannot rename a runner",
            file.display(),
            k.name
        ))
        .hint("leave --name out to keep the registration, or delete scheduler.json and re-run with a registration token to register anew (then delete the old runner in Gitea)")),
        (Some(k), _) => Ok(k.name.clone()),
        (None, Some(n)) => Ok(n.clone()),
        (None, None) => Ok(format!("tenantci-dispatch-{}", i.cluster)),
    }
}

/// Keys already there must load: phase two keeps them as they are.
fn check_kept_keys(p: &crate::config::Paths) -> Result<()> {
    if p.capability_key.exists() {
        capability::load_key(&p.capability_key)?;
    }
    if p.sealing_key.exists() {
        SealingKey::load_or_create(&p.sealing_key)?;
    }
    Ok(())
}

/// What `run` would refuse at start about the cache, refused now and without a write: a bucket
/// client built from the settings (its credentials file read, no request sent), or a directory
/// path that is not one (`run` creates a missing one).
fn check_cache(cache: &crate::cache::settings::CacheSettings) -> Result<()> {
    if let Some(dir) = &cache.dir {
        if dir.exists() && !dir.is_dir() {
            return Err(Error::bad_input(format!(
                "the cache directory {} exists and is not a directory",
                dir.display()
            ))
            .hint("pass --cache-dir naming a directory (created if missing)"));
        }
        return Ok(());
    }
    crate::cache::storage::Storage::open(cache)
        .map(drop)
        .map_err(|why| {
            Error::bad_input(why).hint(
                "fix --cache-s3-* (a 0600 credentials file: the access key id, then the secret key)",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::init::plan::tests::inputs;

    fn kept(name: &str) -> SchedulerCredential {
        serde_json::from_str(&format!(
            r#"{{"id": 7, "uuid": "u", "token": "t", "name": "{name}"}}"#
        ))
        .unwrap()
    }

    #[test]
    fn a_kept_registration_wins_and_without_one_a_token_is_needed() {
        let file = Path::new("/d/scheduler.json");
        let mut i = inputs();
        assert!(matches!(
            registration(Some(kept("r")), &i, file).unwrap(),
            Registration::Kept(_)
        ));
        assert!(matches!(
            registration(None, &i, file).unwrap(),
            Registration::New(_)
        ));
        i.registration_token = None;
        assert!(registration(Some(kept("r")), &i, file).is_ok());
        let e = registration(None, &i, file).unwrap_err();
        assert!(
            e.message().contains("no registration token"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn the_runner_name_is_the_kept_one_and_cannot_change() {
        let file = Path::new("/d/scheduler.json");
        let mut i = inputs();
        assert_eq!(runner_name(&i, None, file).unwrap(), "tenantci-dispatch-ci");
        assert_eq!(runner_name(&i, Some(&kept("r")), file).unwrap(), "r");
        i.name = Some("other".into());
        assert_eq!(runner_name(&i, None, file).unwrap(), "other");
        let e = runner_name(&i, Some(&kept("r")), file).unwrap_err();
        assert!(e.message().contains("cannot rename"), "{}", e.message());
    }
}

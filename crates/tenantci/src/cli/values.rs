//! Flag values that name a library enum. The libraries stay free of clap (their manifests do
//! not list it), so the CLI keeps a mirror of each enum it offers as `--flag VALUE` and converts
//! at the edge. A mirror that drifts from its library enum fails to compile in `From`.

use tenantci_core::pki::KeyType;
use tenantci_runner::check_host::Role;
use tenantci_runner::gitlab::api::RunnerType;

/// `--key-type`: the private key algorithm of a new certificate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum KeyTypeArg {
    /// ECDSA on P-256 with SHA-256: small and fast.
    #[default]
    #[value(name = "ecdsa-p256")]
    EcdsaP256,
    /// RSA 2048 with SHA-256, for clients that cannot do ECDSA.
    #[value(name = "rsa-2048")]
    Rsa2048,
}

impl From<KeyTypeArg> for KeyType {
    fn from(v: KeyTypeArg) -> Self {
        match v {
            KeyTypeArg::EcdsaP256 => KeyType::EcdsaP256,
            KeyTypeArg::Rsa2048 => KeyType::Rsa2048,
        }
    }
}

/// `check-host --role`: which host the checks are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RoleArg {
    /// The gateway host: state dir, node disks, ClientCAs.
    Gateway,
    /// A host that runs gitlab-runner against the tenant apiservers.
    Runner,
}

impl From<RoleArg> for Role {
    fn from(v: RoleArg) -> Self {
        match v {
            RoleArg::Gateway => Role::Gateway,
            RoleArg::Runner => Role::Runner,
        }
    }
}

/// `--runner-type`: the kind of runner GitLab creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
// GitLab's own names (`instance_type`, ...), suffix and all.
#[allow(clippy::enum_variant_names)]
#[value(rename_all = "snake_case")]
pub enum RunnerTypeArg {
    InstanceType,
    GroupType,
    ProjectType,
}

impl From<RunnerTypeArg> for RunnerType {
    fn from(v: RunnerTypeArg) -> Self {
        match v {
            RunnerTypeArg::InstanceType => RunnerType::InstanceType,
            RunnerTypeArg::GroupType => RunnerType::GroupType,
            RunnerTypeArg::ProjectType => RunnerType::ProjectType,
        }
    }
}

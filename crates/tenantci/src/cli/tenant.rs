//! `tenantci tenant ...`: sizing and pre-warm against a tenant cluster.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::output::{self, OutputArgs};
use tenantci_core::gateway::StateDir;
use tenantci_core::node_image::NodeImage;
use tenantci_core::quantity::Milli;
use tenantci_core::{Error, Result};
use tenantci_runner::tenant::prewarm::{self, PrewarmSpec, TolerationSpec};
use tenantci_runner::tenant::sizing::{self, JobPodRequests};

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Check that a job pod's requests fit a rented node (the cluster's node image).
    ///
    /// A job pod is build + helper + each service container. If it does not fit the node
    /// image's allocatable it would stay Pending forever: exit 2 naming the request and the
    /// image's vcpu / memMiB.
    Size(SizeArgs),
    /// Keep rented nodes warm with pause pods sized like a job pod.
    ///
    /// Server-side applies PriorityClass `tenantci-pause` (value -10, preemptionPolicy Never)
    /// and Deployment `tenantci-pause` in the namespace. Job pods preempt pause pods at once;
    /// the Deployment recreates them Pending, which rents the next node. Use the tenant-admin
    /// kubeconfig. Idempotent; `--replicas 0` keeps the objects at zero, `--remove` deletes.
    Prewarm(PrewarmArgs),
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Job pod requests")]
pub struct JobRequestArgs {
    /// CPU request of the build container.
    #[arg(long, value_name = "Q", default_value = "1")]
    pub cpu_request: String,
    /// Memory request of the build container.
    #[arg(long, value_name = "Q", default_value = "1Gi")]
    pub memory_request: String,
    /// CPU request of the helper container.
    #[arg(long, value_name = "Q", default_value = "100m")]
    pub helper_cpu_request: String,
    /// Memory request of the helper container.
    #[arg(long, value_name = "Q", default_value = "128Mi")]
    pub helper_memory_request: String,
    /// CPU request of each service container.
    #[arg(long, value_name = "Q", default_value = "0")]
    pub service_cpu_request: String,
    /// Memory request of each service container.
    #[arg(long, value_name = "Q", default_value = "0")]
    pub service_memory_request: String,
    /// Service containers per job.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub services: u32,
}

impl JobRequestArgs {
    pub fn requests(&self) -> Result<JobPodRequests> {
        Ok(JobPodRequests {
            build_cpu: sizing::parse_request("--cpu-request", &self.cpu_request)?,
            build_memory: sizing::parse_request("--memory-request", &self.memory_request)?,
            helper_cpu: sizing::parse_request("--helper-cpu-request", &self.helper_cpu_request)?,
            helper_memory: sizing::parse_request(
                "--helper-memory-request",
                &self.helper_memory_request,
            )?,
            service_cpu: sizing::parse_request("--service-cpu-request", &self.service_cpu_request)?,
            service_memory: sizing::parse_request(
                "--service-memory-request",
                &self.service_memory_request,
            )?,
            services: self.services,
            build_ephemeral_storage: Milli(0),
        })
    }
}

#[derive(Debug, Args)]
pub struct SizeArgs {
    /// The gateway state directory (node image from clusters/<cluster>/node-image.json).
    #[arg(
        long,
        value_name = "DIR",
        env = "TENANTCI_STATE_DIR",
        requires = "cluster"
    )]
    pub state_dir: Option<PathBuf>,
    /// The tenant cluster.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// A node image manifest instead of the state dir's.
    #[arg(long, value_name = "FILE", conflicts_with = "state_dir")]
    pub node_image: Option<PathBuf>,
    /// Size of the job image in MiB: warns when it and the build output would overflow the
    /// node's root filesystem.
    #[arg(long, value_name = "MIB")]
    pub job_image_size_mib: Option<u64>,
    #[command(flatten)]
    pub job: JobRequestArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct PrewarmArgs {
    /// Kubeconfig of the tenant cluster (the tenant-admin one).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,
    /// The runner namespace (where job pods run).
    #[arg(long, value_name = "NS", default_value = "gitlab-runner")]
    pub namespace: String,
    /// Size the pause pods as the Gitea dispatcher's executor Pods instead: namespace
    /// (cluster.namespace), CPU and memory (executor.resources plus the executor-proxy
    /// sidecar), node selector and tolerations from this dispatcher config.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["cpu", "memory", "node_selector", "tolerations"])]
    pub dispatch_config: Option<PathBuf>,
    /// Pause pods to keep (the headroom, in job pods).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub replicas: i32,
    /// CPU request of one pause pod: the whole job pod (build + helper + services).
    #[arg(long, value_name = "Q", required_unless_present = "dispatch_config")]
    pub cpu: Option<String>,
    /// Memory request of one pause pod.
    #[arg(long, value_name = "Q", required_unless_present = "dispatch_config")]
    pub memory: Option<String>,
    /// The job pods' node selector, `k=v` (repeatable).
    #[arg(long = "node-selector", value_name = "K=V")]
    pub node_selector: Vec<String>,
    /// The job pods' tolerations, `key=value:Effect` or `key:Effect` (repeatable).
    #[arg(long = "toleration", value_name = "T")]
    pub tolerations: Vec<String>,
    /// The job pods' labels, `k=v` (repeatable).
    #[arg(long = "label", value_name = "K=V")]
    pub labels: Vec<String>,
    /// The pause image.
    #[arg(long, default_value = prewarm::DEFAULT_IMAGE)]
    pub image: String,
    /// Delete the Deployment and PriorityClass instead.
    #[arg(long)]
    pub remove: bool,
    /// Ask the apiserver to validate without persisting (server-side dry run).
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn run(cmd: TenantCommand) -> Result<i32> {
    match cmd {
        TenantCommand::Size(args) => size(args),
        TenantCommand::Prewarm(args) => prewarm(args).await,
    }
}

fn size(args: SizeArgs) -> Result<i32> {
    let path = match (&args.node_image, &args.state_dir, &args.cluster) {
        (Some(p), _, _) => p.clone(),
        (None, Some(s), Some(c)) => StateDir::new(s).cluster(c).node_image,
        _ => {
            return Err(Error::bad_input("no node image given")
                .hint("pass --state-dir and --cluster, or --node-image FILE"));
        }
    };
    let image = NodeImage::load(&path)?;
    let report = sizing::check(&args.job.requests()?, &image, args.job_image_size_mib)?;
    if args.output.is_json() {
        output::print_json(&report)?;
    } else {
        println!(
            "ok: the job pod ({} CPU, {} memory) fits a rented node ({} CPU, {} allocatable; vcpu {}, memMiB {})",
            report.cpu_request,
            report.memory_request,
            report.allocatable_cpu,
            report.allocatable_memory,
            report.node_vcpu,
            report.node_mem_mib
        );
        for w in &report.warnings {
            println!("warn: {w}");
        }
    }
    Ok(0)
}

fn key_values(flag: &str, items: &[String]) -> Result<BTreeMap<String, String>> {
    items
        .iter()
        .map(|s| prewarm::parse_key_value(flag, s))
        .collect()
}

pub(crate) fn prewarm_spec(args: &PrewarmArgs) -> Result<PrewarmSpec> {
    if !tenantci_core::dns::is_label(&args.namespace) {
        return Err(Error::bad_input(format!(
            "--namespace `{}` is not a Kubernetes namespace name",
            tenantci_core::input::shown(&args.namespace)
        ))
        .hint("use 1-63 lower-case letters, digits and '-', e.g. gitlab-runner"));
    }
    if args.replicas < 0 {
        return Err(
            Error::bad_input(format!("--replicas {} is negative", args.replicas))
                .hint("pass 0 to keep the objects without pause pods, or --remove to delete them"),
        );
    }
    if let Some(path) = &args.dispatch_config {
        let cfg = tenantci_dispatch::config::Config::load(path)?;
        let mut spec = tenantci_dispatch::backend::pod::pause::prewarm_spec(
            &cfg.executor,
            &cfg.cluster.namespace,
            args.replicas,
        );
        spec.labels = key_values("--label", &args.labels)?;
        spec.image = args.image.clone();
        return Ok(spec);
    }
    Ok(PrewarmSpec {
        namespace: args.namespace.clone(),
        replicas: args.replicas,
        cpu: sizing::parse_request("--cpu", args.cpu.as_deref().unwrap_or_default())?,
        memory: sizing::parse_request("--memory", args.memory.as_deref().unwrap_or_default())?,
        node_selector: key_values("--node-selector", &args.node_selector)?,
        tolerations: args
            .tolerations
            .iter()
            .map(|t| TolerationSpec::parse(t))
            .collect::<Result<_>>()?,
        labels: key_values("--label", &args.labels)?,
        image: args.image.clone(),
    })
}

async fn prewarm(args: PrewarmArgs) -> Result<i32> {
    let spec = prewarm_spec(&args)?;
    let client = tenantci_core::kube_client::from_kubeconfig(&args.kubeconfig).await?;
    if !args.remove && !args.dry_run {
        prewarm::check(&client, &spec).await?;
    }
    let report = if args.remove {
        prewarm::remove(&client, &spec, args.dry_run).await?
    } else {
        prewarm::apply(&client, &spec, args.dry_run).await?
    };
    if args.output.is_json() {
        output::print_json(&report)?;
    } else {
        let dry = if report.dry_run { " (dry run)" } else { "" };
        println!(
            "{} pause pods{dry}: Deployment {} with {} replica(s) of {} CPU / {}, PriorityClass {} (value {})",
            report.action,
            report.deployment,
            report.replicas,
            report.cpu,
            report.memory,
            report.priority_class,
            report.priority
        );
    }
    Ok(0)
}

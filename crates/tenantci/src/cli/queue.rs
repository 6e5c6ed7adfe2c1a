//! `tenantci queue ...`: the NATS users' config, the JetStream topology, and its status.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::output::{self, OutputArgs};
use tenantci_core::duration;
use tenantci_dispatch::backend::{catalog, pod, vm};
use tenantci_dispatch::queue::history_bucket::HistorySettings;
use tenantci_dispatch::queue::topology::{self, Change, TopologySpec};
use tenantci_dispatch::queue::{depth, permissions};

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Write the nats-server authorization fragment for ci-admin, ci-producer and ci-worker.
    ///
    /// Creates DIR/<user>.password (random, 0600) for each user that has none (existing ones are
    /// kept) and writes the fragment with bcrypt hashes to FILE, includable from nats-server.conf.
    NatsConfig(NatsConfigArgs),
    /// Create or update the stream CI_RUNNER, the consumers `pod` and `vm` and the claim ledger
    /// (key-value bucket CI_CLAIMS), all with --replicas (idempotent).
    Init(InitArgs),
    /// Show pending and in-flight assignments per consumer.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct NatsConfigArgs {
    /// Directory for the password files (created 0700).
    #[arg(long, value_name = "DIR")]
    pub secrets_dir: PathBuf,
    /// Where to write the nats-server config fragment.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Connection")]
pub struct ConnArgs {
    /// NATS server URL.
    #[arg(long, value_name = "URL", env = "TENANTCI_NATS_URL")]
    pub nats: String,
    /// NATS user.
    #[arg(long, value_name = "USER")]
    pub user: String,
    /// File holding the user's password (from `queue nats-config`).
    #[arg(long, value_name = "FILE")]
    pub password_file: PathBuf,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Concurrent executor Pods (max_ack_pending of consumer `pod`). Default: 4.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub pod_capacity: u32,
    /// Concurrent VMs (max_ack_pending of consumer `vm`). Default: 1.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub vm_capacity: u32,
    /// Stream replicas: 3 on a three-node NATS cluster. Default: 1.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub replicas: usize,
    /// Redeliver an unacked assignment after this long without progress. Default: 30s.
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub ack_wait: String,
    /// Deliveries before the server gives up on an assignment; -1: unlimited (a transient
    /// failure is retried with backoff up to 60s until it succeeds). Default: -1.
    #[arg(long, value_name = "N", default_value_t = -1, allow_negative_numbers = true)]
    pub max_deliver: i64,
    /// Most assignments the stream holds; more are refused. Default: 100000.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub max_msgs: i64,
    /// Most bytes the stream holds; more are refused. Default: 268435456 (256 MiB).
    #[arg(long, value_name = "BYTES", default_value_t = 256 * 1024 * 1024)]
    pub max_bytes: i64,
    /// How long the task history (bucket CI_HISTORY) keeps a task's record after its last
    /// write, as a Go duration (at least 24h); a dispatcher with ci-admin applies its config's
    /// history.max_age instead. Default: 168h.
    #[arg(long, value_name = "DURATION", default_value = "168h")]
    pub history_max_age: String,
    /// Most tasks the task history keeps (1 to 1000000), the oldest dropped first; a dispatcher
    /// with ci-admin applies its config's history.max_tasks instead. Default: 10000.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub history_max_tasks: i64,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn run(cmd: QueueCommand) -> tenantci_core::Result<i32> {
    match cmd {
        QueueCommand::NatsConfig(args) => nats_config(args),
        QueueCommand::Init(args) => init(args).await,
        QueueCommand::Status(args) => status(args).await,
    }
}

fn nats_config(args: NatsConfigArgs) -> tenantci_core::Result<i32> {
    let report = permissions::write_nats_config(&args.secrets_dir, &args.out, &catalog::kinds())?;
    if args.output.is_json() {
        output::print_json(&report)?;
    } else {
        let state = if report.fragment_written {
            "wrote"
        } else {
            "unchanged"
        };
        println!("{} {state}", report.fragment.display());
        for u in &report.users {
            let how = if u.password_created {
                "created"
            } else {
                "kept"
            };
            println!(
                "  {:<12} {} ({how}, 0600)",
                u.user,
                u.password_file.display()
            );
        }
    }
    Ok(0)
}

fn spec_from(args: &InitArgs) -> tenantci_core::Result<TopologySpec> {
    let ack_wait = duration::parse_positive(&args.ack_wait).map_err(|e| {
        tenantci_core::Error::bad_input(format!("the ack wait `{}` {e}", args.ack_wait))
            .hint("pass --ack-wait as a Go duration such as `30s`")
    })?;
    let spec = TopologySpec {
        // Every backend of this build gets its consumer; the two with flags at their value.
        capacities: catalog::all()
            .map(|f| match f.kind {
                k if k == pod::KIND => (k, args.pod_capacity),
                k if k == vm::KIND => (k, args.vm_capacity),
                k => (k, f.default_capacity),
            })
            .collect(),
        replicas: args.replicas,
        ack_wait,
        max_deliver: args.max_deliver,
        max_messages: args.max_msgs,
        max_bytes: args.max_bytes,
        history: HistorySettings {
            max_age: Some(args.history_max_age.parse().map_err(|e| {
                tenantci_core::Error::bad_input(format!(
                    "the history's max age `{}` {e}",
                    args.history_max_age
                ))
                .hint("pass --history-max-age as a Go duration such as `168h`")
            })?),
            max_tasks: Some(args.history_max_tasks),
        },
        ..TopologySpec::default()
    };
    spec.validate().map_err(|e| {
        tenantci_core::Error::bad_input(format!("invalid queue topology: {e}"))
            .hint("see `tenantci queue init --help` for the accepted values")
    })?;
    Ok(spec)
}

async fn init(args: InitArgs) -> tenantci_core::Result<i32> {
    let spec = spec_from(&args)?;
    let report = topology::apply_at(
        &args.conn.nats,
        &args.conn.user,
        &args.conn.password_file,
        &spec,
    )
    .await?;
    if args.output.is_json() {
        output::print_json(&report)?;
    } else {
        println!(
            "stream {}: {}",
            report.stream,
            describe(&report.stream_change)
        );
        for c in &report.consumers {
            println!(
                "consumer {} (capacity {}): {}",
                c.consumer,
                c.capacity,
                describe(&c.change)
            );
        }
        println!(
            "claim ledger {}: {}",
            report.ledger,
            describe(&report.ledger_change)
        );
        println!(
            "task history {}: {}",
            report.history,
            describe(&report.history_change)
        );
    }
    Ok(0)
}

fn describe(c: &Change) -> String {
    match c {
        Change::Created => "created".into(),
        Change::Unchanged => "unchanged".into(),
        Change::Updated { fields } => format!("updated ({})", fields.join(", ")),
    }
}

async fn status(args: StatusArgs) -> tenantci_core::Result<i32> {
    let report = depth::read(
        &args.conn.nats,
        &args.conn.user,
        &args.conn.password_file,
        &catalog::kinds(),
    )
    .await?;
    if args.output.is_json() {
        output::print_json(&report)?;
    } else {
        println!(
            "{:<8} {:>8} {:>10} {:>9}",
            "CONSUMER", "PENDING", "IN-FLIGHT", "CAPACITY"
        );
        for c in &report.consumers {
            println!(
                "{:<8} {:>8} {:>10} {:>9}",
                c.consumer, c.pending, c.in_flight, c.capacity
            );
        }
    }
    Ok(0)
}

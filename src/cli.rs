//! The whole command-line surface. Doc comments are the help: the first line is the short
//! help, later paragraphs the long help. Global flags work before or after the subcommand.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use crate::group::{parse_max_unhealthy, MaxUnhealthy, OnDrainFailure};
use crate::names::InstanceId;
pub use crate::text::parse_duration;
use crate::text::short;

/// A duration that must be longer than 0 (a timeout: a check or a drain given none would
/// always fail).
fn parse_timeout(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err("must be longer than 0".into()),
        d => Ok(d),
    }
}

/// `1/N` (see `look::Slice`): N.
fn parse_slice(s: &str) -> Result<u32, String> {
    crate::look::Slice::parse(s).map(|s| s.of)
}

/// A subcommand's `after_help`: its examples, then the guide's page about it.
macro_rules! examples {
    ($($line:literal),+; $page:literal) => {
        concat!("Examples:\n", $("  ", $line, "\n",)+ "\nGuide: ", $page, " (in the repository)")
    };
}

/// The global options that mean something to `command`: the others are still accepted there (a
/// global option works anywhere), but its help, man page and completions leave them out.
fn applies(command: &str, option: &str) -> bool {
    const WRITERS: [&str; 7] = ["provision", "destroy", "label", "reconcile", "sweep-orphans", "import", "migrate"];
    match option {
        "yes" => matches!(command, "destroy" | "sweep-orphans"),
        "lock_timeout" | "accept_config" | "metrics_file" => WRITERS.contains(&command),
        "parallelism" | "settle" | "settle_wait" => WRITERS.contains(&command) && command != "migrate",
        "terraform" | "terraform_timeout" | "retries" | "env" | "store" => command != "validate",
        _ => true, // dir, output, vm_types, quiet, verbose, help, version
    }
}

/// The command line as it is parsed, shown and documented: [`Cli`]'s, each subcommand showing
/// only the global options that apply to it ([`applies`]), after its own.
pub fn command() -> clap::Command {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    cmd.build(); // the global options are copied into every subcommand
    for sub in cmd.get_subcommands_mut() {
        let name = sub.get_name().to_string();
        *sub = std::mem::take(sub)
            .mut_args(|arg| if applies(&name, arg.get_id().as_str()) { arg } else { arg.hide(true) });
    }
    cmd
}

/// Manage groups of machines through Terraform.
///
/// infrakit-tf expands an instance spec (JSON) into Terraform JSON files in a directory: one
/// `instance-<digits>.tf.json` per instance, `<scope>_dedicated_<n>.tf.json` per dedicated
/// slot and `<scope>_global.tf.json` per global scope. New files are queued as `.tf.json.new`
/// until terraform applies them.
#[derive(Debug, Parser)]
#[command(name = "infrakit-tf", version, propagate_version = true, max_term_width = 100)]
#[command(after_long_help = crate::exit::help_text())]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Command,
}

/// The options every subcommand accepts, before or after its name. A subcommand's help lists
/// its own options first, then, under "Global options", those of these that apply to it
/// ([`command`]).
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct GlobalArgs {
    /// The managed directory (your Terraform config plus the files infrakit-tf writes)
    #[arg(long, global = true, env = "INFRAKIT_TF_DIR", default_value = ".", value_name = "DIR")]
    pub dir: PathBuf,

    /// Output format of the data on stdout
    #[arg(long, global = true, value_enum, default_value_t = OutputFormat::Table, value_name = "FORMAT")]
    pub output: OutputFormat,

    /// Answer yes to confirmations (required without a terminal)
    #[arg(long, global = true)]
    pub yes: bool,

    /// Treat TYPE as a VM type shaped like aws_instance (map `tags`, Init in `user_data`)
    ///
    /// Repeatable. Other shapes are declared in `infrakit-tf.json` in the directory.
    #[arg(long = "vm-type", global = true, env = "INFRAKIT_TF_VM_TYPES", value_delimiter = ',', value_name = "TYPE")]
    pub vm_types: Vec<String>,

    /// How long to wait for another infrakit-tf run to release the directory (`0` fails at once)
    ///
    /// A number with a unit: `500ms`, `30s`, `5m`, `1h`; a bare number is seconds.
    #[arg(long, global = true, value_parser = parse_duration, default_value = "60s", value_name = "DURATION")]
    pub lock_timeout: Duration,

    /// The longest one terraform run may take; then it gets one interrupt and, after a grace
    /// period (as long as this timeout, at most 60s), is killed (exit 14)
    ///
    /// Applies to every terraform run, long (apply, plan) or short (version, init, show).
    /// A number with a unit: `500ms`, `30s`, `5m`, `1h`; a bare number is seconds.
    #[arg(long, global = true, env = "INFRAKIT_TF_TERRAFORM_TIMEOUT", value_parser = parse_duration, default_value = "1h", value_name = "DURATION")]
    pub terraform_timeout: Duration,

    /// How many resources terraform creates, changes or destroys at once (its `-parallelism`,
    /// whose default is 10); large groups on fast APIs want more
    #[arg(long, global = true, env = "INFRAKIT_TF_PARALLELISM", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub parallelism: Option<u32>,

    /// The store's PostgreSQL URL, for several hosts (overrides `store.postgres` in
    /// infrakit-tf.json, which also names the directory in it: `store.directory`)
    ///
    /// A libpq URL (`postgresql://user@host:5432/db`); the password may also come from
    /// `PGPASSWORD` or the password file (`PGPASSFILE`, `~/.pgpass`). See docs/several-hosts.md.
    #[arg(long, global = true, env = "INFRAKIT_TF_STORE", value_name = "URL", hide_env_values = true)]
    pub store: Option<String>,

    /// With a store: make this host's configuration the one every host must run with
    ///
    /// A host whose `*.tf`, `infrakit-tf.json` (but the URL) or group specs differ from those
    /// the store last ran with refuses to write (exit 3): two copies would undo each other's
    /// changes on every run. This makes this host's copy the one; every other host then
    /// refuses until its copy matches. Give it once, by hand, never from cron.
    #[arg(long, global = true)]
    pub accept_config: bool,

    /// Run a terraform init, plan or apply that failed with a transient error (throttling, an
    /// API's 5xx, a reset connection, a network timeout, a broken download) again, up to N
    /// times, after an exponential backoff; `0` never does (default 3, or `retries.max` in
    /// infrakit-tf.json)
    ///
    /// A failure that matches no pattern, an interrupt, `--terraform-timeout`, a held state
    /// lock are never retried. See docs/running-unattended.md.
    #[arg(long, global = true, env = "INFRAKIT_TF_RETRIES", value_name = "N")]
    pub retries: Option<u32>,

    /// How old the evidence must be before the cloud's "not there" is believed: a look-up or a
    /// read begun less than this after a create, or after an apply that failed or was cut
    /// short, may adopt what it finds, but never concludes that a machine does not exist
    ///
    /// Overrides every look-up type's `settle` (infrakit-tf.json `lookups`; default 2m) for this
    /// run. `0s` trusts the first answer: for a cloud known to be consistent, and for tests. A
    /// Go duration: `90s`, `1m30s`, `2m`. See docs/what-a-reconcile-reads.md.
    #[arg(long, global = true, env = "INFRAKIT_TF_SETTLE", value_parser = parse_duration, value_name = "DURATION")]
    pub settle: Option<Duration>,

    /// A retry in the same run, after an apply that failed while creating, waits for the settle
    /// time when it is at most this long; otherwise (the default, `0s`) the machines that apply
    /// may have made are left to the next run, and the rest is applied
    #[arg(long, global = true, env = "INFRAKIT_TF_SETTLE_WAIT", value_parser = parse_duration, default_value = "0s", value_name = "DURATION")]
    pub settle_wait: Duration,

    /// After every command that writes, and every reconcile, write the run's metrics to PATH in
    /// Prometheus's text format, atomically (for node_exporter's textfile collector; over
    /// `metrics_file` in infrakit-tf.json)
    ///
    /// Failed runs too. A file that cannot be written is a warning, not a failed run.
    #[arg(long, global = true, env = "INFRAKIT_TF_METRICS_FILE", value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,

    /// The terraform (or tofu) program; default: `terraform` on PATH, else `tofu`
    #[arg(long, global = true, env = "INFRAKIT_TF_TERRAFORM", value_name = "PATH")]
    pub terraform: Option<PathBuf>,

    /// Pass an environment variable to terraform (repeatable), e.g. `--env TF_VAR_region=eu`
    #[arg(long, global = true, value_parser = parse_kv, value_name = "K=V")]
    pub env: Vec<(String, String)>,

    /// Print only data and errors
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Print more about what is done
    #[arg(short, long, global = true)]
    pub verbose: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Human-readable: an ID, or a table
    Table,
    /// JSON with a stable schema, for scripts
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check an instance spec and report every problem
    ///
    /// Exits 0 when the spec is valid, 3 otherwise, listing each problem with its JSON location
    /// (an RFC 6901 pointer into the spec).
    #[command(after_help = examples!(
        "infrakit-tf validate web.json",
        "infrakit-tf validate --output json web.json | jq '.problems[].message'";
        "docs/specs-and-scopes.md"))]
    Validate(ValidateArgs),
    /// Create one instance from a spec and print its ID
    ///
    /// Writes the instance file (and its dedicated and global files) as queued `.tf.json.new`
    /// files, or over the live `.tf.json` where one exists. Prints the new ID alone on stdout,
    /// so `id=$(infrakit-tf provision web.json)` works.
    #[command(after_help = examples!(
        "id=$(infrakit-tf --dir ~/web provision web.json)",
        "infrakit-tf provision --count 3 --tag tier=frontend web.json",
        "infrakit-tf provision --no-apply web.json   # queue it; a later reconcile applies";
        "docs/commands.md"))]
    Provision(ProvisionArgs),
    /// Remove instances
    ///
    /// `terminate` (the default) removes the instance file, its dedicated slot and any global
    /// file no other instance refers to. `rolling-update` removes only the instance file and
    /// keeps its dedicated slot for the replacement to re-attach.
    #[command(after_help = examples!(
        "infrakit-tf destroy instance-1795792151 --yes",
        "infrakit-tf destroy instance-1795792151 --reason rolling-update --no-apply --yes";
        "docs/commands.md"))]
    Destroy(DestroyArgs),
    /// Merge labels into an instance's VM tags
    #[command(after_help = examples!(
        "infrakit-tf label instance-1795792151 owner=ops tier=frontend";
        "docs/commands.md"))]
    Label(LabelArgs),
    /// List instances, one row each, queued or not
    #[command(after_help = examples!(
        "infrakit-tf describe",
        "infrakit-tf describe --output json | jq -r '.[].id'";
        "docs/commands.md"))]
    Describe(DescribeArgs),
    /// Converge the directory and its groups: prune machines deleted behind Terraform's back,
    /// apply the queue, keep every group whole and current
    ///
    /// For cron (`*/5 * * * * infrakit-tf reconcile --no-wait`). One refreshing plan finds
    /// machines that vanished; their instance files are removed (their dedicated slots stay
    /// for re-attachment, queued files are never pruned); queued files are promoted. Each
    /// group (--group, or `groups` in infrakit-tf.json) is brought to its size or logical IDs
    /// in one apply, then its outdated members are replaced, --max-unavailable at a time.
    /// Refuses, with exit 11 and nothing applied, a run that would destroy more than
    /// --max-destroy resources.
    #[command(after_help = examples!(
        "*/5 * * * * infrakit-tf --dir /srv/web reconcile --no-wait   # crontab",
        "infrakit-tf reconcile --group web-group.json --health-cmd 'curl -fsS http://$INFRAKIT_TF_ATTR_IP/'",
        "infrakit-tf reconcile --check   # exit 10 when something is pending";
        "docs/reconcile.md"))]
    Reconcile(Box<ReconcileArgs>),
    /// Remove what nothing owns any more: instance files whose VM is gone from state,
    /// dedicated slots and global files no instance refers to
    ///
    /// Lists them with what terraform will destroy, asks (or needs --yes), then applies.
    #[command(after_help = examples!(
        "infrakit-tf sweep-orphans --dry-run",
        "infrakit-tf sweep-orphans --yes";
        "docs/commands.md"))]
    SweepOrphans(SweepArgs),
    /// Adopt machines that already exist (a hand-made first manager) into the group
    ///
    /// SPEC is an instance spec or an InfraKit group spec (path, `-` or `file://` URL). Each
    /// --resource names a resource of the spec and the cloud ID of the existing object; the VM
    /// request makes the instance. Adopted resources keep their live values for the keys the
    /// spec names and get the instance's tags; no Init is injected. Resources of the spec that
    /// are not requested are created, as a provision would. All or nothing; importing what is
    /// already imported changes nothing.
    #[command(after_help = examples!(
        "infrakit-tf import manager.json --resource aws_instance=i-0abc123 --dry-run",
        "infrakit-tf import group.json --group-id managers --resource aws_instance=i-0abc123";
        "docs/import.md"))]
    Import(ImportArgs),
    /// Move this directory into the store, for several hosts (guide: docs/several-hosts.md)
    ///
    /// Needs `store` in infrakit-tf.json (and `terraform { backend "pg" {} }` in main.tf).
    /// Copies the managed files into the store in one transaction and moves terraform's state
    /// into that backend (`terraform init -migrate-state`). Refused, with nothing changed,
    /// when the store already holds other files under this directory's name. Prints the files
    /// the store holds. Run again, it changes nothing.
    #[command(after_help = examples!(
        "infrakit-tf --dir /srv/web migrate";
        "docs/several-hosts.md"))]
    Migrate,
}

impl Command {
    /// The command's name, when its runs are measured (`--metrics-file`): every command that
    /// writes, and `reconcile`; `None` for `validate` and `describe`.
    pub fn measured(&self) -> Option<&'static str> {
        match self {
            Command::Validate(_) | Command::Describe(_) => None,
            Command::Provision(_) => Some("provision"),
            Command::Destroy(_) => Some("destroy"),
            Command::Label(_) => Some("label"),
            Command::Reconcile(_) => Some("reconcile"),
            Command::SweepOrphans(_) => Some("sweep-orphans"),
            Command::Import(_) => Some("import"),
            Command::Migrate => Some("migrate"),
        }
    }
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The spec: a path, `-` for stdin, or a `file://` URL
    #[arg(value_name = "SPEC")]
    pub spec: String,

    /// A resource to adopt: its type, the existing object's cloud ID, and its name in the spec
    /// when the type appears more than once (repeatable; one must be the VM)
    #[arg(long = "resource", required = true, value_parser = crate::import_match::parse_request, value_name = "TYPE=ID[:NAME]")]
    pub resources: Vec<(String, String)>,

    /// The group's ID: the `infrakit.group` tag; must match a group spec's `ID`
    #[arg(long, value_name = "ID")]
    pub group_id: Option<String>,

    /// Leave this property out of the adopted resources' configuration (repeatable)
    #[arg(long = "exclude-prop", value_name = "NAME")]
    pub exclude: Vec<String>,

    /// Show what would be imported and created, and terraform's plan; change nothing
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// Exit at once (code 5) when another infrakit-tf run holds the directory
    #[arg(long)]
    pub no_wait: bool,

    /// Refresh and plan without saving anything; exit 10 when something is pending
    #[arg(long)]
    pub check: bool,

    /// Refuse (exit 11, nothing applied) a run that would destroy more resources than this
    /// [default: 10]
    ///
    /// Counts everything the run would destroy: pruned machines, scaling down and rolling
    /// replacements. A group spec that would empty a group is refused unless --max-destroy
    /// is given.
    #[arg(long, value_name = "N")]
    pub max_destroy: Option<u64>,

    /// A group spec to converge (InfraKit's format; repeatable). Without any, the groups
    /// listed in infrakit-tf.json (`"groups": [...]`, relative to the directory)
    #[arg(long = "group", value_name = "FILE")]
    pub groups: Vec<PathBuf>,

    /// Replace at most N outdated members at a time [default: the spec's
    /// `Updating.MaxUnavailable`, else 1]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_unavailable: Option<u64>,

    /// Percentages of a group at which its rollout pauses, such as `20,50` (`none`: no pause)
    /// [default: the spec's `Updating.Checkpoints`]
    #[arg(long, value_name = "PERCENTS", value_parser = parse_checkpoints)]
    pub checkpoints: Option<Checkpoints>,

    /// How long a batch's replacements must stay healthy (their check passing, run again until
    /// then) before the next batch [default: the spec's `Updating.MinReady`, else 0s]
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub min_ready: Option<Duration>,

    /// How long a rollout pauses at each checkpoint [default: the spec's
    /// `Updating.CheckpointDelay`, else 1h]
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub checkpoint_delay: Option<Duration>,

    /// Roll group ID back to its last good spec: its members on a newer spec are replaced by
    /// members on it, and the group stays there (repeatable)
    ///
    /// The last good spec is the last one under which the group was whole and current; the
    /// rollout record keeps it. The group spec's own spec is not rolled out again until it
    /// changes, or --retry-rollout.
    #[arg(long, value_name = "ID", conflicts_with = "check")]
    pub rollback: Vec<String>,

    /// Roll group ID's spec out again after it was rolled back (repeatable)
    #[arg(long, value_name = "ID", conflicts_with = "check")]
    pub retry_rollout: Vec<String>,

    /// A shell command that says whether a replacement is healthy (exit 0); run with
    /// `INFRAKIT_TF_ID`, `INFRAKIT_TF_LOGICAL_ID`, `INFRAKIT_TF_GROUP` and `INFRAKIT_TF_ATTR_<KEY>` (its
    /// state attributes) in its environment. The next batch waits for it
    #[arg(long, value_name = "CMD")]
    pub health_cmd: Option<String>,

    /// How long --health-cmd may run before it counts as failed
    #[arg(long, value_parser = parse_duration, default_value = "60s", value_name = "DURATION")]
    pub health_timeout: Duration,

    /// The share of the listed machines each run refreshes, to see changes made in the cloud:
    /// 1/N refreshes all of them within N runs
    ///
    /// Machines of a type with a look-up are listed every run (one call per type and group) to
    /// see which still exist; the others are refreshed every run (docs/what-a-reconcile-reads.md).
    /// The slice goes on where the last run, on any host, stopped.
    #[arg(long, value_parser = parse_slice, default_value = "1/12", value_name = "1/N")]
    pub refresh_slice: u32,

    /// Refresh every resource this run, as a plain `terraform plan` does (no listing, no slice)
    #[arg(long)]
    pub full_refresh: bool,

    #[command(flatten)]
    pub drain: DrainArgs,

    #[command(flatten)]
    pub heal: HealArgs,
}

/// Health-based repair; each flag overrides the group spec's `Healing` for every group of the
/// run.
#[derive(Debug, Default, Args)]
pub struct HealArgs {
    /// A shell command that checks each created member every run (exit 0: healthy); run with
    /// the environment --health-cmd has [default: the group spec's `Healing.Command`]
    ///
    /// Overrides the spec's `Healing.Command` for every group of the run. A member whose
    /// checks fail --heal-failures runs in a row is unhealthy, and is replaced in its slot.
    #[arg(long, value_name = "CMD")]
    pub heal_cmd: Option<String>,

    /// How long a check may run before it counts as failed (it is killed) [default: the
    /// spec's `Healing.Timeout`, else 10s]
    #[arg(long, value_parser = parse_timeout, value_name = "DURATION")]
    pub heal_timeout: Option<Duration>,

    /// How long after a member was first seen created it is first checked [default: the
    /// spec's `Healing.InitialDelay`, else 0s]
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub heal_initial_delay: Option<Duration>,

    /// Failed checks in a row (one a run) that make a member unhealthy [default: the spec's
    /// `Healing.FailuresBeforeRepair`, else 3]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub heal_failures: Option<u32>,

    /// The circuit breaker: with more unhealthy members than this (a count, or a percentage
    /// of the desired size, rounded down but at least 1), a group repairs none and the run
    /// exits 18 [default: the spec's `Healing.MaxUnhealthy`, else 50%]
    #[arg(long, value_parser = parse_max_unhealthy, value_name = "N|P%")]
    pub heal_max_unhealthy: Option<MaxUnhealthy>,

    /// Unhealthy members repaired per group per run, at most [default: the spec's
    /// `Healing.MaxRepairsPerRun`, else 1]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub heal_max_repairs: Option<u64>,
}

/// The drain before a member is destroyed; each flag overrides the group spec's
/// `Lifecycle` for every group of the run.
#[derive(Debug, Default, Args)]
pub struct DrainArgs {
    /// A shell command that drains a member before it is destroyed (exit 0: drained); run
    /// with the environment --health-cmd has [default: the group spec's `Lifecycle.Drain`]
    ///
    /// Overrides the spec's `Lifecycle.Drain` for every group of the run. It runs before the
    /// member's files are removed: a run killed before the removal leaves the member, and
    /// the next run drains it again.
    #[arg(long, value_name = "CMD")]
    pub drain_cmd: Option<String>,

    /// How long the drain command may run before it counts as failed (it is killed)
    /// [default: the spec's `Lifecycle.DrainTimeout`, else 5m]
    #[arg(long, value_parser = parse_timeout, value_name = "DURATION")]
    pub drain_timeout: Option<Duration>,

    /// What a failed drain does: `abandon` keeps the member (exit 17 once all else is done),
    /// `continue` destroys it anyway [default: the spec's `Lifecycle.OnDrainFailure`, else
    /// abandon]
    #[arg(long, value_enum, value_name = "WHAT")]
    pub on_drain_failure: Option<OnDrainFailure>,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// List the orphans and terraform's plan; change nothing
    #[arg(long)]
    pub dry_run: bool,

    /// Remove the files but do not run terraform
    #[arg(long, conflicts_with = "dry_run")]
    pub no_apply: bool,

    /// Destroy the strays instead: machines a reconcile's listing showed with the tags of a
    /// resource of this directory that has its machine already (a twin a lost answer made, or a
    /// leak), in no state
    ///
    /// Only those: a stray that names a resource without a machine is adopted by reconcile, and
    /// one that names no file here (another directory's?) is never destroyed. The strays are
    /// those the last reconcile found (docs/what-a-reconcile-reads.md).
    #[arg(long, conflicts_with = "no_apply")]
    pub strays: bool,

    /// With --strays: refuse (exit 11) to destroy more than N machines
    #[arg(long, value_name = "N", default_value_t = 10, requires = "strays")]
    pub max_destroy: u64,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The spec: a path, or `-` for stdin
    #[arg(value_name = "SPEC")]
    pub spec: PathBuf,
}

#[derive(Debug, Args)]
pub struct ProvisionArgs {
    /// The spec: a path, or `-` for stdin
    #[arg(value_name = "SPEC")]
    pub spec: PathBuf,

    /// The instance's logical ID (a pet): names its siblings and dedicated slot, sets the
    /// `infrakit.logical_id` tag; overrides the spec's `LogicalID`. Repeatable: one pet per
    /// logical ID, all in one apply
    #[arg(long, value_name = "ID")]
    pub logical_id: Vec<String>,

    /// Provision N instances (each its own ID and slot) in one apply, so that they are
    /// created in parallel; stdout lists the N IDs, `--output json` an array (at most 1000)
    #[arg(long, value_name = "N", conflicts_with = "logical_id", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub count: Option<u32>,

    /// Add a tag to the VM (repeatable; overrides the spec's `Tags`)
    #[arg(long = "tag", value_parser = parse_kv, value_name = "K=V")]
    pub tags: Vec<(String, String)>,

    /// Only write the files (queued as `.tf.json.new`); do not run terraform
    #[arg(long)]
    pub no_apply: bool,

    /// Show the files that would change and terraform's plan; write and apply nothing
    #[arg(long, conflicts_with = "no_apply")]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct DestroyArgs {
    /// Instance IDs (`instance-<digits>`)
    #[arg(required = true, value_parser = parse_id, value_name = "ID")]
    pub ids: Vec<InstanceId>,

    /// Why: `terminate` removes the dedicated slot too; `rolling-update` keeps it
    #[arg(long, value_enum, default_value_t = Reason::Terminate)]
    pub reason: Reason,

    /// Only change the files; do not run terraform
    #[arg(long)]
    pub no_apply: bool,

    /// Show the files that would change and terraform's plan; write and apply nothing
    #[arg(long, conflicts_with = "no_apply")]
    pub dry_run: bool,

    /// A group spec whose `Lifecycle.Drain` drains its members before they are destroyed
    /// (repeatable). Without any, the groups listed in infrakit-tf.json; a member's group is
    /// its `infrakit.group` tag
    #[arg(long = "group", value_name = "FILE")]
    pub groups: Vec<PathBuf>,

    #[command(flatten)]
    pub drain: DrainArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Reason {
    /// Scale down or retire: remove the instance, its slot, and unreferenced globals
    Terminate,
    /// Replace the instance: keep its dedicated slot for the replacement
    #[value(alias = "rolling_update")]
    RollingUpdate,
}

#[derive(Debug, Args)]
pub struct LabelArgs {
    /// The instance ID
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: InstanceId,

    /// Labels to merge into the VM's tags
    #[arg(required = true, value_parser = parse_kv, value_name = "K=V")]
    pub labels: Vec<(String, String)>,

    /// Only change the files; do not run terraform
    #[arg(long)]
    pub no_apply: bool,

    /// Show the files that would change and terraform's plan; write and apply nothing
    #[arg(long, conflicts_with = "no_apply")]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct DescribeArgs {
    /// Show only instances with this tag (repeatable; all must match)
    #[arg(long = "tag", value_parser = parse_kv, value_name = "K=V")]
    pub tags: Vec<(String, String)>,

    /// A group spec that says whether its members are current (repeatable). Without any, the
    /// groups listed in infrakit-tf.json
    #[arg(long = "group", value_name = "FILE")]
    pub groups: Vec<PathBuf>,

    /// Include each VM's properties (in `--output json`)
    #[arg(long)]
    pub properties: bool,
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected K=V with a non-empty key, got `{}`", short(s))),
    }
}

fn parse_id(s: &str) -> Result<InstanceId, String> {
    s.parse()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::FromArgMatches;

    #[test]
    fn cli_is_well_formed() {
        command().debug_assert();
    }

    // A subcommand's help lists its own options, then the global ones that apply to it; the
    // others are still accepted there.
    #[test]
    fn help_shows_the_global_options_that_apply() {
        let mut cmd = command();
        let validate = cmd.find_subcommand_mut("validate").unwrap().render_help().to_string();
        let (own, global) = validate.split_once("Global options:").expect("a heading of global options");
        assert!(!own.contains("--dir") && global.contains("--dir"), "{validate}");
        for not_here in ["--store", "--retries", "--metrics-file", "--yes", "--lock-timeout"] {
            assert!(!validate.contains(not_here), "validate -h shows {not_here}: {validate}");
        }
        assert!(validate.contains("Examples:\n  infrakit-tf validate web.json"), "{validate}");
        let reconcile = cmd.find_subcommand_mut("reconcile").unwrap().render_help().to_string();
        let own = reconcile.split_once("Global options:").unwrap().0;
        assert!(own.contains("--max-destroy") && !own.contains("--lock-timeout"), "{reconcile}");
        let matches =
            command().try_get_matches_from(["infrakit-tf", "validate", "--retries", "2", "web.json"]).unwrap();
        assert_eq!(Cli::from_arg_matches(&matches).unwrap().global.retries, Some(2), "a hidden global option parses");
    }

    #[test]
    fn global_flags_go_before_or_after() {
        let a = Cli::try_parse_from(["infrakit-tf", "--dir", "x", "describe", "--output", "json"]).unwrap();
        assert_eq!((a.global.dir, a.global.output), (PathBuf::from("x"), OutputFormat::Json));
        let b = Cli::try_parse_from(["infrakit-tf", "destroy", "instance-1", "--reason", "rolling_update", "--yes"])
            .unwrap();
        assert!(b.global.yes);
        assert!(matches!(b.command, Command::Destroy(DestroyArgs { reason: Reason::RollingUpdate, .. })));
    }
}

/// `--checkpoints`: percentages of a group, increasing (`group::check_checkpoints`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoints(pub Vec<u64>);

/// Parses `--checkpoints`: `20,50` (a `%` after each is allowed), or `none`.
fn parse_checkpoints(text: &str) -> Result<Checkpoints, String> {
    if text.trim() == "none" {
        return Ok(Checkpoints(Vec::new()));
    }
    let percents = text
        .split(',')
        .map(|p| {
            let p = p.trim();
            p.strip_suffix('%').unwrap_or(p).trim().parse::<u64>().map_err(|_| {
                format!("`{}` is not a percentage: give them as `20,50`, or `none`", crate::text::short(p))
            })
        })
        .collect::<Result<Vec<u64>, String>>()?;
    crate::group::check_checkpoints(&percents)?;
    Ok(Checkpoints(percents))
}

//! Arguments resolved once into what every command needs, with the directory's configuration
//! file (`infrakit-tf.json`, see `config`): read and parsed on first use, at most once a
//! command, and every reader takes its part from here.

use std::cell::OnceCell;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::cli::GlobalArgs;
use crate::config::{self, Config, CONFIG_FILE};
use crate::directory::Directory;
use crate::fsio;
use crate::journal;
use crate::lock::{self, DirLock, Wait};
use crate::output::Printer;
use crate::profile::Profiles;
use crate::store::StoreConfig;
use crate::terraform::retry::{self, Retry};
use crate::terraform::{self, Terraform};

pub(crate) struct Ctx {
    /// `--terraform` / `INFRAKIT_TF_TERRAFORM`.
    pub(crate) terraform: Option<PathBuf>,
    /// `--env K=V`: extra environment for terraform.
    pub(crate) tf_env: Vec<(String, String)>,
    pub(crate) dir: PathBuf,
    pub(crate) printer: Printer,
    pub(crate) assume_yes: bool,
    pub(crate) vm_types: Vec<String>,
    pub(crate) lock_timeout: Duration,
    /// `--terraform-timeout`: the longest any one terraform run may take.
    pub(crate) terraform_timeout: Duration,
    /// `--parallelism`: terraform's `-parallelism` for plans and applies.
    pub(crate) parallelism: Option<u32>,
    /// `--accept-config`: with a store, this host's configuration becomes the one every host
    /// must run with.
    pub(crate) accept_config: bool,
    /// `--store` / `INFRAKIT_TF_STORE`: the store URL, over infrakit-tf.json's.
    store_url: Option<String>,
    /// The store, resolved on first use (`None`: the local directory is the store).
    store: OnceCell<Option<StoreConfig>>,
    /// `--retries`: over infrakit-tf.json's `retries.max`.
    retries: Option<u32>,
    /// The retry policy, resolved on first use.
    retry: OnceCell<Retry>,
    /// `--metrics-file`.
    metrics_file: Option<PathBuf>,
    /// `--settle`: every look-up type's settle time, for this run.
    settle: Option<Duration>,
    /// `--settle-wait`: the longest a retry waits for the settle time.
    pub(crate) settle_wait: Duration,
    /// infrakit-tf.json, parsed on first use (see [`Ctx::config`]).
    config: OnceCell<Config>,
}

impl Ctx {
    pub(crate) fn new(args: GlobalArgs) -> Self {
        Ctx {
            terraform: args.terraform,
            tf_env: args.env,
            dir: args.dir,
            printer: Printer::new(args.output, args.quiet, args.verbose),
            assume_yes: args.yes,
            vm_types: args.vm_types.into_iter().filter(|t| !t.is_empty()).collect(),
            lock_timeout: args.lock_timeout,
            terraform_timeout: args.terraform_timeout,
            parallelism: args.parallelism,
            accept_config: args.accept_config,
            store_url: args.store,
            store: OnceCell::new(),
            retries: args.retries,
            retry: OnceCell::new(),
            metrics_file: args.metrics_file,
            settle: args.settle,
            settle_wait: args.settle_wait,
            config: OnceCell::new(),
        }
    }

    /// The directory's configuration file, `infrakit-tf.json`: read and parsed on first use,
    /// then kept; the default (every section empty) when there is none, or no directory. Each
    /// reader asks at the moment it needs it, so a command that needs no part of it never
    /// reads it. A file that cannot be read or parsed is not kept: each use fails alike
    /// (invalid: exit 3).
    pub(crate) fn config(&self) -> Result<&Config> {
        if let Some(config) = self.config.get() {
            return Ok(config);
        }
        let config = read_config(&self.config_file())?.unwrap_or_default();
        Ok(self.config.get_or_init(|| config))
    }

    /// Where the configuration file is (as messages name it).
    fn config_file(&self) -> PathBuf {
        self.dir.join(CONFIG_FILE)
    }

    /// Which failed terraform runs are run again: infrakit-tf.json's `retries`, its `max`
    /// under `--retries`. A pattern that is no regular expression, or a delay that is no
    /// duration, is refused (exit 3).
    pub(crate) fn retry(&self) -> Result<&Retry> {
        if let Some(retry) = self.retry.get() {
            return Ok(retry);
        }
        let section = self.config()?.retries.clone().unwrap_or_default();
        let file = self.config_file();
        let bad = |e: String| config::invalid(&file, e);
        let base = match &section.base_delay {
            Some(d) => crate::cli::parse_duration(d).map_err(|e| bad(format!("retries.base_delay: {e}")))?,
            None => retry::DEFAULT_BASE,
        };
        let patterns = section.errors.map_or(retry::Patterns::Default, retry::Patterns::Replaced);
        let max = self.retries.or(section.max).unwrap_or(retry::DEFAULT_MAX);
        let policy =
            Retry::new(max, base, patterns, &section.extra_errors).map_err(|e| bad(format!("retries: {e}")))?;
        Ok(self.retry.get_or_init(|| policy))
    }

    /// Where this run's metrics go: `--metrics-file`, else infrakit-tf.json's `metrics_file`.
    pub(crate) fn metrics_file(&self) -> Result<Option<PathBuf>> {
        match &self.metrics_file {
            Some(path) => Ok(Some(path.clone())),
            None => Ok(self.config()?.metrics_file.as_ref().map(|p| self.dir.join(p))),
        }
    }

    /// The store, when one is configured (`store` in infrakit-tf.json, `--store`): then the
    /// managed files and the lock live in PostgreSQL (see `store`).
    pub(crate) fn store(&self) -> Result<Option<&StoreConfig>> {
        if let Some(store) = self.store.get() {
            return Ok(store.as_ref());
        }
        let section = self.config()?.store.clone();
        let config = StoreConfig::resolve(section, self.store_url.as_deref(), &self.config_file())?;
        Ok(self.store.get_or_init(|| config).as_ref())
    }

    /// The directory, listed. Fails with "not found" when it does not exist. Under the lock,
    /// the temporary files a killed write left behind are removed as they are listed (no
    /// second listing: on a large directory that costs as much as the command).
    pub(crate) fn directory(&self) -> Result<Directory> {
        let mut dir = Directory::open(&self.dir)?;
        if lock::held() {
            dir.remove_stale_temps()?;
        }
        Ok(dir)
    }

    /// The VM profiles and look-ups in force: built in, the configuration file's, `--vm-type`.
    pub(crate) fn profiles(&self) -> Result<Profiles> {
        let config = self.config()?;
        Ok(Profiles::load(&config.vm_types, &config.lookups, &self.vm_types, self.settle))
    }

    /// The profiles of a directory that must exist, without listing it (before the lock:
    /// the listing that counts is taken under it).
    pub(crate) fn profiles_of_existing_dir(&self) -> Result<Profiles> {
        if !self.dir.is_dir() {
            return Err(crate::exit::missing_directory(&self.dir).into());
        }
        self.profiles()
    }

    /// The terraform runner for `dir`: discovered, version-checked.
    pub(crate) fn terraform(&self, dir: &Directory) -> Result<Terraform> {
        let program = terraform::discover(self.terraform.as_deref())?;
        let mut env = self.tf_env.clone();
        let store = self.store()?;
        if let Some(store) = store {
            // `backend "pg" {}` keeps the state in the store's database, in a schema of the
            // directory's own; a setting of yours (in main.tf, the environment, --env) wins.
            for (key, value) in store.terraform_env(dir.path())? {
                let yours =
                    env.iter().any(|(k, _)| *k == key) || key != "PGPASSWORD" && std::env::var_os(&key).is_some();
                if !yours {
                    env.push((key, value));
                } else if key == "PG_CONN_STR" {
                    self.printer.warn(
                        "your PG_CONN_STR replaces infrakit-tf's: terraform's state writes are not fenced by the lease \
                         (a host that lost it could still save a state) and the server may end its idle session; \
                         leave PG_CONN_STR to infrakit-tf (set the connection in store.postgres)",
                    );
                }
            }
        }
        let tf = Terraform::open(program, dir.path(), env, self.terraform_timeout, self.printer.clone())?
            .with_parallelism(self.parallelism)
            // Several hosts: a terraform that a killed run on another host left running holds
            // the state's lock; ours waits for it as for our own lock.
            .with_state_lock_timeout(store.map(|_| self.lock_timeout))
            .without_env(if store.is_some() { crate::store::tls::UNSAFE_FOR_TERRAFORM } else { &[] })
            .under_lease(store.is_some())
            // A command that writes checked the policy before it began (`lib::run`); one that
            // only reads runs without retries rather than fail for it.
            .with_retry(self.retry().cloned().unwrap_or_else(|_| Retry::none()));
        self.printer.detail(&format!("using {}", tf.describe()));
        Ok(tf)
    }

    /// Takes the directory lock (for commands that write), waiting up to `--lock-timeout`.
    /// List the directory *after* this.
    pub(crate) fn lock_dir(&self) -> Result<DirLock> {
        self.lock_dir_within(Wait::new(self.lock_timeout))
    }

    /// The directory lock alone, nothing undone (a reader that must set up `.terraform`
    /// first): every path to the directory lock goes through here.
    pub(crate) fn lock_dir_only(&self, wait: Wait) -> Result<DirLock> {
        lock::directory(&self.dir, wait, &self.printer)
    }

    /// Takes the directory lock, waiting until `wait`'s deadline, then undoes a change a killed run
    /// left half done (`journal::recover`); its stray temporary files go when the directory is
    /// listed ([`Ctx::directory`]). A directory that cannot be written fails here, before
    /// anything is changed.
    pub(crate) fn lock_dir_within(&self, wait: Wait) -> Result<DirLock> {
        let lock = self.lock_dir_only(wait)?;
        fsio::check_writable(&self.dir)?;
        let undone = journal::recover(&self.dir)?;
        if !undone.is_empty() {
            self.printer.warn(&format!(
                "an earlier run was interrupted while changing {} file(s); its change was undone: {}",
                undone.len(),
                undone.join(", ")
            ));
        }
        Ok(lock)
    }
}

/// The configuration file `file`, parsed; `None` when there is none.
fn read_config(file: &Path) -> Result<Option<Config>> {
    match crate::fsio::read_to_string(file) {
        Ok(text) => Ok(Some(Config::parse(&text, file)?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
            Err(crate::exit::invalid(e.to_string()).hint("replace it with the configuration file").into())
        }
        Err(e) => Err(e).with_context(|| format!("failed to read `{}`", file.display())),
    }
}

//! Arguments resolved once into what every command needs.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use crate::cli::GlobalArgs;
use crate::directory::Directory;
use crate::lock::{self, DirLock};
use crate::output::Printer;
use crate::profile::Profiles;
use crate::terraform::{self, Terraform};

pub struct Ctx {
    /// `--terraform` / `INFRAKIT_TF_TERRAFORM`.
    pub terraform: Option<PathBuf>,
    /// `--env K=V`: extra environment for terraform.
    pub tf_env: Vec<(String, String)>,
    pub dir: PathBuf,
    pub printer: Printer,
    pub assume_yes: bool,
    pub vm_types: Vec<String>,
    pub lock_timeout: Duration,
}

impl Ctx {
    pub fn new(args: GlobalArgs) -> Self {
        Ctx {
            terraform: args.terraform,
            tf_env: args.env,
            dir: args.dir,
            printer: Printer::new(args.output, args.quiet, args.verbose),
            assume_yes: args.yes,
            vm_types: args.vm_types.into_iter().filter(|t| !t.is_empty()).collect(),
            lock_timeout: args.lock_timeout,
        }
    }

    /// The directory, listed. Fails with "not found" when it does not exist.
    pub fn directory(&self) -> Result<Directory> {
        Directory::open(&self.dir)
    }

    pub fn profiles(&self, dir: &Directory) -> Result<Profiles> {
        Profiles::load(dir.path(), &self.vm_types)
    }

    /// The profiles of a directory that must exist, without listing it (before the lock:
    /// the listing that counts is taken under it).
    pub fn profiles_of_existing_dir(&self) -> Result<Profiles> {
        if !self.dir.is_dir() {
            return Err(crate::directory::missing(&self.dir).into());
        }
        Profiles::load(&self.dir, &self.vm_types)
    }

    /// The terraform runner for `dir`: discovered, version-checked.
    pub fn terraform(&self, dir: &Directory) -> Result<Terraform> {
        let program = terraform::discover(self.terraform.as_deref())?;
        let tf = Terraform::open(program, dir.path(), self.tf_env.clone())?;
        self.printer.detail(&format!("using {} {}", tf.program().display(), tf.version));
        Ok(tf)
    }

    /// Takes the directory lock (for commands that write). List the directory *after* this.
    pub fn lock(&self) -> Result<DirLock> {
        lock::lock(&self.dir, self.lock_timeout, &self.printer)
    }
}

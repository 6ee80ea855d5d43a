//! Never apply into a lost state. Terraform treats a missing or empty state as "nothing
//! exists yet" and would create every machine again (the old ones leak). So after every run
//! that may change the state, its `lineage` and `serial` (the state's identity and version)
//! are recorded in [`RECORD`]; before every plan or apply, [`check`] refuses when the state
//! is missing, empty or unreadable, has another lineage, or an older serial than recorded,
//! while the directory has live managed files (whose machines the state must know).
//!
//! Terraform creates an empty state file when it takes its lock, before it saves anything, so
//! an empty state with neither a record nor a backup (`terraform.tfstate.backup`, written
//! before terraform overwrites a state) is a first apply that was cut short: nothing was ever
//! saved, nothing is lost, and terraform may go on.
//!
//! A state terraform could not save (it writes it to `errored.tfstate`, whatever the backend)
//! stops every plan and apply until it is pushed and the file removed. With a store, a writer
//! pushes it by itself first when that is safe ([`push_verdict`]; `Workspace::push_errored_state`).
//!
//! The local backend's state file is read here (directly: it is cheap, and no extra
//! terraform run is paid for it). With a store, terraform's state is a row of the store's
//! database, which the store reads and whose stamp it records ([`check_store`], judged by the
//! same rules, [`judge`]). Any other remote backend is not checked.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::directory::Directory;
use crate::exit::{Code, Failure};
use crate::fsio;
use crate::names::Suffix;

/// Where terraform writes a state it could not save.
const ERRORED: &str = "errored.tfstate";

/// Lineage and serial of the state after our last terraform run.
pub(crate) const RECORD: &str = ".infrakit-tf-state.json";

/// A state's identity and version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Stamp {
    pub(crate) lineage: String,
    pub(crate) serial: u64,
}

/// What the state file (or the store's state row) holds.
#[derive(Debug, PartialEq)]
pub(crate) enum Observed {
    Missing,
    Empty,
    Unreadable(String),
    State(Stamp),
}

/// Records the state's stamp after a run (nothing for a remote backend, or a state that is
/// not there or not whole).
pub(crate) fn record(dir: &Path) -> Result<()> {
    let Some(path) = local_state(dir) else { return Ok(()) };
    if let Observed::State(stamp) = observe(&path) {
        fsio::write_atomic(&dir.join(RECORD), &serde_json::to_vec(&stamp)?, fsio::Perms::Public)?;
    }
    Ok(())
}

/// Refuses to let terraform plan or apply into a state that lost what the directory's live
/// files say exists.
///
/// `env` is what terraform runs with, as a shell prefix, for the command a hint gives (with a
/// store: where its state is).
pub(crate) fn check(dir: &Directory, env: Option<&str>) -> Result<()> {
    if let Some(file) = errored(dir.path()) {
        // Terraform could not save the state after a run (a full disk, a backend gone): what
        // it did is only in this file. Applying again would do it again.
        return Err(errored_refusal(dir, &file, env, None));
    }
    let Some(path) = local_state(dir.path()) else { return Ok(()) };
    if !dir.managed().any(|f| f.suffix == Suffix::Live) {
        return Ok(());
    }
    let recorded: Option<Stamp> =
        crate::fsio::read(dir.path().join(RECORD)).ok().and_then(|b| serde_json::from_slice(&b).ok());
    let observed = observe(&path);
    let first_cut_short = observed == Observed::Empty && recorded.is_none() && !backup_of(&path).exists();
    let problem = if first_cut_short { None } else { judge(&observed, recorded.as_ref()) };
    match problem {
        None => Ok(()),
        Some(problem) => Err(Failure::new(
            Code::StateLost,
            format!(
                "refusing to run terraform: the state `{}` does not match the live files: {problem}; applying would create every machine again",
                path.display()
            ),
        )
        .hint(format!(
            "restore `{}` (or your backend's previous version), check it, then remove `{RECORD}` to accept it and re-run",
            backup_of(&path).display()
        ))
        .into()),
    }
}

/// The refusal (exit 13) to plan or apply while `file` holds a state terraform could not save
/// in `dir`; `why` it was not pushed by itself, when a writer judged it unsafe ([`push_verdict`]).
/// `env` is what terraform runs with, as a shell prefix (see [`check`]).
pub(crate) fn errored_refusal(dir: &Directory, file: &Path, env: Option<&str>, why: Option<&str>) -> anyhow::Error {
    let shown = if file == dir.path().join(ERRORED) { PathBuf::from(ERRORED) } else { file.to_path_buf() };
    let push = match env {
        Some(env) => format!("cd {} && {env} terraform state push {}", dir.shown().display(), shown.display()),
        None => format!("terraform state push {}", shown.display()),
    };
    let place = if file == dir.path().join(ERRORED) {
        format!("`{ERRORED}` in `{}`", dir.shown().display())
    } else {
        format!("`{}` (kept there for `{}`, which was full)", file.display(), dir.shown().display())
    };
    let message = format!("refusing to run terraform: {place} holds a state terraform could not save");
    match why {
        None => Failure::new(Code::StateLost, message).hint(format!(
            "push it where the state belongs (`{push}`; `-force` when terraform says the serial is the same: the file is the newer), then remove it and re-run"
        )),
        Some(why) => Failure::new(Code::StateLost, format!("{message}, and pushing it by itself is not safe: {why}"))
            .hint(format!(
                "look at both states (`terraform state pull`, and the file): if the file is the one, push it (`{push} -force`); then remove it and re-run"
            )),
    }
    .into()
}

/// Whether two state documents hold the same objects and outputs (whatever their serials): a
/// state terraform could not save that the backend holds already (pushed by a run stopped
/// before it removed the file) is dropped, not refused. Unreadable: `false`.
pub(crate) fn same_objects(a: &[u8], b: &[u8]) -> bool {
    let held = |bytes: &[u8]| {
        serde_json::from_slice::<serde_json::Value>(bytes)
            .ok()
            .map(|v| (v.get("lineage").cloned(), v.get("resources").cloned(), v.get("outputs").cloned()))
    };
    matches!((held(a), held(b)), (Some(a), Some(b)) if a == b && a.0.is_some())
}

/// How a state terraform could not save may be pushed ([`push_verdict`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Push {
    /// Newer than the backend's: a plain `state push`.
    Plain,
    /// Of the backend's serial (terraform wrote the file instead of saving that version):
    /// `state push -force`, since terraform refuses another state of the same serial.
    Force,
}

/// Whether the state terraform could not save (`file`, as [`Observed::of`] its bytes) may be
/// pushed over the store's state (`backend`; `recorded`: the stamp the last run left) by
/// itself, losing nothing: the same lineage and a serial not older than the store's state's
/// (nor than the one recorded), or no state in the store while the file is of the recorded
/// lineage (or none was recorded: a first apply that could not save). `Err`: why not.
pub(crate) fn push_verdict(file: &Observed, backend: &Observed, recorded: Option<&Stamp>) -> Result<Push, String> {
    let ours = match file {
        Observed::State(stamp) => stamp,
        Observed::Missing => return Err("it is gone".into()),
        Observed::Empty => return Err("it is empty".into()),
        Observed::Unreadable(e) => return Err(format!("its lineage and serial cannot be read: {e}")),
    };
    let push = match backend {
        Observed::State(now) if now.lineage != ours.lineage => {
            Err(format!("its lineage `{}` is not the store's state's `{}`", ours.lineage, now.lineage))
        }
        Observed::State(now) if ours.serial < now.serial => {
            Err(format!("its serial {} is older than the store's state's {}", ours.serial, now.serial))
        }
        Observed::State(now) if ours.serial == now.serial => Ok(Push::Force),
        Observed::State(_) => Ok(Push::Plain),
        Observed::Missing => match recorded {
            Some(then) if then.lineage != ours.lineage => Err(format!(
                "the store holds no state, and its lineage `{}` is not the `{}` the last run recorded",
                ours.lineage, then.lineage
            )),
            _ => Ok(Push::Plain),
        },
        Observed::Empty => Err("the store's state is empty (0 bytes): which one is right cannot be told".into()),
        Observed::Unreadable(e) => Err(format!("the store's state cannot be read: {e}")),
    }?;
    match recorded {
        Some(then) if then.lineage == ours.lineage && then.serial > ours.serial => {
            Err(format!("its serial {} is older than the {} the last run recorded", ours.serial, then.serial))
        }
        _ => Ok(push),
    }
}

/// Where a state terraform could not save is, for the directory `dir`: terraform's own
/// `errored.tfstate` there, or where [`keep_dump`] kept its emergency dump when the
/// directory could not hold it. `None`: nowhere.
pub(crate) fn errored(dir: &Path) -> Option<PathBuf> {
    // In the temporary directory, only a file of ours, in a directory of ours alone: anyone
    // can write there, and a state planted there would be pushed.
    dump_places(dir).into_iter().filter(|p| !p.private || trusted(&p.path)).map(|p| p.path).find(|p| p.exists())
}

/// Whether `file` and its directory are this user's, and its directory no one else's to write
/// or read (0700): what another local user cannot have planted or read.
fn trusted(file: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid(2) has no preconditions.
    let me = unsafe { libc::geteuid() };
    let ours = |p: &Path, mask: u32| {
        std::fs::symlink_metadata(p).is_ok_and(|m| m.uid() == me && m.mode() & mask == 0 && !m.file_type().is_symlink())
    };
    file.parent().is_some_and(|d| ours(d, 0o077)) && (!file.exists() || ours(file, 0o077))
}

/// Where an emergency dump of `dir`'s state goes, in order: the directory (as terraform's own
/// `errored.tfstate`, so that the same guard and push apply), the state directory of the XDG
/// spec (`$XDG_STATE_HOME`, else `~/.local/state`: `infrakit-tf/errored/<dir's hash>.tfstate`),
/// the temporary directory (`infrakit-tf-<uid>/errored-<dir's hash>.tfstate`, in a directory
/// of this user's alone, 0700: another local user can neither plant nor read it). Named after
/// the directory's absolute path, so that its next run finds it.
fn dump_places(dir: &Path) -> Vec<Place> {
    let state_home = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
        .or_else(|| std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(".local/state")));
    places_in(dir, state_home.as_deref(), &std::env::temp_dir())
}

/// [`dump_places`], the state and temporary directories given.
fn places_in(dir: &Path, state_home: Option<&Path>, tmp: &Path) -> Vec<Place> {
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let hash = abs
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
    let mut places = vec![Place { path: dir.join(ERRORED), ours: false, private: false }];
    places.extend(state_home.map(|d| Place {
        path: d.join("infrakit-tf/errored").join(format!("{hash:016x}.tfstate")),
        ours: true,
        private: false,
    }));
    // SAFETY: geteuid(2) has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mine = tmp.join(format!("infrakit-tf-{me}"));
    places.push(Place { path: mine.join(format!("errored-{hash:016x}.tfstate")), ours: true, private: true });
    places
}

/// A place for a dump: its path, whether the directories on its way are ours to make (under
/// the state directory, and our own in the temporary directory; never the managed directory),
/// and whether its directory must be ours alone to be used or trusted (in the temporary
/// directory, which every user can write).
struct Place {
    path: PathBuf,
    ours: bool,
    private: bool,
}

/// Where [`keep_dump`] kept a state.
pub(crate) enum Kept {
    File(PathBuf),
    /// Nowhere could hold it: the caller prints it whole (the text).
    Nowhere(String),
}

/// Keeps the state terraform could not save and printed instead (its emergency dump), in the
/// first of [`dump_places`] that can hold it; the next run refuses to plan or apply until it
/// is pushed (see [`check`]).
pub(crate) fn keep_dump(dir: &Path, state: &serde_json::Value) -> Kept {
    keep_in(&dump_places(dir), state)
}

fn keep_in(places: &[Place], state: &serde_json::Value) -> Kept {
    let text = serde_json::to_string_pretty(state).unwrap_or_else(|_| state.to_string());
    for Place { path, ours, private } in places {
        let made =
            |p: &Path| *ours && (if *private { fsio::create_private_dir(p) } else { fsio::create_dir_all(p) }).is_ok();
        let parent_ok = path.parent().is_none_or(|p| p.is_dir() || made(p));
        if parent_ok
            && (!*private || trusted(path))
            && fsio::write_atomic(path, text.as_bytes(), fsio::Perms::Private).is_ok()
        {
            return Kept::File(path.clone());
        }
    }
    Kept::Nowhere(text)
}

/// With a store: another host (`host`, `HOST:DIR`) holds a state terraform could not save; a
/// plan or an apply here would make what it made again (exit 13). `env` reaches the state;
/// `forget` is the SQL for a host that is gone for good.
pub(crate) fn errored_elsewhere(host: &str, env: &str, forget: &str) -> anyhow::Error {
    let (name, dir) = host.split_once(':').unwrap_or((host, "."));
    Failure::new(
        Code::StateLost,
        format!(
            "refusing to run terraform: `{ERRORED}` on `{host}` holds a state terraform could not save there; applying here would make what it made again"
        ),
    )
    .hint(format!(
        "on {name}: `cd {dir} && {env} terraform state push {ERRORED}`, remove it, and run any command there; if that host or its file is gone for good, forget it (`{forget}`) and re-run"
    ))
    .into()
}

/// What is wrong with the state `observed` when the last run left `recorded`: `None` when it
/// is that state, or a later version of it (a missing state with nothing recorded is a
/// directory whose first apply has not saved one yet).
pub(crate) fn judge(observed: &Observed, recorded: Option<&Stamp>) -> Option<String> {
    match (observed, recorded) {
        (Observed::State(now), Some(then)) if now.lineage != then.lineage => Some(format!(
            "its lineage is `{}`, but the last run left lineage `{}`: it is another state",
            now.lineage, then.lineage
        )),
        (Observed::State(now), Some(then)) if now.serial < then.serial => Some(format!(
            "its serial is {}, older than the {} the last run left: it was rolled back",
            now.serial, then.serial
        )),
        (Observed::State(_), _) => None,
        (Observed::Missing, Some(_)) => Some("it is missing".into()),
        (Observed::Missing, None) => None,
        (Observed::Empty, _) => Some("it is empty (0 bytes)".into()),
        (Observed::Unreadable(e), _) => Some(format!("it cannot be read: {e}")),
    }
}

/// With a store: refuses to let terraform plan or apply into a state row (in schema
/// `schema` of the store's database, read by the store) that lost what the live files say
/// exists, by the rules of [`judge`]. A state that is not there while nothing was recorded is
/// a first apply that saved nothing yet (cut short), as for a local state: every run records
/// the stamp after it applies, so a state lost later is caught. `env` reaches the state (the
/// hint's `terraform state push`); `accept` is the SQL that forgets the record.
pub(crate) fn check_store(
    dir: &Directory,
    observed: &Observed,
    recorded: Option<&Stamp>,
    schema: &str,
    env: &str,
    accept: &str,
) -> Result<()> {
    if dir.live_instances() == 0 {
        return Ok(());
    }
    let push = format!("cd {} && {env} terraform state push FILE", dir.shown().display());
    let Some(problem) = judge(observed, recorded) else { return Ok(()) };
    Err(Failure::new(
        Code::StateLost,
        format!(
            "refusing to run terraform: the state in schema `{schema}` of the store's database does not match the live files: {problem}; applying would create every machine again"
        ),
    )
    .hint(format!(
        "push the last good state (`{push}`, with `-force` over a newer one), check it; to accept the state as it is, forget the record (`{accept}`); then re-run"
    ))
    .into())
}

/// Whether terraform keeps this directory's state in a local file: no backend recorded by
/// `init` (`.terraform/terraform.tfstate`), or the `local` one.
pub(crate) fn is_local(dir: &Path) -> bool {
    local_state(dir).is_some()
}

fn backup_of(state: &Path) -> PathBuf {
    let mut name = state.as_os_str().to_owned();
    name.push(".backup");
    PathBuf::from(name)
}

/// The local backend's state file (where it would be), or `None` when another backend is
/// configured.
pub(crate) fn local_state_path(dir: &Path) -> Option<PathBuf> {
    local_state(dir)
}

/// The local backend's state file, or `None` when another backend is configured.
fn local_state(dir: &Path) -> Option<PathBuf> {
    #[derive(Deserialize)]
    struct Backend {
        #[serde(rename = "type")]
        kind: String,
        #[serde(default)]
        config: serde_json::Map<String, serde_json::Value>,
    }
    #[derive(Deserialize)]
    struct BackendState {
        backend: Option<Backend>,
    }
    let default = Some(dir.join("terraform.tfstate"));
    let Ok(bytes) = crate::fsio::read(dir.join(".terraform/terraform.tfstate")) else { return default };
    match serde_json::from_slice::<BackendState>(&bytes).ok().and_then(|s| s.backend) {
        None => default,
        Some(b) if b.kind == "local" => match b.config.get("path").and_then(|p| p.as_str()) {
            Some(p) => Some(dir.join(p)),
            None => default,
        },
        Some(_) => None,
    }
}

fn observe(path: &Path) -> Observed {
    match crate::fsio::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Observed::Missing,
        Err(e) => Observed::Unreadable(e.to_string()),
        Ok(bytes) => Observed::of(&bytes),
    }
}

impl Observed {
    /// What a state's bytes hold.
    pub(crate) fn of(bytes: &[u8]) -> Observed {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Observed::Empty;
        }
        match serde_json::from_slice::<Stamp>(bytes) {
            Ok(stamp) => Observed::State(stamp),
            Err(e) => Observed::Unreadable(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_stamp_of_a_state_file() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("terraform.tfstate");
        assert_eq!(observe(&p), Observed::Missing);
        fsio::write_atomic(&p, b"", fsio::Perms::Public).unwrap();
        assert_eq!(observe(&p), Observed::Empty);
        fsio::write_atomic(&p, b"{\"version\": 4, \"serial\": 7", fsio::Perms::Public).unwrap();
        assert!(matches!(observe(&p), Observed::Unreadable(_)));
        let state = br#"{"version": 4, "terraform_version": "1.11.4", "serial": 7, "lineage": "abc", "resources": []}"#;
        fsio::write_atomic(&p, state, fsio::Perms::Public).unwrap();
        assert_eq!(observe(&p), Observed::State(Stamp { lineage: "abc".into(), serial: 7 }));
    }

    #[test]
    fn a_dump_goes_to_the_first_place_that_can_hold_it_else_it_is_printed() {
        let tmp = tempfile::tempdir().unwrap();
        let state = serde_json::json!({"version": 4, "serial": 3, "lineage": "abc"});
        let gone = tmp.path().join("no such dir");
        let state_home = tmp.path().join("state");
        let tmpdir = tmp.path().join("tmp");
        fsio::create_dir_all(&tmpdir).unwrap();
        let places = places_in(&gone, Some(&state_home), &tmpdir);
        let Kept::File(kept) = keep_in(&places, &state) else { panic!("kept nowhere") };
        assert!(kept.starts_with(state_home.join("infrakit-tf/errored")), "{}", kept.display());
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&crate::fsio::read(&kept).unwrap()).unwrap(), state);
        // A state directory that cannot be made (a file in its way): the temporary directory.
        fsio::write_atomic(&tmp.path().join("file"), b"", fsio::Perms::Public).unwrap();
        let places = places_in(&gone, Some(&tmp.path().join("file")), &tmpdir);
        let Kept::File(kept) = keep_in(&places, &state) else { panic!("kept nowhere") };
        assert!(kept.starts_with(&tmpdir));
        // Nowhere at all: the text, to print.
        let places = places_in(&gone, None, &gone);
        assert!(matches!(keep_in(&places, &state), Kept::Nowhere(text) if text.contains("\"lineage\": \"abc\"")));
    }

    #[test]
    fn a_state_is_pushed_by_itself_only_over_an_older_version_of_itself() {
        let stamp = |lineage: &str, serial| Stamp { lineage: lineage.into(), serial };
        let state = |lineage: &str, serial| Observed::State(stamp(lineage, serial));
        let ours = state("a", 7);
        assert_eq!(push_verdict(&ours, &state("a", 6), Some(&stamp("a", 6))), Ok(Push::Plain));
        assert_eq!(push_verdict(&ours, &state("a", 7), Some(&stamp("a", 7))), Ok(Push::Force));
        assert_eq!(push_verdict(&ours, &Observed::Missing, None), Ok(Push::Plain));
        assert_eq!(push_verdict(&ours, &Observed::Missing, Some(&stamp("a", 5))), Ok(Push::Plain));
        let refused = |file: &Observed, backend: &Observed, recorded: Option<Stamp>| {
            push_verdict(file, backend, recorded.as_ref()).unwrap_err()
        };
        assert_eq!(refused(&ours, &state("b", 3), None), "its lineage `a` is not the store's state's `b`");
        assert_eq!(refused(&ours, &state("a", 8), None), "its serial 7 is older than the store's state's 8");
        assert_eq!(
            refused(&ours, &state("a", 6), Some(stamp("a", 9))),
            "its serial 7 is older than the 9 the last run recorded"
        );
        assert!(refused(&ours, &Observed::Missing, Some(stamp("b", 1))).contains("the store holds no state"));
        assert!(refused(&ours, &Observed::Empty, None).contains("the store's state is empty"));
        assert!(refused(&Observed::Unreadable("x".into()), &state("a", 1), None).contains("cannot be read"));
        assert_eq!(refused(&Observed::Empty, &state("a", 1), None), "it is empty");
    }

    #[test]
    fn a_state_the_backend_holds_already_is_told_whatever_its_serial() {
        let doc = |serial: u64, id: &str| {
            serde_json::to_vec(&serde_json::json!({"version": 4, "serial": serial, "lineage": "a",
                "resources": [{"type": "t", "name": "n", "instances": [{"attributes": {"id": id}}]}], "outputs": {}}))
            .unwrap()
        };
        assert!(same_objects(&doc(2, "i-1"), &doc(3, "i-1")));
        assert!(!same_objects(&doc(2, "i-1"), &doc(3, "i-2")));
        assert!(!same_objects(b"{}", b"{}"), "no lineage: not a state");
        assert!(!same_objects(b"not json", &doc(3, "i-1")));
    }

    #[test]
    fn a_remote_backend_is_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        assert_eq!(local_state(d), Some(d.join("terraform.tfstate")));
        fsio::create_dir_all(&d.join(".terraform")).unwrap();
        let backend = |b: &str| {
            fsio::write_atomic(&d.join(".terraform/terraform.tfstate"), b.as_bytes(), fsio::Perms::Public).unwrap()
        };
        backend(r#"{"backend": {"type": "pg", "config": {"conn_str": "postgres://x"}}}"#);
        assert_eq!(local_state(d), None);
        backend(r#"{"backend": {"type": "local", "config": {"path": "other.tfstate"}}}"#);
        assert_eq!(local_state(d), Some(d.join("other.tfstate")));
    }
}

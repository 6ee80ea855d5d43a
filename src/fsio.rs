//! Every file-system mutation goes through here (clippy bans `std::fs::write`, `remove_file`,
//! `rename`, `copy`, `create_dir_all` and `symlink` elsewhere), so that there is one place
//! that makes writes atomic, one that classifies write errors, and one crash point per
//! mutation for the crash-point tests (`fault::point`).
//!
//! `write_atomic` writes a temporary file in the destination directory, syncs it, renames it
//! over the destination and syncs the directory, so a reader (terraform, another infrakit-tf,
//! a crash) sees the old bytes or the new bytes, never a mix. Unchanged bytes are not
//! rewritten. See <https://lwn.net/Articles/457667/> for why the directory sync matters. A
//! crash can leave a temporary file (`.infrakit-tf-*.tmp`) behind: `Directory::remove_stale_temps`
//! clears them under the directory lock.
//!
//! A write that fails because the file system is read-only or full, or because permission is
//! denied, is a classified [`Code::Unwritable`] failure: the operator's fix is the disk, not
//! infrakit-tf.
#![allow(clippy::disallowed_methods)]

use std::fs::{self, File, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::Result;

use crate::exit::{Code, Failure};
use crate::fault;

/// Who may read a file we write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Perms {
    /// 0644: no secrets inside.
    Public,
    /// 0600: carries Init (user data), which often holds secrets.
    Private,
    /// Exactly these permission bits (restoring a file as it was).
    Exact(u32),
}

impl Perms {
    pub(crate) fn bits(self) -> u32 {
        match self {
            Perms::Public => 0o644,
            Perms::Private => 0o600,
            Perms::Exact(bits) => bits,
        }
    }
}

/// The process's umask, as the operator set it (see [`note_umask`]); 0o022 until noted.
static UMASK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0o022);

/// Notes the process's umask, once, at the start (reading it means setting it, briefly: no
/// other thread runs yet). Every file we write honours it: a umask of 077 makes even our
/// "public" files (the records, the shared files) the operator's alone.
pub(crate) fn note_umask() {
    // SAFETY: umask(2) has no preconditions; the old value is put back at once.
    let mask = unsafe {
        let old = libc::umask(0o077);
        libc::umask(old);
        old
    };
    UMASK.store(mask & 0o777, std::sync::atomic::Ordering::Relaxed);
}

/// `bits` less what the umask takes away.
fn masked(bits: u32) -> u32 {
    bits & !UMASK.load(std::sync::atomic::Ordering::Relaxed)
}

/// Prefix of our temporary files: a leading `.` keeps terraform and our listing away from them.
pub(crate) const TEMP_PREFIX: &str = ".infrakit-tf-";
const TEMP_SUFFIX: &str = ".tmp";

/// What `write_atomic` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    Changed,
    Unchanged,
}

/// Writes `bytes` to `path` atomically. An existing file keeps its permissions, except that a
/// private file is never left readable by others.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], perms: Perms) -> Result<Written> {
    replace(path, bytes, perms, true)
}

/// [`write_atomic`] without waiting for the disk: for a note that, lost in a crash, only
/// costs work (a reader never sees half of it).
pub(crate) fn write_unsynced(path: &Path, bytes: &[u8], perms: Perms) -> Result<Written> {
    replace(path, bytes, perms, false)
}

fn replace(path: &Path, bytes: &[u8], perms: Perms, durable: bool) -> Result<Written> {
    let existing = match read(path) {
        Ok(old) if old == bytes => return Ok(Written::Unchanged),
        Ok(_) => Some(fs::metadata(path).map_err(|e| error(e, "stat", path))?),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(error(e, "read", path)),
    };
    let bits = match (&existing, perms) {
        (_, Perms::Exact(bits)) => bits,
        (Some(meta), Perms::Private) => meta.permissions().mode() & 0o770,
        (Some(meta), Perms::Public) => meta.permissions().mode() & 0o7777,
        (None, perms) => masked(perms.bits()),
    };
    fault::point(|| format!("write {}", path.display()));
    let dir = parent(path);
    let write = || -> io::Result<()> {
        let mut tmp = tempfile::Builder::new().prefix(TEMP_PREFIX).suffix(TEMP_SUFFIX).tempfile_in(dir)?;
        tmp.as_file().set_permissions(Permissions::from_mode(bits))?;
        tmp.write_all(bytes)?;
        if durable {
            tmp.as_file().sync_all()?;
        }
        tmp.persist(path).map_err(|e| e.error)?;
        if durable {
            sync_dir(dir)?;
        }
        Ok(())
    };
    write().map_err(|e| error(e, "write", path))?;
    Ok(Written::Changed)
}

/// Removes a file; a file that is already gone is not an error (another run, or the user, got
/// there first and the outcome is the same).
pub(crate) fn remove(path: &Path) -> Result<bool> {
    if fs::symlink_metadata(path).is_err() {
        return Ok(false);
    }
    fault::point(|| format!("remove {}", path.display()));
    match fs::remove_file(path) {
        Ok(()) => {
            sync_dir(parent(path)).map_err(|e| error(e, "sync", parent(path)))?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(error(e, "remove", path)),
    }
}

/// Renames `from` over `to` (same directory: atomic) and syncs the directory.
pub(crate) fn rename(from: &Path, to: &Path) -> Result<()> {
    fault::point(|| format!("rename {} {}", from.display(), to.display()));
    fs::rename(from, to).map_err(|e| error(e, "rename", from))?;
    sync_dir(parent(to)).map_err(|e| error(e, "sync", parent(to)))
}

/// Creates a directory and its parents.
pub(crate) fn create_dir_all(path: &Path) -> Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    fault::point(|| format!("mkdir {}", path.display()));
    fs::create_dir_all(path).map_err(|e| error(e, "create", path))
}

/// Creates the directory `path` (not its parents) for this user alone (0700); one already there
/// is left as it is (the caller checks whose it is).
pub(crate) fn create_private_dir(path: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if path.is_dir() {
        return Ok(());
    }
    fault::point(|| format!("mkdir {}", path.display()));
    fs::DirBuilder::new().mode(0o700).create(path).map_err(|e| error(e, "create", path))
}

/// Opens (creating it, empty, if need be; the umask applies) a file held only for its `flock` (see
/// `lock::generation::changing`).
pub(crate) fn open_lock_file(path: &Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    // Never through a link: one another user planted would have us create (as root, say)
    // whatever it points to.
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o666)
        .open(path)
        .map_err(|e| error(e, "open", path))
}

/// Reads a regular file whole. Anything else (a FIFO, a socket, a device, through a link or
/// not) is an error of kind `InvalidInput`, found without waiting (the open does not block)
/// and never read: a FIFO planted where we read a record must not hang the command, nor a
/// link to `/dev/zero` fill its memory.
pub(crate) fn read(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let path = path.as_ref();
    let not_a_file = |meta: &fs::Metadata| {
        let kind = meta.file_type();
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_dir() {
            "a directory"
        } else {
            "a device"
        };
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{}` is {what}, not a file: it is never read", path.display()),
        )
    };
    // Looked at before it is opened (a socket cannot be), and again once open (it may have
    // been replaced in between).
    let meta = fs::metadata(path)?;
    if !meta.is_file() {
        return Err(not_a_file(&meta));
    }
    let mut file = fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_a_file(&meta));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// [`read`], as UTF-8 text.
pub(crate) fn read_to_string(path: impl AsRef<Path>) -> io::Result<String> {
    String::from_utf8(read(path)?).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Opens an existing file held only for its `flock`, never through a link, never blocking (a
/// FIFO planted there is not waited on) and only if it is a regular file.
pub(crate) fn open_existing_lock_file(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other(format!("`{}` is not a regular file", path.display())));
    }
    Ok(file)
}

/// A symbolic link at `link` to `target` (the dry-run mirror).
pub(crate) fn symlink(target: &Path, link: &Path) -> Result<()> {
    fault::point(|| format!("symlink {}", link.display()));
    std::os::unix::fs::symlink(target, link).map_err(|e| error(e, "link", link))
}

/// Writes a new file in a temporary directory of our own (a reader's view of the store):
/// plainly, without the atomic dance or fsync, since it does not outlive the command.
pub(crate) fn write_scratch(path: &Path, bytes: &[u8], bits: u32) -> Result<()> {
    fault::point(|| format!("write {}", path.display()));
    let write = || -> io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = fs::OpenOptions::new().write(true).create_new(true).mode(bits).open(path)?;
        file.write_all(bytes)
    };
    write().map_err(|e| error(e, "write", path))
}

/// The name every temporary directory of ours starts with (in `TMPDIR`).
const TEMP_DIR_PREFIX: &str = "infrakit-tf-";

/// A new temporary directory of ours for `kind` (`plan`, `mirror`, `view`), for this user
/// alone (0700), removed when dropped; named `infrakit-tf-KIND-PID.START-XXXXXX`, so that one a killed run left behind
/// is known as such ([`sweep_temp_dirs`]).
pub(crate) fn temp_dir(kind: &str) -> Result<tempfile::TempDir> {
    let prefix = format!("{TEMP_DIR_PREFIX}{kind}-{}-", crate::process::me());
    // This user's alone (0700): plans saved there hold the state and sensitive values.
    tempfile::Builder::new()
        .prefix(&prefix)
        .permissions(Permissions::from_mode(0o700))
        .tempdir()
        .map_err(|e| anyhow::Error::new(e).context("failed to create a temporary directory"))
}

/// Removes the temporary directories (and files) of ours that runs killed before they could remove them
/// left in `TMPDIR` (cron kills runs; over months they would fill it): those whose owner (the
/// PID and start time in the name) is gone, and, from an infrakit-tf before that naming, those
/// a day old. Only names of exactly our shapes ([`stale_temp_dir`]); best effort: what cannot
/// be read or removed stays.
pub(crate) fn sweep_temp_dirs() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let age = || entry.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
        if stale_temp_dir(name, crate::process::alive, age) {
            let _ = match entry.file_type() {
                Ok(t) if t.is_dir() => fs::remove_dir_all(entry.path()),
                Ok(t) if t.is_file() => fs::remove_file(entry.path()),
                _ => Ok(()),
            };
        }
    }
}

/// Whether `name` is a temporary directory of ours that nobody will remove:
/// `infrakit-tf-KIND-PID.START-XXXXXX` whose process is gone (`alive`), or
/// `infrakit-tf-KIND-XXXXXX` (an older infrakit-tf's) a day old (`age`).
fn stale_temp_dir(name: &str, alive: impl Fn(u32, u64) -> bool, age: impl Fn() -> Option<std::time::Duration>) -> bool {
    let Some(rest) = name.strip_prefix(TEMP_DIR_PREFIX) else { return false };
    let Some((kind, rest)) = rest.split_once('-') else { return false };
    let random = |s: &str| s.len() == 6 && s.bytes().all(|b| b.is_ascii_alphanumeric());
    // `terraform`: the file terraform's output is followed through, unlinked once open.
    // `snapshot`: what an older release called a reader's `view`.
    if !["plan", "mirror", "view", "snapshot", "state", "terraform", "relay"].contains(&kind) {
        return false;
    }
    match rest.split_once('-') {
        Some((owner, suffix)) if random(suffix) => match owner.split_once('.').map(|(p, s)| (p.parse(), s.parse())) {
            Some((Ok(pid), Ok(start))) => !alive(pid, start),
            _ => false,
        },
        None if random(rest) => age().is_some_and(|a| a > std::time::Duration::from_secs(24 * 3600)),
        _ => false,
    }
}

/// Whether a directory entry is one of our temporary files (`.infrakit-tf-*.tmp`): left
/// behind only by a write that was killed, when no writer holds the directory lock.
pub(crate) fn is_temp(name: &str) -> bool {
    name.starts_with(TEMP_PREFIX) && name.ends_with(TEMP_SUFFIX)
}

/// Whether `dir` can be written at all (a read-only mount, say): checked before a command
/// starts changing anything, so that it fails before its first write, with the right code.
pub(crate) fn check_writable(dir: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|_| {
        anyhow::Error::from(Failure::new(Code::Invalid, format!("`{}` holds a NUL byte", dir.display())))
    })?;
    // SAFETY: access(2) reads a NUL-terminated path and has no other precondition.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0 {
        return Ok(());
    }
    Err(error(io::Error::last_os_error(), "write to", dir))
}

/// An I/O error with its path; a read-only or full file system, or a permission denied, is
/// classified [`Code::Unwritable`].
fn error(e: io::Error, verb: &str, path: &Path) -> anyhow::Error {
    use io::ErrorKind::{FileTooLarge, PermissionDenied, QuotaExceeded, ReadOnlyFilesystem, StorageFull};
    let message = format!("failed to {verb} `{}`", path.display());
    let hint = match e.kind() {
        StorageFull | QuotaExceeded | FileTooLarge => "free some space on that file system, then re-run",
        ReadOnlyFilesystem => "the file system is mounted read-only: remount it read-write, then re-run",
        PermissionDenied => "give this user write permission on the directory, then re-run",
        _ => return anyhow::Error::new(e).context(message),
    };
    // The OS's words for the kind alone (a temporary file's path would only confuse).
    let reason = io::Error::from(e.kind());
    Failure::new(Code::Unwritable, format!("{message}: {reason}")).hint(hint).into()
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// A file in memory (`memfd_create`, named `name` in `/proc`): its reader (an open file
/// description of its own, so its own offset) and its writer. Needs no disk, so what is
/// written there survives a full or missing temporary directory.
pub(crate) fn memory_file(name: &std::ffi::CStr) -> io::Result<(File, File)> {
    use std::os::fd::FromRawFd;
    // SAFETY: a NUL-terminated name and valid flags; the descriptor is owned by `writer` below.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by memfd_create and is owned by nothing else.
    let writer = unsafe { File::from_raw_fd(fd) };
    // Writable too: the reader frees what it has read (fallocate needs a writable descriptor).
    let reader = File::options().read(true).write(true).open(format!("/proc/self/fd/{fd}"))?;
    Ok((reader, writer))
}

/// Frees what has been read of `file` (its reader, see [`memory_file`]): a hole punched up to
/// the read offset, the size kept. Best effort: a file system without holes frees it when the
/// file is closed instead.
pub(crate) fn forget_read(file: &mut File) {
    use std::io::Seek;
    use std::os::fd::AsRawFd;
    let Ok(read) = file.stream_position() else { return };
    // SAFETY: fallocate(2) on a descriptor `file` owns; its failure changes nothing.
    unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            0,
            read as libc::off_t,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_temporary_directories_whose_owner_is_gone_are_stale() {
        let day = || Some(std::time::Duration::from_secs(25 * 3600));
        let now = || Some(std::time::Duration::from_secs(60));
        let dead = |_: u32, _: u64| false;
        let live = |_: u32, _: u64| true;
        assert!(stale_temp_dir("infrakit-tf-plan-123.456-aB3dE9", dead, now));
        assert!(!stale_temp_dir("infrakit-tf-plan-123.456-aB3dE9", live, day), "its run goes on");
        assert!(stale_temp_dir("infrakit-tf-mirror-aB3dE9", dead, day), "an older infrakit-tf's, a day old");
        assert!(!stale_temp_dir("infrakit-tf-mirror-aB3dE9", dead, now));
        for other in [
            "infrakit-tf-pg.aB3dE9",
            "infrakit-tf-bench-pg.x",
            "infrakit-tf-plan-notours",
            "tmp.aB3dE9",
            "infrakit-tf-plan-1.2-toolong",
        ] {
            assert!(!stale_temp_dir(other, dead, day), "{other}");
        }
    }

    #[test]
    fn writes_replace_and_skip_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.tf.json");
        assert_eq!(write_atomic(&p, b"one\n", Perms::Public).unwrap(), Written::Changed);
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o644);
        let before = fs::metadata(&p).unwrap().modified().unwrap();
        assert_eq!(write_atomic(&p, b"one\n", Perms::Public).unwrap(), Written::Unchanged);
        assert_eq!(fs::metadata(&p).unwrap().modified().unwrap(), before);
        assert_eq!(write_atomic(&p, b"two\n", Perms::Public).unwrap(), Written::Changed);
        assert_eq!(fs::read(&p).unwrap(), b"two\n");
        // Nothing else left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn private_files_are_not_world_readable_even_when_replacing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("instance-1.tf.json");
        write_atomic(&p, b"x", Perms::Private).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        fs::set_permissions(&p, Permissions::from_mode(0o644)).unwrap();
        write_atomic(&p, b"y", Perms::Private).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o007, 0);
    }

    #[test]
    fn remove_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        write_atomic(&p, b"x", Perms::Public).unwrap();
        assert!(remove(&p).unwrap());
        assert!(!remove(&p).unwrap());
    }
}

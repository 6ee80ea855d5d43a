//! A relay between terraform and a pooler that refuses its driver's startup packet.
//! Terraform's driver (lib/pq) puts `extra_float_digits=2` in every startup packet (a default
//! no connection string can remove), and PgBouncer as Debian installs it refuses that
//! parameter (`unsupported startup parameter: extra_float_digits`) unless its
//! `ignore_startup_parameters` names it. So behind such a pooler terraform is pointed here
//! instead: a Unix socket (`.s.PGSQL.5432`, as PostgreSQL names its own) in a temporary
//! directory of this user's alone (0700), plain text. No other local user can connect: the
//! relay opens its upstream connection with our TLS settings and client certificate, and a
//! port on loopback would have handed those to anyone (a bare startup packet, and the store
//! was theirs while terraform ran). Each connection's startup
//! packet is passed on without that one pair, everything else byte for byte, to the pooler
//! our own connection reached, over TLS when ours is; then bytes are copied both ways until
//! either side closes. Authentication (md5, SCRAM) is between terraform and the pooler: the
//! relay never sees a password, only the bytes that carry it.
//!
//! A process of its own (our binary again, started as `infrakit-tf __relay`: no command of
//! the CLI, so no help, completion or man page shows it), started the first time terraform
//! is given the store's connection, because it must outlive us as long as our
//! terraform may: when we are killed alone mid-apply, the terraform `PR_SET_PDEATHSIG`
//! interrupts saves its state through it. Its stdin is a pipe from us, nothing else of ours
//! (every other descriptor is close-on-exec): one line of JSON, where to and how (the TLS
//! settings' files, no secret: it needs none), then, when we end normally, `done`; its stdout
//! gives its socket's directory, one line, and is closed (the directory goes when it ends, and
//! a killed relay's is swept by the next run, as the other temporary directories); its stderr is `/dev/null`; its own process group
//! (a terminal's Ctrl-C is terraform's, the relay serves terraform's stop); what others left
//! open for us (not close-on-exec) it closes first thing. It ends:
//! - after `done`, once no connection is open (our terraform runs are over);
//! - when the pipe ends without it (we died): once no connection has been open for
//!   [`QUIET`] since, and at the latest [`Upstream::linger`] after (the lease's orphan
//!   grace and a margin: the watchdog has killed that terraform by then).
//!
//! Terraform holds its connection through an apply (its state lock is a session's advisory
//! lock): a relay with no connection for [`QUIET`] after we died serves nobody.

use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio_postgres::config::Host;

use super::pooler;
use super::tls::{Parts, Tls};

/// Where the relay passes connections on: the pooler as our connection reached it.
pub(super) struct Upstream {
    pub(super) host: Host,
    pub(super) port: u16,
    /// TLS as ours negotiated it: `Some` when our connection is over TLS.
    pub(super) tls: Option<Tls>,
    /// The longest connecting to the pooler may take.
    pub(super) limit: Duration,
    /// The longest the relay serves once we are gone (see the module's comment).
    pub(super) linger: Duration,
}

/// [`Upstream`] as the relay process reads it on its stdin.
#[derive(Serialize, Deserialize)]
struct Wire {
    /// A host name, or a Unix socket's directory.
    host: String,
    unix: bool,
    port: u16,
    tls: Option<Parts>,
    limit: Duration,
    linger: Duration,
}

/// The first argument that makes our binary the relay (`crate::relay`, before the command
/// line is parsed: no command of the CLI).
pub(crate) const COMMAND: &str = "__relay";

/// What we write on the relay's stdin when we end normally.
const DONE: &str = "done";

/// Once we are gone, how long the relay waits with no connection open before it ends.
const QUIET: Duration = Duration::from_secs(5);

/// The relay's stdin: open as long as we run (see the module's comment).
static LIFELINE: Mutex<Option<std::process::ChildStdin>> = Mutex::new(None);

/// The first message's code: a startup packet (protocol 3.0), or one of the requests that
/// come instead of one.
const PROTOCOL_3: i32 = 196_608;
const SSL_REQUEST: i32 = 80_877_103;
const GSSENC_REQUEST: i32 = 80_877_104;

/// The parameter dropped (see the module's comment).
const DROPPED: &[u8] = b"extra_float_digits";

/// The longest first message taken: libpq's own limit for a startup packet (10000 bytes).
const MAX_STARTUP: usize = 10_000;

/// The port terraform is given, which names the socket (`.s.PGSQL.<port>`) in the directory
/// it is given as its host.
pub(super) const PORT: u16 = 5432;

/// Starts the relay to `upstream`, in `dir` (terraform's, so that a process still working
/// there is seen): the directory of the socket it listens on ([`PORT`]'s).
// Our own binary again, not a program of the user's: its own process so that it outlives us
// (see the module's comment); terraform's runner (`terraform::supervise`) spawns terraform.
#[expect(clippy::disallowed_methods, reason = "the relay is our own binary, spawned here alone")]
pub(super) fn start(upstream: Upstream, dir: &Path) -> io::Result<PathBuf> {
    use std::os::unix::process::CommandExt;
    let (host, unix) = match &upstream.host {
        Host::Tcp(name) => (name.clone(), false),
        Host::Unix(path) => (path.display().to_string(), true),
    };
    let wire = Wire {
        host,
        unix,
        port: upstream.port,
        tls: upstream.tls.as_ref().map(Tls::parts),
        limit: upstream.limit,
        linger: upstream.linger,
    };
    let mut child = std::process::Command::new("/proc/self/exe")
        .arg(COMMAND)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()?;
    let mut lifeline = child.stdin.take().expect("piped");
    let mut line = serde_json::to_vec(&wire)?;
    line.push(b'\n');
    lifeline.write_all(&line)?;
    let mut socket = String::new();
    io::BufReader::new(child.stdout.take().expect("piped")).read_line(&mut socket)?;
    let socket = PathBuf::from(socket.trim());
    if !socket.is_absolute() {
        let _ = child.kill();
        let _ = child.wait();
        return Err(io::Error::other("it did not start"));
    }
    // Never waited for: it outlives us, or ends after `done`, when we are about to exit.
    *LIFELINE.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(lifeline);
    Ok(socket)
}

/// Tells the relay, if we started one, that we are ending normally: it ends once no
/// connection is open.
pub(crate) fn done() {
    if let Some(mut lifeline) = LIFELINE.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
        let _ = lifeline.write_all(format!("{DONE}\n").as_bytes());
    }
}

/// How the relay learns that it may end.
enum Ending {
    /// We ended normally.
    Done,
    /// We are gone without a word.
    Orphaned,
}

/// The relay process (`__relay`): reads its [`Wire`] on stdin, writes its socket's directory
/// on stdout,
/// serves until it may end (see the module's comment). Nothing is printed: its stderr is
/// `/dev/null`, and a relay that cannot start is an EOF where its port was awaited.
pub(crate) fn run() -> std::process::ExitCode {
    match serve_here() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(_) => std::process::ExitCode::FAILURE,
    }
}

fn serve_here() -> anyhow::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd};
    close_inherited();
    let mut line = String::new();
    io::stdin().read_line(&mut line)?;
    let wire: Wire = serde_json::from_str(&line)?;
    let host = if wire.unix { Host::Unix(PathBuf::from(&wire.host)) } else { Host::Tcp(wire.host) };
    let tls = wire.tls.map(Tls::from_parts).transpose()?;
    let upstream = Arc::new(Upstream { host, port: wire.port, tls, limit: wire.limit, linger: wire.linger });
    // This user's alone (0700, see the module's comment), removed when the relay ends.
    let home = crate::fsio::temp_dir("relay")?;
    let listener = std::os::unix::net::UnixListener::bind(home.path().join(format!(".s.PGSQL.{PORT}")))?;
    listener.set_nonblocking(true)?;
    // The directory, then stdout is `/dev/null`: nothing of ours holds the pipe.
    {
        // SAFETY: fd 1 is our stdout; the `File` is forgotten, never closing it.
        let mut out = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(1) });
        out.write_all(format!("{}\n", home.path().display()).as_bytes())?;
        let null = std::fs::File::open("/dev/null")?;
        // SAFETY: dup2(2) of descriptors we hold.
        if unsafe { libc::dup2(null.as_raw_fd(), 1) } < 0 {
            return Err(io::Error::last_os_error().into());
        }
    }
    let (tell, ending) = tokio::sync::oneshot::channel();
    std::thread::Builder::new().name("lifeline".into()).spawn(move || {
        let mut word = String::new();
        let said = io::stdin().read_line(&mut word).is_ok_and(|_| word.trim() == DONE);
        let _ = tell.send(if said { Ending::Done } else { Ending::Orphaned });
    })?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async move {
        let listener = UnixListener::from_std(listener)?;
        relay(listener, upstream, ending).await;
        drop(home);
        Ok(())
    })
}

/// Closes every descriptor but stdin, stdout and stderr: ours are close-on-exec, but what
/// whoever started infrakit-tf left open (a pipe cron or a wrapper reads to its end) is not
/// the relay's to keep open after infrakit-tf is gone.
fn close_inherited() {
    // SAFETY: close_range(2) on descriptors nothing in this process uses yet.
    if unsafe { libc::syscall(libc::SYS_close_range, 3_u32, u32::MAX, 0_u32) } == 0 {
        return;
    }
    // Before Linux 5.9.
    let open: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map(|dir| dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    for fd in open.into_iter().filter(|fd| *fd > 2) {
        // SAFETY: as above; the listing's own descriptor is closed already (EBADF).
        unsafe { libc::close(fd) };
    }
}

/// Serves `listener`'s connections until it may end (see the module's comment).
async fn relay(listener: UnixListener, upstream: Arc<Upstream>, ending: tokio::sync::oneshot::Receiver<Ending>) {
    let open = Arc::new(AtomicUsize::new(0));
    let last_closed = Arc::new(Mutex::new(Instant::now()));
    let mut ending = std::pin::pin!(ending);
    // Once told: the quiet it waits for, and the latest it ends.
    let mut end: Option<(Duration, Instant)> = None;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    let (upstream, open, last_closed) = (upstream.clone(), open.clone(), last_closed.clone());
                    open.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(async move {
                        serve(client, &upstream).await;
                        *last_closed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
                        open.fetch_sub(1, Ordering::SeqCst);
                    });
                }
                // Out of descriptors, say: the client sees its connection refused; wait a
                // little rather than spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
            told = &mut ending, if end.is_none() => {
                let now = Instant::now();
                end = Some(match told {
                    Ok(Ending::Done) => (Duration::ZERO, now + upstream.linger),
                    Ok(Ending::Orphaned) | Err(_) => (QUIET, now + upstream.linger),
                });
                *last_closed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = now;
            }
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        if let Some((quiet, latest)) = end {
            let since = last_closed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).elapsed();
            if Instant::now() >= latest || open.load(Ordering::SeqCst) == 0 && since >= quiet {
                return;
            }
        }
    }
}

/// One of terraform's connections: its first message, rewritten, to the pooler, then bytes
/// both ways. A pooler that cannot be reached is told to terraform as an error of the
/// protocol's, so that its message says why.
async fn serve(mut client: UnixStream, upstream: &Upstream) {
    let Ok(Some(first)) = first_message(&mut client).await else { return };
    let reached = tokio::time::timeout(upstream.limit, async {
        pooler::raw(&upstream.host, upstream.port, upstream.tls.as_ref()).await
    })
    .await
    .unwrap_or_else(|_| Err(io::Error::other(format!("no answer within {}", crate::text::duration(upstream.limit)))));
    let mut server = match reached {
        Ok(server) => server,
        Err(e) => {
            let why = format!("infrakit-tf's relay cannot reach the pooler: {e}");
            let _ = client.write_all(&fatal(&why)).await;
            return;
        }
    };
    if server.write_all(&first).await.is_ok() {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
    }
}

/// The client's first message as the pooler gets it (see [`pass_on`]), after answering any
/// request for TLS or GSSAPI encryption with `N` (terraform is given `sslmode=disable`, so
/// none should come); `None` when the client goes or sends what is not a first message.
async fn first_message(client: &mut UnixStream) -> io::Result<Option<Vec<u8>>> {
    loop {
        let len = client.read_i32().await?;
        if !(8..=MAX_STARTUP as i32).contains(&len) {
            return Ok(None);
        }
        let mut message = len.to_be_bytes().to_vec();
        message.resize(len as usize, 0);
        client.read_exact(&mut message[4..]).await?;
        let code = i32::from_be_bytes(message[4..8].try_into().expect("four bytes"));
        if code == SSL_REQUEST || code == GSSENC_REQUEST {
            client.write_all(b"N").await?;
            continue;
        }
        return Ok(pass_on(&message));
    }
}

/// `message`, a client's first, as the pooler gets it: a startup packet without the
/// [`DROPPED`] pair, every other byte as it was; anything else (a cancel request) as it is.
/// `None` when a startup packet is malformed.
fn pass_on(message: &[u8]) -> Option<Vec<u8>> {
    if message.get(4..8)? != PROTOCOL_3.to_be_bytes() {
        return Some(message.to_vec());
    }
    // `key\0value\0` pairs, then a `\0`.
    let pairs = message[8..].strip_suffix(&[0])?;
    let mut kept = PROTOCOL_3.to_be_bytes().to_vec();
    let mut fields = pairs.split_inclusive(|b| *b == 0);
    while let Some(key) = fields.next() {
        let value = fields.next()?;
        if !value.ends_with(&[0]) {
            return None;
        }
        if key != [DROPPED, &[0]].concat() {
            kept.extend_from_slice(key);
            kept.extend_from_slice(value);
        }
    }
    kept.push(0);
    kept.splice(0..0, (kept.len() as i32 + 4).to_be_bytes());
    Some(kept)
}

/// An `ErrorResponse` ending the session, with `message` (code 08006, connection failure).
fn fatal(message: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for (kind, text) in [(b'S', "FATAL"), (b'V', "FATAL"), (b'C', "08006"), (b'M', message)] {
        body.push(kind);
        body.extend_from_slice(text.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut out = vec![b'E'];
    out.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn startup(pairs: &[&str]) -> Vec<u8> {
        let mut body = PROTOCOL_3.to_be_bytes().to_vec();
        for text in pairs {
            body.extend_from_slice(text.as_bytes());
            body.push(0);
        }
        body.push(0);
        body.splice(0..0, (body.len() as i32 + 4).to_be_bytes());
        body
    }

    #[test]
    fn only_extra_float_digits_is_dropped_from_a_startup_packet() {
        let libpq = startup(&[
            "user",
            "ops",
            "database",
            "infra",
            "extra_float_digits",
            "2",
            "application_name",
            "infrakit-tf tf web#7",
        ]);
        let passed = pass_on(&libpq).unwrap();
        assert_eq!(passed, startup(&["user", "ops", "database", "infra", "application_name", "infrakit-tf tf web#7"]));
        // Nothing to drop: byte for byte; a value named like the key stays.
        let other = startup(&["user", "extra_float_digits", "database", "d"]);
        assert_eq!(pass_on(&other).unwrap(), other);
        // A cancel request (its own code, a process and a key) goes as it is.
        let cancel = [&16_i32.to_be_bytes()[..], &80_877_102_i32.to_be_bytes(), &[0, 0, 0, 9, 1, 2, 3, 4]].concat();
        assert_eq!(pass_on(&cancel).unwrap(), cancel);
        // Malformed: a key without its value, or no final NUL.
        assert_eq!(pass_on(&startup(&["user"])), None);
        let mut cut = startup(&["user", "ops"]);
        cut.pop();
        assert_eq!(pass_on(&cut), None);
    }
}

//! A relay on loopback between terraform and a pooler that refuses its driver's startup
//! packet. Terraform's driver (lib/pq) puts `extra_float_digits=2` in every startup packet
//! (a default no connection string can remove), and PgBouncer as Debian installs it refuses
//! that parameter (`unsupported startup parameter: extra_float_digits`) unless its
//! `ignore_startup_parameters` names it. So behind such a pooler terraform is pointed here
//! instead (`127.0.0.1`, a port the kernel picks, plain text): each connection's startup
//! packet is passed on without that one pair, everything else byte for byte, to the pooler
//! our own connection reached, over TLS when ours is; then bytes are copied both ways until
//! either side closes. Authentication (md5, SCRAM) is between terraform and the pooler: the
//! relay never sees a password, only the bytes that carry it.
//!
//! One thread, its own single-threaded runtime, started the first time terraform is given
//! the store's connection and listening until the process exits: terraform under the lease
//! is stopped by its watchdog when we are gone (`terraform::watchdog`), and readers' runs
//! are short. But when we are killed alone mid-apply, the terraform that `PR_SET_PDEATHSIG`
//! interrupts cannot save its state through us, as it can connected directly: what it made
//! since its last save is in no state (README, "Behind PgBouncer").

use std::io;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_postgres::config::Host;

use super::pooler;
use super::tls::Tls;

/// Where the relay passes connections on: the pooler as our connection reached it.
pub(super) struct Upstream {
    pub(super) host: Host,
    pub(super) port: u16,
    /// TLS as ours negotiated it: `Some` when our connection is over TLS.
    pub(super) tls: Option<Tls>,
    /// The longest connecting to the pooler may take.
    pub(super) limit: Duration,
}

/// The first message's code: a startup packet (protocol 3.0), or one of the requests that
/// come instead of one.
const PROTOCOL_3: i32 = 196_608;
const SSL_REQUEST: i32 = 80_877_103;
const GSSENC_REQUEST: i32 = 80_877_104;

/// The parameter dropped (see the module's comment).
const DROPPED: &[u8] = b"extra_float_digits";

/// The longest first message taken: libpq's own limit for a startup packet (10000 bytes).
const MAX_STARTUP: usize = 10_000;

/// Starts the relay to `upstream`: the port it listens on, on `127.0.0.1`.
pub(super) fn start(upstream: Upstream) -> io::Result<u16> {
    let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let upstream = Arc::new(upstream);
    std::thread::Builder::new().name("relay".into()).spawn(move || {
        rt.block_on(async move {
            let Ok(listener) = TcpListener::from_std(listener) else { return };
            loop {
                match listener.accept().await {
                    Ok((client, _)) => {
                        let _ = client.set_nodelay(true);
                        let upstream = upstream.clone();
                        tokio::spawn(async move { serve(client, &upstream).await });
                    }
                    // Out of descriptors, say: the client sees its connection refused; wait a
                    // little rather than spin.
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        })
    })?;
    Ok(port)
}

/// One of terraform's connections: its first message, rewritten, to the pooler, then bytes
/// both ways. A pooler that cannot be reached is told to terraform as an error of the
/// protocol's, so that its message says why.
async fn serve(mut client: TcpStream, upstream: &Upstream) {
    let Ok(Some(first)) = first_message(&mut client).await else { return };
    let reached = tokio::time::timeout(upstream.limit, async {
        pooler::raw(&upstream.host, upstream.port, upstream.tls.as_ref()).await
    })
    .await
    .unwrap_or_else(|_| Err(io::Error::other(format!("no answer within {}", crate::lock::human(upstream.limit)))));
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
async fn first_message(client: &mut TcpStream) -> io::Result<Option<Vec<u8>>> {
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

//! TLS to the store, as libpq does it, for our client and terraform's `backend "pg"` alike.
//!
//! The settings are libpq's, with libpq's meaning, from the connection string, else the
//! environment, else libpq's default files under `~/.postgresql/`:
//!
//! - `sslmode` (`PGSSLMODE`): `disable`, `allow` (plain, then TLS if the server refuses
//!   plain), `prefer` (the default: TLS when the server offers it), `require`, `verify-ca` (the
//!   certificate is signed by a trusted CA), `verify-full` (and names the host we asked for);
//! - `sslrootcert` (`PGSSLROOTCERT`, `~/.postgresql/root.crt`): the CAs to trust, or `system`
//!   for the operating system's store (which, as in libpq 16, makes `verify-full` the default
//!   and refuses weaker modes). Where a root file exists, every mode that uses TLS checks the
//!   chain (libpq's "require behaves as verify-ca");
//! - `sslcert`, `sslkey` (`PGSSLCERT`, `PGSSLKEY`, `~/.postgresql/postgresql.{crt,key}`): a
//!   client certificate, used when the certificate file exists; a key readable by group or
//!   others is refused, as libpq refuses it;
//! - `sslcrl`, `sslcrldir` (`PGSSLCRL`, `PGSSLCRLDIR`, `~/.postgresql/root.crl`): refused,
//!   because terraform's driver cannot check a revocation list and terraform must connect as
//!   we do.
//!
//! Everything is checked, and the rustls configuration built, when the store's settings are
//! read: a setting that cannot be honoured is exit 3 before anything is written.
//!
//! The TLS stack is rustls with ring: pure Rust and assembly, linked into the one static
//! binary, no OpenSSL at run time. `sslrootcert=system` reads the system's store through
//! rustls-native-certs (the files OpenSSL would read, `SSL_CERT_FILE` and `SSL_CERT_DIR`
//! included), as libpq's `system` asks OpenSSL for its default paths; a trust store compiled
//! into the binary would not follow the host's CA updates.
//!
//! Terraform's lib/pq knows `disable`, `require`, `verify-ca` and `verify-full` only, and
//! panics on `PGSSLCRL` and a few other variables: [`Tls::for_terraform`] says what it gets,
//! translated from what our connection negotiated, and [`UNSAFE_FOR_TERRAFORM`] what it must
//! never see.

use std::future::Future;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::Result;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

use crate::exit::invalid;

/// Environment variables terraform's lib/pq panics on ("setting PGSSLCRL not supported"):
/// never passed to terraform when the store is used.
pub(crate) const UNSAFE_FOR_TERRAFORM: &[&str] = &[
    "PGHOSTADDR",
    "PGSERVICE",
    "PGSERVICEFILE",
    "PGREALM",
    "PGREQUIRESSL",
    "PGSSLCRL",
    "PGSSLCRLDIR",
    "PGREQUIREPEER",
    "PGKRBSRVNAME",
    "PGGSSLIB",
    "PGSYSCONFDIR",
    "PGLOCALEDIR",
    // Ours are given in PG_CONN_STR; lib/pq would also read these.
    "PGSSLMODE",
    "PGSSLROOTCERT",
    "PGSSLCERT",
    "PGSSLKEY",
];

/// libpq's `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Mode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    const ALL: [(Mode, &'static str); 6] = [
        (Mode::Disable, "disable"),
        (Mode::Allow, "allow"),
        (Mode::Prefer, "prefer"),
        (Mode::Require, "require"),
        (Mode::VerifyCa, "verify-ca"),
        (Mode::VerifyFull, "verify-full"),
    ];

    fn parse(text: &str) -> Option<Mode> {
        Mode::ALL.iter().find(|(_, name)| *name == text).map(|(mode, _)| *mode)
    }

    pub(crate) fn name(self) -> &'static str {
        Mode::ALL.iter().find(|(mode, _)| *mode == self).map(|(_, name)| *name).expect("every mode has a name")
    }
}

/// The `ssl*` keys a connection string gave, taken out of it (tokio-postgres knows only a
/// few of them, and not all of libpq's values).
#[derive(Default, Debug)]
pub(super) struct Settings {
    mode: Option<String>,
    rootcert: Option<String>,
    cert: Option<String>,
    key: Option<String>,
    crl: Option<String>,
    crldir: Option<String>,
}

impl Settings {
    /// Keeps `key`'s value when it is one of ours; false when it is not.
    pub(super) fn take(&mut self, key: &str, value: &str) -> bool {
        let slot = match key {
            "sslmode" => &mut self.mode,
            "sslrootcert" => &mut self.rootcert,
            "sslcert" => &mut self.cert,
            "sslkey" => &mut self.key,
            "sslcrl" => &mut self.crl,
            "sslcrldir" => &mut self.crldir,
            // Only an encrypted key needs it, and those are refused (`read_key`).
            "sslpassword" => return true,
            _ => return false,
        };
        *slot = Some(value.to_string());
        true
    }
}

/// What the server's certificate chain is checked against.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Roots {
    /// Nothing: any certificate (still the handshake's signatures).
    Unchecked,
    File(PathBuf),
    System,
}

/// The TLS settings of the store's connections, resolved and checked.
#[derive(Clone)]
pub(crate) struct Tls {
    pub(crate) mode: Mode,
    roots: Roots,
    /// The client certificate and its key.
    client: Option<(PathBuf, PathBuf)>,
    /// Built once; `None` for `disable`.
    config: Option<Arc<rustls::ClientConfig>>,
    /// TLS is required with a host that is not this machine (see [`Tls::insist`]).
    insist: bool,
}

/// [`Tls`] as it is passed to another process of ours: what was resolved, not the built
/// configuration.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct Parts {
    mode: String,
    roots: Roots,
    client: Option<(PathBuf, PathBuf)>,
    #[serde(default)]
    insist: bool,
}

impl Tls {
    /// No TLS.
    pub(crate) fn disabled() -> Tls {
        Tls { mode: Mode::Disable, roots: Roots::Unchecked, client: None, config: None, insist: false }
    }

    /// The settings `given` (from the connection string), else `env`'s, else libpq's files
    /// under `home`'s `.postgresql/`, checked and ready to connect with.
    pub(super) fn resolve(given: Settings, env: impl Fn(&str) -> Option<String>, home: Option<&Path>) -> Result<Tls> {
        let pick = |given: Option<String>, var: &str| given.or_else(|| env(var)).filter(|v| !v.is_empty());
        // Terraform runs in the managed directory: a relative file is this one's, made whole.
        let path = |text: String| std::path::absolute(&text).unwrap_or_else(|_| PathBuf::from(text));
        let default_file = |name: &str| home.map(|h| h.join(".postgresql").join(name));
        let rootcert = pick(given.rootcert, "PGSSLROOTCERT");
        let system = rootcert.as_deref() == Some("system");
        let mode = match pick(given.mode, "PGSSLMODE") {
            None if system => Mode::VerifyFull,
            None => Mode::Prefer,
            Some(text) => Mode::parse(&text).ok_or_else(|| {
                invalid(format!(
                    "the store's sslmode `{text}` is not one of disable, allow, prefer, require, verify-ca, verify-full"
                ))
            })?,
        };
        if mode == Mode::Disable {
            return Ok(Tls::disabled());
        }
        if system && mode != Mode::VerifyFull {
            return Err(invalid(format!(
                "the store's sslmode `{}` may not be used with sslrootcert=system, as in libpq: anyone can get a \
                 certificate the system trusts for a host name of their own",
                mode.name()
            ))
            .hint("use sslmode=verify-full (the default with sslrootcert=system)")
            .into());
        }
        let crl = pick(given.crl, "PGSSLCRL")
            .map(PathBuf::from)
            .or_else(|| default_file("root.crl").filter(|f| f.exists()))
            .map(|f| f.display().to_string())
            .or(pick(given.crldir, "PGSSLCRLDIR"));
        if let Some(crl) = crl {
            return Err(invalid(format!(
                "the store's certificate revocation list ({crl}) cannot be honoured: terraform's PostgreSQL driver \
                 (lib/pq) cannot check one, and terraform must connect as infrakit-tf does"
            ))
            .hint(
                "remove sslcrl/sslcrldir from the URL, PGSSLCRL/PGSSLCRLDIR from the environment and \
                 ~/.postgresql/root.crl, or revoke by replacing the server's certificate; nothing was changed",
            )
            .into());
        }
        let roots = match rootcert {
            Some(_) if system => Roots::System,
            given => {
                let file = given.map(path).or_else(|| default_file("root.crt"));
                match file {
                    Some(file) if file.exists() => Roots::File(file),
                    file if mode >= Mode::VerifyCa => {
                        let file = file.map_or("~/.postgresql/root.crt".into(), |f| f.display().to_string());
                        return Err(invalid(format!(
                            "the store's sslmode={} needs the server's CA, and the root certificate file {file} does not exist",
                            mode.name()
                        ))
                        .hint("give the CA in sslrootcert (or PGSSLROOTCERT), sslrootcert=system for the system's trusted roots, or sslmode=require not to check the certificate")
                        .into());
                    }
                    _ => Roots::Unchecked,
                }
            }
        };
        let client = match pick(given.cert, "PGSSLCERT").map(path).or_else(|| default_file("postgresql.crt")) {
            Some(cert) if cert.exists() => {
                let key = pick(given.key, "PGSSLKEY")
                    .map(path)
                    .or_else(|| default_file("postgresql.key"))
                    .unwrap_or_default();
                Some((cert, key))
            }
            _ => None,
        };
        let mut tls = Tls { mode, roots, client, config: None, insist: false };
        tls.config = Some(Arc::new(tls.client_config()?));
        Ok(tls)
    }

    /// The settings as another process of ours is given them (the relay, `relay`): files
    /// named, never read here, no secret.
    pub(super) fn parts(&self) -> Parts {
        Parts {
            mode: self.mode.name().to_string(),
            roots: self.roots.clone(),
            client: self.client.clone(),
            insist: self.insist,
        }
    }

    /// The settings [`Tls::parts`] gave, ready to connect with (their files read again).
    pub(super) fn from_parts(parts: Parts) -> Result<Tls> {
        let mode = Mode::parse(&parts.mode).ok_or_else(|| invalid(format!("no sslmode `{}`", parts.mode)))?;
        if mode == Mode::Disable {
            return Ok(Tls::disabled());
        }
        let mut tls = Tls { mode, roots: parts.roots, client: parts.client, config: None, insist: parts.insist };
        tls.config = Some(Arc::new(tls.client_config()?));
        Ok(tls)
    }

    /// The rustls configuration: our verifier, the client certificate if any.
    fn client_config(&self) -> Result<rustls::ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = match &self.roots {
            Roots::Unchecked => None,
            Roots::File(file) => {
                let mut roots = RootCertStore::empty();
                let certs = read_certs(file, "sslrootcert")?;
                let (added, _) = roots.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(invalid(format!(
                        "the store's sslrootcert {} holds no usable CA certificate",
                        file.display()
                    ))
                    .into());
                }
                Some(roots)
            }
            Roots::System => {
                let found = rustls_native_certs::load_native_certs();
                let mut roots = RootCertStore::empty();
                roots.add_parsable_certificates(found.certs);
                if roots.is_empty() {
                    return Err(invalid("sslrootcert=system, but this system's trust store holds no certificate")
                        .hint("install the CA certificates (Debian: ca-certificates), or give the CA's file in sslrootcert")
                        .into());
                }
                Some(roots)
            }
        };
        let verifier = Verifier {
            roots: roots.map(Arc::new),
            names: self.mode == Mode::VerifyFull,
            algorithms: provider.signature_verification_algorithms,
        };
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(format!("TLS cannot be set up: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier));
        let Some((cert, key)) = &self.client else { return Ok(builder.with_no_client_auth()) };
        let chain = read_certs(cert, "sslcert")?;
        let key = read_key(cert, key)?;
        builder.with_client_auth_cert(chain, key).map_err(|e| {
            invalid(format!("the store's client certificate {} cannot be used with its key: {e}", cert.display()))
                .into()
        })
    }

    /// Over a Unix socket, PostgreSQL has no TLS (libpq does not ask for it there).
    pub(super) fn for_host(&self, host: &tokio_postgres::config::Host) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode;
        match (host, self.mode) {
            (tokio_postgres::config::Host::Unix(_), _) | (_, Mode::Disable) => SslMode::Disable,
            (tokio_postgres::config::Host::Tcp(name), Mode::Allow | Mode::Prefer) if self.insist && !is_local(name) => {
                SslMode::Require
            }
            (_, Mode::Allow) => SslMode::Disable,
            (_, Mode::Prefer) => SslMode::Prefer,
            _ => SslMode::Require,
        }
    }

    /// TLS is required with a host that is not this machine, whatever `prefer` or `allow` say
    /// (see `config::insist_on_tls`).
    pub(super) fn insist(&mut self) {
        self.insist = true;
    }

    /// The connector for one connection; `used` is set when the handshake is done.
    pub(super) fn connector(&self, used: Arc<AtomicBool>) -> Connector {
        Connector { config: self.config.clone(), used }
    }

    /// What terraform's lib/pq gets in `PG_CONN_STR`, so that it makes the connection ours
    /// made: plain where ours is plain (`allow` and `prefer` that did not negotiate TLS),
    /// else the same checks with lib/pq's names (`require` with a root file is `verify-ca`,
    /// as in libpq), the same files.
    pub(crate) fn for_terraform(&self, negotiated_tls: bool) -> Vec<(&'static str, String)> {
        if self.config.is_none() || !negotiated_tls {
            return vec![("sslmode", "disable".into())];
        }
        let mode = match (&self.roots, self.mode) {
            (_, Mode::VerifyFull) => Mode::VerifyFull,
            (Roots::File(_), _) => Mode::VerifyCa,
            // `allow`, `prefer` and `require` that negotiated TLS, nothing checked.
            _ => Mode::Require,
        };
        let mut conn = vec![("sslmode", mode.name().to_string())];
        if let Roots::File(file) = &self.roots {
            // lib/pq checks against the system's roots when it is not given.
            conn.push(("sslrootcert", file.display().to_string()));
        }
        if let Some((cert, key)) = &self.client {
            conn.push(("sslcert", cert.display().to_string()));
            conn.push(("sslkey", key.display().to_string()));
        }
        conn
    }

    /// One line naming why the TLS part of connecting failed, if it did: `None` when the
    /// failure was not TLS's.
    pub(super) fn why(&self, e: &tokio_postgres::Error, host: &str) -> Option<String> {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(s) = source {
            if let Some(tls) = s.downcast_ref::<rustls::Error>() {
                return Some(self.explain(tls, host));
            }
            if let Some(io) = s.downcast_ref::<io::Error>() {
                if let Some(tls) = io.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
                    return Some(self.explain(tls, host));
                }
            }
            if s.to_string() == "server does not support TLS" {
                return Some(format!(
                    "the server does not offer TLS, which sslmode={} asks for (nothing was sent in clear text)",
                    self.mode.name()
                ));
            }
            source = s.source();
        }
        None
    }

    fn explain(&self, e: &rustls::Error, host: &str) -> String {
        let roots = match &self.roots {
            Roots::File(file) => format!("sslrootcert {}", file.display()),
            Roots::System => "the system's trust store (sslrootcert=system)".into(),
            Roots::Unchecked => "sslrootcert".into(),
        };
        let refused = "the server's TLS certificate was refused";
        match e {
            rustls::Error::InvalidCertificate(cert) => match cert {
                CertificateError::UnknownIssuer => {
                    format!("{refused}: it is not signed by a CA that {roots} holds (an unknown CA)")
                }
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                    format!("{refused}: it does not name the host `{host}` (sslmode=verify-full checks the host name)")
                }
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    format!("{refused}: it has expired")
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    format!("{refused}: it is not valid yet (check this host's clock)")
                }
                CertificateError::Revoked => format!("{refused}: it has been revoked"),
                other => format!("{refused}: {other:?}"),
            },
            rustls::Error::AlertReceived(alert) => {
                let ours = if self.client.is_some() {
                    "our client certificate"
                } else {
                    "the connection without a client certificate"
                };
                format!("the server refused {ours} in the TLS handshake ({alert:?})")
            }
            other => format!("the TLS handshake failed: {other}"),
        }
    }
}

fn read_certs(file: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<_> =
        CertificateDer::pem_file_iter(file).and_then(|certs| certs.collect::<Result<Vec<_>, _>>()).map_err(|e| {
            invalid(format!("the store's {what} {} cannot be read as PEM certificates: {e}", file.display()))
        })?;
    if certs.is_empty() {
        return Err(invalid(format!("the store's {what} {} holds no PEM certificate", file.display())).into());
    }
    Ok(certs)
}

/// The client certificate's key: present, readable and writable by its owner alone (0600 or
/// less): libpq allows 0640 when root owns it, but terraform's lib/pq refuses any group or
/// other bit, and terraform must connect as we do; and not encrypted (we have no way to ask
/// for its password).
fn read_key(cert: &Path, key: &Path) -> Result<PrivateKeyDer<'static>> {
    let meta = std::fs::metadata(key).map_err(|e| {
        invalid(format!(
            "the store's client certificate {} has no private key file: {}: {e}",
            cert.display(),
            key.display()
        ))
        .hint("give it in sslkey (or PGSSLKEY), or ~/.postgresql/postgresql.key")
    })?;
    if meta.mode() & 0o177 != 0 {
        return Err(invalid(format!(
            "the store's private key file {} has group or world access ({:o}), which terraform's PostgreSQL driver and infrakit-tf refuse",
            key.display(),
            meta.mode() & 0o777
        ))
        .hint(format!("chmod 600 {}", key.display()))
        .into());
    }
    let text = crate::fsio::read(key).map_err(|e| invalid(format!("the store's sslkey {}: {e}", key.display())))?;
    if text.windows(9).any(|w| w == b"ENCRYPTED") {
        return Err(invalid(format!(
            "the store's private key file {} is encrypted, which infrakit-tf cannot read (sslpassword is not supported)",
            key.display()
        ))
        .hint(format!("decrypt it: openssl pkey -in {0} -out {0}.plain, mode 600", key.display()))
        .into());
    }
    PrivateKeyDer::from_pem_slice(&text)
        .map_err(|e| invalid(format!("the store's sslkey {} holds no PEM private key: {e}", key.display())).into())
}

/// Checks the server's certificate as the mode asks: nothing, the chain, or the chain and the
/// host name. The handshake's signatures are always checked.
#[derive(Debug)]
struct Verifier {
    /// `None`: the chain is not checked.
    roots: Option<Arc<RootCertStore>>,
    /// Whether the certificate must name the host (`verify-full`).
    names: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.algorithms.all,
            )?;
            if self.names {
                rustls::client::verify_server_name(&cert, server_name)?;
            }
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// tokio-postgres's TLS hook, for one connection.
pub(super) struct Connector {
    config: Option<Arc<rustls::ClientConfig>>,
    used: Arc<AtomicBool>,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> MakeTlsConnect<S> for Connector {
    type Stream = Stream<S>;
    type TlsConnect = Handshake;
    type Error = io::Error;

    /// `host` is empty for a Unix socket, where no handshake is asked for (see `for_host`).
    fn make_tls_connect(&mut self, host: &str) -> io::Result<Handshake> {
        let name = ServerName::try_from(host.to_string()).ok();
        Ok(Handshake { config: self.config.clone(), name, host: host.to_string(), used: self.used.clone() })
    }
}

/// One TLS handshake, to the host named.
pub(super) struct Handshake {
    config: Option<Arc<rustls::ClientConfig>>,
    /// `None`: `host` is not a name or an address (a socket's directory).
    name: Option<ServerName<'static>>,
    host: String,
    used: Arc<AtomicBool>,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> TlsConnect<S> for Handshake {
    type Stream = Stream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream<S>>> + Send>>;

    fn connect(self, socket: S) -> Self::Future {
        Box::pin(async move {
            // `disable` never asks for a handshake.
            let config = self.config.ok_or_else(|| io::Error::other("TLS is disabled (sslmode=disable)"))?;
            let host = self.host;
            let name = self.name.ok_or_else(|| io::Error::other(format!("`{host}` is not a host name for TLS")))?;
            let stream = tokio_rustls::TlsConnector::from(config).connect(name, socket).await?;
            self.used.store(true, Ordering::Relaxed);
            Ok(Stream(stream))
        })
    }
}

/// A TLS connection to the server.
pub(super) struct Stream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for Stream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Whether `host` is this machine: `localhost`, a loopback address.
pub(super) fn is_local(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA certificate and a client certificate with its key, in `dir`.
    fn files(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let client =
            rcgen::CertificateParams::new(Vec::<String>::new()).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
        let write = |name: &str, text: String| {
            let path = dir.join(name);
            crate::fsio::write_atomic(&path, text.as_bytes(), crate::fsio::Perms::Private).unwrap();
            path
        };
        (write("ca.crt", ca.pem()), write("client.crt", client.pem()), write("client.key", key.serialize_pem()))
    }

    fn settings(pairs: &[(&str, &str)]) -> Settings {
        let mut s = Settings::default();
        for (k, v) in pairs {
            assert!(s.take(k, v), "{k} is ours");
        }
        s
    }

    fn resolve(pairs: &[(&str, &str)], env: &[(&str, &str)], home: Option<&Path>) -> Result<Tls> {
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Tls::resolve(settings(pairs), |k| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()), home)
    }

    fn err(tls: Result<Tls>) -> String {
        format!("{:#}", tls.err().expect("refused"))
    }

    #[test]
    fn terraform_gets_the_connection_our_client_made_in_lib_pq_terms() {
        let tmp = tempfile::tempdir().unwrap();
        let (ca, cert, key) = files(tmp.path());
        let ca = ca.to_str().unwrap();
        let tf = |pairs: &[(&str, &str)], negotiated: bool| {
            let conn = resolve(pairs, &[], None).unwrap().for_terraform(negotiated);
            conn.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
        };
        assert_eq!(tf(&[("sslmode", "disable")], false), "sslmode=disable");
        // lib/pq has no `allow` or `prefer`: what ours negotiated.
        assert_eq!(tf(&[], false), "sslmode=disable");
        assert_eq!(tf(&[], true), "sslmode=require");
        assert_eq!(tf(&[("sslmode", "allow")], true), "sslmode=require");
        assert_eq!(tf(&[("sslmode", "require")], true), "sslmode=require");
        // A root file makes `require` check the chain, in libpq: lib/pq's `verify-ca`.
        assert_eq!(
            tf(&[("sslmode", "require"), ("sslrootcert", ca)], true),
            format!("sslmode=verify-ca sslrootcert={ca}")
        );
        assert_eq!(
            tf(&[("sslmode", "verify-ca"), ("sslrootcert", ca)], true),
            format!("sslmode=verify-ca sslrootcert={ca}")
        );
        assert_eq!(
            tf(&[("sslmode", "verify-full"), ("sslrootcert", ca)], true),
            format!("sslmode=verify-full sslrootcert={ca}")
        );
        // The system's roots are lib/pq's own default.
        assert_eq!(tf(&[("sslrootcert", "system")], true), "sslmode=verify-full");
        let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
        assert_eq!(
            tf(&[("sslmode", "require"), ("sslcert", cert), ("sslkey", key)], true),
            format!("sslmode=require sslcert={cert} sslkey={key}")
        );
    }

    #[test]
    fn settings_come_from_the_string_then_the_environment_then_the_home_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let (ca, cert, key) = files(tmp.path());
        let home = tempfile::tempdir().unwrap();
        let pg = home.path().join(".postgresql");
        crate::fsio::create_dir_all(&pg).unwrap();
        for (from, to) in [(&ca, "root.crt"), (&cert, "postgresql.crt"), (&key, "postgresql.key")] {
            crate::fsio::write_atomic(&pg.join(to), &crate::fsio::read(from).unwrap(), crate::fsio::Perms::Private)
                .unwrap();
        }
        let tls = resolve(&[("sslmode", "require")], &[("PGSSLMODE", "disable")], Some(home.path())).unwrap();
        assert_eq!(tls.mode, Mode::Require, "the string wins");
        assert_eq!(tls.roots, Roots::File(pg.join("root.crt")), "libpq's default root file");
        assert_eq!(tls.client, Some((pg.join("postgresql.crt"), pg.join("postgresql.key"))));
        let tls = resolve(&[], &[("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", ca.to_str().unwrap())], None).unwrap();
        assert_eq!((tls.mode, tls.roots), (Mode::VerifyFull, Roots::File(ca.clone())));
        assert_eq!(resolve(&[], &[], None).unwrap().mode, Mode::Prefer, "libpq's default");
        // A root.crl at home is libpq's default revocation list: refused like any other.
        crate::fsio::write_atomic(&pg.join("root.crl"), b"", crate::fsio::Perms::Private).unwrap();
        assert!(err(resolve(&[], &[], Some(home.path()))).contains("revocation list"));
        assert!(resolve(&[("sslmode", "disable")], &[], Some(home.path())).is_ok(), "no TLS, no files");
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_up_front() {
        let tmp = tempfile::tempdir().unwrap();
        let (ca, cert, key) = files(tmp.path());
        assert!(err(resolve(&[("sslmode", "sure")], &[], None)).contains("is not one of"));
        assert!(
            err(resolve(&[("sslmode", "require"), ("sslrootcert", "system")], &[], None)).contains("may not be used")
        );
        assert!(err(resolve(&[("sslmode", "verify-ca")], &[], None)).contains("root certificate file"));
        assert!(err(resolve(&[("sslmode", "require")], &[("PGSSLCRLDIR", "/etc/crl")], None)).contains("/etc/crl"));
        assert!(err(resolve(&[("sslrootcert", key.to_str().unwrap())], &[], None)).contains("no PEM certificate"));
        let client = |key: &Path| {
            resolve(
                &[
                    ("sslrootcert", ca.to_str().unwrap()),
                    ("sslcert", cert.to_str().unwrap()),
                    ("sslkey", key.to_str().unwrap()),
                ],
                &[],
                None,
            )
        };
        assert!(client(&key).is_ok());
        let missing = tmp.path().join("none.key");
        assert!(err(client(&missing)).contains("has no private key file"));
        let encrypted = tmp.path().join("encrypted.key");
        let text = "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n";
        crate::fsio::write_atomic(&encrypted, text.as_bytes(), crate::fsio::Perms::Private).unwrap();
        assert!(err(client(&encrypted)).contains("is encrypted"));
        let message = err(client(&encrypted));
        assert!(!message.contains("MIIB"), "no key material: {message}");
    }
}

//! The store over TLS: a PostgreSQL that accepts TLS only (`hostssl`, `hostnossl ... reject`),
//! with certificates a throwaway CA made for the run (`.ci/postgres start-tls`), whose URL is
//! `INFRAKIT_TF_TEST_PG_TLS` (`postgresql://infrakit:PASSWORD@localhost:PORT/postgres`) and
//! whose directory (its socket, and the certificates in `tls/`) is
//! `INFRAKIT_TF_TEST_PG_TLS_DIR`. Since the server refuses plain text, every provision that
//! applies proves that both our client and terraform's `backend "pg"` spoke TLS.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use infrakit_tf::exit::Code;

use crate::support::cloud::Cloud;
use crate::support::store::{census, use_store};
use crate::support::Run;

/// One test's database on the TLS-only server, dropped at the end. The test's own admin
/// connections go through the server's socket.
struct TlsDb {
    /// `postgresql://infrakit:PASSWORD@localhost:PORT`
    base: String,
    dir: PathBuf,
    name: String,
}

impl TlsDb {
    fn new() -> Self {
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| {
                panic!("{name} is not set: the TLS tests need the TLS-only server `.ci/test` starts (`.ci/postgres start-tls DIR`)")
            })
        };
        let url = var("INFRAKIT_TF_TEST_PG_TLS");
        let base = url.rsplit_once('/').unwrap().0.to_string();
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!("tls_{}_{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst));
        let db = TlsDb { base, dir: PathBuf::from(var("INFRAKIT_TF_TEST_PG_TLS_DIR")), name };
        db.admin("postgres").batch_execute(&format!("CREATE DATABASE {}", db.name)).unwrap();
        db
    }

    fn admin(&self, db: &str) -> postgres::Client {
        let port = self.base.rsplit_once(':').unwrap().1;
        let conn = format!("host={} port={port} user=infrakit dbname={db}", self.dir.display());
        postgres::Client::connect(&conn, postgres::NoTls).unwrap()
    }

    /// The database's URL with `query` (`sslmode=...&...`).
    fn url(&self, query: &str) -> String {
        let sep = if query.is_empty() { "" } else { "?" };
        format!("{}/{}{sep}{query}", self.base, self.name)
    }

    /// A file of the run's certificates (`ca.crt`, `other-ca.crt`, `client.crt`, `client.key`).
    fn cert(&self, name: &str) -> String {
        self.dir.join("tls").join(name).to_str().unwrap().to_string()
    }

    fn password(&self) -> String {
        self.base.split_once("://").unwrap().1.split_once('@').unwrap().0.split_once(':').unwrap().1.to_string()
    }

    /// Whether the store holds anything: its schema exists.
    fn has_store(&self) -> bool {
        let row =
            self.admin(&self.name).query_one("SELECT count(*) FROM pg_namespace WHERE nspname = 'infrakit_tf'", &[]);
        row.unwrap().get::<_, i64>(0) > 0
    }
}

impl Drop for TlsDb {
    fn drop(&mut self) {
        let _ = self.admin("postgres").batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
    }
}

/// A host using the store at `url`.
fn host(url: &str) -> Cloud {
    let c = Cloud::new();
    use_store(&c, url);
    c
}

/// Provisions one instance (applied) and checks that `describe` sees it created.
fn provision_and_describe(c: &Cloud, env: &[(&str, &str)]) {
    let before = c.describe_with(env).len();
    c.run_env(&["provision", &c.spec()], env).ok();
    let rows = c.describe_with(env);
    assert_eq!(rows.len(), before + 1, "{rows:#?}");
    assert!(rows.iter().all(|r| r["status"] == "created"), "{rows:#?}");
}

#[test]
fn verify_full_with_the_servers_ca_and_every_other_way_libpq_allows() {
    let db = TlsDb::new();
    // The recommended setting first: the server's CA, the host name checked.
    let c = host(&db.url(&format!("sslmode=verify-full&sslrootcert={}", db.cert("ca.crt"))));
    provision_and_describe(&c, &[]);
    // `require`: TLS, the certificate not checked.
    let point = |url: String| crate::support::store::point_at(&c, &url);
    point(db.url("sslmode=require"));
    provision_and_describe(&c, &[]);
    // No sslmode: libpq's default, `prefer`, takes the TLS the server offers (it refuses plain).
    point(db.url(""));
    provision_and_describe(&c, &[]);
    // The settings from the environment; and one that terraform's lib/pq panics on
    // ("setting PGGSSLIB not supported"), which terraform does not inherit.
    let ca = db.cert("ca.crt");
    provision_and_describe(&c, &[("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", &ca), ("PGGSSLIB", "gssapi")]);
    // libpq's default root file, ~/.postgresql/root.crt, with `verify-ca` in key=value form.
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".postgresql")).unwrap();
    std::fs::copy(&ca, home.path().join(".postgresql/root.crt")).unwrap();
    let port = db.base.rsplit_once(':').unwrap().1;
    point(format!(
        "host=localhost port={port} user=infrakit password={} dbname={} sslmode=verify-ca",
        db.password(),
        db.name
    ));
    provision_and_describe(&c, &[("HOME", home.path().to_str().unwrap())]);
    // A relative file is the working directory's, not the managed directory's, where
    // terraform runs (the tests run from the scratch root, the directory is `dir/` in it).
    std::fs::copy(&ca, c.s.root.path().join("our-ca.crt")).unwrap();
    point(db.url("sslmode=verify-full&sslrootcert=our-ca.crt"));
    provision_and_describe(&c, &[]);
    assert_eq!(census(&c).0, 6, "six machines, none twice");
}

#[test]
fn a_unix_socket_needs_no_tls() {
    // As in libpq: no TLS over a Unix socket, whatever sslmode says (the server's socket
    // trusts local connections).
    let db = TlsDb::new();
    let port = db.base.rsplit_once(':').unwrap().1;
    for mode in ["prefer", "require"] {
        let c = host(&format!("host={} port={port} user=infrakit dbname={} sslmode={mode}", db.dir.display(), db.name));
        provision_and_describe(&c, &[]);
    }
}

#[test]
fn a_client_certificate_logs_in() {
    let db = TlsDb::new();
    // `cert` in pg_hba.conf: the role infrakit_cert has no password, its certificate is its login.
    let port = db.base.rsplit_once(':').unwrap().1;
    let url = format!(
        "postgresql://infrakit_cert@localhost:{port}/{}?sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
        db.name,
        db.cert("ca.crt"),
        db.cert("client.crt"),
        db.cert("client.key")
    );
    let c = host(&url);
    provision_and_describe(&c, &[]);
    // A key that group or others can read is refused before connecting, as libpq refuses it.
    let loose = tempfile::tempdir().unwrap();
    let key = loose.path().join("client.key");
    std::fs::copy(db.cert("client.key"), &key).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    crate::support::store::point_at(&c, &url.replace(&db.cert("client.key"), key.to_str().unwrap()));
    let before = c.s.snapshot();
    let run = c.run(&["provision", &c.spec()]).code(Code::Invalid);
    assert!(one_line(&run).contains("has group or world access"), "{run:#?}");
    assert_eq!(c.s.snapshot(), before);
}

/// The one `error:` line of a refused run, checked for secrets.
fn one_line(run: &Run) -> String {
    assert_eq!(run.error_lines().len(), 1, "{run:#?}");
    let line = run.error_lines()[0].to_string();
    assert!(!run.stderr.contains("BEGIN"), "no key material: {}", run.stderr);
    line
}

/// A refusal: `args` run with `url` fails with `code` and one line containing `cause`, no
/// password, nothing written here or in the store.
fn refused(db: &TlsDb, url: &str, env: &[(&str, &str)], code: Code, cause: &str) {
    let c = host(url);
    let before = c.s.snapshot();
    for args in [vec!["provision", &c.spec()], vec!["describe"]] {
        let run = c.run_env(&args, env).code(code);
        let line = one_line(&run);
        assert!(line.contains(cause), "expected `{cause}` in: {line}");
        assert!(!run.stderr.contains(&db.password()), "the password is never printed: {}", run.stderr);
        if code == Code::StoreUnavailable {
            assert!(line.starts_with("error: cannot use the store at postgresql://infrakit@"), "{line}");
        }
    }
    assert_eq!(c.s.snapshot(), before, "nothing written here");
    assert!(!db.has_store(), "nothing written in the store");
    assert_eq!(census(&c).0, 0);
}

#[test]
fn an_unknown_ca_a_wrong_host_name_and_plain_text_are_refused() {
    let db = TlsDb::new();
    let other = db.cert("other-ca.crt");
    refused(
        &db,
        &db.url(&format!("sslmode=verify-full&sslrootcert={other}")),
        &[],
        Code::StoreUnavailable,
        "unknown CA",
    );
    // verify-ca checks the chain too.
    refused(&db, &db.url(&format!("sslmode=verify-ca&sslrootcert={other}")), &[], Code::StoreUnavailable, "unknown CA");
    // The certificate names `localhost`, not the address.
    let by_address =
        db.url(&format!("sslmode=verify-full&sslrootcert={}", db.cert("ca.crt"))).replace("@localhost:", "@127.0.0.1:");
    refused(&db, &by_address, &[], Code::StoreUnavailable, "does not name the host `127.0.0.1`");
    // Plain text to a server that accepts TLS only: the server's own refusal.
    refused(&db, &db.url("sslmode=disable"), &[], Code::StoreUnavailable, "no encryption");
    // No CA to check against: refused before connecting.
    let home = tempfile::tempdir().unwrap();
    refused(
        &db,
        &db.url("sslmode=verify-full"),
        &[("HOME", home.path().to_str().unwrap())],
        Code::Invalid,
        "root certificate file",
    );
}

#[test]
fn a_server_without_tls_is_refused_where_tls_is_required() {
    // The plain test server (`.ci/postgres start`) offers no TLS.
    let plain = std::env::var("INFRAKIT_TF_TEST_PG").expect("INFRAKIT_TF_TEST_PG");
    let db = TlsDb::new(); // only for `refused`'s checks of the TLS server's store: untouched
    let url = format!("{plain}?sslmode=require");
    refused(&db, &url, &[], Code::StoreUnavailable, "the server does not offer TLS");
    // `allow` tries TLS only when plain text is refused by the server's rules: a wrong
    // password is said as it is.
    let (scheme, rest) = plain.split_once("://").unwrap();
    let (creds, place) = rest.split_once('@').unwrap();
    let wrong = format!("{scheme}://{}:wrong@{place}?sslmode=allow", creds.split_once(':').unwrap().0);
    refused(&db, &wrong, &[], Code::StoreUnavailable, "password authentication failed");
}

#[test]
fn a_revocation_list_is_refused_before_anything_is_written() {
    // Terraform's lib/pq panics on PGSSLCRL ("setting PGSSLCRL not supported"): never after a
    // commit, never at all.
    let db = TlsDb::new();
    let url = db.url(&format!("sslmode=verify-full&sslrootcert={}", db.cert("ca.crt")));
    let crl = db.cert("ca.crt"); // any file: it is refused before it is read
    refused(&db, &url, &[("PGSSLCRL", &crl)], Code::Invalid, "revocation list");
    refused(&db, &format!("{url}&sslcrl={crl}"), &[], Code::Invalid, "revocation list");
}

#[test]
fn an_expired_certificate_is_refused() {
    // A server of the test's own that answers the TLS request and presents a certificate that
    // expired in 2021, signed by a CA the client trusts.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut leaf = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    leaf.not_before = rcgen::date_time_ymd(2020, 1, 1);
    leaf.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let leaf = leaf.signed_by(&key, &ca, &ca_key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let port = expired_server(leaf.der().clone(), key.serialize_der());

    let db = TlsDb::new();
    let url = format!("postgresql://infrakit@localhost:{port}/x?sslmode=verify-full&sslrootcert={}", ca_file.display());
    refused(&db, &url, &[], Code::StoreUnavailable, "has expired");
}

/// Serves PostgreSQL's TLS request on a port of its own, then a handshake with `cert`,
/// forever (one thread per connection); returns the port.
fn expired_server(cert: rustls::pki_types::CertificateDer<'static>, key: Vec<u8>) -> u16 {
    use std::io::{Read, Write};
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for socket in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                let mut socket = socket;
                let mut request = [0u8; 8];
                if socket.read_exact(&mut request).is_err() || socket.write_all(b"S").is_err() {
                    return;
                }
                let mut tls = rustls::StreamOwned::new(rustls::ServerConnection::new(config).unwrap(), socket);
                let _ = tls.read(&mut [0u8; 64]);
            });
        }
    });
    port
}

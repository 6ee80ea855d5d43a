//! A TCP proxy between a host and the database server that can freeze: it stops forwarding in
//! both directions but keeps every connection open (packets dropped, no reset: what a network
//! partition or a stuck middlebox does). Neither side is told; the server keeps the frozen
//! sessions, and their locks, until its TCP keepalive gives up.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub struct Proxy {
    port: u16,
    frozen: Arc<AtomicBool>,
    closed: Arc<AtomicBool>,
}

impl Proxy {
    /// A proxy on a free loopback port to `target` (`127.0.0.1:PORT`).
    pub fn to(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (frozen, closed) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let target = target.to_string();
        let (f, c) = (frozen.clone(), closed.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if c.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                // Connections made while frozen are left unanswered too.
                let Ok(server) = TcpStream::connect(&target) else { continue };
                for (from, to) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)] {
                    let (f, c) = (f.clone(), c.clone());
                    std::thread::spawn(move || pump(from, to, &f, &c));
                }
            }
        });
        Proxy { port, frozen, closed }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops forwarding (both ways, every connection, new ones too) until `thaw`.
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    pub fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wakes the accepting thread
    }
}

/// Copies `from` to `to` until either closes; while frozen, reads nothing and sends nothing.
fn pump(mut from: TcpStream, mut to: TcpStream, frozen: &AtomicBool, closed: &AtomicBool) {
    let mut buf = [0u8; 16384];
    from.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    loop {
        if closed.load(Ordering::SeqCst) {
            break;
        }
        if frozen.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

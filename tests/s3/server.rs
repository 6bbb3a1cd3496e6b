//! A real S3-compatible server for the tests: moto's server (installed into python/.venv by
//! `scripts/setup.sh`) on a loopback port, reached through a small TCP relay the tests can take down
//! and bring back (a stopped server, as the writers see it) without losing the in-memory buckets.
//!
//! The server is started by [`S3::start`] and stopped when the value drops; a watchdog shell also
//! stops it if this process dies without dropping it.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long moto may take to answer its first request (it imports boto and flask first).
const STARTUP: Duration = Duration::from_secs(60);

pub struct S3 {
    server: Child,
    /// The relay's address: what every client is given as its endpoint.
    pub endpoint: String,
    relay: Arc<Relay>,
}

impl S3 {
    /// Start moto on a free loopback port and the relay in front of it.
    pub fn start() -> Result<S3, String> {
        let python = python()?;
        let port = free_port()?;
        // moto's server through tests/python/moto_server.py, which spares it two costs per request
        // (a third of its CPU per request, measured there).
        let launcher = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/python/moto_server.py");
        let watchdog = format!(
            "\"$0\" \"$1\" -H 127.0.0.1 -p {port} >/dev/null 2>&1 & m=$!; \
             trap 'kill $m 2>/dev/null' EXIT TERM; \
             while kill -0 {parent} 2>/dev/null && kill -0 $m 2>/dev/null; do sleep 1; done",
            parent = std::process::id()
        );
        let server = Command::new("sh")
            .args(["-c", &watchdog, python.to_str().ok_or("python path is not UTF-8")?, launcher])
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting moto: {e}"))?;
        let upstream: SocketAddr = ([127, 0, 0, 1], port).into();
        wait_until_serving(upstream)?;
        let relay = Relay::start(upstream)?;
        let endpoint = format!("http://{}", relay.addr);
        Ok(S3 { server, endpoint, relay })
    }

    /// Create `bucket` (moto keeps it in memory for the server's life).
    pub fn create_bucket(&self, bucket: &str) -> Result<(), String> {
        let reply = http(
            self.relay.upstream,
            &format!("PUT /{bucket} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
        )?;
        if reply.starts_with("HTTP/1.1 200") {
            Ok(())
        } else {
            Err(format!("creating bucket {bucket}: {}", reply.lines().next().unwrap_or("")))
        }
    }

    /// The environment a client process is given to reach this server, as AWS SDKs and pylance read it.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ALLOW_HTTP", "true".into()),
            // A stopped server must surface as an error within seconds, not after the default 3 min.
            ("OBJECT_STORE_CLIENT_MAX_RETRIES", "3".into()),
            ("OBJECT_STORE_CLIENT_RETRY_TIMEOUT", "10".into()),
        ]
    }

    /// Take the server away: new connections are refused and open ones are cut.
    pub fn stop(&self) {
        self.relay.set_up(false);
    }

    /// Bring it back, buckets and objects as they were.
    pub fn restart(&self) {
        self.relay.set_up(true);
    }

    /// Connections the relay has carried (a test can assert the server was really used).
    pub fn connections(&self) -> u64 {
        self.relay.connections.load(Ordering::SeqCst)
    }

    /// Responses the server has sent through the relay: every request a client made that got an
    /// answer (a benchmark's round trips, whoever the client).
    pub fn responses(&self) -> u64 {
        self.relay.responses.load(Ordering::SeqCst)
    }

    /// Requests the relay has carried, by method and what they touch (`GET manifest`, `LIST`, ...).
    pub fn requests_by_kind(&self) -> BTreeMap<String, u64> {
        self.relay.kinds.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Requests carried since `before` (an earlier [`S3::requests_by_kind`]), by kind.
    pub fn requests_since(&self, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
        requests_minus(&self.requests_by_kind(), before)
    }
}

/// The kinds counted more often in `now` than in `then`, with the difference.
pub fn requests_minus(now: &BTreeMap<String, u64>, then: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    now.iter()
        .map(|(kind, n)| (kind.clone(), n.saturating_sub(then.get(kind).copied().unwrap_or(0))))
        .filter(|(_, n)| *n > 0)
        .collect()
}

impl Drop for S3 {
    fn drop(&mut self) {
        // SIGTERM, not SIGKILL: the watchdog shell's trap stops moto on its way out (a killed
        // shell would leave moto running with no parent).
        let terminated = Command::new("kill").arg("-TERM").arg(self.server.id().to_string()).status();
        if !terminated.is_ok_and(|s| s.success()) {
            let _ = self.server.kill();
        }
        let _ = self.server.wait();
    }
}

fn python() -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var("LANCE_ACTIONS_PYTHON") {
        return Ok(PathBuf::from(p));
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../python/.venv/bin/python");
    if venv.exists() {
        return Ok(venv);
    }
    Err("no python with moto: run ./scripts/setup.sh (it installs moto[server] into python/.venv)".into())
}

fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("finding a free port: {e}"))?;
    listener.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

fn wait_until_serving(addr: SocketAddr) -> Result<(), String> {
    let started = Instant::now();
    while started.elapsed() < STARTUP {
        if let Ok(reply) = http(addr, "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            && reply.starts_with("HTTP/1.1")
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!("moto did not answer on {addr} within {STARTUP:?}"))
}

fn http(addr: SocketAddr, request: &str) -> Result<String, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    s.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).map_err(|e| e.to_string())?;
    Ok(reply)
}

/// A byte relay in front of the server. While down it accepts and immediately closes (the client
/// sees a reset, as from a server that went away), and every open connection is cut.
///
/// It also makes moto's conditional put atomic, as S3's is. moto 5.2.5 checks `If-None-Match: *`
/// against the bucket and stores the object later in the same request handler, with no lock, in a
/// threaded server (`moto/s3/responses.py`, `put_object`): two creates of one key racing through
/// that window can both succeed, the second overwriting the first. Every manifest version is such a
/// create, and the commit loop's soundness rests on exactly one of them succeeding
/// (`design/commit.md`, "On object storage"), so the relay lets one conditional put at a time
/// reach moto: from its request to the end of its response (moto closes every connection after
/// one response).
struct Relay {
    addr: SocketAddr,
    upstream: SocketAddr,
    up: AtomicBool,
    /// Bumped on every stop: a connection opened in an earlier epoch ends at its next read.
    epoch: AtomicU64,
    connections: AtomicU64,
    responses: AtomicU64,
    conditional_puts: std::sync::Mutex<()>,
    /// Requests by [`request_kind`].
    kinds: std::sync::Mutex<BTreeMap<String, u64>>,
}

impl Relay {
    fn start(upstream: SocketAddr) -> Result<Arc<Relay>, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("starting the relay: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let relay = Arc::new(Relay {
            addr,
            upstream,
            up: AtomicBool::new(true),
            epoch: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            responses: AtomicU64::new(0),
            conditional_puts: std::sync::Mutex::new(()),
            kinds: Default::default(),
        });
        let accepting = relay.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let relay = accepting.clone();
                std::thread::spawn(move || relay.serve(client));
            }
        });
        Ok(relay)
    }

    fn tally(&self, kind: String) {
        *self.kinds.lock().unwrap_or_else(|e| e.into_inner()).entry(kind).or_default() += 1;
    }

    fn set_up(&self, up: bool) {
        if !up {
            self.epoch.fetch_add(1, Ordering::SeqCst);
        }
        self.up.store(up, Ordering::SeqCst);
    }

    fn serve(self: &Arc<Self>, client: TcpStream) {
        if !self.up.load(Ordering::SeqCst) {
            drop(client);
            return;
        }
        let head = peek_request_head(&client);
        if let Some(head) = &head {
            self.tally(request_kind(head));
        }
        // Held until this connection's one request has been answered.
        let _one_create_at_a_time = head
            .as_deref()
            .is_some_and(is_conditional_put)
            .then(|| self.conditional_puts.lock().unwrap_or_else(|e| e.into_inner()));
        let Ok(server) = TcpStream::connect(self.upstream) else { return };
        self.connections.fetch_add(1, Ordering::SeqCst);
        let epoch = self.epoch.load(Ordering::SeqCst);
        let (Ok(mut request_from), Ok(request_to)) = (client.try_clone(), server.try_clone()) else { return };
        let relay = self.clone();
        let requests = std::thread::spawn(move || relay.pump(&mut request_from, request_to, epoch, false));
        let (Ok(mut response_from), Ok(response_to)) = (server.try_clone(), client.try_clone()) else { return };
        self.pump(&mut response_from, response_to, epoch, true);
        let _ = requests.join();
    }

    /// Copy bytes one way until either side closes or the relay is stopped; on the server's side,
    /// count the responses (status lines).
    fn pump(&self, from: &mut TcpStream, mut to: TcpStream, epoch: u64, responses: bool) {
        let _ = from.set_read_timeout(Some(Duration::from_millis(200)));
        let mut buf = [0u8; 64 * 1024];
        let mut status_lines = StatusLines::default();
        loop {
            if self.epoch.load(Ordering::SeqCst) != epoch {
                break;
            }
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if responses {
                        self.responses.fetch_add(status_lines.count(&buf[..n]), Ordering::SeqCst);
                    }
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
        }
        let _ = from.shutdown(std::net::Shutdown::Both);
        let _ = to.shutdown(std::net::Shutdown::Both);
    }
}

/// The head (request line and headers) of the request waiting on `client`, read without consuming
/// it; `None` when it is not complete within a second or does not fit 16 KiB.
fn peek_request_head(client: &TcpStream) -> Option<String> {
    let mut buf = [0u8; 16 * 1024];
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    while std::time::Instant::now() < deadline {
        let n = client.peek(&mut buf).ok()?;
        let head = &buf[..n];
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(String::from_utf8_lossy(&head[..end]).into_owned());
        }
        if n == buf.len() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

/// Does the request create an object only if absent (`PUT` with `If-None-Match`)?
fn is_conditional_put(head: &str) -> bool {
    head.starts_with("PUT ") && head.to_ascii_lowercase().contains("\r\nif-none-match:")
}

/// A request's method and what it touches in a Lance table, for the benches' breakdown of round
/// trips: `GET manifest`, `PUT transaction`, `LIST`, ...
fn request_kind(head: &str) -> String {
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    let method = parts.next().unwrap_or("?");
    let target = parts.next().unwrap_or_default();
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let what = if query.contains("list-type") || (method == "GET" && query.contains("prefix=")) {
        return "LIST".to_string();
    } else if path.contains("/_versions/") {
        "manifest"
    } else if path.contains("/_transactions/") {
        "transaction"
    } else if path.contains("/_deletions/") {
        "deletion"
    } else if path.contains("/_indices/") {
        "index"
    } else if path.contains("/data/") {
        "data"
    } else {
        "other"
    };
    format!("{method} {what}")
}

/// Counts HTTP/1.1 status lines in one connection's response bytes, across read boundaries: a
/// status line opens the stream or follows the previous response's last CRLF.
struct StatusLines {
    tail: Vec<u8>,
}

impl Default for StatusLines {
    fn default() -> Self {
        // The stream's start counts as a line start.
        StatusLines { tail: b"\r\n".to_vec() }
    }
}

impl StatusLines {
    const MARK: &'static [u8] = b"\r\nHTTP/1.1 ";

    fn count(&mut self, bytes: &[u8]) -> u64 {
        let mut window = std::mem::take(&mut self.tail);
        window.extend_from_slice(bytes);
        let found = window.windows(Self::MARK.len()).filter(|w| *w == Self::MARK).count() as u64;
        let keep = window.len().min(Self::MARK.len() - 1);
        self.tail = window[window.len() - keep..].to_vec();
        found
    }
}

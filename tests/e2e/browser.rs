//! A real browser: Debian's Chromium, driven over WebDriver by chromedriver, loads a small realistic
//! site (`tests/browser-site/`: HTML, CSS, an image, an ES module importing another, a JSON fetch and
//! a WebAssembly module instantiated with `instantiateStreaming`) and Debian's Python documentation
//! (where installed) from statico over HTTP/1.1 (plain and TLS), HTTP/2 (TLS + ALPN)
//! and HTTP/3 (QUIC), and checks what the browser itself reports: every sub-resource loaded with 200,
//! the protocol (`nextHopProtocol`: `http/1.1`, `h2`, `h3`), a reload revalidating the page with 304, a
//! `Range` fetch answered 206, the 404 page, an SPA deep link (`--spa-fallback`) running the
//! module, and an `EventSource` on a stream route (`stream=sse`) getting its events, then stopping at
//! the 204 its reconnection gets; and over HTTP/2 and HTTP/3, a `fetch` reading a stream route's
//! events and an OpenAI route's streamed tokens with its body's reader, each on its own at its time.
//!
//! WebDriver is plain HTTP + JSON, spoken here with `ureq` (already a dependency) and `serde_json`
//! rather than fantoccini or thirtyfour: a handful of requests need no async runtime and no extra
//! dependency tree. Chromium keeps no HTTP cache for an origin whose certificate it does not trust,
//! so instead of `--ignore-certificate-errors` each test trusts statico's self-signed certificate in
//! a private NSS database (`certutil`) under a temporary `HOME` given to the browser. Host names
//! other than `localhost` (mapped to 127.0.0.1) resolve to nothing, so the browser talks to
//! 127.0.0.1 only. chromedriver and every process under it are killed by PID when a test ends.
//!
//! Chromium fails its requests in progress with `ERR_NETWORK_CHANGED` when an interface or address
//! of the host comes or goes, so the tests hold [`statico_tests::network_interfaces`] against the
//! container tests' veths, and a check whose requests failed that way (something else on a CI host
//! changed its interfaces) runs again from scratch, up to three times in all ([`in_browser`]). A
//! failing test prints what Chromium's net log (kept in the temp dir) says went wrong, and a failed
//! burst of fetches the server's log and totals too.
//!
//! Each test prints `SKIPPED: … needs chromium and chromedriver` without them (`cargo xtask setup`
//! installs `chromium`, `chromium-driver` and `libnss3-tools`).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use statico_tests::{scratch_dir, Server};

/// Debian's Chromium (a wrapper script that execs the browser).
const CHROMIUM: &str = "/usr/bin/chromium";
/// Debian's Python documentation (`python3.11-doc`): a realistic site, used where installed.
const PYTHON_DOCS: &str = "/usr/share/doc/python3.11/html";
/// How long the browser may take for any one step on a busy machine.
const BROWSER_WAIT: Duration = Duration::from_secs(60);
/// The files of `tests/browser-site/` that its index page loads, directly or through its module.
const SUBRESOURCES: [&str; 6] = [
    "/style.css",
    "/logo.png",
    "/app.js",
    "/lib.js",
    "/data.json",
    "/tiny.wasm",
];

/// How the browser reaches statico.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Protocol {
    /// HTTP/1.1 over plain TCP.
    Http1,
    /// HTTP/1.1 over TLS (ALPN http/1.1).
    Https1,
    /// HTTP/2 over TLS (ALPN h2).
    H2,
    /// HTTP/3 over QUIC, which the browser is told to use from the first request.
    H3,
}

impl Protocol {
    /// statico's flags for this protocol.
    fn flags(self) -> &'static [&'static str] {
        match self {
            Protocol::Http1 => &[],
            Protocol::Https1 => &["--tls-self-signed"],
            Protocol::H2 => &["--tls-self-signed", "--http2"],
            Protocol::H3 => &["--tls-self-signed", "--http3"],
        }
    }

    fn tls(self) -> bool {
        self != Protocol::Http1
    }

    /// What the browser reports as `nextHopProtocol`.
    fn reported(self) -> &'static str {
        match self {
            Protocol::Http1 | Protocol::Https1 => "http/1.1",
            Protocol::H2 => "h2",
            Protocol::H3 => "h3",
        }
    }
}

/// Why a test does not run here, if it does not.
fn skip_reason(protocol: Protocol) -> Option<String> {
    let missing = |p: &str| !on_path(p);
    if !Path::new(CHROMIUM).exists() || missing("chromedriver") {
        return Some("needs chromium and chromedriver (cargo xtask setup)".into());
    }
    if protocol.tls() && missing("certutil") {
        return Some("needs certutil (libnss3-tools; cargo xtask setup)".into());
    }
    None
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
}

/// A statico serving a site over one protocol, with its certificate (if any) saved in `dir`.
struct Site {
    server: Server,
    dir: PathBuf,
    origin: String,
    protocol: Protocol,
}

impl Site {
    /// statico serving `root` over `protocol`, with `extra` flags; `name` names its scratch directory.
    fn serve(name: &str, protocol: Protocol, root: &str, extra: &[&str]) -> Site {
        let dir = scratch_dir("browser", name);
        let out = dir.to_str().unwrap();
        let mut args = vec!["--root", root, "-v"];
        args.extend_from_slice(protocol.flags());
        if protocol.tls() {
            args.extend_from_slice(&["--tls-self-signed-out", out]);
        }
        args.extend_from_slice(extra);
        let server = Server::start(&args);
        let port = server.addr.port();
        // TLS sites are reached by the name on the certificate, which the browser maps to 127.0.0.1.
        let origin = match protocol.tls() {
            true => format!("https://localhost:{port}"),
            false => format!("http://127.0.0.1:{port}"),
        };
        Site {
            server,
            dir,
            origin,
            protocol,
        }
    }

    /// `tests/browser-site/` served with `--spa-fallback index.html` and [`ROUTES`] in front, or
    /// without either (`spa` false).
    fn test_site(name: &str, protocol: Protocol, spa: bool) -> Site {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/browser-site");
        let extra: &[&str] = if spa {
            &[
                "--spa-fallback",
                "index.html",
                "--route",
                ROUTES[0],
                "--route",
                ROUTES[1],
                "--route",
                ROUTES[2],
            ]
        } else {
            &[]
        };
        Site::serve(name, protocol, root, extra)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin)
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A process tree this test started (chromedriver, and Chromium under it), killed by PID on drop.
struct ProcessTree(Child);

impl Drop for ProcessTree {
    fn drop(&mut self) {
        let root = self.0.id();
        for pid in descendants(root) {
            kill(pid);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kill(pid: u32) {
    // SAFETY: kill(2) on a process started by this test (chromedriver or one of its descendants).
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
}

/// Every live process below `root`, from the parent PIDs in /proc.
fn descendants(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // The fields after the command name (which may hold spaces) are: state, ppid, …
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// A Chromium session over WebDriver.
struct Browser {
    agent: ureq::Agent,
    /// `http://127.0.0.1:PORT/session/ID` of the chromedriver session.
    session: String,
    home: PathBuf,
    _driver: ProcessTree,
}

impl Browser {
    /// Chromium trusting the certificates of `sites`, speaking HTTP/3 to those served over it.
    fn launch(name: &str, sites: &[&Site]) -> Browser {
        let home = scratch_dir("browser-home", name);
        trust_certificates(&home, sites);
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .env("HOME", &home)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let driver = ProcessTree(driver);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(BROWSER_WAIT))
            .http_status_as_error(false)
            .proxy(None)
            .build()
            .into();
        let base = format!("http://127.0.0.1:{port}");
        wait_until_ready(&agent, &base);
        let caps = capabilities(&home, sites);
        let created = call(&agent, "POST", &format!("{base}/session"), Some(caps))
            .unwrap_or_else(|e| panic!("new WebDriver session: {e}"));
        let id = created["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_string();
        Browser {
            agent,
            session: format!("{base}/session/{id}"),
            home,
            _driver: driver,
        }
    }

    fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.session);
        call(&self.agent, method, &url, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}\n{}", self.net_log_report()))
    }

    /// Navigates to `url` and waits for its load event.
    fn go(&self, url: &str) {
        self.command("POST", "/url", Some(json!({ "url": url })));
    }

    /// Reloads the page and waits for its load event.
    fn reload(&self) {
        self.command("POST", "/refresh", Some(json!({})));
    }

    /// Runs `script` (a function body; a returned promise is awaited) in the page.
    fn run(&self, script: &str) -> Value {
        let body = json!({ "script": script, "args": [] });
        self.command("POST", "/execute/sync", Some(body))
    }

    /// The page's navigation timing entry.
    fn navigation(&self) -> Value {
        self.run(
            "const e = performance.getEntriesByType('navigation')[0];
             return { protocol: e.nextHopProtocol, status: e.responseStatus, type: e.type,
                      transfer: e.transferSize, body: e.encodedBodySize };",
        )
    }

    /// The page's resource timing entries: path, protocol, status and bytes transferred of each.
    fn resources(&self) -> Vec<Value> {
        let entries = self.run(
            "return performance.getEntriesByType('resource').map(e => {
               const u = new URL(e.name);
               return { path: u.pathname, origin: u.origin, protocol: e.nextHopProtocol,
                        status: e.responseStatus, transfer: e.transferSize };
             });",
        );
        entries.as_array().expect("resource entries").clone()
    }

    /// What the browser's net log says went wrong (see [`net_events`]), for a failing test; the
    /// whole log is kept in a file named here.
    fn net_log_report(&self) -> String {
        self.net_log().0
    }

    /// What the net log says went wrong (kept in the temp dir, the errors listed), and whether
    /// Chromium failed a request because the host's network changed.
    fn net_log(&self) -> (String, bool) {
        let log = self.home.join("netlog.json");
        let home = self.home.file_name().unwrap_or_default().to_string_lossy();
        let kept = std::env::temp_dir().join(format!("{home}-netlog.json"));
        let _ = std::fs::copy(&log, &kept);
        let events = net_events(&std::fs::read_to_string(&log).unwrap_or_default());
        let changed = events.iter().any(|e| e.ends_with("ERR_NETWORK_CHANGED"));
        let cause = match changed {
            true => {
                "Chromium failed requests with ERR_NETWORK_CHANGED: an interface or address of \
                 the host came or went during the test (a container's veth does, see \
                 statico_tests::network_interfaces); not the server's doing\n"
            }
            false => "",
        };
        let shown = events.len().min(60);
        let report = format!(
            "{cause}net log (kept in {}): {} errors and network changes, the first {shown}:\n{}",
            kept.display(),
            events.len(),
            events[..shown].join("\n"),
        );
        (report, changed)
    }

    /// Why a page's fetches failed, for a failing test: the browser's net log, and the server's log
    /// and totals. Stops the server.
    fn why_fetches_failed(&self, site: &Site) -> String {
        let net_log = self.net_log_report();
        statico_tests::signal(site.server.pid(), "TERM");
        let start = Instant::now();
        while !site.server.stderr().contains("statico: totals") && start.elapsed() < BROWSER_WAIT {
            thread::sleep(Duration::from_millis(50));
        }
        let stdout = site.server.stdout();
        let tail: Vec<&str> = stdout.lines().rev().take(40).collect();
        format!(
            "{net_log}\n\
             server stderr (its totals: requests, responses, tls_failures, timeouts…):\n{}\n\
             server stdout (-v, the last lines, newest first):\n{}",
            site.server.stderr(),
            tail.join("\n"),
        )
    }

    /// What the site's module recorded in `window.appResult`, once it has.
    fn app_result(&self) -> Value {
        self.run(
            "return new Promise(done => {
               const poll = () => window.appResult ? done(window.appResult) : setTimeout(poll, 20);
               poll();
             });",
        )
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = call(&self.agent, "DELETE", &self.session, None);
        // `_driver` (dropped after this) kills what is left of the browser.
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

/// What a Chromium net log says went wrong: the events that ended with an error, but for the names
/// that do not resolve (every host but localhost, by [`capabilities`]), and the network changes the
/// browser saw, each named with its time in ms (`"1234" URL_REQUEST #56 REQUEST_ALIVE
/// ERR_CONNECTION_RESET`: time, source, event, error). The log is one event a line after a line of
/// constants.
fn net_events(log: &str) -> Vec<String> {
    let mut lines = log.lines();
    let constants: Value = lines
        .next()
        .and_then(|l| serde_json::from_str(&format!("{}}}", l.trim_end_matches(','))).ok())
        .unwrap_or_default();
    let name = |table: &str, code: &Value| {
        let table = constants["constants"][table].as_object();
        let found = table.and_then(|t| t.iter().find(|(_, v)| *v == code));
        found.map_or(code.to_string(), |(k, _)| k.clone())
    };
    lines
        .filter_map(|l| serde_json::from_str::<Value>(l.trim_end_matches(',')).ok())
        .filter_map(|e| {
            let event = name("logEventTypes", &e["type"]);
            let changed = event.starts_with("NETWORK_") && event.ends_with("_CHANGED");
            let error = e["params"]["net_error"].is_i64();
            let error = error.then(|| name("netError", &e["params"]["net_error"]));
            if error.as_deref() == Some("ERR_NAME_NOT_RESOLVED") || (error.is_none() && !changed) {
                return None;
            }
            let source = name("logSourceType", &e["source"]["type"]);
            Some(format!(
                "{} {source} #{} {event} {}",
                e["time"],
                e["source"]["id"],
                error.unwrap_or_default()
            ))
        })
        .collect()
}

/// A WebDriver request; its `value`, or the WebDriver error.
fn call(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    body: Option<Value>,
) -> Result<Value, String> {
    let response = match (method, body) {
        ("GET", _) => agent.get(url).call(),
        ("DELETE", _) => agent.delete(url).call(),
        (_, body) => agent
            .post(url)
            .header("Content-Type", "application/json")
            .send(body.unwrap_or(json!({})).to_string()),
    };
    let mut response = response.map_err(|e| e.to_string())?;
    let text = response
        .body_mut()
        .read_to_string()
        .map_err(|e| e.to_string())?;
    let mut parsed: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
    let value = parsed["value"].take();
    match value.get("error") {
        Some(error) => Err(format!("{error}: {}", value["message"])),
        None => Ok(value),
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().unwrap().port()
}

/// Waits until chromedriver answers `/status` with ready.
fn wait_until_ready(agent: &ureq::Agent, base: &str) {
    let start = Instant::now();
    loop {
        let status = call(agent, "GET", &format!("{base}/status"), None);
        if matches!(&status, Ok(v) if v["ready"] == json!(true)) {
            return;
        }
        assert!(
            start.elapsed() < BROWSER_WAIT,
            "chromedriver not ready: {status:?}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// A private NSS database under `home` trusting each TLS site's self-signed certificate.
fn trust_certificates(home: &Path, sites: &[&Site]) {
    let db = home.join(".pki/nssdb");
    std::fs::create_dir_all(&db).unwrap();
    let db = format!("sql:{}", db.display());
    certutil(&["-d", &db, "-N", "--empty-password"]);
    for site in sites.iter().filter(|s| s.protocol.tls()) {
        let cert = site.dir.join("cert.pem");
        let nick = format!("statico-{}", site.server.addr.port());
        let cert = cert.to_str().unwrap();
        certutil(&["-d", &db, "-A", "-t", "C,,", "-n", &nick, "-i", cert]);
    }
}

fn certutil(args: &[&str]) {
    let out = Command::new("certutil")
        .args(args)
        .output()
        .expect("run certutil");
    assert!(
        out.status.success(),
        "certutil {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The WebDriver capabilities: headless Chromium for CI (as root too), its profile under `home`,
/// `localhost` on 127.0.0.1 and no other name resolving, QUIC forced for the HTTP/3 sites.
fn capabilities(home: &Path, sites: &[&Site]) -> Value {
    let mut args: Vec<String> = [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--no-proxy-server",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--host-resolver-rules=MAP localhost 127.0.0.1, MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    ]
    .map(String::from)
    .to_vec();
    args.push(format!(
        "--user-data-dir={}",
        home.join("profile").display()
    ));
    // The browser's own account of every request and socket, read when a test fails.
    args.push(format!(
        "--log-net-log={}",
        home.join("netlog.json").display()
    ));
    args.push("--net-log-capture-mode=Everything".into());
    let quic: Vec<String> = sites
        .iter()
        .filter(|s| s.protocol == Protocol::H3)
        .map(|s| format!("localhost:{}", s.server.addr.port()))
        .collect();
    if !quic.is_empty() {
        args.push("--enable-quic".into());
        args.push(format!("--origin-to-force-quic-on={}", quic.join(",")));
    }
    let wait = BROWSER_WAIT.as_millis() as u64;
    json!({ "capabilities": { "alwaysMatch": {
        "browserName": "chrome",
        "timeouts": { "script": wait, "pageLoad": wait, "implicit": 0 },
        "goog:chromeOptions": { "binary": CHROMIUM, "args": args },
    } } })
}

/// Held by each test while its browser runs: one Chromium at a time (each takes hundreds of MiB and
/// a core while it starts), even when the suite runs tests in parallel.
fn one_browser_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `check` in a browser against `tests/browser-site/` over `protocol`, served twice: with
/// `--spa-fallback index.html` and without (for the 404 page).
fn on_test_site(name: &str, protocol: Protocol, check: fn(&Browser, &Site, &Site)) {
    if let Some(reason) = skip_reason(protocol) {
        println!("SKIPPED: {name} {reason}");
        return;
    }
    let sites = || {
        vec![
            Site::test_site(&format!("{name}-spa"), protocol, true),
            Site::test_site(&format!("{name}-plain"), protocol, false),
        ]
    };
    in_browser(name, sites, |b, sites| check(b, &sites[0], &sites[1]));
}

/// How many times a browser check may run in all when Chromium fails its requests because the
/// host's network changed under it.
const ATTEMPTS: u32 = 3;

/// Serves `sites`, launches a browser trusting them and runs `check`, one browser at a time and
/// never while a container test adds or removes an interface. Chromium fails every request in flight
/// with `ERR_NETWORK_CHANGED` when an interface or address of the host comes or goes, whatever the
/// server does, and not only our containers do that on a CI host: when the net log shows such a
/// failure, the check runs again from scratch (new servers, new browser), up to [`ATTEMPTS`] times.
/// Any other failure fails the test at once, with the net log's errors printed.
fn in_browser(name: &str, sites: impl Fn() -> Vec<Site>, check: impl Fn(&Browser, &[Site])) {
    let _turn = one_browser_at_a_time();
    let _interfaces = statico_tests::network_interfaces();
    for attempt in 1..=ATTEMPTS {
        let sites = sites();
        let browser = Browser::launch(name, &sites.iter().collect::<Vec<_>>());
        let run =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&browser, &sites)));
        let Err(panic) = run else { return };
        let (report, network_changed) = browser.net_log();
        if !network_changed || attempt == ATTEMPTS {
            eprintln!("{name}: attempt {attempt} of {ATTEMPTS} failed; {report}");
            std::panic::resume_unwind(panic);
        }
        eprintln!("{name}: attempt {attempt} failed with ERR_NETWORK_CHANGED; again: {report}");
    }
}

/// Asserts the entry says `protocol` and `status`.
fn assert_entry(entry: &Value, protocol: Protocol, status: u64) {
    assert_eq!(entry["protocol"], protocol.reported(), "{entry}");
    assert_eq!(entry["status"], status, "{entry}");
}

/// The index page, its stylesheet and image, both modules, the JSON and the WebAssembly all load
/// with 200 over `protocol`, and the module ran to the end.
fn every_subresource_loads(b: &Browser, site: &Site, _: &Site) {
    b.go(&site.url("/"));
    let app = b.app_result();
    assert_eq!(app["error"], Value::Null, "{app}");
    assert_eq!(app["greeting"], "hello from lib.js", "{app}");
    assert_eq!(app["answer"], 42, "{app}");
    assert_eq!(app["wasm"], true, "{app}");
    assert_entry(&b.navigation(), site.protocol, 200);
    let resources = b.resources();
    for path in SUBRESOURCES {
        let entry = resources
            .iter()
            .find(|e| e["path"] == path)
            .unwrap_or_else(|| panic!("{path} not among the resources: {resources:?}"));
        assert_entry(entry, site.protocol, 200);
    }
    let logo = b.run("return document.getElementById('logo').naturalWidth;");
    assert_eq!(logo, 4, "the image did not decode");
    let color = b.run("return getComputedStyle(document.getElementById('title')).color;");
    assert_eq!(color, "rgb(1, 2, 3)", "the stylesheet did not apply");
}

/// A reload sends the page's validators and gets 304; the module runs again from the cache.
fn reload_revalidates_with_304(b: &Browser, site: &Site, _: &Site) {
    b.go(&site.url("/"));
    b.app_result();
    b.reload();
    let app = b.app_result();
    assert_eq!(app["answer"], 42, "{app}");
    // The browser reports a response revalidated from its cache with a transferSize of 300 (what
    // the Resource Timing spec gives for a 304) and the cached status; statico logged the 304.
    let nav = b.navigation();
    assert_eq!(
        (&nav["type"], &nav["transfer"]),
        (&json!("reload"), &json!(300)),
        "{nav}"
    );
    site.server.wait_stdout("304 Not Modified");
}

/// A `Range` fetch gets 206 with the requested bytes and their Content-Range.
fn range_fetch_gets_206(b: &Browser, site: &Site, _: &Site) {
    b.go(&site.url("/"));
    b.app_result();
    let got = b.run(
        "return fetch('/data.json', { headers: { Range: 'bytes=1-8' }, cache: 'no-store' })
           .then(async r => ({ status: r.status, range: r.headers.get('content-range'),
                               body: await r.text() }));",
    );
    assert_eq!(got["status"], 206, "{got}");
    assert_eq!(got["range"], "bytes 1-8/15", "{got}");
    assert_eq!(got["body"], "\"answer\"", "{got}");
}

/// A missing page gets status 404 and the root's 404.html.
fn missing_page_gets_the_404_page(b: &Browser, _: &Site, plain: &Site) {
    b.go(&plain.url("/no/such/page"));
    assert_entry(&b.navigation(), plain.protocol, 404);
    let heading = b.run("return document.getElementById('missing')?.textContent;");
    assert_eq!(heading, "statico browser site: page not found");
}

/// Routes in front of the site (the calibrated target): one held 150 ms, one answering 503 half the
/// time, one served by a pool of one server with one place in its queue.
const ROUTES: [&str; 3] = [
    "GET /api/slow delay=150ms body=slow header=Content-Type:text/plain",
    "GET /api/mix status=503:50% body=mixed",
    "GET /api/pool capacity=1 queue=1 delay=500ms body=pooled",
];

/// A page's `fetch` of a route with a delay waits for it, and one with a status mix gets both
/// statuses, over `protocol`, next to the site's own files.
fn routes_answer_the_pages_fetches(b: &Browser, spa: &Site, _: &Site) {
    b.go(&spa.url("/"));
    b.app_result();
    let slow = b.run(
        "const t0 = performance.now();
         return fetch('/api/slow', { cache: 'no-store' })
           .then(async r => ({ status: r.status, body: await r.text(), ms: performance.now() - t0 }));",
    );
    assert_eq!(
        (&slow["status"], &slow["body"]),
        (&json!(200), &json!("slow")),
        "{slow}"
    );
    let ms = slow["ms"].as_f64().unwrap_or(0.0);
    assert!(
        (150.0..2000.0).contains(&ms),
        "held {ms} ms for a 150 ms delay"
    );
    // Each fetch's status, or why it failed (a rejected fetch is a network error).
    let mix = b.run(
        "return Promise.allSettled(Array.from({ length: 60 }, () =>
           fetch('/api/mix', { cache: 'no-store' }).then(r => r.status)))
           .then(all => all.map(r => r.status === 'fulfilled' ? r.value : String(r.reason)));",
    );
    let statuses: Vec<u64> = (mix.as_array().expect("statuses").iter())
        .filter_map(Value::as_u64)
        .collect();
    if statuses.len() != 60 {
        panic!("fetches failed: {mix}\n{}", b.why_fetches_failed(spa));
    }
    let failed = statuses.iter().filter(|s| **s == 503).count();
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 503),
        "{statuses:?}"
    );
    assert!(
        (10..=50).contains(&failed),
        "{failed} of 60 answered 503 for a 50% mix"
    );
    pool_sheds_a_pages_burst(b);
}

/// Four fetches at once of a pool of one server (500 ms each) with one place in its queue: one
/// served at once, one after it (not before 1 s), two shed with 503 before the first is served.
fn pool_sheds_a_pages_burst(b: &Browser) {
    let got = b.run(
        "const t0 = performance.now();
         return Promise.all(Array.from({ length: 4 }, () =>
           fetch('/api/pool', { cache: 'no-store' })
             .then(r => ({ status: r.status, ms: performance.now() - t0 }))));",
    );
    let answers: Vec<(u64, f64)> = (got.as_array().expect("answers").iter())
        .map(|a| {
            (
                a["status"].as_u64().unwrap_or(0),
                a["ms"].as_f64().unwrap_or(0.0),
            )
        })
        .collect();
    let ms_of = |status| answers.iter().filter(move |a| a.0 == status).map(|a| a.1);
    assert_eq!(ms_of(200).count(), 2, "{got}");
    assert_eq!(ms_of(503).count(), 2, "{got}");
    let served_last = ms_of(200).fold(0.0, f64::max);
    assert!(
        served_last >= 1000.0,
        "the queued one served after {served_last} ms: {got}"
    );
    let served_first = ms_of(200).fold(f64::MAX, f64::min);
    assert!(
        ms_of(503).all(|ms| ms < served_first),
        "shed after the first was served: {got}"
    );
}

/// A deep link into the single-page app gets index.html with 200, and its module runs there.
fn spa_deep_link_runs_the_module(b: &Browser, spa: &Site, _: &Site) {
    b.go(&spa.url("/app/deep/link?tab=2"));
    let app = b.app_result();
    assert_eq!(app["path"], "/app/deep/link", "{app}");
    assert_eq!(app["answer"], 42, "{app}");
    assert_eq!(app["wasm"], true, "{app}");
    assert_entry(&b.navigation(), spa.protocol, 200);
}

/// Debian's Python documentation: pages load with every stylesheet, script and image answered 200
/// over `protocol`, the stylesheets parsed and the images decoded.
fn python_docs_load(name: &str, protocol: Protocol) {
    if let Some(reason) = skip_reason(protocol) {
        println!("SKIPPED: {name} {reason}");
        return;
    }
    if !Path::new(PYTHON_DOCS).join("index.html").exists() {
        println!("SKIPPED: {name} needs {PYTHON_DOCS} (python3.11-doc)");
        return;
    }
    let sites = || vec![Site::serve(name, protocol, PYTHON_DOCS, &[])];
    in_browser(name, sites, |b, sites| {
        for page in ["/", "/library/index.html", "/library/asyncio-task.html"] {
            docs_page_loads(b, &sites[0], page);
        }
    });
}

fn docs_page_loads(b: &Browser, site: &Site, page: &str) {
    b.go(&site.url(page));
    assert_entry(&b.navigation(), site.protocol, 200);
    let title = b.run("return document.title;");
    assert!(
        title.as_str().unwrap_or("").contains("3.11"),
        "{page}: title {title}"
    );
    let resources = b.resources();
    assert!(resources.len() >= 3, "{page}: {resources:?}");
    for entry in resources.iter().filter(|e| e["origin"] == site.origin) {
        // What an earlier page left in the cache comes from there, with no protocol.
        match entry["transfer"] == 0 {
            true => assert_eq!(entry["status"], 200, "{page}: {entry}"),
            false => assert_entry(entry, site.protocol, 200),
        }
    }
    let rules = b.run("return [...document.styleSheets].map(s => s.cssRules.length);");
    let rules = rules.as_array().unwrap();
    assert!(
        !rules.is_empty() && rules.iter().all(|n| n.as_u64() > Some(0)),
        "{page}: {rules:?}"
    );
    let broken = b.run(
        "return [...document.images].filter(i => !i.complete || i.naturalWidth == 0)
           .map(i => i.src);",
    );
    assert_eq!(broken, json!([]), "{page}: images that did not load");
}

/// A stream route in front of the test site: five server-sent events 50 ms apart.
const EVENTS: &str = "GET /events stream=sse events=5 gap=50ms";

/// A page's `EventSource` gets the stream route's five events in order with their ids; once the
/// stream has ended the browser reconnects with `Last-Event-ID: 4`, gets 204, and closes the source
/// for good (its `readyState` CLOSED), as the server-sent events spec says a 204 does.
fn event_source(name: &str, protocol: Protocol) {
    if let Some(reason) = skip_reason(protocol) {
        println!("SKIPPED: {name} {reason}");
        return;
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/browser-site");
    let name = format!("{name}-events");
    let sites = || vec![Site::serve(&name, protocol, root, &["--route", EVENTS])];
    in_browser(&name, sites, |b, sites| {
        let site = &sites[0];
        b.go(&site.url("/"));
        b.app_result();
        // Chromium reconnects 3 s after the end; the page gives up after 20 s.
        let got = b.run(
            "return new Promise(done => {
               const t0 = performance.now(), got = [];
               const source = new EventSource('/events');
               source.onmessage = e =>
                 got.push({ id: e.lastEventId, data: e.data, ms: performance.now() - t0 });
               source.onerror = () => {
                 if (source.readyState === EventSource.CLOSED) done({ got, closed: true });
               };
               setTimeout(() => { source.close(); done({ got, closed: false }); }, 20000);
             });",
        );
        let events = got["got"].as_array().expect("events");
        let seen: Vec<(&str, &str)> = (events.iter())
            .map(|e| {
                (
                    e["id"].as_str().unwrap_or(""),
                    e["data"].as_str().unwrap_or(""),
                )
            })
            .collect();
        let want: Vec<(String, String)> = (0..5)
            .map(|i| (i.to_string(), format!("{{\"i\":{i}}}")))
            .collect();
        let want: Vec<(&str, &str)> = want.iter().map(|(i, d)| (&i[..], &d[..])).collect();
        assert_eq!(seen, want, "{got}");
        let spread = events[4]["ms"].as_f64().unwrap() - events[0]["ms"].as_f64().unwrap();
        assert!(
            spread >= 150.0,
            "five events 50 ms apart came within {spread} ms: {got}"
        );
        assert_eq!(got["closed"], true, "the source never closed: {got}");
        site.server.wait_stdout("204 No Content");
    });
}

/// A stream route and an OpenAI route, each six events 200 ms apart after a first wait of 200 ms.
const PACED: [&str; 2] = [
    "GET /ticks stream=sse events=6 first=200ms gap=200ms",
    "/v1/* openai=on model=m tokens=6 first=200ms gap=200ms",
];

/// A page's `fetch` reads a streamed body with its reader, as a chat UI reads an LLM's answer: each
/// read is timed since the request; `path` and `init` are `fetch`'s arguments. Returns `{ protocol,
/// status, reads: [{ ms, text }] }`.
const READ_STREAM: &str = "
    const t0 = performance.now();
    const r = await fetch(path, init);
    const reader = r.body.getReader(), text = new TextDecoder(), reads = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      reads.push({ ms: performance.now() - t0, text: text.decode(value, { stream: true }) });
    }
    const entry = performance.getEntriesByType('resource').find(e => e.name.endsWith(path));
    return { protocol: entry && entry.nextHopProtocol, status: r.status, reads };";

/// A page's `fetch` gets a stream route's events and an OpenAI route's streamed tokens (`stream:
/// true`) one read each, at their times: not before they are due, not held back to go with the next
/// (each of the six at 200 ms + k × 200 ms from the request, within 150 ms).
fn fetch_reads_streamed_events_one_by_one(name: &str, protocol: Protocol) {
    if let Some(reason) = skip_reason(protocol) {
        println!("SKIPPED: {name} {reason}");
        return;
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/browser-site");
    let name = format!("{name}-fetch-stream");
    let args = ["--route", PACED[0], "--route", PACED[1]];
    let sites = || vec![Site::serve(&name, protocol, root, &args)];
    in_browser(&name, sites, |b, sites| {
        b.go(&sites[0].url("/"));
        b.app_result();
        let chat = json!({
            "method": "POST",
            "headers": { "content-type": "application/json" },
            "body": json!({
                "model": "m",
                "messages": [{ "role": "user", "content": "hi" }],
                "stream": true,
            }).to_string(),
        });
        for (path, init, event) in [
            ("/ticks", json!({}), "data: {\"i\":"),
            ("/v1/chat/completions", chat, "\"content\":"),
        ] {
            let got = b.run(&format!(
                "const path = {}, init = {init}; return (async () => {{ {READ_STREAM} }})();",
                json!(path)
            ));
            assert_eq!(got["status"], 200, "{path}: {got}");
            assert_eq!(got["protocol"], protocol.reported(), "{path}: {got}");
            let reads = got["reads"].as_array().expect("reads");
            let timed: Vec<(f64, usize)> = (reads.iter())
                .map(|r| {
                    let text = r["text"].as_str().unwrap_or("");
                    (r["ms"].as_f64().unwrap(), text.matches(event).count())
                })
                .filter(|(_, events)| *events > 0)
                .collect();
            assert_eq!(
                timed.len(),
                6,
                "{path}: six reads with an event each: {got}"
            );
            let times: Vec<u64> = timed.iter().map(|(ms, _)| *ms as u64).collect();
            eprintln!("{path} over {protocol:?}: events read at {times:?} ms");
            for (k, (ms, events)) in timed.iter().enumerate() {
                let due = 200.0 + 200.0 * k as f64;
                assert_eq!(*events, 1, "{path}: read {k} holds {events} events: {got}");
                assert!(
                    *ms >= due - 5.0 && *ms < due + 150.0,
                    "{path}: event {k} read at {ms} ms, due at {due} ms: {got}"
                );
            }
        }
    });
}

/// The tests over one protocol: one module per protocol, one test per check.
macro_rules! over {
    ($module:ident, $protocol:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn every_subresource_loads() {
                on_test_site(
                    stringify!($module),
                    $protocol,
                    super::every_subresource_loads,
                );
            }

            #[test]
            fn reload_revalidates_with_304() {
                on_test_site(
                    stringify!($module),
                    $protocol,
                    super::reload_revalidates_with_304,
                );
            }

            #[test]
            fn range_fetch_gets_206() {
                on_test_site(stringify!($module), $protocol, super::range_fetch_gets_206);
            }

            #[test]
            fn missing_page_gets_the_404_page() {
                on_test_site(
                    stringify!($module),
                    $protocol,
                    super::missing_page_gets_the_404_page,
                );
            }

            #[test]
            fn spa_deep_link_runs_the_module() {
                on_test_site(
                    stringify!($module),
                    $protocol,
                    super::spa_deep_link_runs_the_module,
                );
            }

            #[test]
            fn routes_answer_the_pages_fetches() {
                on_test_site(
                    stringify!($module),
                    $protocol,
                    super::routes_answer_the_pages_fetches,
                );
            }

            #[test]
            fn event_source_gets_every_event_then_stops_at_204() {
                super::event_source(stringify!($module), $protocol);
            }

            #[test]
            fn python_docs_load() {
                super::python_docs_load(stringify!($module), $protocol);
            }
        }
    };
}

/// A page's `fetch` reading streamed answers over HTTP/2 with TLS (ALPN h2), as chat UIs do.
#[test]
fn http2_fetch_reads_streamed_events_one_by_one() {
    fetch_reads_streamed_events_one_by_one("http2", Protocol::H2);
}

/// The same over HTTP/3.
#[test]
fn http3_fetch_reads_streamed_events_one_by_one() {
    fetch_reads_streamed_events_one_by_one("http3", Protocol::H3);
}

over!(http1_1, Protocol::Http1);
over!(https1_1, Protocol::Https1);
over!(http2, Protocol::H2);
over!(http3, Protocol::H3);

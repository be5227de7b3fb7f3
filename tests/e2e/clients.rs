//! Real HTTP clients against statico: curl (HTTP/1.0, HEAD, keep-alive reuse, 100-continue, chunked
//! upload) and the `ureq` crate.

use statico_tests::{run_client, Server};

fn curl(args: &[&str]) -> (bool, String, String) {
    run_client("curl", &[&["-sS", "--max-time", "10"], args].concat())
}

#[test]
fn curl_gets_the_configured_response() {
    let s = Server::start(&[
        "-s",
        "201",
        "-b",
        "Hello, World!",
        "-H",
        "Content-Type: text/plain",
        "-H",
        "X-Mock: yes",
    ]);
    let (ok, out, err) = curl(&["-i", &s.url("/any/path?q=1")]);
    assert!(ok, "{err}");
    assert!(out.starts_with("HTTP/1.1 201 Created\r\n"), "{out}");
    assert!(out.contains("Content-Type: text/plain\r\n") && out.contains("X-Mock: yes\r\n"));
    assert!(out.contains("Content-Length: 13\r\n") && out.contains("Server: statico/"));
    assert!(
        out.contains("\r\nDate: ") && out.ends_with("\r\n\r\nHello, World!"),
        "{out}"
    );
}

#[test]
fn curl_head_gets_headers_without_body() {
    let s = Server::start(&["-b", "some body"]);
    let (ok, out, err) = curl(&["-I", &s.url("/")]);
    assert!(ok, "{err}");
    assert!(out.contains("Content-Length: 9\r\n"), "{out}");
    assert!(
        out.ends_with("\r\n\r\n"),
        "HEAD response carried a body: {out:?}"
    );
}

#[test]
fn curl_http10_gets_connection_close() {
    let s = Server::start(&["-b", "x"]);
    let (ok, out, err) = curl(&["-0", "-i", "-v", &s.url("/")]);
    assert!(ok, "{err}");
    assert!(
        out.contains("Connection: close\r\n") && out.ends_with("\r\n\r\nx"),
        "{out}"
    );
    assert!(err.contains("> GET / HTTP/1.0"), "{err}");
    assert!(err.contains("Closing connection"), "{err}");
}

#[test]
fn curl_reuses_the_keep_alive_connection() {
    let s = Server::start(&["-b", "k"]);
    let (ok, out, err) = curl(&["-v", &s.url("/a"), &s.url("/b"), &s.url("/c")]);
    assert!(ok, "{err}");
    assert_eq!(out, "kkk");
    assert_eq!(
        err.matches("Re-using existing connection").count(),
        2,
        "{err}"
    );
    let stopped = s.stop();
    assert_eq!(stopped.total("conns_accepted"), 1);
    assert_eq!(stopped.total("requests"), 3);
}

fn upload_file(len: usize) -> tempfile_path::TempPath {
    tempfile_path::TempPath::with_bytes(&vec![b'z'; len])
}

#[test]
fn curl_expect_100_continue_upload() {
    let s = Server::start(&["-b", "ok", "-vv"]);
    let file = upload_file(200_000);
    let (ok, out, err) = curl(&[
        "-v",
        "-H",
        "Expect: 100-continue",
        "--expect100-timeout",
        "30",
        "--data-binary",
        &format!("@{}", file.path()),
        &s.url("/upload"),
    ]);
    assert!(ok, "{err}");
    assert!(err.contains("< HTTP/1.1 100 Continue"), "{err}");
    assert_eq!(out, "ok");
    let stopped = s.stop();
    assert_eq!(stopped.total("requests"), 1);
    assert!(stopped.total("bytes_in") > 200_000);
}

#[test]
fn curl_chunked_upload_then_reuse() {
    let s = Server::start(&["-b", "ok"]);
    let file = upload_file(100_000);
    let (ok, out, err) = curl(&[
        "-v",
        "-H",
        "Transfer-Encoding: chunked",
        "--data-binary",
        &format!("@{}", file.path()),
        &s.url("/up"),
        "--next",
        &s.url("/after"),
    ]);
    assert!(ok, "{err}");
    assert!(err.contains("> Transfer-Encoding: chunked"), "{err}");
    assert_eq!(out, "okok");
    let stopped = s.stop();
    assert_eq!(
        stopped.total("requests"),
        2,
        "the chunked body must not be parsed as requests"
    );
}

#[test]
fn ureq_agent_keeps_alive_and_posts() {
    let s = Server::start(&[
        "-b",
        "{\"ok\":true}",
        "-H",
        "Content-Type: application/json",
    ]);
    let agent = ureq::Agent::new_with_defaults();
    for i in 0..20 {
        let mut resp = if i % 2 == 0 {
            agent.get(&s.url("/get")).call().expect("GET")
        } else {
            agent
                .post(&s.url("/post"))
                .send(&b"payload".repeat(100)[..])
                .expect("POST")
        };
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "application/json");
        assert_eq!(resp.body_mut().read_to_string().unwrap(), "{\"ok\":true}");
    }
    let stopped = s.stop();
    assert_eq!(stopped.total("requests"), 20);
    assert_eq!(
        stopped.total("conns_accepted"),
        1,
        "ureq's agent should have reused one connection"
    );
}

/// A temporary file deleted on drop (std only).
mod tempfile_path {
    use std::path::PathBuf;

    pub struct TempPath(PathBuf);

    impl TempPath {
        pub fn with_bytes(bytes: &[u8]) -> Self {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "statico-e2e-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::write(&p, bytes).unwrap();
            TempPath(p)
        }

        pub fn path(&self) -> String {
            self.0.display().to_string()
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

pub use tempfile_path::TempPath;

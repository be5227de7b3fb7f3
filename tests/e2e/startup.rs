//! Start-up: flags are checked before anything listens, errors name the cause and the fix.

use statico_tests::{get, run_to_exit, Reader, Server};

#[test]
fn bad_flag_values_exit_2_naming_the_flag() {
    for (args, flag) in [
        (&["-p", "eighty"][..], "--port"),
        (&["-d", "later"][..], "--delay"),
        (&["-s", "1000"][..], "--status"),
        (&["--runtime", "fibers"][..], "--runtime"),
        (&["-H", "no colon here"][..], "--header"),
    ] {
        let (code, err) = run_to_exit(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?} should name {flag}: {err}");
    }
}

#[test]
fn unreadable_body_file_is_an_error() {
    let (code, err) = run_to_exit(&["-b", "@/definitely/not/here.json"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("/definitely/not/here.json") && err.contains("cannot read"),
        "{err}"
    );
}

#[test]
fn reserved_header_is_refused() {
    let (code, err) = run_to_exit(&["-H", "Content-Length: 5"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("Content-Length") && err.contains("set by statico"),
        "{err}"
    );
}

#[test]
fn port_in_use_fails_the_start() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port().to_string();
    let (code, err) = run_to_exit(&["-a", "127.0.0.1", "-p", &port]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("already in use") && err.contains("-p"),
        "{err}"
    );
}

#[test]
fn second_statico_on_the_same_port_is_refused_not_merged() {
    let first = Server::start(&[]);
    let port = first.addr.port().to_string();
    let (code, err) = run_to_exit(&["-a", "127.0.0.1", "-p", &port]);
    assert_eq!(
        code,
        Some(1),
        "a second server silently shared the port: {err}"
    );
}

#[test]
fn body_file_is_served() {
    let file = crate::clients::TempPath::with_bytes(b"{\"from\":\"file\"}");
    let s = Server::start(&[
        "-b",
        &format!("@{}", file.path()),
        "-H",
        "Content-Type: application/json",
    ]);
    let mut r = Reader::new(s.connect());
    r.send(&get("/"));
    let resp = r.response(false);
    assert_eq!(resp.body, b"{\"from\":\"file\"}");
    assert_eq!(
        resp.header("content-type").as_deref(),
        Some("application/json")
    );
}

#[test]
fn startup_names_steering_and_workers() {
    let s = Server::start(&["-t", "3"]);
    let err = s.stderr();
    assert!(err.contains("with 3 workers"), "{err}");
    let steering = err.lines().filter(|l| l.contains("steering: ")).count();
    assert_eq!(steering, 1, "exactly one steering line: {err}");
}

#[test]
fn help_lists_every_flag() {
    let out = std::process::Command::new(statico_tests::binary())
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--threads",
        "--port",
        "--address",
        "--status",
        "--body",
        "--header",
        "--delay",
        "--body-delay",
        "--meter",
        "--meter-format",
        "--verbose",
        "--runtime",
        "--steering",
        "--receive-buffer-size",
        "--send-buffer-size",
        "--listen-backlog",
        "--tcp-nodelay",
        "--max-head-size",
        "--max-body-size",
        "--header-timeout",
        "--idle-timeout",
        "--shutdown-timeout",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}

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
        "--uring-entries",
        "--uring-sqpoll",
        "--http2",
        "--max-concurrent-streams",
        "--xdp",
        "--user",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}

#[test]
fn listening_line_names_the_runtime_under_test() {
    let s = Server::start(&[]);
    let err = s.stderr();
    let line = err.lines().find(|l| l.contains("listening on")).unwrap();
    assert!(
        line.contains(&format!("runtime: {}", statico_tests::runtime())),
        "{line}"
    );
}

#[test]
fn runtime_aliases_say_what_they_map_to() {
    let s = Server::start(&["--runtime", "glommio"]);
    assert!(
        s.stderr()
            .contains("runtime glommio maps to statico's own io_uring loop"),
        "{}",
        s.stderr()
    );
}

/// A seccomp filter that refuses io_uring_setup (as container runtimes do) must make a forced
/// `--runtime io-uring` fail with the reason, not fall back.
#[cfg(target_os = "linux")]
#[test]
fn io_uring_refused_by_seccomp_fails_the_start_with_the_reason() {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(statico_tests::binary());
    cmd.args(["--runtime", "io-uring", "-a", "127.0.0.1", "-p", "0"]);
    // SAFETY: between fork and exec only async-signal-safe calls (prctl) are made.
    unsafe { cmd.pre_exec(deny_io_uring_setup) };
    let (code, err) = statico_tests::exit_of(cmd);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("io_uring is unavailable")
            && err.contains("seccomp")
            && err.contains("--runtime tokio"),
        "{err}"
    );
}

#[cfg(target_os = "linux")]
fn deny_io_uring_setup() -> std::io::Result<()> {
    const IO_URING_SETUP: u32 = 425; // the same number on every architecture
    let filter = [
        // load the syscall number
        libc::sock_filter {
            code: 0x20,
            jt: 0,
            jf: 0,
            k: 0,
        },
        // if it is io_uring_setup, fall through to EPERM, else skip to ALLOW
        libc::sock_filter {
            code: 0x15,
            jt: 0,
            jf: 1,
            k: IO_URING_SETUP,
        },
        libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        },
        libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut _,
    };
    // SAFETY: prctl with valid arguments; `prog` outlives the call.
    let ok = unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            && libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            ) == 0
    };
    if ok {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(target_os = "linux")]
#[test]
fn io_uring_entries_and_sqpoll_are_honoured() {
    let s = Server::start(&[
        "--runtime",
        "io-uring",
        "--uring-entries",
        "64",
        "--uring-sqpoll",
        "20",
        "-b",
        "sq",
    ]);
    let err = s.stderr();
    let line = err.lines().find(|l| l.contains("listening on")).unwrap();
    assert!(
        line.contains("64 entries") && line.contains("sqpoll"),
        "{line}"
    );
    // More requests than the ring has entries, pipelined, still all answered.
    let mut r = Reader::new(s.connect());
    r.send(&get("/").repeat(200));
    for _ in 0..200 {
        assert_eq!(r.response(false).body, b"sq");
    }
}

#[test]
fn the_manual_documents_every_flag_of_help() {
    let out = std::process::Command::new(statico_tests::binary())
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    // The manual's flag list (docs/flags.md; the README is its front page).
    let manual = std::fs::read_to_string(format!("{root}/docs/flags.md")).unwrap();
    let mut flags: Vec<&str> = help
        .split_whitespace()
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.trim_end_matches([',', '.', ')', ']']))
        .map(|w| w.split(['=', '[', '<']).next().unwrap())
        .collect();
    flags.sort();
    flags.dedup();
    assert!(
        flags.len() > 25,
        "parsed too few flags from --help: {flags:?}"
    );
    for flag in flags {
        if flag == "--help" || flag == "--version" {
            continue;
        }
        // The flag itself, not a longer one it prefixes (--header vs --header-timeout).
        let documented = manual.match_indices(flag).any(|(i, _)| {
            let next = manual[i + flag.len()..].chars().next().unwrap_or(' ');
            !(next.is_ascii_alphanumeric() || next == '-')
        });
        assert!(documented, "docs/flags.md does not document {flag}");
    }
    // --help names the manual's page for each group of flags: each page it names exists.
    let pages: Vec<&str> = help
        .split([' ', ',', '\n'])
        .filter(|w| w.starts_with("docs/") && w.ends_with(".md"))
        .collect();
    assert!(
        pages.len() > 5,
        "--help names too few manual pages: {pages:?}"
    );
    for page in pages {
        assert!(
            std::path::Path::new(&format!("{root}/{page}")).is_file(),
            "--help names {page}, which is not there"
        );
    }
}

#[test]
fn runtime_auto_is_the_default_and_says_what_it_chose_and_why() {
    // io-uring where the kernel allows it (this machine kind does), --http2 or not.
    let s = Server::start(&["--runtime", "auto"]);
    let line = s.stderr();
    assert!(
        line.contains("runtime: io-uring")
            && line.contains("(auto: the kernel has what io_uring needs)"),
        "{line}"
    );
    drop(s);
    let s = Server::start(&["--runtime", "auto", "--http2"]);
    let line = s.stderr();
    assert!(
        line.contains("runtime: io-uring")
            && line.contains("(auto: the kernel has what io_uring needs)")
            && line.contains("HTTP/1.1 and h2c on io-uring"),
        "{line}"
    );
    // Without --runtime at all (the suite's Server adds one, so ask the binary directly).
    let out = std::process::Command::new(statico_tests::binary())
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("[default: auto]"), "{help}");
}

#[test]
fn check_says_what_a_start_would_use_then_exits_without_serving() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let (code, err) = run_to_exit(&[
        "--check",
        "-a",
        "127.0.0.1",
        "-p",
        &port,
        "--listen-backlog",
        "1000000",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("statico: check: OK"), "{err}");
    assert!(
        err.contains(&format!("would listen on http://127.0.0.1:{port}")),
        "{err}"
    );
    assert!(err.contains("statico: check: steering "), "{err}");
    assert!(
        err.contains("advice: --listen-backlog 1000000 is cut to net.core.somaxconn"),
        "{err}"
    );
    // Nothing was left listening, and no BPF pins were left behind.
    std::net::TcpListener::bind(format!("127.0.0.1:{port}")).expect("the port is free again");
    assert!(!std::path::Path::new(&format!("/sys/fs/bpf/statico/{port}")).exists());
    // A port in use fails the check as it would fail a start (1); a bad flag value is the user's (2).
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().port().to_string();
    let (code, err) = run_to_exit(&["--check", "-a", "127.0.0.1", "-p", &taken]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("already in use") && !err.contains("check: OK"),
        "{err}"
    );
    let (code, err) = run_to_exit(&[
        "--check",
        "--tls-cert",
        "/nonexistent.pem",
        "--tls-key",
        "/nonexistent.pem",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--tls-cert"), "{err}");
}

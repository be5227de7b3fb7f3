//! Many connections at once: 10 000 concurrent keep-alive connections each get their answers, in bounded
//! memory, and 10 000 idle HTTP/2 connections cost bounded memory each and all close at the idle
//! timeout; the descriptor limit, the descriptor table grown before connections come, and the io_uring
//! direct-descriptor table that make that possible.

use std::io::Write;
use std::os::unix::process::CommandExt;

use statico_tests::{get, Reader, Server};

#[test]
fn ten_thousand_concurrent_keep_alive_connections() {
    const N: usize = 10_000;
    let _many = statico_tests::many_connections();
    let s = Server::start(&["-b", "many", "--listen-backlog", "16384"]);
    let before = statico_tests::rss_kib(s.pid());
    let mut conns: Vec<Reader> = (0..N).map(|_| Reader::new(s.connect())).collect();
    // Idle connections that have made a request hold no read buffer: about 0.8 KiB each on io_uring,
    // 1.6 KiB on tokio (its task, timer and socket registration too).
    let per_conn_kib = if statico_tests::runtime() == "io-uring" {
        2
    } else {
        3
    };
    for round in 0..2 {
        for c in conns.iter_mut() {
            c.stream.write_all(&get("/")).unwrap();
        }
        for (i, c) in conns.iter_mut().enumerate() {
            let r = c.response(false);
            assert_eq!(
                (r.status, r.body.as_slice()),
                (200, &b"many"[..]),
                "connection {i}, round {round}"
            );
        }
        let idle = statico_tests::rss_kib(s.pid());
        statico_tests::assert_memory!(
            idle < before + (N as u64) * per_conn_kib,
            "{N} idle connections: RSS {before} KiB → {idle} KiB"
        );
    }
    drop(conns);
    let stopped = s.stop();
    assert_eq!(stopped.total("conns_accepted"), N as u64);
    assert_eq!(stopped.total("requests"), 2 * N as u64);
}

/// 10 000 HTTP/2 connections that send the preface and SETTINGS, then nothing: each is served (the
/// server's SETTINGS come), costs `h2`'s state and buffers (about 20 KiB on either runtime), and each
/// gets GOAWAY at `--idle-timeout` and is closed after the 2 s grace, while a request beside them is
/// answered at once.
#[test]
fn ten_thousand_idle_http2_connections_cost_bounded_memory_and_all_close_when_idle() {
    use std::io::Read;
    use std::time::{Duration, Instant};
    const N: usize = 10_000;
    let _many = statico_tests::many_connections();
    let s = Server::start(&[
        "--http2",
        "-b",
        "many",
        "--idle-timeout",
        "5s",
        "--listen-backlog",
        "16384",
    ]);
    let before = statico_tests::rss_kib(s.pid());
    let hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    let opened = Instant::now();
    let mut conns: Vec<std::net::TcpStream> = (0..N)
        .map(|_| {
            let mut c = s.connect();
            c.write_all(hello).unwrap();
            c
        })
        .collect();
    let mut buf = [0u8; 4096];
    for (i, c) in conns.iter_mut().enumerate() {
        c.set_read_timeout(Some(statico_tests::WAIT)).unwrap();
        let n = c.read(&mut buf).unwrap_or(0);
        assert!(
            n >= 9 && buf[3] == 4,
            "connection {i}: no SETTINGS ({n} bytes)"
        );
    }
    let served = opened.elapsed();
    let idle = statico_tests::rss_kib(s.pid());
    let per = idle.saturating_sub(before) / N as u64;
    statico_tests::assert_memory!(
        per < 32,
        "{per} KiB per idle HTTP/2 connection (RSS {before} KiB → {idle} KiB)"
    );
    let (ok, out, err) =
        statico_tests::run_client("curl", &["-sS", "--http2-prior-knowledge", &s.url("/")]);
    assert!(ok && out == "many", "a request beside them: {err}");
    // GOAWAY at 5 s, the close 2 s later: every connection is closed about 7 s after it was
    // opened (the last `served` after the first).
    assert!(
        served < Duration::from_secs(4),
        "opening and serving took {served:?}"
    );
    std::thread::sleep((Duration::from_secs(7) + served).saturating_sub(opened.elapsed()));
    for (i, c) in conns.iter_mut().enumerate() {
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let closed = loop {
            match c.read(&mut buf) {
                Ok(0) | Err(_) => break opened.elapsed(),
                Ok(_) => {} // the GOAWAY, and the PING after it
            }
        };
        assert!(
            closed < Duration::from_secs(9) + served,
            "connection {i} still open {closed:?} after the first was opened"
        );
    }
    drop(conns);
    let stopped = s.stop();
    assert_eq!(stopped.total("conns_accepted"), N as u64 + 1);
    assert_eq!(stopped.total("timeouts"), N as u64);
    eprintln!("{N} idle HTTP/2 connections: {per} KiB each, served in {served:?}");
}

/// 10 000 requests held at once on a route's delay: every one is answered after its delay (not much
/// before, not much after), in memory that stays bounded per held request, and the ground truth
/// counts them all.
#[test]
fn ten_thousand_requests_held_on_a_delay_at_once() {
    const N: usize = 10_000;
    let _many = statico_tests::many_connections();
    let delay = std::time::Duration::from_secs(2);
    let s = Server::start(&[
        "--route",
        "/held delay=2s size=1k",
        "--listen-backlog",
        "16384",
    ]);
    let before = statico_tests::rss_kib(s.pid());
    let mut conns: Vec<Reader> = (0..N).map(|_| Reader::new(s.connect())).collect();
    let sent = std::time::Instant::now();
    for c in conns.iter_mut() {
        c.stream.write_all(&get("/held")).unwrap();
    }
    std::thread::sleep(delay / 2);
    let held = statico_tests::rss_kib(s.pid());
    // Each held answer: its connection (see above) and a copy of its 1 KiB answer and a timer entry.
    let per_conn_kib = if statico_tests::runtime() == "io-uring" {
        4
    } else {
        5
    };
    statico_tests::assert_memory!(
        held < before + (N as u64) * per_conn_kib,
        "{N} held requests: RSS {before} KiB → {held} KiB"
    );
    for (i, c) in conns.iter_mut().enumerate() {
        let r = c.response(false);
        assert_eq!((r.status, r.body.len()), (200, 1024), "connection {i}");
    }
    let all = sent.elapsed();
    assert!(all >= delay, "answered after {all:?}, before the delay");
    assert!(
        all < delay * 3,
        "the last answer came {all:?} after the requests"
    );
    drop(conns);
    let stopped = s.stop();
    assert!(
        stopped
            .stderr
            .contains(&format!("route /held: {N} requests (200 {N}, gone 0)")),
        "{}",
        stopped.stderr
    );
}

/// The open-files soft limit is raised to the hard limit at start-up, so a server started from a shell
/// with the usual soft limit of 1024 still takes thousands of connections.
#[test]
fn soft_fd_limit_is_raised_to_the_hard_limit() {
    let s = Server::start_with(&["-t", "1"], |cmd| {
        // SAFETY: setrlimit is async-signal-safe and touches only the child's own limits.
        unsafe {
            cmd.pre_exec(|| {
                let mut lim = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                lim.rlim_cur = lim.rlim_max.min(256);
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", s.pid())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(fields[3], fields[4], "soft limit = hard limit: {line}");
    assert_ne!(fields[3], "256", "{line}");
    // 400 connections, more than the 256 the server was started with, all served.
    let mut conns: Vec<Reader> = (0..400).map(|_| Reader::new(s.connect())).collect();
    for c in conns.iter_mut() {
        c.stream.write_all(&get("/")).unwrap();
    }
    for c in conns.iter_mut() {
        assert_eq!(c.response(false).status, 200);
    }
}

/// The process's descriptor table is grown to the open-files limit (at most 65 536 slots) at
/// start-up: grown later, by doubling as connections come, each growth would stop the accepting
/// worker for an RCU grace period (tens of milliseconds on a VM) in the middle of a burst.
#[test]
fn descriptor_table_is_grown_before_connections_come() {
    let s = Server::start(&["-t", "1"]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
    let size: u64 = field(&status, "FDSize:").parse().unwrap();
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", s.pid())).unwrap();
    let soft: u64 = field(&limits, "Max open files").parse().unwrap();
    assert!(
        size >= soft.min(65_536),
        "descriptor table of {size} slots, open-files limit {soft}"
    );
}

/// The first number after `label` on its line of a /proc file.
fn field<'a>(text: &'a str, label: &str) -> &'a str {
    let line = text.lines().find(|l| l.starts_with(label)).unwrap();
    line[label.len()..].split_whitespace().next().unwrap()
}

/// With io_uring, connections are accepted as direct descriptors into the ring's registered file table:
/// ring operations skip the per-operation file lookup, and connections use no ordinary descriptor.
#[test]
fn io_uring_connections_are_direct_descriptors() {
    let s = Server::start(&["--runtime", "io-uring", "-t", "1"]);
    assert!(
        s.stderr().contains("direct descriptors, pinned"),
        "{}",
        s.stderr()
    );
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", s.pid()))
            .unwrap()
            .count()
    };
    let before = fds();
    let mut conns: Vec<Reader> = (0..500).map(|_| Reader::new(s.connect())).collect();
    for c in conns.iter_mut() {
        c.stream.write_all(&get("/")).unwrap();
        assert_eq!(c.response(false).status, 200);
    }
    let during = fds();
    assert!(
        during < before + 10,
        "500 open connections added {} descriptors to the process",
        during - before
    );
}

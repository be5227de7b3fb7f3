//! Many connections at once: 10 000 concurrent keep-alive connections each get their answers, in bounded
//! memory; the descriptor limit and the io_uring direct-descriptor table that make that possible.

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

//! Many connections at once: 10 000 concurrent keep-alive connections each get their answers.

use std::io::Write;

use statico_tests::{get, Reader, Server};

#[test]
fn ten_thousand_concurrent_keep_alive_connections() {
    const N: usize = 10_000;
    let s = Server::start(&["-b", "many", "--listen-backlog", "16384"]);
    let mut conns: Vec<Reader> = (0..N).map(|_| Reader::new(s.connect())).collect();
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
    }
    drop(conns);
    let stopped = s.stop();
    assert_eq!(stopped.total("conns_accepted"), N as u64);
    assert_eq!(stopped.total("requests"), 2 * N as u64);
}

//! A real proxy (nginx) in front of a pool: a burst gets 200s and 503s, and the ground truth agrees.

use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use statico_tests::figures::{num, outcome, truth_when};
use statico_tests::scratch_dir;

use super::{at, ms, pool, route, run, start, Answer};

/// nginx started by a test, stopped (by its process id) when dropped.
struct Nginx {
    child: std::process::Child,
    addr: SocketAddr,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx in the foreground, one process, proxying everything to `upstream` (no retries).
fn nginx(name: &str, upstream: SocketAddr) -> Option<Nginx> {
    let bin = ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())?;
    let dir = scratch_dir("pools", name);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let d = dir.to_str().unwrap();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\nerror_log {d}/error.log;\npid {d}/nginx.pid;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n access_log off;\n client_body_temp_path {d}/body;\n proxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fastcgi;\n uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n\
         server {{\n  listen 127.0.0.1:{port};\n  location / {{\n   proxy_pass http://{upstream};\n\
         proxy_next_upstream off;\n  }}\n }}\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let child = std::process::Command::new(bin)
        .args([
            "-p",
            d,
            "-e",
            &format!("{d}/error.log"),
            "-c",
            &format!("{d}/nginx.conf"),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let n = Nginx { child, addr };
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "nginx did not listen: {}",
            std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        );
        thread::sleep(ms(50));
    }
    Some(n)
}

#[test]
fn through_nginx_a_burst_gets_200s_and_503s_and_the_ground_truth_agrees() {
    let s = start(&["/p capacity=2 queue=4 delay=50ms"], &[]);
    let Some(proxy) = nginx("nginx", s.addr) else {
        eprintln!("SKIPPED: nginx is not installed");
        return;
    };
    const N: usize = 20;
    let got = run(proxy.addr, vec![at("/p", ms(0)); N]).1.join().unwrap();
    let ok = got
        .iter()
        .filter(|g| g.answer == Some(Answer::Status(200)))
        .count();
    let shed = got
        .iter()
        .filter(|g| g.answer == Some(Answer::Status(503)))
        .count();
    assert_eq!(ok + shed, N, "only 200s and 503s: {got:?}");
    // The burst reaches statico within a few ms, inside the first 50 ms service: 2 + 4 are served;
    // a request nginx passes on late may find room, so a couple more are allowed.
    assert!((6..=8).contains(&ok), "{ok} of {N} served: {got:?}");
    let t = truth_when(&s, |t| {
        let p = pool(t, "/p");
        num(p, &["served"]) + num(p, &["shed"]) >= N as f64
    });
    let p = pool(&t, "/p");
    let r = route(&t, "/p");
    assert_eq!(
        (num(p, &["served"]) as usize, num(p, &["shed"]) as usize),
        (ok, shed),
        "what the client saw vs the pool: {p}"
    );
    assert_eq!(
        (
            outcome(r, "200") as usize,
            outcome(r, "shed") as usize,
            outcome(r, "gone")
        ),
        (ok, shed, 0),
        "{r}"
    );
    assert!(num(p, &["in_service_max"]) <= 2.0, "{p}");
    drop(proxy);
}

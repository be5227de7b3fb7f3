//! One pool for several routes and protocols: `--pool` with `pool=NAME`, a route's own pool keys,
//! TOML `[[pool]]`, and HTTP/1.1, HTTP/2, TLS and HTTP/3 requests counted in one in-flight limit.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use statico_tests::figures::{num, truth_when};
use statico_tests::{get, scratch_dir, WAIT};

use super::{
    args, assert_waves, at, done_sorted, h2_answer, h2_connect, h2_finish, h2_send, ms, pool,
    read_answer, route, run, start, start_h2, tokio_rt, Answer, Got, MS,
};

#[test]
fn a_named_pool_is_shared_by_its_routes_and_pool_keys_give_a_route_its_own() {
    let s = start(
        &[
            "/a pool=db delay=200ms",
            "/b pool=db delay=200ms",
            "/free delay=200ms",
            "/x capacity=1 delay=200ms",
            "/y capacity=1 delay=200ms",
        ],
        &["--pool", "db capacity=1"],
    );
    let paths = ["/a", "/b", "/free", "/x", "/y"];
    let got = run(s.addr, paths.iter().map(|p| at(p, ms(0))).collect())
        .1
        .join()
        .unwrap();
    assert!(
        got.iter().all(|g| g.answer == Some(Answer::Status(200))),
        "{got:?}"
    );
    // /a and /b take turns on db's one server.
    let ab = done_sorted(&got[..2]);
    assert_waves(&ab, 1, ms(200), ms(100), "/a and /b in pool db");
    // The others each go at once, with the first of /a and /b rather than after it: /free has no
    // pool, /x and /y a pool each.
    for (g, path) in got[2..].iter().zip(&paths[2..]) {
        assert!(
            g.done + MS >= ms(200) && g.done + ms(100) < ab[1],
            "{path} answered after {:?}, /a and /b after {ab:?}",
            g.done
        );
    }
    let t = truth_when(&s, |t| num(pool(t, "db"), &["served"]) >= 2.0);
    let db = pool(&t, "db");
    assert_eq!(
        (
            num(db, &["served"]),
            num(db, &["in_service_max"]),
            num(db, &["queued_max"])
        ),
        (2.0, 1.0, 1.0),
        "{db}"
    );
    for own in ["/x", "/y"] {
        assert_eq!(num(pool(&t, own), &["served"]), 1.0, "{t}");
    }
    let names: Vec<&str> = t["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        !names.contains(&"/free"),
        "a route without a pool: {names:?}"
    );
    assert_eq!(names.len(), 3, "{names:?}");
}

#[test]
fn routes_file_pools_and_route_pool_keys_work_like_the_flags() {
    let dir = scratch_dir("pools", "toml");
    let path = dir.join("routes.toml");
    std::fs::write(
        &path,
        "[[pool]]\nname = \"db\"\ncapacity = 1\nqueue = \"1\"\nshed = \"429\"\n\n\
         [[route]]\npath = \"/a\"\npool = \"db\"\ndelay = \"200ms\"\n\n\
         [[route]]\npath = \"/own\"\ncapacity = \"2\"\nqueue-timeout = \"100ms\"\ndelay = \"300ms\"\n",
    )
    .unwrap();
    let s = start(&[], &["--routes", path.to_str().unwrap()]);
    let mut plans = vec![at("/a", ms(0)); 3];
    plans.extend(vec![at("/own", ms(0)); 3]);
    let got = run(s.addr, plans).1.join().unwrap();
    // db: one served at once, one queued, one shed with 429.
    let a = &got[..3];
    let mut a_ok: Vec<Duration> = a
        .iter()
        .filter(|g| g.answer == Some(Answer::Status(200)))
        .map(|g| g.done)
        .collect();
    a_ok.sort();
    assert_eq!(a_ok.len(), 2, "{a:?}");
    assert_waves(&a_ok, 1, ms(200), ms(100), "/a in db");
    let a_shed: Vec<&Got> = a
        .iter()
        .filter(|g| g.answer != Some(Answer::Status(200)))
        .collect();
    assert_eq!(a_shed[0].answer, Some(Answer::Status(429)), "{a:?}");
    assert!(a_shed[0].done + ms(100) < a_ok[0], "shed at once: {a:?}");
    // /own: two in service at once; the third is shed (503) after waiting 100 ms.
    let own = &got[3..];
    let own_ok: Vec<&Got> = own
        .iter()
        .filter(|g| g.answer == Some(Answer::Status(200)))
        .collect();
    assert_eq!(own_ok.len(), 2, "{own:?}");
    let mut own_done: Vec<Duration> = own_ok.iter().map(|g| g.done).collect();
    own_done.sort();
    assert_waves(&own_done, 2, ms(300), ms(100), "/own, capacity 2");
    let own_shed = own
        .iter()
        .find(|g| g.answer != Some(Answer::Status(200)))
        .unwrap();
    assert_eq!(own_shed.answer, Some(Answer::Status(503)), "{own:?}");
    assert!(
        own_shed.latency() + MS >= ms(100) && own_shed.latency() < ms(250),
        "queue-timeout 100ms: {own:?}"
    );
    let t = truth_when(&s, |t| num(pool(t, "/own"), &["shed"]) >= 1.0);
    let db = pool(&t, "db");
    assert_eq!(
        (
            num(db, &["capacity"]),
            num(db, &["queue"]),
            num(db, &["served"]),
            num(db, &["shed"])
        ),
        (1.0, 1.0, 2.0, 1.0),
        "{db}"
    );
    let own = pool(&t, "/own");
    assert_eq!(
        (
            num(own, &["capacity"]),
            num(own, &["served"]),
            num(own, &["shed"])
        ),
        (2.0, 2.0, 1.0),
        "{own}"
    );
}

#[test]
fn http1_and_http2_requests_share_one_pool_and_one_in_flight_count() {
    let s = start_h2(
        &["/p capacity=2 delay=200ms", "/i delay=inflight:20ms:20ms"],
        &["-t", "2"],
    );
    let addr = s.addr;
    // Three HTTP/1.1 requests and three HTTP/2 streams at once: one pool of two, so three waves.
    let both = |path: &'static str| {
        tokio_rt().block_on(async move {
            let (client, _conn) = h2_connect(addr, false).await;
            let (t0, h1) = run(addr, vec![at(path, ms(0)); 3]);
            let mut streams = Vec::new();
            for _ in 0..3 {
                let resp = h2_send(&client, path).await;
                streams.push(tokio::spawn(async move {
                    (h2_finish(resp).await, t0.elapsed())
                }));
            }
            let mut h2 = Vec::new();
            for st in streams {
                h2.push(st.await.unwrap());
            }
            (h1.join().unwrap(), h2)
        })
    };
    let (h1, h2) = both("/p");
    assert!(
        h1.iter().all(|g| g.answer == Some(Answer::Status(200))),
        "{h1:?}"
    );
    assert!(h2.iter().all(|(r, _)| matches!(r, Ok(200))), "{h2:?}");
    let mut done: Vec<Duration> = h1
        .iter()
        .map(|g| g.done)
        .chain(h2.iter().map(|(_, d)| *d))
        .collect();
    done.sort();
    assert_waves(
        &done,
        2,
        ms(200),
        ms(120),
        "3 HTTP/1.1 + 3 HTTP/2 in capacity=2",
    );
    let t = truth_when(&s, |t| num(pool(t, "/p"), &["served"]) >= 6.0);
    let p = pool(&t, "/p");
    assert_eq!(
        (num(p, &["served"]), num(p, &["in_service_max"])),
        (6.0, 2.0),
        "{p}"
    );

    // inflight:20ms:20ms with six in flight over both protocols: the last drawn sees six (140 ms).
    // At least five of the six must be drawn before the first is answered (40 ms) — a count per
    // protocol would stop at 80 ms.
    let (h1, h2) = both("/i");
    assert!(
        h1.iter().all(|g| g.answer == Some(Answer::Status(200))),
        "{h1:?}"
    );
    assert!(h2.iter().all(|(r, _)| matches!(r, Ok(200))), "{h2:?}");
    let t = truth_when(&s, |t| num(route(t, "/i"), &["count"]) >= 6.0);
    let i = route(&t, "/i");
    let max = num(i, &["drawn_us", "max"]);
    assert!(
        (119_500.0..=140_200.0).contains(&max),
        "drawn max {max} µs: {i}"
    );
}

#[test]
fn http2_streams_past_the_queue_get_503_or_a_stream_reset_and_the_connection_goes_on() {
    let s = start_h2(
        &[
            "/s capacity=1 queue=1 delay=300ms header=X-Pool:yes",
            "/r capacity=1 queue=1 delay=300ms shed=reset",
            "/ok body=ok",
        ],
        &[],
    );
    let addr = s.addr;
    tokio_rt().block_on(async move {
        let (client, _conn) = h2_connect(addr, false).await;
        for path in ["/s", "/r"] {
            let t0 = Instant::now();
            let mut streams = Vec::new();
            for _ in 0..3 {
                let resp = h2_send(&client, path).await;
                streams.push(tokio::spawn(async move {
                    (h2_answer(resp).await, t0.elapsed())
                }));
            }
            let mut out = Vec::new();
            for st in streams {
                out.push(st.await.unwrap());
            }
            let ok = out
                .iter()
                .filter(|(r, _)| matches!(r, Ok((200, _))))
                .count();
            assert_eq!(ok, 2, "{path}: one in service, one queued: {out:?}");
            let (shed, at) = out
                .iter()
                .find(|(r, _)| !matches!(r, Ok((200, _))))
                .unwrap();
            let first_ok = out
                .iter()
                .filter(|(r, _)| matches!(r, Ok((200, _))))
                .map(|(_, at)| *at)
                .min()
                .unwrap();
            assert!(
                *at + ms(150) < first_ok,
                "{path}: shed after {at:?}, the first served after {first_ok:?}"
            );
            match (path, shed) {
                ("/s", Ok((503, headers))) => {
                    assert_eq!(headers.get("x-pool").unwrap(), "yes");
                    assert_eq!(headers.get("content-length").unwrap(), "0");
                }
                ("/r", Err(e)) if e.is_reset() => {}
                _ => panic!("{path}: shed as {shed:?}"),
            }
        }
        // Only streams were refused: the connection still answers.
        assert_eq!(h2_finish(h2_send(&client, "/ok").await).await.unwrap(), 200);
    });
    let t = truth_when(&s, |t| num(pool(t, "/r"), &["shed"]) >= 1.0);
    for name in ["/s", "/r"] {
        let p = pool(&t, name);
        assert_eq!((num(p, &["served"]), num(p, &["shed"])), (2.0, 1.0), "{p}");
    }
}

#[cfg(target_os = "linux")]
#[test]
fn http1_over_tls_and_http3_requests_share_one_pool() {
    let dir = crate::http3::scratch("pools-mixed");
    let s = crate::http3::start(&dir, &args(&["/p capacity=2 delay=200ms"], &[]));
    let addr = s.addr;
    // Two HTTP/1.1-over-TLS clients (rustls, handshaken before the start) and four HTTP/3 streams.
    let config = tls_client(&dir);
    let mut tls: Vec<_> = (0..2).map(|_| tls_connect(&config, addr)).collect();
    let barrier = Arc::new(Barrier::new(3));
    let rt = crate::http3::runtime();
    let (conn, send) = rt.block_on(crate::http3::connect(&dir, addr));
    let t0 = Instant::now();
    let h1: Vec<_> = tls
        .drain(..)
        .map(|mut stream| {
            let barrier = barrier.clone();
            thread::spawn(move || {
                barrier.wait();
                stream.write_all(&get("/p")).unwrap();
                let (answer, _) = read_answer(&mut stream);
                (answer, t0.elapsed())
            })
        })
        .collect();
    barrier.wait();
    let h3: Vec<(u16, Duration)> = rt.block_on(async move {
        let mut streams = tokio::task::JoinSet::new();
        for _ in 0..4 {
            let mut send = send.clone();
            streams.spawn(async move {
                let (head, _) = crate::http3::request(&mut send, "GET", "/p").await;
                (head.status().as_u16(), t0.elapsed())
            });
        }
        let out = streams.join_all().await;
        conn.close(0u32.into(), b"done");
        out
    });
    let h1: Vec<(Answer, Duration)> = h1.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(h1.iter().all(|(a, _)| *a == Answer::Status(200)), "{h1:?}");
    assert!(h3.iter().all(|(st, _)| *st == 200), "{h3:?}");
    let mut done: Vec<Duration> = h1
        .iter()
        .map(|x| x.1)
        .chain(h3.iter().map(|x| x.1))
        .collect();
    done.sort();
    // Six in a pool of two: three waves, whichever protocol each came by.
    assert_waves(
        &done,
        2,
        ms(200),
        ms(150),
        "2 HTTPS + 4 HTTP/3 in capacity=2",
    );
    let t = truth_when(&s, |t| num(pool(t, "/p"), &["served"]) >= 6.0);
    let p = pool(&t, "/p");
    assert_eq!(
        (num(p, &["served"]), num(p, &["in_service_max"])),
        (6.0, 2.0),
        "{p}"
    );
}

/// A rustls client configuration trusting `dir/cert.pem`, offering HTTP/1.1.
#[cfg(target_os = "linux")]
fn tls_client(dir: &std::path::Path) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(dir.join("cert.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(tls)
}

/// A TLS connection to `addr`, its handshake done.
#[cfg(target_os = "linux")]
fn tls_connect(
    config: &Arc<rustls::ClientConfig>,
    addr: SocketAddr,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    tcp.set_nodelay(true).unwrap();
    let mut conn =
        rustls::ClientConnection::new(config.clone(), "localhost".try_into().unwrap()).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).expect("TLS handshake");
    }
    rustls::StreamOwned::new(conn, tcp)
}

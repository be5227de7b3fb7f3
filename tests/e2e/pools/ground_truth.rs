//! What a pool reports: the ground truth (`wait_us`, `drawn_us`, `held_us`, outcomes `shed` and
//! `gone`, `"pools"`), the Prometheus gauges and wait histogram, and the exit lines.

use statico_tests::figures::{num, outcome, series, truth_when};

use super::{at, gauges_seen, ms, pool, route, run, start, Answer};

#[test]
fn ground_truth_metrics_and_exit_lines_show_waits_services_holds_and_sheds() {
    let s = start(
        &["/p capacity=1 delay=300ms", "/q pool=q delay=300ms"],
        &["--pool", "q capacity=1 queue=1 shed=429"],
    );
    let mut plans = vec![at("/p", ms(0)); 3];
    plans.extend(vec![at("/q", ms(0)); 3]);
    let (t0, h) = run(s.addr, plans);
    // While the first of each is in service (until about 300 ms): /p has 2 waiting, /q 1 (its
    // third was shed).
    gauges_seen(
        &s,
        &[
            ("statico_pool_in_service{pool=\"/p\"}", 1.0),
            ("statico_pool_queued{pool=\"/p\"}", 2.0),
            ("statico_pool_in_service{pool=\"q\"}", 1.0),
            ("statico_pool_queued{pool=\"q\"}", 1.0),
        ],
        t0 + ms(20),
        t0 + ms(600),
    );
    let got = h.join().unwrap();
    let p_answers: Vec<_> = got[..3].iter().map(|g| g.answer).collect();
    assert!(
        p_answers.iter().all(|a| *a == Some(Answer::Status(200))),
        "{got:?}"
    );
    let mut q: Vec<_> = got[3..].iter().map(|g| g.answer.unwrap()).collect();
    q.sort_by_key(|a| format!("{a:?}"));
    assert_eq!(
        q,
        [
            Answer::Status(200),
            Answer::Status(200),
            Answer::Status(429)
        ],
        "{got:?}"
    );

    let t = truth_when(&s, |t| num(pool(t, "/p"), &["served"]) >= 3.0);
    let p = route(&t, "/p");
    // Waits of about 0, 300 and 600 ms; each drew 300 ms; each held wait + service.
    assert_eq!(num(p, &["wait_us", "count"]), 3.0, "{p}");
    let drawn = num(p, &["drawn_us", "mean"]);
    assert!((299_500.0..=300_500.0).contains(&drawn), "{p}");
    let wait = num(p, &["wait_us", "mean"]);
    assert!(
        (290_000.0..=340_000.0).contains(&wait),
        "wait mean {wait}: {p}"
    );
    assert!(num(p, &["wait_us", "max"]) >= 590_000.0, "{p}");
    let held = num(p, &["held_us", "mean"]);
    assert!(
        held >= wait + drawn - 100.0 && held <= wait + drawn + 5_000.0,
        "held mean {held} is not wait {wait} + service {drawn}: {p}"
    );
    let pq = pool(&t, "q");
    assert_eq!(
        (
            num(pq, &["served"]),
            num(pq, &["shed"]),
            num(pq, &["queued_max"])
        ),
        (2.0, 1.0, 1.0),
        "{pq}"
    );
    assert_eq!(outcome(route(&t, "/q"), "shed"), 1, "{t}");
    assert_eq!(outcome(route(&t, "/q"), "gone"), 0, "{t}");

    let after = s.scrape("/metrics");
    for (name, want) in [
        ("statico_pool_in_service{pool=\"/p\"}", 0.0),
        ("statico_pool_queued{pool=\"/p\"}", 0.0),
        ("statico_route_wait_seconds_count{route=\"/p\"}", 3.0),
        (
            "statico_route_wait_seconds_bucket{route=\"/p\",le=\"+Inf\"}",
            3.0,
        ),
    ] {
        assert_eq!(series(&after, name), Some(want), "{name}:\n{after}");
    }
    // The histogram's content: one wait under 250 ms (the first), all three under 1 s.
    let buckets: Vec<(f64, f64)> = after
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("statico_route_wait_seconds_bucket{route=\"/p\",le=\"")?;
            let (le, count) = rest.split_once("\"} ")?;
            Some((le.parse().ok()?, count.trim().parse().ok()?))
        })
        .collect();
    let at_most = |x: f64| {
        buckets
            .iter()
            .filter(|(le, _)| *le <= x)
            .map(|b| b.1)
            .fold(0.0, f64::max)
    };
    assert!(buckets.len() > 3, "wait buckets:\n{after}");
    assert_eq!(at_most(0.25), 1.0, "waits up to 250 ms: {buckets:?}");
    let sum = series(&after, "statico_route_wait_seconds_sum{route=\"/p\"}").unwrap();
    assert!((0.87..=1.02).contains(&sum), "wait sum {sum} s");

    let stopped = s.stop();
    for line in [
        "statico: pool /p: capacity 1, queue unbounded: served 3, shed 0, in service max 1, queued max 2",
        "statico: pool q: capacity 1, queue 1: served 2, shed 1, in service max 1, queued max 1",
    ] {
        assert!(stopped.stderr.lines().any(|l| l == line), "no {line:?} in\n{}", stopped.stderr);
    }
}

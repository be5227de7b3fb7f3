//! `delay=inflight:BASE:PER`: the delay is BASE alone, and grows by PER with each request in flight.

use statico_tests::figures::{num, truth, truth_when};

use super::{burst, done_sorted, ms, route, start, Answer, MS};

#[test]
fn inflight_delay_is_base_alone_and_grows_with_the_requests_in_flight() {
    let s = start(&["/i delay=inflight:20ms:20ms"], &["-t", "2"]);
    // Alone: 20 ms + 20 ms × 1.
    let alone = burst(&s, "/i", 1);
    assert_eq!(alone[0].answer, Some(Answer::Status(200)));
    assert!(
        alone[0].done + MS >= ms(40) && alone[0].done < ms(240),
        "alone: {:?}",
        alone[0].done
    );
    let t = truth_when(&s, |t| num(route(t, "/i"), &["count"]) >= 1.0);
    let drawn = num(route(&t, "/i"), &["drawn_us", "max"]);
    assert!(
        (39_900.0..=40_100.0).contains(&drawn),
        "alone drew {drawn} µs"
    );

    // N at once: the k-th drawn sees k in flight, 20 + 20·k ms; the largest is 20 + 20·N when all N
    // are drawn before the first is answered (40 ms after it came; sends take a few ms). One
    // straggler is allowed for: at least N - 1 together.
    for n in [5usize, 10] {
        let before = num(route(&truth(&s), "/i"), &["count"]);
        let got = burst(&s, "/i", n);
        assert!(
            got.iter().all(|g| g.answer == Some(Answer::Status(200))),
            "{got:?}"
        );
        let t = truth_when(&s, |t| num(route(t, "/i"), &["count"]) >= before + n as f64);
        let i = route(&t, "/i");
        let max = num(i, &["drawn_us", "max"]);
        let top = 20_000.0 + 20_000.0 * n as f64;
        assert!(
            (top - 20_000.0 - 100.0..=top + 100.0).contains(&max),
            "{n} at once: drawn max {max} µs, want {top}: {i}"
        );
        // The client waited for the largest draw.
        let last = *done_sorted(&got).last().unwrap();
        assert!(
            last.as_secs_f64() * 1e6 + 1000.0 >= top - 20_000.0,
            "{n} at once: the last answered after {last:?}"
        );
    }
}

//! The `echo` oracle: a request's query string as `--echo-query` reads it (Fortio's `status`,
//! `delay`, `size`, `close`, `header`), against `--max-delay 10s --max-size 16m`. Never a panic;
//! a refusal is one line; what is accepted never exceeds the limits: every delay at most 10 s, every
//! size at most 16 MiB, fractions in 0..=1 summing to at most 1, statuses in 100..=999, headers
//! that are valid fields. The answer drawn from it (`Echo::choose`, four draws) holds no longer
//! than 10 s, says a `Content-Length` of at most 16 MiB, and its head is one HTTP/1.1 head: no bare
//! line feed, no blank line before its end (no response splitting through `header=`).
//!
//! Shared by the fuzz target (`fuzz_targets/echo.rs`) and the corpus replay
//! (`tests/fuzz_corpus.rs`), which include this file with `#[path]`.

use std::sync::OnceLock;
use std::time::Duration;

use statico::catalog::echo::Echo;
use statico::catalog::response::{Framing, DATE_LEN};
use statico::catalog::route::fortio::{parse_query, Limits};
use statico::catalog::route::generator;

const LIMITS: Limits = Limits {
    max_delay: Duration::from_secs(10),
    max_size: 16 << 20,
};

/// Made once: `Echo::new` generates its `--max-size` body.
fn echo() -> &'static Echo {
    static ECHO: OnceLock<Echo> = OnceLock::new();
    ECHO.get_or_init(|| Echo::new(LIMITS, &[]))
}

pub fn check(query: &[u8]) {
    match parse_query(query, &LIMITS) {
        Err(e) => assert!(!e.contains('\n'), "refused in more than one line: {e:?}"),
        Ok(None) => {}
        Ok(Some(o)) => {
            let fractions = |f: &mut dyn Iterator<Item = f64>| {
                let mut sum = 0.0;
                for p in f {
                    assert!((0.0..=1.0).contains(&p), "fraction {p} in {o:?}");
                    sum += p;
                }
                // Fortio rounds the running percentage to 4 decimals before comparing with 100.
                assert!(sum <= 1.0 + 1e-6, "fractions sum to {sum} in {o:?}");
            };
            fractions(&mut o.status.iter().map(|s| s.1));
            fractions(&mut o.delay.iter().map(|s| s.1));
            fractions(&mut o.size.iter().map(|s| s.1));
            assert!(o.status.iter().all(|s| (100..=999).contains(&s.0)), "{o:?}");
            assert!(o.delay.iter().all(|d| d.0 <= LIMITS.max_delay), "{o:?}");
            assert!(o.size.iter().all(|s| s.0 <= LIMITS.max_size), "{o:?}");
            assert!((0.0..=1.0).contains(&o.close), "{o:?}");
            for (name, value) in &o.headers {
                assert!(
                    !name.is_empty() && !name.contains([':', ' ', '\r', '\n']),
                    "{o:?}"
                );
                assert!(!value.chars().any(|c| c.is_control() && c != '\t'), "{o:?}");
            }
        }
    }
    let mut target = b"/echo?".to_vec();
    target.extend_from_slice(query);
    let mut draw = generator(Some(query.len() as u64), 0);
    for _ in 0..4 {
        let Some(choice) = echo().choose(&target, &mut draw) else {
            return;
        };
        assert!(choice.hold.delay <= LIMITS.max_delay, "{choice:?}");
        let mut head = Vec::new();
        let date = [b'D'; DATE_LEN];
        echo().write(&choice, Framing::KeepAlive, true, &date, &mut head);
        let text = String::from_utf8(head).expect("the head is UTF-8");
        let end = text.find("\r\n\r\n").expect("the head ends");
        assert_eq!(
            end + 4,
            text.len(),
            "a blank line inside the head: {text:?}"
        );
        assert!(
            !text.replace("\r\n", "").contains(['\r', '\n']),
            "a bare CR or LF in the head: {text:?}"
        );
        let length: u64 = (text.split("\r\n"))
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .expect("a Content-Length")
            .parse()
            .expect("a number");
        assert!(length <= LIMITS.max_size, "{text:?}");
        assert_eq!(text.matches("\r\nContent-Length:").count(), 1, "{text:?}");
        if length <= 4096 {
            let mut whole = Vec::new();
            echo().write(&choice, Framing::KeepAlive, false, &date, &mut whole);
            assert_eq!(whole.len() as u64, text.len() as u64 + length, "{text:?}");
        }
    }
}

//! Fortio-compatible per-request overrides, read from a request's query string.
//!
//! Fortio's echo server (`fortio server`; `fhttp/http_server.go` and `fhttp/http_utils.go` in
//! fortio.org/fortio) lets each request ask for its own response: `?status=503:10,429:5`,
//! `?delay=5ms:50,100ms:1`, `?size=1024:50`, `?close=5`, `?header=X-A:b`. Load tests and client
//! test suites written against Fortio use these, so statico answers them the same way; this
//! module parses them ([`parse_query`]) and makes Fortio's draws ([`Overrides::draw_status`] and
//! friends).
//!
//! Fortio's semantics, as its source has them:
//!
//! - `status`, `delay`, `size` take either one value (every response) or `VALUE:PERCENT,...`
//!   pairs, the percentages without a `%` sign (one is tolerated), fractional allowed, each in
//!   0..=100 and summing to at most 100. Each argument gets one uniform draw per request, walked
//!   through the cumulative percentages; a draw past the last entry gets the default: the route's
//!   status, no delay, the route's own body.
//! - `delay` is a Go duration (`time.ParseDuration`: `5ms`, `1.5s`, `1m30s`), read in
//!   [`DurationSyntax::Go`].
//! - `size` is a plain byte count (`1024`; Fortio has no `k` suffix, and its own unit for
//!   `-maxpayloadsizekb` is 1024 bytes). Statico also takes `1k`/`1m` here, 1024-based like every
//!   size it reads.
//! - `close` is a probability in percent: `close=5` closes after about 5% of responses, so
//!   `close=1` is 1% (older Fortio closed whenever `close` had any value); `close=true` always
//!   closes, `close=false` never.
//! - `header=Name:Value` may be repeated; each adds a response header.
//! - Only the first `status`, `delay`, `size` and `close` count (Go's `Form.Get`); empty values
//!   count as absent; unknown arguments are ignored.
//!
//! Where statico differs, it is stricter: Fortio caps a delay at `-max-echo-delay` and a size at
//! `-maxpayloadsizekb` and ignores (or, for `status`, answers 400 to) what it cannot parse;
//! statico refuses both with an error naming the argument, for the caller to report.
//!
//! Nothing here is allocated in proportion to a value: a size is a number, and the server slices
//! its body from a shared buffer.

use std::borrow::Cow;
use std::time::Duration;

use percent_encoding::percent_decode;
use rand::{Rng, RngExt};

use super::spec::parse_header;
use crate::catalog::model::units::{
    duration_problem, format_duration, format_size, parse_size, DurationSyntax,
};

/// The most a query may ask for: the server's `--max-delay` and `--max-size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest `delay=` accepted.
    pub max_delay: Duration,
    /// The largest `size=` accepted, in bytes.
    pub max_size: u64,
}

/// What one request's query asked for. Fractions are 0..=1; an empty table (or `close` of 0)
/// means the argument was not given.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    /// Statuses and the fraction of responses each gets; the rest get the route's status.
    pub status: Vec<(u16, f64)>,
    /// Delays before responding and the fraction each applies to; the rest get none.
    pub delay: Vec<(Duration, f64)>,
    /// Body sizes in bytes and the fraction each applies to; the rest get the route's body.
    pub size: Vec<(u64, f64)>,
    /// The probability of closing the connection after the response.
    pub close: f64,
    /// Extra response headers, in order.
    pub headers: Vec<(String, String)>,
}

impl Overrides {
    /// The status for this response: a draw from `status`, else `base`.
    pub fn draw_status<R: Rng + ?Sized>(&self, rng: &mut R, base: u16) -> u16 {
        pick(&self.status, rng).unwrap_or(base)
    }

    /// The delay before this response: a draw from `delay`, else zero.
    pub fn draw_delay<R: Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        pick(&self.delay, rng).unwrap_or(Duration::ZERO)
    }

    /// The body size for this response: a draw from `size`, else `None` (the route's body).
    pub fn draw_size<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<u64> {
        pick(&self.size, rng)
    }

    /// Whether to close the connection after this response.
    pub fn draw_close<R: Rng + ?Sized>(&self, rng: &mut R) -> bool {
        self.close > 0.0 && rng.random::<f64>() < self.close
    }
}

/// One uniform draw walked through the cumulative fractions, as Fortio does; `None` when the
/// table is empty (no draw made) or the draw falls past its end.
fn pick<T: Copy, R: Rng + ?Sized>(table: &[(T, f64)], rng: &mut R) -> Option<T> {
    if table.is_empty() {
        return None;
    }
    let roll = rng.random::<f64>();
    let mut cumulative = 0.0;
    table.iter().find_map(|&(value, fraction)| {
        cumulative += fraction;
        (roll < cumulative).then_some(value)
    })
}

/// The query arguments this module knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arg {
    Status,
    Delay,
    Size,
    Close,
    Header,
}

impl Arg {
    const ALL: [Arg; 5] = [Arg::Status, Arg::Delay, Arg::Size, Arg::Close, Arg::Header];

    fn name(self) -> &'static str {
        match self {
            Arg::Status => "status",
            Arg::Delay => "delay",
            Arg::Size => "size",
            Arg::Close => "close",
            Arg::Header => "header",
        }
    }
}

/// Parses a request's query string (with or without its leading `?`): `None` when it has none
/// of Fortio's arguments (`status`, `delay`, `size`, `close`, `header`) with a value. Values are
/// percent-decoded (`+` is a space). A bad value, or one beyond `limits`, is an error naming
/// the argument.
pub fn parse_query(query: &[u8], limits: &Limits) -> Result<Option<Overrides>, String> {
    let query = query.strip_prefix(b"?").unwrap_or(query);
    let mut overrides = Overrides::default();
    let mut seen: Vec<Arg> = Vec::new();
    for pair in query.split(|&b| b == b'&') {
        let (name, value) = match pair.iter().position(|&b| b == b'=') {
            Some(at) => (&pair[..at], &pair[at + 1..]),
            None => (pair, &b""[..]),
        };
        let name: Cow<'_, [u8]> = percent_decode(name).into();
        let Some(arg) = Arg::ALL.into_iter().find(|a| a.name().as_bytes() == &*name) else {
            continue;
        };
        let value = decode(value).map_err(|why| format!("{} {why}", arg.name()))?;
        if value.is_empty() || (arg != Arg::Header && seen.contains(&arg)) {
            continue;
        }
        seen.push(arg);
        apply(&mut overrides, arg, &value, limits)?;
    }
    Ok((!seen.is_empty()).then_some(overrides))
}

/// Parses one argument's value into `overrides`.
fn apply(overrides: &mut Overrides, arg: Arg, value: &str, limits: &Limits) -> Result<(), String> {
    match arg {
        Arg::Status => overrides.status = weighted("status", value, parse_status)?,
        Arg::Delay => {
            let table = weighted("delay", value, |v| {
                duration_problem(v, DurationSyntax::Go).map_err(|why| format!("{v:?} {why}"))
            })?;
            if let Some(delay) = beyond(&table, limits.max_delay) {
                let (delay, max) = (format_duration(delay), format_duration(limits.max_delay));
                return Err(format!("delay {delay} is beyond --max-delay {max}"));
            }
            overrides.delay = table;
        }
        Arg::Size => {
            let table = weighted("size", value, |v| {
                parse_size(v).map_err(|_| format!("{v:?} is not a byte count"))
            })?;
            if let Some(size) = beyond(&table, limits.max_size) {
                let (size, max) = (format_size(size), format_size(limits.max_size));
                return Err(format!("size {size} is beyond --max-size {max}"));
            }
            overrides.size = table;
        }
        Arg::Close => overrides.close = parse_close(value)?,
        Arg::Header => overrides
            .headers
            .push(parse_header(value).map_err(|e| format!("header {e}"))?),
    }
    Ok(())
}

/// A query value percent-decoded, `+` as a space, as Go's `url.ParseQuery` does; borrowed
/// when there is nothing to decode.
fn decode(raw: &[u8]) -> Result<Cow<'_, str>, &'static str> {
    let decoded: Cow<'_, [u8]> = if raw.contains(&b'+') {
        let spaced: Vec<u8> = raw
            .iter()
            .map(|&b| if b == b'+' { b' ' } else { b })
            .collect();
        Cow::Owned(percent_decode(&spaced).collect())
    } else {
        percent_decode(raw).into()
    };
    match decoded {
        Cow::Borrowed(bytes) => std::str::from_utf8(bytes)
            .map(Cow::Borrowed)
            .map_err(|_| "is not UTF-8"),
        Cow::Owned(bytes) => String::from_utf8(bytes)
            .map(Cow::Owned)
            .map_err(|_| "is not UTF-8"),
    }
}

/// The first value in `table` above `limit`.
fn beyond<T: PartialOrd + Copy>(table: &[(T, f64)], limit: T) -> Option<T> {
    table
        .iter()
        .map(|&(value, _)| value)
        .find(|&value| value > limit)
}

/// Fortio's `VALUE` (every response) or `VALUE:PERCENT,...` list, with `parse_one` for each value.
fn weighted<T>(
    arg: &str,
    value: &str,
    parse_one: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<(T, f64)>, String> {
    let bad =
        |why: String| format!("{arg} {value:?}: {why}; expected {arg}=VALUE or VALUE:PERCENT,...");
    if !value.contains([',', ':']) {
        return Ok(vec![(parse_one(value).map_err(bad)?, 1.0)]);
    }
    let mut total = 0.0;
    let mut table = Vec::new();
    for entry in value.split(',') {
        let Some((one, percent)) = entry.split_once(':').filter(|(_, p)| !p.contains(':')) else {
            return Err(bad(format!("{entry:?} is not VALUE:PERCENT")));
        };
        let percent = parse_fortio_percent(percent).map_err(bad)?;
        total += percent;
        // Fortio rounds the running total to 4 decimals before comparing it with 100.
        if (total * 1e4).round() / 1e4 > 100.0 {
            return Err(bad(format!("the percentages add up to {total}, over 100")));
        }
        table.push((parse_one(one).map_err(bad)?, percent / 100.0));
    }
    Ok(table)
}

/// A Fortio percentage: a number in 0..=100, an optional trailing `%`.
fn parse_fortio_percent(s: &str) -> Result<f64, String> {
    match s.strip_suffix('%').unwrap_or(s).parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!("{s:?} is not a percentage in 0..=100")),
    }
}

/// A status code in 100..=999.
fn parse_status(s: &str) -> Result<u16, String> {
    match s.parse::<u16>() {
        Ok(code) if (100..=999).contains(&code) => Ok(code),
        _ => Err(format!("{s:?} is not a status in 100..=999")),
    }
}

/// `close`: `true` (always), `false` (never), or a percentage (an optional trailing `%`).
fn parse_close(value: &str) -> Result<f64, String> {
    match value {
        "true" => Ok(1.0),
        "false" => Ok(0.0),
        _ => parse_fortio_percent(value)
            .map(|p| p / 100.0)
            .map_err(|why| format!("close {why}; expected close=true, false or PERCENT")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    const LIMITS: Limits = Limits {
        max_delay: Duration::from_secs(10),
        max_size: 16 << 20,
    };

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn parse(q: &str) -> Overrides {
        parse_query(q.as_bytes(), &LIMITS)
            .unwrap_or_else(|e| panic!("{q}: {e}"))
            .expect(q)
    }

    fn parse_err(q: &str) -> String {
        parse_query(q.as_bytes(), &LIMITS).expect_err(q)
    }

    #[test]
    fn nothing_known_is_none() {
        for q in [
            "",
            "?",
            "a=1&b=2",
            "status=",
            "?delay=&size=",
            "gzip=true",
            "Status=503",
        ] {
            assert_eq!(parse_query(q.as_bytes(), &LIMITS), Ok(None), "{q}");
        }
    }

    #[test]
    fn status_arg() {
        assert_eq!(parse("status=503").status, [(503, 1.0)]);
        assert_eq!(
            parse("?status=503:10,429:5").status,
            [(503, 0.1), (429, 0.05)]
        );
        assert_eq!(parse("status=503:0.5%25").status, [(503, 0.005)]);
        assert_eq!(parse("status=404&status=500").status, [(404, 1.0)]);
        assert_eq!(parse("x=1&status=503&y").status, [(503, 1.0)]);
        assert!(parse_err("status=abc").starts_with("status \"abc\": \"abc\" is not a status"));
        assert!(parse_err("status=42").contains("\"42\" is not a status in 100..=999"));
        assert!(parse_err("status=503,404").contains("\"503\" is not VALUE:PERCENT"));
        assert!(parse_err("status=503:1:2").contains("\"503:1:2\" is not VALUE:PERCENT"));
        assert!(parse_err("status=503:x").contains("\"x\" is not a percentage in 0..=100"));
        assert!(parse_err("status=503:101").contains("\"101\" is not a percentage"));
        assert!(
            parse_err("status=503:60,429:50").contains("the percentages add up to 110, over 100")
        );
        assert_eq!(parse("status=503:60,429:40").status.len(), 2);
    }

    #[test]
    fn delay_arg() {
        assert_eq!(parse("delay=5ms").delay, [(ms(5), 1.0)]);
        assert_eq!(
            parse("delay=5ms:50,100ms:1").delay,
            [(ms(5), 0.5), (ms(100), 0.01)]
        );
        assert_eq!(parse("delay=1.5s").delay, [(ms(1500), 1.0)]);
        assert_eq!(
            parse("delay=100us").delay,
            [(Duration::from_micros(100), 1.0)]
        );
        assert_eq!(
            parse("delay=100%C2%B5s").delay,
            [(Duration::from_micros(100), 1.0)]
        );
        assert_eq!(parse("delay=0").delay, [(Duration::ZERO, 1.0)]);
        assert_eq!(parse("delay=1s500ms").delay, [(ms(1500), 1.0)]);
        assert!(parse_err("delay=5").contains("delay \"5\": \"5\" has no unit"));
        assert!(parse_err("delay=5d").contains("\"5d\" has an unknown unit"));
        assert!(parse_err("delay=-5ms").contains("\"-5ms\" is negative"));
        assert!(parse_err("delay=ms").contains("\"ms\" is not a number"));
    }

    #[test]
    fn size_arg() {
        assert_eq!(parse("size=1024").size, [(1024, 1.0)]);
        assert_eq!(parse("size=1k").size, [(1024, 1.0)]);
        assert_eq!(
            parse("size=1024:50,2048:20").size,
            [(1024, 0.5), (2048, 0.2)]
        );
        assert_eq!(parse("size=0").size, [(0, 1.0)]);
        assert_eq!(parse("size=16m").size, [(16 << 20, 1.0)]);
        assert_eq!(
            parse_err("size=abc"),
            "size \"abc\": \"abc\" is not a byte count; expected size=VALUE or VALUE:PERCENT,..."
        );
        assert!(parse_err("size=-1").contains("\"-1\" is not a byte count"));
    }

    #[test]
    fn close_arg() {
        assert_eq!(parse("close=true").close, 1.0);
        assert_eq!(parse("close=false").close, 0.0);
        assert_eq!(parse("close=5").close, 0.05);
        assert_eq!(parse("close=1").close, 0.01);
        assert_eq!(parse("close=100%25").close, 1.0);
        assert!(parse_err("close=yes").contains("close \"yes\" is not a percentage"));
        assert!(parse_err("close=150").contains("\"150\" is not a percentage in 0..=100"));
    }

    #[test]
    fn header_arg() {
        let o = parse("header=X-A:b&header=&header=Cache-Control:+no-store&header=X-B%3A%20c%20d");
        let want = [("X-A", "b"), ("Cache-Control", "no-store"), ("X-B", "c d")];
        let got: Vec<_> = o
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        assert_eq!(got, want);
        assert!(parse_err("header=X-A").contains("header \"X-A\": no colon"));
        assert!(parse_err("header=X%20A:b").contains("\"X A\" is not a header name"));
        assert!(parse_err("header=X:a%0Db").contains("control character"));
        assert!(parse_err("header=X:%FF").contains("header is not UTF-8"));
    }

    #[test]
    fn limits() {
        assert_eq!(
            parse_err("delay=20s"),
            "delay 20s is beyond --max-delay 10s"
        );
        assert!(parse_err("delay=1ms:10,11s:10").contains("delay 11s is beyond --max-delay 10s"));
        assert_eq!(parse("delay=10s").delay, [(Duration::from_secs(10), 1.0)]);
        assert_eq!(parse_err("size=32m"), "size 32m is beyond --max-size 16m");
        assert_eq!(
            parse_err("size=16777217"),
            "size 16777217 is beyond --max-size 16m"
        );
        assert!(parse_err("size=1:50,99999999999:1").contains("is beyond --max-size"));
    }

    /// How often each outcome comes up in 100 000 draws from `SmallRng::seed_from_u64(1)`.
    fn frequencies<T: PartialEq + Copy>(
        draw: impl Fn(&mut SmallRng) -> T,
        outcomes: &[T],
    ) -> Vec<f64> {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut counts = vec![0u32; outcomes.len()];
        for _ in 0..100_000 {
            let got = draw(&mut rng);
            let i = outcomes
                .iter()
                .position(|o| *o == got)
                .expect("an expected outcome");
            counts[i] += 1;
        }
        counts
            .into_iter()
            .map(|c| f64::from(c) / 100_000.0)
            .collect()
    }

    /// Each frequency within 0.005 (five standard errors at worst) of what was asked for.
    fn assert_close(got: &[f64], want: &[f64]) {
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 0.005, "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn draw_frequencies() {
        let o = parse("status=503:10,429:5&delay=5ms:50,100ms:1&size=1024:50,2048:20&close=5");
        let f = frequencies(|r| o.draw_status(r, 200), &[503, 429, 200]);
        assert_close(&f, &[0.10, 0.05, 0.85]);
        let f = frequencies(|r| o.draw_delay(r), &[ms(5), ms(100), Duration::ZERO]);
        assert_close(&f, &[0.50, 0.01, 0.49]);
        let f = frequencies(|r| o.draw_size(r), &[Some(1024), Some(2048), None]);
        assert_close(&f, &[0.50, 0.20, 0.30]);
        let f = frequencies(|r| o.draw_close(r), &[true, false]);
        assert_close(&f, &[0.05, 0.95]);
    }

    #[test]
    fn draws_without_arguments_are_defaults() {
        let o = parse("header=X:y");
        let mut rng = SmallRng::seed_from_u64(1);
        assert_eq!(o.draw_status(&mut rng, 204), 204);
        assert_eq!(o.draw_delay(&mut rng), Duration::ZERO);
        assert_eq!(o.draw_size(&mut rng), None);
        assert!(!o.draw_close(&mut rng));
        let o = parse("status=503&close=true");
        assert!((0..1000).all(|_| o.draw_status(&mut rng, 200) == 503 && o.draw_close(&mut rng)));
    }
}

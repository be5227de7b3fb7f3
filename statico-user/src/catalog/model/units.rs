//! The units values are written in — durations, byte counts, percentages — with one parser and one
//! printer each, so that a value reads the same in a route's keys ([`crate::catalog::route::spec`],
//! [`super::dist`], [`crate::catalog::route::pool_spec`]), a window's ([`super::schedule`]) and
//! Fortio's query arguments ([`crate::catalog::route::fortio`]), and prints back as it reads. Fortio's
//! `?delay=` is written in Go's duration syntax, a superset of statico's: one parser reads both
//! ([`DurationSyntax`]). Every error is one line naming the value and the expected form.

use std::time::Duration;

/// Parses a duration in statico's syntax ([`DurationSyntax::Statico`]): a decimal number and a
/// unit — `ns`, `us` (or `µs`), `ms`, `s` — like `10ms`, `1.5s`, `250us`; a bare `0` is zero.
/// Fractions finer than a nanosecond are dropped.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    duration_problem(s, DurationSyntax::Statico).map_err(|why| {
        format!(
            "{s:?} {why}; expected a duration like 10ms, 1.5s, 250us or 0 (units ns, us, ms, s)"
        )
    })
}

/// The two ways a duration is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DurationSyntax {
    /// statico's, in every flag and TOML key: one decimal number and its unit (`ns`, `us` or
    /// `µs`, `ms`, `s`), or a bare `0`; at most `u64::MAX` nanoseconds.
    Statico,
    /// Go's `time.ParseDuration`, which Fortio's `?delay=` takes: an optional `+`, one or more
    /// numbers with units (`1m30s`; also `μs`, `m`, `h`), a bare `0` or `-0`; at most
    /// `i64::MAX` nanoseconds (about 292 years).
    Go,
}

impl DurationSyntax {
    /// A unit's length in nanoseconds, if the syntax has the unit.
    fn unit_nanos(self, unit: &str) -> Option<u64> {
        use DurationSyntax::Go;
        match (unit, self) {
            ("ns", _) => Some(1),
            ("us" | "µs", _) | ("μs", Go) => Some(1_000),
            ("ms", _) => Some(1_000_000),
            ("s", _) => Some(1_000_000_000),
            ("m", Go) => Some(60_000_000_000),
            ("h", Go) => Some(3_600_000_000_000),
            _ => None,
        }
    }

    /// The longest duration the syntax reads, in nanoseconds.
    fn most_nanos(self) -> u64 {
        match self {
            DurationSyntax::Statico => u64::MAX,
            DurationSyntax::Go => i64::MAX as u64,
        }
    }
}

/// A duration written in `syntax`, or its problem as a phrase that fits after the value
/// (`is negative`, `has no unit`, …).
pub(crate) fn duration_problem(s: &str, syntax: DurationSyntax) -> Result<Duration, &'static str> {
    let go = syntax == DurationSyntax::Go;
    let s = if go {
        s.strip_prefix('+').unwrap_or(s)
    } else {
        s
    };
    if s == "0" || (go && s == "-0") {
        return Ok(Duration::ZERO);
    }
    if s.starts_with('-') {
        return Err("is negative");
    }
    if go && s.is_empty() {
        return Err("is not a duration");
    }
    let mut total: u64 = 0;
    let mut rest = s;
    loop {
        let (number, after) = split_number(rest);
        let (unit, next) = match syntax {
            DurationSyntax::Statico => (after, ""),
            DurationSyntax::Go => after.split_at(
                after
                    .find(|c: char| c.is_ascii_digit() || c == '.')
                    .unwrap_or(after.len()),
            ),
        };
        // statico names a missing number before the unit; Go, the unit first.
        if !go && number.is_empty() {
            return Err("is not a number");
        }
        let scale = match unit {
            "" => return Err("has no unit"),
            unit => syntax.unit_nanos(unit).ok_or("has an unknown unit")?,
        };
        let part = scale_decimal(number, scale)?;
        total = (total.checked_add(part))
            .filter(|&t| t <= syntax.most_nanos())
            .ok_or("is too large")?;
        rest = next;
        if rest.is_empty() {
            return Ok(Duration::from_nanos(total));
        }
    }
}

/// Prints a duration the way [`parse_duration`] reads it, in the largest unit it reaches:
/// `10ms`, `1.5s`, `250us`, `0`.
pub fn format_duration(d: Duration) -> String {
    const UNITS: [(u128, usize, &str); 4] = [
        (1_000_000_000, 9, "s"),
        (1_000_000, 6, "ms"),
        (1_000, 3, "us"),
        (1, 0, "ns"),
    ];
    let n = d.as_nanos();
    if n == 0 {
        return "0".to_owned();
    }
    let (scale, digits, unit) = UNITS
        .into_iter()
        .find(|&(scale, ..)| n >= scale)
        .unwrap_or(UNITS[3]);
    let (whole, frac) = (n / scale, n % scale);
    if frac == 0 {
        format!("{whole}{unit}")
    } else {
        let frac = format!("{frac:0digits$}");
        format!("{whole}.{}{unit}", frac.trim_end_matches('0'))
    }
}

/// Parses a byte count: a number with an optional 1024-based unit — `k`, `m`, `g`, also written
/// `kb`/`kib` and so on, in either case — like `512`, `64k` (65536), `1M`, `1.5k` (1536).
pub fn parse_size(s: &str) -> Result<u64, String> {
    size_problem(s).map_err(|why| format!("{s:?} {why}; expected a size like 512, 64k, 1m or 1g"))
}

/// [`parse_size`], with the problem as a phrase that fits after the value.
fn size_problem(s: &str) -> Result<u64, &'static str> {
    let (number, unit) = split_number(s);
    let scale = match unit.to_ascii_lowercase().as_str() {
        _ if number.is_empty() => return Err("is not a number"),
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err("has an unknown unit"),
    };
    scale_decimal(number, scale)
}

/// Prints a byte count the way [`parse_size`] reads it, in the largest unit that divides it:
/// `64k`, `1m`, `1000`.
pub fn format_size(n: u64) -> String {
    match [(1 << 30, "g"), (1 << 20, "m"), (1 << 10, "k")]
        .into_iter()
        .find(|&(unit, _)| n != 0 && n.is_multiple_of(unit))
    {
        Some((unit, suffix)) => format!("{}{suffix}", n / unit),
        None => n.to_string(),
    }
}

/// Parses a percentage, which must carry its `%` sign and lie in `0..=100`, as a fraction:
/// `10%` is 0.1, `0.1%` is 0.001.
pub fn parse_percent(s: &str) -> Result<f64, String> {
    let problem = match s.strip_suffix('%').map(str::parse::<f64>) {
        None => "has no % sign",
        Some(Ok(p)) if (0.0..=100.0).contains(&p) => return Ok(p / 100.0),
        Some(Ok(p)) if p.is_finite() => "is not within 0%..=100%",
        Some(_) => "is not a number",
    };
    Err(format!(
        "{s:?} {problem}; expected a percentage like 10% or 0.5%"
    ))
}

/// Splits `1.5ms` into its decimal number `1.5` and the rest, `ms`.
fn split_number(s: &str) -> (&str, &str) {
    s.split_at(
        s.find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len()),
    )
}

/// `number × scale` exactly, for a decimal `number` like `1.5` (digits, at most one `.`, at
/// least one digit), rounded down to a whole unit.
fn scale_decimal(number: &str, scale: u64) -> Result<u64, &'static str> {
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.len() + frac.len() == 0 || !digits_only(whole) || !digits_only(frac) {
        return Err("is not a number");
    }
    let mut value: u128 = 0;
    for b in whole.bytes() {
        value = value * 10 + u128::from(b - b'0');
        if value > u128::from(u64::MAX) {
            return Err("is too large");
        }
    }
    let (mut numerator, mut denominator) = (0u128, 1u128);
    // 19 fractional digits are finer than a base unit for any scale below 10^19 (an hour is
    // 3.6·10^12 ns, a gigabyte 2^30 bytes).
    for b in frac.bytes().take(19) {
        numerator = numerator * 10 + u128::from(b - b'0');
        denominator *= 10;
    }
    let total = value * u128::from(scale) + numerator * u128::from(scale) / denominator;
    u64::try_from(total).map_err(|_| "is too large")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10ms"), Ok(ms(10)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("250µs"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("100ns"), Ok(Duration::from_nanos(100)));
        assert_eq!(parse_duration("2s"), Ok(ms(2000)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration(".5ms"), Ok(Duration::from_micros(500)));
        assert_eq!(parse_duration("0.0000000015s"), Ok(Duration::from_nanos(1)));
        for (bad, why) in [
            ("10", "has no unit"),
            ("5m", "has an unknown unit"),
            ("ms", "is not a number"),
            ("", "is not a number"),
            ("1.2.3s", "is not a number"),
            ("-1s", "is negative"),
            ("99999999999999999999s", "is too large"),
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert!(
                e.starts_with(&format!("{bad:?} {why}; expected a duration like")),
                "{e}"
            );
        }
        assert_eq!(
            format_duration(Duration::from_nanos(1_234_567)),
            "1.234567ms"
        );
        assert_eq!(format_duration(Duration::from_nanos(999)), "999ns");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("64kb"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1m"), Ok(1_048_576));
        assert_eq!(parse_size("1M"), Ok(1_048_576));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("1.5k"), Ok(1536));
        assert_eq!(parse_size("0"), Ok(0));
        assert!(parse_size("1x")
            .unwrap_err()
            .contains("\"1x\" has an unknown unit"));
        assert!(parse_size("k").unwrap_err().contains("is not a number"));
        assert!(parse_size("-1k").unwrap_err().contains("is not a number"));
        assert!(parse_size("99999999999g")
            .unwrap_err()
            .contains("is too large"));
        assert_eq!(format_size(65536), "64k");
        assert_eq!(format_size(1 << 20), "1m");
        assert_eq!(format_size(1000), "1000");
        assert_eq!(format_size(0), "0");
    }

    #[test]
    fn percents() {
        assert_eq!(parse_percent("10%"), Ok(0.1));
        assert!((parse_percent("0.1%").unwrap() - 0.001).abs() < 1e-15);
        assert_eq!(parse_percent("100%"), Ok(1.0));
        assert_eq!(parse_percent("0%"), Ok(0.0));
        assert!(parse_percent("10")
            .unwrap_err()
            .contains("\"10\" has no % sign"));
        assert!(parse_percent("101%")
            .unwrap_err()
            .contains("is not within 0%..=100%"));
        assert!(parse_percent("-1%").unwrap_err().contains("is not within"));
        assert!(parse_percent("x%").unwrap_err().contains("is not a number"));
        assert!(parse_percent("NaN%")
            .unwrap_err()
            .contains("is not a number"));
    }

    #[test]
    fn go_durations() {
        let go = |s| duration_problem(s, DurationSyntax::Go);
        assert_eq!(go("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(go("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(go(".5s"), Ok(ms(500)));
        assert_eq!(go("1μs"), Ok(Duration::from_micros(1)));
        assert_eq!(go("100µs"), Ok(Duration::from_micros(100)));
        assert_eq!(go("+5ms"), Ok(ms(5)));
        assert_eq!(go("-0"), Ok(Duration::ZERO));
        assert_eq!(go("3000000h"), Err("is too large"));
        assert_eq!(go(""), Err("is not a duration"));
        assert_eq!(go("5"), Err("has no unit"));
        assert_eq!(go("5d"), Err("has an unknown unit"));
        assert_eq!(go("abc"), Err("has an unknown unit"));
        assert_eq!(go("-5ms"), Err("is negative"));
        assert_eq!(go("ms"), Err("is not a number"));
        // statico's syntax has none of Go's extras.
        for s in ["1m30s", "1h", "1μs", "+5ms", "-0", "5m"] {
            assert!(duration_problem(s, DurationSyntax::Statico).is_err(), "{s}");
        }
        assert_eq!(
            duration_problem("abc", DurationSyntax::Statico),
            Err("is not a number")
        );
    }
}

//! Latency distributions for routes.
//!
//! A route's `delay=` and `body-delay=` say how long the server waits, and a fixed wait is rarely
//! what a benchmark of a client, proxy or load generator needs: real services answer with a
//! spread of latencies and a long tail. [`Dist`] is that spread, written compactly on the command
//! line (`lognormal:10ms:80ms`, `pct:50=5ms,99=100ms,100=1s`, …), drawn cheaply per request
//! ([`Dist::sample`], no allocation), and stated exactly ([`Dist::quantile`]) so tests and
//! benchmarks can compare what the server did with what was asked for. Its durations are read and
//! printed as every duration is ([`crate::catalog::model::units`]). Every error is one line naming the bad
//! part and the expected form.

use std::fmt;
use std::time::Duration;

use rand::{Rng, RngExt};
use rand_distr::{Distribution, Exp1, StandardNormal};

use crate::catalog::model::units::{
    duration_problem, format_duration, parse_duration, DurationSyntax,
};

/// The standard normal quantile at 0.99: a log-normal's p99 is `exp(mu + Z99 * sigma)`.
const Z99: f64 = 2.326_347_874_0;

/// The forms [`Dist::parse`] accepts, for the "unknown distribution" error.
const FORMS: &str = "10ms, uniform:LOW:HIGH, exp:MEAN, normal:MEAN:SD, lognormal:P50:P99, \
                     pareto:SCALE:SHAPE, pct:P=D,..., inflight:BASE:PER";

/// How long something takes: one fixed value or a random draw from a distribution.
///
/// Durations are whole nanoseconds; draws that would be negative are zero, and draws beyond
/// what a [`Duration`] holds are [`Duration::MAX`].
#[derive(Clone, Debug, PartialEq)]
pub enum Dist {
    /// Always this long: `10ms`.
    Fixed(Duration),
    /// Evenly spread between `low` and `high`, both included: `uniform:5ms:15ms`.
    Uniform { low: Duration, high: Duration },
    /// Exponential (memoryless) with this mean: `exp:10ms`.
    Exp { mean: Duration },
    /// Normal with this mean and standard deviation, draws below zero clamped to zero:
    /// `normal:10ms:2ms`.
    Normal { mean: Duration, sd: Duration },
    /// Log-normal given by its median and 99th percentile: `lognormal:10ms:80ms`
    /// (`mu = ln(p50)`, `sigma = ln(p99 / p50) / 2.3263478740`).
    LogNormal { p50: Duration, p99: Duration },
    /// Pareto (power-law tail) with this minimum and shape: `pareto:5ms:1.5`. A shape at or
    /// below 1 has no finite mean, at or below 2 no finite variance.
    Pareto { scale: Duration, shape: f64 },
    /// Empirical: percentile points `(P in 0..=100, duration)`, linear between them:
    /// `pct:50=5ms,90=20ms,99=100ms,100=1s`. The points always start at percentile 0 (an
    /// implicit `0=0` is added when the spec does not give one) and end at 100.
    Pct(Vec<(f64, Duration)>),
    /// Load-dependent (Nighthawk's linear model, done exactly): BASE + PER × the route's requests
    /// in flight when it is drawn, itself included, across every worker and protocol:
    /// `inflight:1ms:500us`. A delay is drawn when the request is held ([`super::load`]), a
    /// stream's wait when it is due ([`Dist::sample_at`]).
    InFlight { base: Duration, per: Duration },
}

impl Dist {
    /// Parses the spec form: `10ms`, `uniform:LOW:HIGH`, `exp:MEAN`, `normal:MEAN:SD`,
    /// `lognormal:P50:P99`, `pareto:SCALE:SHAPE` or `pct:P=D,...` (see the variants).
    pub fn parse(s: &str) -> Result<Dist, String> {
        let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
        match kind {
            "uniform" => parse_uniform(s, rest),
            "exp" => {
                let [mean] = fields(s, rest, "exp:MEAN")?;
                let mean = field_duration(s, "exp:MEAN", "mean", mean)?;
                Ok(Dist::Exp { mean })
            }
            "normal" => {
                let [mean, sd] = fields(s, rest, "normal:MEAN:SD")?;
                let mean = field_duration(s, "normal:MEAN:SD", "mean", mean)?;
                let sd = field_duration(s, "normal:MEAN:SD", "sd", sd)?;
                Ok(Dist::Normal { mean, sd })
            }
            "lognormal" => parse_lognormal(s, rest),
            "pareto" => parse_pareto(s, rest),
            "pct" => parse_pct(s, rest),
            "inflight" => {
                const FORM: &str = "inflight:BASE:PER";
                let [base, per] = fields(s, rest, FORM)?;
                let base = field_duration(s, FORM, "base", base)?;
                let per = field_duration(s, FORM, "per", per)?;
                Ok(Dist::InFlight { base, per })
            }
            _ if !s.contains(':') && s.starts_with(|c: char| c.is_ascii_digit() || c == '-') => {
                parse_duration(s).map(Dist::Fixed)
            }
            _ => Err(format!(
                "{s:?}: unknown distribution; expected one of {FORMS}"
            )),
        }
    }

    /// One draw. Cheap enough for every request: no allocation, a few floating-point operations
    /// (the exponential and normal draws are `rand_distr`'s ziggurat samplers, [`Exp1`] and
    /// [`StandardNormal`], scaled and shifted here).
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        match self {
            Dist::Fixed(d) => *d,
            Dist::Uniform { low, high } => {
                Duration::from_nanos(rng.random_range(nanos(*low)..=nanos(*high)))
            }
            Dist::Exp { mean } => {
                let e: f64 = Exp1.sample(rng);
                secs(mean.as_secs_f64() * e)
            }
            Dist::Normal { mean, sd } => {
                let z: f64 = StandardNormal.sample(rng);
                secs(shifted(mean.as_secs_f64(), sd.as_secs_f64(), z))
            }
            Dist::LogNormal { p50, p99 } => {
                let (mu, sigma) = log_normal_params(*p50, *p99);
                let z: f64 = StandardNormal.sample(rng);
                secs(shifted(mu, sigma, z).exp())
            }
            // Inverse transform: scale · U^(-1/shape) = scale · exp(E / shape), E ~ Exp(1).
            Dist::Pareto { scale, shape } => {
                let e: f64 = Exp1.sample(rng);
                secs(scale.as_secs_f64() * (e / shape).exp())
            }
            Dist::Pct(points) => interpolate(points, rng.random::<f64>()),
            Dist::InFlight { base, .. } => *base,
        }
    }

    /// One draw when `in_flight` of its route's requests are in flight: `inflight:BASE:PER` is
    /// BASE + PER × `in_flight`, every other distribution its [`Dist::sample`].
    pub fn sample_at<R: Rng + ?Sized>(&self, rng: &mut R, in_flight: u64) -> Duration {
        match self {
            Dist::InFlight { base, per } => in_flight_wait(*base, *per, in_flight),
            other => other.sample(rng),
        }
    }

    /// For `inflight:BASE:PER`: BASE and PER (the draw needs the count in flight).
    pub fn in_flight(&self) -> Option<(Duration, Duration)> {
        match self {
            Dist::InFlight { base, per } => Some((*base, *per)),
            _ => None,
        }
    }

    /// The distribution's quantile (inverse CDF) at `p` in `0..=1` (clamped), from its stated
    /// parameters rather than from draws: the ground truth a measured latency is compared with.
    /// Unbounded distributions give [`Duration::MAX`] at `p = 1`.
    pub fn quantile(&self, p: f64) -> Duration {
        let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
        match self {
            Dist::Fixed(d) => *d,
            Dist::Uniform { low, high } => *low + (*high - *low).mul_f64(p),
            Dist::Exp { mean } => secs(-mean.as_secs_f64() * (-p).ln_1p()),
            Dist::Normal { mean, sd } => {
                let z = inverse_normal_cdf(p);
                secs(shifted(mean.as_secs_f64(), sd.as_secs_f64(), z))
            }
            Dist::LogNormal { p50, p99 } => {
                let (mu, sigma) = log_normal_params(*p50, *p99);
                secs(shifted(mu, sigma, inverse_normal_cdf(p)).exp())
            }
            Dist::Pareto { scale, shape } => {
                secs(scale.as_secs_f64() * (1.0 - p).powf(-1.0 / shape))
            }
            Dist::Pct(points) => interpolate(points, p),
            // From one in flight to a hundred: where the buckets are fine.
            Dist::InFlight { base, per } => *base + per.mul_f64(1.0 + 99.0 * p),
        }
    }

    /// The longest possible draw for the bounded distributions (`Fixed`, `Uniform`, `Pct`);
    /// `None` for the others, whose tails have no bound.
    pub fn max(&self) -> Option<Duration> {
        match self {
            Dist::Fixed(d) => Some(*d),
            Dist::Uniform { high, .. } => Some(*high),
            Dist::Pct(points) => points.last().map(|&(_, d)| d),
            Dist::Exp { .. } | Dist::Normal { .. } | Dist::LogNormal { .. } => None,
            Dist::Pareto { .. } | Dist::InFlight { .. } => None,
        }
    }
}

/// `inflight:BASE:PER` with `in_flight` requests in flight: BASE + PER × `in_flight`.
pub(super) fn in_flight_wait(base: Duration, per: Duration, in_flight: u64) -> Duration {
    base.saturating_add(per.saturating_mul(u32::try_from(in_flight).unwrap_or(u32::MAX)))
}

/// Prints the spec form, which [`Dist::parse`] reads back to an equal value.
impl fmt::Display for Dist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = |d: &Duration| format_duration(*d);
        match self {
            Dist::Fixed(v) => write!(f, "{}", d(v)),
            Dist::Uniform { low, high } => write!(f, "uniform:{}:{}", d(low), d(high)),
            Dist::Exp { mean } => write!(f, "exp:{}", d(mean)),
            Dist::Normal { mean, sd } => write!(f, "normal:{}:{}", d(mean), d(sd)),
            Dist::LogNormal { p50, p99 } => write!(f, "lognormal:{}:{}", d(p50), d(p99)),
            Dist::Pareto { scale, shape } => write!(f, "pareto:{}:{shape}", d(scale)),
            Dist::InFlight { base, per } => write!(f, "inflight:{}:{}", d(base), d(per)),
            Dist::Pct(points) => {
                f.write_str("pct:")?;
                for (i, (p, v)) in points.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "," };
                    write!(f, "{sep}{p}={}", d(v))?;
                }
                Ok(())
            }
        }
    }
}

/// `uniform:LOW:HIGH`, with `LOW <= HIGH`.
fn parse_uniform(spec: &str, rest: &str) -> Result<Dist, String> {
    const FORM: &str = "uniform:LOW:HIGH";
    let [low_s, high_s] = fields(spec, rest, FORM)?;
    let low = field_duration(spec, FORM, "low", low_s)?;
    let high = field_duration(spec, FORM, "high", high_s)?;
    if high < low {
        return Err(format!(
            "{spec:?}: high ({high_s}) is below low ({low_s}); expected {FORM}"
        ));
    }
    Ok(Dist::Uniform { low, high })
}

/// `lognormal:P50:P99`, with `0 < P50 <= P99`.
fn parse_lognormal(spec: &str, rest: &str) -> Result<Dist, String> {
    const FORM: &str = "lognormal:P50:P99";
    let [p50_s, p99_s] = fields(spec, rest, FORM)?;
    let p50 = field_duration(spec, FORM, "p50", p50_s)?;
    let p99 = field_duration(spec, FORM, "p99", p99_s)?;
    if p50.is_zero() {
        return Err(format!("{spec:?}: p50 must be above 0; expected {FORM}"));
    }
    if p99 < p50 {
        return Err(format!(
            "{spec:?}: p99 ({p99_s}) is below p50 ({p50_s}); expected {FORM}"
        ));
    }
    Ok(Dist::LogNormal { p50, p99 })
}

/// `pareto:SCALE:SHAPE`, with `SCALE > 0` and a finite `SHAPE > 0`.
fn parse_pareto(spec: &str, rest: &str) -> Result<Dist, String> {
    const FORM: &str = "pareto:SCALE:SHAPE";
    let [scale_s, shape_s] = fields(spec, rest, FORM)?;
    let scale = field_duration(spec, FORM, "scale", scale_s)?;
    if scale.is_zero() {
        return Err(format!("{spec:?}: scale must be above 0; expected {FORM}"));
    }
    match shape_s.parse::<f64>() {
        Ok(shape) if shape.is_finite() && shape > 0.0 => Ok(Dist::Pareto { scale, shape }),
        Ok(_) => Err(format!(
            "{spec:?}: shape ({shape_s}) must be above 0; expected {FORM}"
        )),
        Err(_) => Err(format!(
            "{spec:?}: shape {shape_s:?} is not a number; expected {FORM}"
        )),
    }
}

/// `pct:P=D,...`: percentiles strictly increasing within `0..=100`, the last one 100, durations
/// never decreasing; an implicit `0=0` first point unless the spec gives percentile 0.
fn parse_pct(spec: &str, rest: &str) -> Result<Dist, String> {
    const FORM: &str = "pct:P=D,... like pct:50=5ms,99=100ms,100=1s";
    let mut points: Vec<(f64, Duration)> = Vec::new();
    for entry in rest.split(',') {
        let Some((p_s, d_s)) = entry.split_once('=') else {
            return Err(format!("{spec:?}: {entry:?} is not P=D; expected {FORM}"));
        };
        let p = match p_s.parse::<f64>() {
            Ok(p) if (0.0..=100.0).contains(&p) => p,
            _ => {
                return Err(format!(
                    "{spec:?}: percentile {p_s:?} is not a number in 0..=100; expected {FORM}"
                ));
            }
        };
        let d = field_duration(spec, FORM, &format!("the value at {p_s}"), d_s)?;
        if let Some(&(last_p, last_d)) = points.last() {
            if p <= last_p {
                return Err(format!(
                    "{spec:?}: percentiles out of order ({p_s} after {last_p}); expected {FORM}"
                ));
            }
            if d < last_d {
                return Err(format!(
                    "{spec:?}: values decrease ({d_s} at {p_s} is below {} at {last_p}); \
                     expected {FORM}",
                    format_duration(last_d)
                ));
            }
        }
        points.push((p, d));
    }
    if points.last().is_some_and(|&(p, _)| p != 100.0) {
        return Err(format!(
            "{spec:?}: the last percentile must be 100; expected {FORM}"
        ));
    }
    if points.first().is_some_and(|&(p, _)| p != 0.0) {
        points.insert(0, (0.0, Duration::ZERO));
    }
    Ok(Dist::Pct(points))
}

/// Splits a distribution's parameters at `:` into exactly `N` fields.
fn fields<'a, const N: usize>(
    spec: &str,
    rest: &'a str,
    form: &str,
) -> Result<[&'a str; N], String> {
    let mut out = [""; N];
    let mut parts = rest.split(':');
    for slot in &mut out {
        *slot = parts.next().unwrap_or_default();
    }
    if rest.is_empty() || parts.next().is_some() || out.contains(&"") {
        return Err(format!("{spec:?}: expected {form}"));
    }
    Ok(out)
}

/// A distribution parameter that is a duration; the error names the parameter.
fn field_duration(spec: &str, form: &str, name: &str, value: &str) -> Result<Duration, String> {
    duration_problem(value, DurationSyntax::Statico)
        .map_err(|why| format!("{spec:?}: {name} {value:?} {why}; expected {form}"))
}

/// The percentile points' value at `q` in `0..=1`, linear between the points.
fn interpolate(points: &[(f64, Duration)], q: f64) -> Duration {
    let x = q * 100.0;
    let i = points.partition_point(|&(p, _)| p < x);
    match (i.checked_sub(1).and_then(|j| points.get(j)), points.get(i)) {
        (Some(&(p0, d0)), Some(&(p1, d1))) => d0 + (d1 - d0).mul_f64((x - p0) / (p1 - p0)),
        (None, Some(&(_, d))) | (Some(&(_, d)), None) => d,
        (None, None) => Duration::ZERO,
    }
}

/// A log-normal's `(mu, sigma)`, in log-seconds, from its median and 99th percentile.
fn log_normal_params(p50: Duration, p99: Duration) -> (f64, f64) {
    log_normal_of(p50.as_secs_f64(), p99.as_secs_f64())
}

/// A log-normal's `(mu, sigma)` from its median and 99th percentile (durations in seconds, or
/// counts).
pub fn log_normal_of(p50: f64, p99: f64) -> (f64, f64) {
    (p50.ln(), (p99 / p50).ln() / Z99)
}

/// `mean + sd · z`, which is `mean` when `sd` is zero (even for an infinite `z`).
fn shifted(mean: f64, sd: f64, z: f64) -> f64 {
    if sd == 0.0 {
        mean
    } else {
        mean + sd * z
    }
}

/// Seconds as a [`Duration`]: negative or NaN is zero, too large is [`Duration::MAX`].
fn secs(s: f64) -> Duration {
    if s.is_nan() || s <= 0.0 {
        Duration::ZERO
    } else {
        Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
    }
}

/// A duration's nanoseconds, saturating at `u64::MAX` (about 584 years).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The standard normal quantile: Acklam's rational approximation (relative error below
/// 1.15e-9), plenty for latency percentiles.
fn inverse_normal_cdf(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 6] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
        1.0,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 5] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
        1.0,
    ];
    const P_LOW: f64 = 0.02425;
    let tail = |q: f64| {
        let r = (-2.0 * q.ln()).sqrt();
        horner(&C, r) / horner(&D, r)
    };
    match p {
        _ if p <= 0.0 => f64::NEG_INFINITY,
        _ if p >= 1.0 => f64::INFINITY,
        _ if p < P_LOW => tail(p),
        _ if p > 1.0 - P_LOW => -tail(1.0 - p),
        _ => {
            let q = p - 0.5;
            q * horner(&A, q * q) / horner(&B, q * q)
        }
    }
}

/// A polynomial with coefficients from the highest power down, at `x`.
fn horner(coefficients: &[f64], x: f64) -> f64 {
    coefficients.iter().fold(0.0, |acc, c| acc * x + c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// 100 000 draws from `SmallRng::seed_from_u64(1)`, sorted.
    fn draws(d: &Dist) -> Vec<Duration> {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut v: Vec<Duration> = (0..100_000).map(|_| d.sample(&mut rng)).collect();
        v.sort_unstable();
        v
    }

    /// Checks the empirical p50, p90 and p99 of 100 000 draws against [`Dist::quantile`],
    /// each within `tolerance` (relative).
    fn check_quantiles(spec: &str, tolerance: [f64; 3]) {
        let d = Dist::parse(spec).unwrap();
        let v = draws(&d);
        for (p, tol) in [0.5, 0.9, 0.99].into_iter().zip(tolerance) {
            let got = v[(p * v.len() as f64) as usize].as_secs_f64();
            let want = d.quantile(p).as_secs_f64();
            let err = (got - want).abs() / want;
            assert!(
                err <= tol,
                "{spec} p{}: drew {got}, quantile {want}, error {err}",
                p * 100.0
            );
        }
    }

    // Tolerances: the sampling error of an empirical quantile over 100 000 draws is well under
    // 1% at p50/p90 for all of these; at p99 it is about 1% for the log-normal and shape-3 Pareto
    // and about 2% for the shape-1.5 Pareto's heavier tail, hence its wider bound.
    #[test]
    fn fixed_draws() {
        check_quantiles("10ms", [0.0, 0.0, 0.0]);
    }

    #[test]
    fn uniform_draws() {
        check_quantiles("uniform:5ms:15ms", [0.02, 0.02, 0.02]);
    }

    #[test]
    fn exp_draws() {
        check_quantiles("exp:10ms", [0.02, 0.02, 0.03]);
    }

    #[test]
    fn normal_draws() {
        check_quantiles("normal:10ms:2ms", [0.02, 0.02, 0.02]);
    }

    #[test]
    fn normal_clamps_at_zero() {
        // Φ(-0.5) ≈ 30.85% of draws fall below zero.
        let d = Dist::parse("normal:5ms:10ms").unwrap();
        let v = draws(&d);
        assert_eq!(d.quantile(0.3), Duration::ZERO);
        assert_eq!(v[30_000], Duration::ZERO);
        assert_ne!(v[31_500], Duration::ZERO);
        check_quantiles("normal:5ms:10ms", [0.03, 0.03, 0.03]);
    }

    #[test]
    fn lognormal_draws() {
        check_quantiles("lognormal:10ms:80ms", [0.03, 0.03, 0.03]);
        let d = Dist::parse("lognormal:10ms:80ms").unwrap();
        assert!(d.quantile(0.5).abs_diff(ms(10)) < Duration::from_nanos(10));
        assert!(d.quantile(0.99).abs_diff(ms(80)) < Duration::from_nanos(100));
    }

    #[test]
    fn pareto_draws() {
        check_quantiles("pareto:5ms:3", [0.02, 0.02, 0.03]);
        check_quantiles("pareto:5ms:1.5", [0.02, 0.03, 0.06]);
        assert_eq!(Dist::parse("pareto:5ms:1.5").unwrap().quantile(0.0), ms(5));
    }

    #[test]
    fn pct_draws() {
        check_quantiles("pct:50=5ms,90=20ms,99=100ms,100=1s", [0.02, 0.02, 0.03]);
        check_quantiles("pct:0=10ms,100=20ms", [0.02, 0.02, 0.02]);
        let d = Dist::parse("pct:50=5ms,90=20ms,99=100ms,100=1s").unwrap();
        assert_eq!(d.quantile(0.5), ms(5));
        assert_eq!(d.quantile(0.7), Duration::from_micros(12_500));
        assert_eq!(d.quantile(0.0), Duration::ZERO);
        assert_eq!(d.quantile(1.0), ms(1000));
    }

    #[test]
    fn same_seed_same_sequence() {
        for spec in [
            "uniform:1ms:2ms",
            "exp:1ms",
            "lognormal:1ms:9ms",
            "pct:100=1s",
        ] {
            let d = Dist::parse(spec).unwrap();
            let mut a = SmallRng::seed_from_u64(7);
            let mut b = SmallRng::seed_from_u64(7);
            let mut c = SmallRng::seed_from_u64(8);
            let (va, vb, vc): (Vec<_>, Vec<_>, Vec<_>) = (0..100)
                .map(|_| (d.sample(&mut a), d.sample(&mut b), d.sample(&mut c)))
                .fold(
                    (vec![], vec![], vec![]),
                    |(mut x, mut y, mut z), (p, q, r)| {
                        x.push(p);
                        y.push(q);
                        z.push(r);
                        (x, y, z)
                    },
                );
            assert_eq!(va, vb, "{spec}");
            assert_ne!(va, vc, "{spec}");
        }
    }

    #[test]
    fn parses_each_kind() {
        assert_eq!(Dist::parse("10ms"), Ok(Dist::Fixed(ms(10))));
        assert_eq!(
            Dist::parse("uniform:5ms:15ms"),
            Ok(Dist::Uniform {
                low: ms(5),
                high: ms(15)
            })
        );
        assert_eq!(Dist::parse("exp:10ms"), Ok(Dist::Exp { mean: ms(10) }));
        assert_eq!(
            Dist::parse("normal:10ms:2ms"),
            Ok(Dist::Normal {
                mean: ms(10),
                sd: ms(2)
            })
        );
        assert_eq!(
            Dist::parse("lognormal:10ms:80ms"),
            Ok(Dist::LogNormal {
                p50: ms(10),
                p99: ms(80)
            })
        );
        assert_eq!(
            Dist::parse("pareto:5ms:1.5"),
            Ok(Dist::Pareto {
                scale: ms(5),
                shape: 1.5
            })
        );
        let pct = vec![(0.0, Duration::ZERO), (50.0, ms(5)), (100.0, ms(1000))];
        assert_eq!(Dist::parse("pct:50=5ms,100=1s"), Ok(Dist::Pct(pct)));
        let pct = vec![(0.0, ms(1)), (100.0, ms(2))];
        assert_eq!(Dist::parse("pct:0=1ms,100=2ms"), Ok(Dist::Pct(pct)));
    }

    #[test]
    fn display_round_trips() {
        for spec in [
            "10ms",
            "0",
            "1.5s",
            "uniform:5ms:15ms",
            "exp:1.234567ms",
            "normal:10ms:0",
            "lognormal:10ms:80ms",
            "pareto:5ms:1.5",
            "pct:0=0,50=5ms,90=20ms,99.9=100ms,100=1s",
        ] {
            let d = Dist::parse(spec).unwrap();
            assert_eq!(d.to_string(), spec);
            assert_eq!(Dist::parse(&d.to_string()), Ok(d));
        }
        let d = Dist::parse("pct:50=1500ms,100=2s").unwrap();
        assert_eq!(d.to_string(), "pct:0=0,50=1.5s,100=2s");
        assert_eq!(Dist::parse(&d.to_string()), Ok(d));
    }

    #[test]
    fn max_is_the_bound() {
        assert_eq!(Dist::parse("10ms").unwrap().max(), Some(ms(10)));
        assert_eq!(Dist::parse("uniform:1ms:3ms").unwrap().max(), Some(ms(3)));
        assert_eq!(
            Dist::parse("pct:50=1ms,100=7ms").unwrap().max(),
            Some(ms(7))
        );
        assert_eq!(Dist::parse("exp:1ms").unwrap().max(), None);
        assert_eq!(Dist::parse("pareto:1ms:2").unwrap().max(), None);
    }

    fn parse_err(spec: &str) -> String {
        Dist::parse(spec).expect_err(spec)
    }

    #[test]
    fn rejects_impossible_parameters() {
        assert_eq!(
            parse_err("lognormal:80ms:10ms"),
            "\"lognormal:80ms:10ms\": p99 (10ms) is below p50 (80ms); expected lognormal:P50:P99"
        );
        assert_eq!(
            parse_err("normal:10ms:-2ms"),
            "\"normal:10ms:-2ms\": sd \"-2ms\" is negative; expected normal:MEAN:SD"
        );
        assert!(parse_err("uniform:15ms:5ms").contains("high (5ms) is below low (15ms)"));
        assert!(parse_err("pareto:5ms:0").contains("shape (0) must be above 0"));
        assert!(parse_err("pareto:5ms:-1").contains("shape (-1) must be above 0"));
        assert!(parse_err("pareto:5ms:x").contains("shape \"x\" is not a number"));
        assert!(parse_err("pareto:0:2").contains("scale must be above 0"));
        assert!(parse_err("lognormal:0:1ms").contains("p50 must be above 0"));
    }

    #[test]
    fn rejects_bad_percentiles() {
        assert!(parse_err("pct:90=5ms,50=20ms")
            .starts_with("\"pct:90=5ms,50=20ms\": percentiles out of order"));
        assert!(parse_err("pct:50=5ms,50=6ms,100=1s").contains("percentiles out of order"));
        assert!(parse_err("pct:50=20ms,100=5ms")
            .contains("values decrease (5ms at 100 is below 20ms at 50)"));
        assert!(parse_err("pct:50=5ms,99=1s").contains("the last percentile must be 100"));
        assert!(parse_err("pct:50=5ms,101=1s")
            .contains("percentile \"101\" is not a number in 0..=100"));
        assert!(parse_err("pct:-1=5ms,100=1s").contains("percentile \"-1\""));
        assert!(parse_err("pct:50").contains("\"50\" is not P=D"));
        assert!(parse_err("pct:50=5,100=1s").contains("the value at 50 \"5\" has no unit"));
        assert!(parse_err("pct:").contains("\"\" is not P=D"));
    }

    #[test]
    fn rejects_bad_forms() {
        assert_eq!(
            parse_err("gamma:1"),
            "\"gamma:1\": unknown distribution; expected one of 10ms, uniform:LOW:HIGH, exp:MEAN, \
             normal:MEAN:SD, lognormal:P50:P99, pareto:SCALE:SHAPE, pct:P=D,..., inflight:BASE:PER"
        );
        assert!(parse_err("fast").contains("unknown distribution"));
        assert_eq!(
            parse_err("uniform:5ms"),
            "\"uniform:5ms\": expected uniform:LOW:HIGH"
        );
        assert!(parse_err("exp:1ms:2ms").contains("expected exp:MEAN"));
        assert!(parse_err("exp:").contains("expected exp:MEAN"));
        assert!(parse_err("normal:10ms:").contains("expected normal:MEAN:SD"));
        assert!(parse_err("exp:10").contains("mean \"10\" has no unit"));
        assert!(parse_err("10").contains("\"10\" has no unit"));
        assert!(parse_err("-5ms").contains("is negative"));
    }

    #[test]
    fn inverse_normal_is_accurate() {
        assert!((inverse_normal_cdf(0.99) - Z99).abs() < 1e-8);
        assert!((inverse_normal_cdf(0.5)).abs() < 1e-12);
        assert!((inverse_normal_cdf(0.01) + Z99).abs() < 1e-8);
        assert!((inverse_normal_cdf(0.9) - 1.281_551_565_5).abs() < 1e-8);
    }
}

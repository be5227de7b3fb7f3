//! The queueing theory `bench --capacity` holds statico's pools to: c servers, exponential service,
//! FIFO, no queue limit. Pure functions, no I/O.
//!
//! - M/M/c (Poisson arrivals), the reference: Erlang C for P(wait), the wait's tail
//!   `P(W > t) = C·e^{-(cμ-λ)t}`, the sojourn's (wait + service) by its closed form, all in steady
//!   state, which exists only below capacity (λ < cμ).
//! - D/M/c (evenly spaced arrivals, as oha sends them): GI/M/c theory says an arrival finds all c
//!   servers busy with some probability and then waits an exponential time of rate `cμ(1−σ)`, σ the
//!   root in (0,1) of `σ = A*(cμ(1−σ)) = exp(−cμ(1−σ)/λ)` ([`dmc_sigma`]); for c = 1, P(wait) = σ.
//! - [`simulate`]: the queue itself, request by request (Kiefer–Wolfowitz: each arrival takes the
//!   earliest free server), from empty, for a finite run with a deadline — exactly the experiment the
//!   bench makes, including loads at and above capacity, where no steady state exists and the answer
//!   depends on the run's length. [`predict`] pools seeded replications of it. The tests hold it to
//!   Erlang C (Poisson arrivals) and to σ (even arrivals).

/// SplitMix64: a small seeded generator, so a prediction is the same on every run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Exponential with this mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

/// Erlang C: the probability that an arrival waits in M/M/c with `a` = λ/μ Erlangs offered (1 at or
/// above capacity), by the Erlang B recursion.
pub fn erlang_c(c: usize, a: f64) -> f64 {
    if a >= c as f64 {
        return 1.0;
    }
    let mut b = 1.0;
    for k in 1..=c {
        b = a * b / (k as f64 + a * b);
    }
    b / (1.0 - a / c as f64 * (1.0 - b))
}

/// An M/M/c queue in steady state: `c` servers, arrivals at `lambda`/s, service rate `mu`/s each.
#[derive(Clone, Copy, Debug)]
pub struct Mmc {
    pub c: usize,
    pub lambda: f64,
    pub mu: f64,
}

impl Mmc {
    /// `None` at or above capacity: no steady state.
    pub fn new(c: usize, lambda: f64, mu: f64) -> Option<Mmc> {
        (lambda < c as f64 * mu).then_some(Mmc { c, lambda, mu })
    }

    pub fn p_wait(&self) -> f64 {
        erlang_c(self.c, self.lambda / self.mu)
    }

    /// The rate of the wait's exponential tail, cμ − λ.
    fn theta(&self) -> f64 {
        self.c as f64 * self.mu - self.lambda
    }

    pub fn mean_wait(&self) -> f64 {
        self.p_wait() / self.theta()
    }

    /// The wait's `p` quantile: 0 when at least a share `p` does not wait.
    pub fn wait_quantile(&self, p: f64) -> f64 {
        let c = self.p_wait();
        if 1.0 - p >= c {
            0.0
        } else {
            (c / (1.0 - p)).ln() / self.theta()
        }
    }

    /// P(wait + service > t).
    pub fn sojourn_tail(&self, t: f64) -> f64 {
        let (c, mu, theta) = (self.p_wait(), self.mu, self.theta());
        // P(E_θ + E_μ > t), the sum of the two exponentials of a request that waits.
        let both = if (theta - mu).abs() < 1e-9 * mu {
            (1.0 + mu * t) * (-mu * t).exp()
        } else {
            (theta * (-mu * t).exp() - mu * (-theta * t).exp()) / (theta - mu)
        };
        (1.0 - c) * (-mu * t).exp() + c * both
    }

    /// The sojourn's `p` quantile, by bisection on its tail.
    pub fn sojourn_quantile(&self, p: f64) -> f64 {
        let (mut lo, mut hi) = (0.0, 1.0 / self.mu);
        while self.sojourn_tail(hi) > 1.0 - p {
            hi *= 2.0;
        }
        for _ in 0..100 {
            let mid = (lo + hi) / 2.0;
            if self.sojourn_tail(mid) > 1.0 - p {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        (lo + hi) / 2.0
    }
}

/// The offered load (λ as a share of capacity cμ) at which M/M/c's mean wait reaches `wait`.
pub fn mmc_knee(c: usize, mu: f64, wait: f64) -> f64 {
    let cap = c as f64 * mu;
    let (mut lo, mut hi) = (0.0, cap * (1.0 - 1e-12));
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if Mmc::new(c, mid, mu).is_some_and(|q| q.mean_wait() < wait) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0 / cap
}

/// σ of D/M/c: the root in (0,1) of σ = exp(−cμ(1−σ)/λ), by iteration from 0 (which climbs to the
/// smallest root); `None` at or above capacity, where the only root is 1.
pub fn dmc_sigma(c: usize, lambda: f64, mu: f64) -> Option<f64> {
    let k = c as f64 * mu / lambda;
    if k <= 1.0 {
        return None;
    }
    let mut s: f64 = 0.0;
    for _ in 0..1_000_000 {
        let next = (-k * (1.0 - s)).exp();
        if (next - s).abs() < 1e-15 {
            return Some(next);
        }
        s = next;
    }
    Some(s)
}

/// How requests arrive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arrivals {
    /// A Poisson process (M/M/c): the tests hold the simulation to Erlang C with it.
    #[cfg_attr(not(test), allow(dead_code))]
    Poisson,
    /// Request i due at i/λ, then rounded up to a multiple of `grid` seconds (0: not rounded) on a
    /// clock of random phase — oha's pacing, whose tokio timer rounds each due time up to the
    /// millisecond.
    Even { grid: f64 },
}

/// One experiment: a pool of `servers` with exponential service of `mean_service` s, `rate` arrivals
/// a second for `seconds`, then the deadline (the client stops waiting).
#[derive(Clone, Copy, Debug)]
pub struct Model {
    pub servers: usize,
    pub mean_service: f64,
    pub rate: f64,
    pub seconds: f64,
    pub arrivals: Arrivals,
}

/// What one simulated run saw, in seconds.
#[derive(Clone, Debug, Default)]
pub struct Run {
    /// Each request's wait as statico records it (`wait_us`): until it got a server, or, if it was
    /// still queued at the deadline, until then (when its client leaves).
    pub waits: Vec<f64>,
    /// Wait + service of each request answered before the deadline (what the client counts).
    pub sojourns: Vec<f64>,
    pub arrived: usize,
    /// The most requests arrived and not yet answered at once: the connections an open-loop client needs.
    pub max_in_flight: usize,
}

/// One run of `m` from an empty queue.
pub fn simulate(m: &Model, rng: &mut Rng) -> Run {
    let mut free = vec![0.0f64; m.servers.max(1)];
    let mut run = Run::default();
    let (mut arrivals, mut finishes) = (Vec::new(), Vec::new());
    let phase = match m.arrivals {
        Arrivals::Even { grid } => rng.unit() * grid,
        Arrivals::Poisson => 0.0,
    };
    let mut poisson_at = 0.0;
    for i in 0.. {
        let at = match m.arrivals {
            Arrivals::Poisson => {
                poisson_at += rng.exp(1.0 / m.rate);
                poisson_at
            }
            Arrivals::Even { grid } if grid > 0.0 => {
                ((i as f64 / m.rate + phase) / grid).ceil() * grid - phase
            }
            Arrivals::Even { .. } => i as f64 / m.rate,
        };
        if at > m.seconds {
            break;
        }
        let k = (0..free.len())
            .min_by(|a, b| free[*a].total_cmp(&free[*b]))
            .unwrap_or(0);
        let start = at.max(free[k]);
        free[k] = start + rng.exp(m.mean_service);
        run.waits.push(start.min(m.seconds) - at);
        if free[k] <= m.seconds {
            run.sojourns.push(free[k] - at);
        }
        arrivals.push(at);
        finishes.push(free[k]);
    }
    run.arrived = arrivals.len();
    run.max_in_flight = max_in_flight(&arrivals, &mut finishes);
    run
}

/// The most requests in flight at an arrival: arrived so far, less those finished by then.
fn max_in_flight(arrivals: &[f64], finishes: &mut [f64]) -> usize {
    finishes.sort_by(f64::total_cmp);
    let mut done = 0;
    let mut most = 0;
    for (i, at) in arrivals.iter().enumerate() {
        while done < finishes.len() && finishes[done] <= *at {
            done += 1;
        }
        most = most.max(i + 1 - done.min(i + 1));
    }
    most
}

/// The nearest-rank `p` quantile of sorted `v` (0 when empty).
pub fn quantile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A distribution's p50, p99 and mean, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    pub p50: f64,
    pub p99: f64,
    pub mean: f64,
}

impl Summary {
    pub fn of(mut v: Vec<f64>) -> Summary {
        v.sort_by(f64::total_cmp);
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        Summary {
            p50: quantile(&v, 0.5),
            p99: quantile(&v, 0.99),
            mean,
        }
    }
}

/// [`simulate`]'s runs pooled: the prediction for one offered load.
#[derive(Clone, Debug, Default)]
pub struct Prediction {
    pub wait: Summary,
    pub sojourn: Summary,
    /// Answers before the deadline per second of the run.
    pub throughput: f64,
    /// The share of requests that waited.
    pub p_wait: f64,
    /// The most in flight in any run.
    pub max_in_flight: usize,
    /// Each run's own mean wait and mean sojourn, for the spread of a single run's figures.
    pub run_mean_wait: Vec<f64>,
    pub run_mean_sojourn: Vec<f64>,
}

/// `runs` runs of `m`, seeded with `seed`, pooled.
pub fn predict(m: &Model, runs: usize, seed: u64) -> Prediction {
    let mut rng = Rng::new(seed);
    let mut p = Prediction::default();
    let (mut waits, mut sojourns) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let r = simulate(m, &mut rng);
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        p.run_mean_wait.push(mean(&r.waits));
        p.run_mean_sojourn.push(mean(&r.sojourns));
        p.max_in_flight = p.max_in_flight.max(r.max_in_flight);
        p.throughput += r.sojourns.len() as f64 / m.seconds / runs as f64;
        waits.extend(r.waits);
        sojourns.extend(r.sojourns);
    }
    p.p_wait = waits.iter().filter(|w| **w > 0.0).count() as f64 / waits.len().max(1) as f64;
    p.wait = Summary::of(waits);
    p.sojourn = Summary::of(sojourns);
    p
}

/// Where a curve turns up: the first load at which `values` (one per load, loads ascending) reach
/// `threshold`, interpolated linearly in load and in log(value) between grid points (linearly in value
/// where the lower one is 0); `None` if they never do.
pub fn knee(loads: &[f64], values: &[f64], threshold: f64) -> Option<f64> {
    let first = values.iter().position(|v| *v >= threshold)?;
    if first == 0 {
        return Some(loads[0]);
    }
    let (x0, x1, v0, v1) = (
        loads[first - 1],
        loads[first],
        values[first - 1],
        values[first],
    );
    let f = if v0 > 0.0 {
        (threshold.ln() - v0.ln()) / (v1.ln() - v0.ln())
    } else {
        (threshold - v0) / (v1 - v0)
    };
    Some(x0 + f * (x1 - x0))
}

/// The knee of each simulated run (`per_load[i][r]`: run r's figure at load i), sorted: how far a
/// single run's knee strays from the pooled one. Runs whose curve never reaches `threshold` are left out.
pub fn run_knees(loads: &[f64], per_load: &[Vec<f64>], threshold: f64) -> Vec<f64> {
    let runs = per_load.iter().map(Vec::len).min().unwrap_or(0);
    let mut knees: Vec<f64> = (0..runs)
        .filter_map(|r| {
            let curve: Vec<f64> = per_load.iter().map(|v| v[r]).collect();
            knee(loads, &curve, threshold)
        })
        .collect();
    knees.sort_by(f64::total_cmp);
    knees
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    #[test]
    fn erlang_c_matches_the_closed_form() {
        // c = 8, A = 6.4 Erlang (80% of capacity): A^c/c! · c/(c−A) over Σ_{k<c} A^k/k! + that.
        let (c, a) = (8usize, 6.4f64);
        let fact = |n: usize| (1..=n).map(|k| k as f64).product::<f64>();
        let top = a.powi(c as i32) / fact(c) * c as f64 / (c as f64 - a);
        let sum: f64 = (0..c).map(|k| a.powi(k as i32) / fact(k)).sum();
        let expected = top / (sum + top);
        assert!(close(erlang_c(c, a), expected, 1e-12));
        assert!(
            (erlang_c(c, a) - 0.45764).abs() < 1e-5,
            "{}",
            erlang_c(c, a)
        );
        // M/M/1: P(wait) = ρ.
        assert!(close(erlang_c(1, 0.7), 0.7, 1e-12));
        assert_eq!(erlang_c(8, 8.0), 1.0);
    }

    #[test]
    fn mmc_quantiles_invert_their_tails() {
        let q = Mmc::new(8, 720.0, 100.0).unwrap();
        let w99 = q.wait_quantile(0.99);
        assert!(close(
            q.p_wait() * (-(800.0 - 720.0) * w99).exp(),
            0.01,
            1e-9
        ));
        assert_eq!(q.wait_quantile(0.2), 0.0);
        let s99 = q.sojourn_quantile(0.99);
        assert!(close(q.sojourn_tail(s99), 0.01, 1e-6));
        // At light load the sojourn is the service: p99 of exp(10 ms) = 10 ms · ln 100.
        let light = Mmc::new(8, 10.0, 100.0).unwrap();
        assert!(close(
            light.sojourn_quantile(0.99),
            0.01 * 100f64.ln(),
            1e-3
        ));
        assert!(Mmc::new(8, 800.0, 100.0).is_none());
    }

    #[test]
    fn the_mmc_knee_is_where_the_mean_wait_reaches_the_service() {
        let k = mmc_knee(8, 100.0, 0.01);
        let q = Mmc::new(8, k * 800.0, 100.0).unwrap();
        assert!(close(q.mean_wait(), 0.01, 1e-6));
        assert!(k > 0.9 && k < 0.93, "{k}");
    }

    #[test]
    fn sigma_solves_its_equation_below_capacity_only() {
        let s = dmc_sigma(8, 760.0, 100.0).unwrap();
        assert!(s > 0.0 && s < 1.0);
        assert!((s - (-800.0 * (1.0 - s) / 760.0f64).exp()).abs() < 1e-12);
        assert!(dmc_sigma(8, 800.0, 100.0).is_none());
    }

    fn long(c: usize, rate: f64, arrivals: Arrivals) -> Prediction {
        let m = Model {
            servers: c,
            mean_service: 0.01,
            rate,
            seconds: 2000.0,
            arrivals,
        };
        predict(&m, 1, 7)
    }

    #[test]
    fn the_simulation_with_poisson_arrivals_is_erlang_c() {
        let p = long(8, 640.0, Arrivals::Poisson);
        let q = Mmc::new(8, 640.0, 100.0).unwrap();
        assert!(
            close(p.p_wait, q.p_wait(), 0.03),
            "{} {}",
            p.p_wait,
            q.p_wait()
        );
        assert!(close(p.wait.mean, q.mean_wait(), 0.06), "{:?}", p.wait);
        assert!(close(p.wait.p99, q.wait_quantile(0.99), 0.06));
        assert!(close(p.sojourn.p99, q.sojourn_quantile(0.99), 0.04));
    }

    #[test]
    fn the_simulation_with_even_arrivals_is_gi_m_c() {
        // D/M/1: an arrival waits with probability σ.
        let p = long(1, 80.0, Arrivals::Even { grid: 0.0 });
        let s = dmc_sigma(1, 80.0, 100.0).unwrap();
        assert!(close(p.p_wait, s, 0.03), "{} {s}", p.p_wait);
        // D/M/8: the wait, given one, is exponential of rate cμ(1−σ); its mean is P(wait) times that.
        let p = long(8, 720.0, Arrivals::Even { grid: 0.0 });
        let s = dmc_sigma(8, 720.0, 100.0).unwrap();
        let given = p.wait.mean / p.p_wait;
        assert!(close(given, 1.0 / (800.0 * (1.0 - s)), 0.05), "{given} {s}");
        // Even arrivals wait less than Poisson ones at the same load.
        assert!(p.wait.mean < Mmc::new(8, 720.0, 100.0).unwrap().mean_wait() * 0.8);
    }

    #[test]
    fn above_capacity_the_throughput_caps_and_the_wait_grows_with_the_run() {
        let m = |seconds| Model {
            servers: 8,
            mean_service: 0.01,
            rate: 1200.0,
            seconds,
            arrivals: Arrivals::Even { grid: 0.001 },
        };
        let (short, longer) = (predict(&m(2.0), 10, 1), predict(&m(10.0), 10, 1));
        assert!(
            close(longer.throughput, 800.0, 0.03),
            "{}",
            longer.throughput
        );
        // Answered by the deadline T: those that came by T/ρ, having waited up to (ρ−1)T/ρ.
        assert!(close(longer.sojourn.p99, 0.99 * 0.5 * 10.0 / 1.5, 0.05));
        assert!(longer.wait.p50 > 4.0 * short.wait.p50);
        assert!(close(longer.max_in_flight as f64, 4000.0, 0.05));
    }

    #[test]
    fn the_same_seed_predicts_the_same() {
        let m = Model {
            servers: 8,
            mean_service: 0.01,
            rate: 700.0,
            seconds: 1.0,
            arrivals: Arrivals::Even { grid: 0.001 },
        };
        let (a, b) = (predict(&m, 3, 5), predict(&m, 3, 5));
        assert_eq!((a.wait, a.sojourn), (b.wait, b.sojourn));
    }

    #[test]
    fn knees_interpolate_between_grid_points() {
        let loads = [0.5, 0.8, 0.9, 1.0];
        // 2 ms, 5 ms, 10 ms... at 10 ms exactly on a grid point.
        assert_eq!(knee(&loads, &[0.002, 0.005, 0.01, 0.05], 0.01), Some(0.9));
        // Halfway in log: between 5 ms and 20 ms, 10 ms is half way.
        let k = knee(&loads, &[0.002, 0.005, 0.02, 0.05], 0.01).unwrap();
        assert!((k - 0.85).abs() < 1e-12, "{k}");
        // Linear from 0.
        let k = knee(&loads, &[0.0, 0.0, 0.02, 0.05], 0.01).unwrap();
        assert!((k - 0.85).abs() < 1e-12, "{k}");
        assert_eq!(knee(&loads, &[0.0; 4], 0.01), None);
        assert_eq!(knee(&loads, &[0.02; 4], 0.01), Some(0.5));
        let per_load = vec![
            vec![0.0, 0.0],
            vec![0.005, 0.02],
            vec![0.02, 0.03],
            vec![0.05, 0.05],
        ];
        assert_eq!(run_knees(&loads, &per_load, 0.01).len(), 2);
        let quantiles = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(
            (quantile(&quantiles, 0.5), quantile(&quantiles, 0.99)),
            (2.0, 4.0)
        );
    }
}

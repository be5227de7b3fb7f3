//! A report of rates and server CPU per unit, each server against a peer in the same run (nginx for
//! `bench --tls` and `bench --site`, Caddy for `bench --http3`, Fortio for `bench --routes`, Fortio or
//! grpc-go per method for `bench --grpc`): the tables, and a chart of each statico's CPU relative to
//! the peer's.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use super::measure::{self, Stat};
use super::report::bar_chart;
use crate::tools::server::ServerUnderTest;

/// The rows a [`Report`] table takes: [`measure::interleave`] over the servers for rounds that yield
/// (rate, server CPU µs per unit), each round's figures shown as it ends.
pub fn interleave(
    servers: &[ServerUnderTest],
    rounds: usize,
    mut round: impl FnMut(&ServerUnderTest) -> Result<(f64, f64)>,
) -> Result<Vec<Vec<(f64, f64)>>> {
    measure::interleave(servers, rounds, |s| {
        let (rate, cpu) = round(s)?;
        eprintln!("  {:<17} {rate:>10.0}/s {cpu:>8.2} µs", s.name);
        Ok((rate, cpu))
    })
}

/// "1.12x (met)" or "1.52x (NOT met)".
pub fn verdict(ratio: f64, target: f64) -> String {
    let met = if ratio <= target { "met" } else { "NOT met" };
    format!("{ratio:.2}x ({met})")
}

/// Each statico's CPU in group `over` divided by its own in group `base`, from (group, server, CPU
/// median) triples; a statico measured in only one of them is left out.
pub fn ratios_between(
    medians: &[(&str, String, f64)],
    over: &str,
    base: &str,
) -> Vec<(String, f64)> {
    let of = |group: &str, server: &str| {
        medians
            .iter()
            .find(|(g, s, _)| *g == group && s == server)
            .map(|m| m.2)
    };
    medians
        .iter()
        .filter(|(g, s, _)| *g == over && s.starts_with("statico"))
        .filter_map(|(_, s, cpu)| {
            let base = of(base, s).filter(|b| *b > 0.0)?;
            Some((s.clone(), cpu / base))
        })
        .collect()
}

/// Each server's ratio against `target` (`statico-io-uring 0.60x (met), …`), or `none` when there
/// is no ratio to judge.
pub fn verdicts(ratios: &[(String, f64)], target: f64, none: &str) -> String {
    let said: Vec<String> = (ratios.iter())
        .map(|(name, x)| format!("{name} {}", verdict(*x, target)))
        .collect();
    match said.is_empty() {
        true => none.to_string(),
        false => said.join(", "),
    }
}

/// The report's text, and per scenario each statico's server CPU relative to the peer's for the chart.
pub struct Report {
    pub text: String,
    /// The peer every ratio is taken against: the server whose name starts with this.
    peer: &'static str,
    ratios: Vec<(&'static str, Vec<(String, f64)>)>,
}

impl Report {
    /// A report against nginx.
    pub fn new(heading: String) -> Report {
        Report::against("nginx", heading)
    }

    /// A report against `peer` (the server whose name starts with it).
    pub fn against(peer: &'static str, heading: String) -> Report {
        Report {
            text: heading,
            peer,
            ratios: Vec::new(),
        }
    }

    /// Takes the next tables' ratios against `peer` (a run whose scenarios have peers of their own).
    pub fn set_peer(&mut self, peer: &'static str) {
        self.peer = peer;
    }

    /// The ratios of a scenario's table, (server, its CPU per unit / the peer's), if the peer ran.
    pub fn ratios(&self, group: &str) -> &[(String, f64)] {
        self.ratios
            .iter()
            .find(|(g, _)| *g == group)
            .map_or(&[], |(_, r)| r.as_slice())
    }

    /// One scenario's lines: rate and CPU per unit, medians with min–max, and the ratio to the peer.
    pub fn table(
        &mut self,
        group: &'static str,
        scenario: &str,
        rate: &str,
        cpu: &str,
        servers: &[ServerUnderTest],
        rows: &[Vec<(f64, f64)>],
    ) {
        let (out, peer) = (&mut self.text, self.peer);
        let _ = writeln!(
            out,
            "\n{scenario}\n  {:<17} {:>24} {:>24} {:>10}",
            "server",
            rate,
            cpu,
            format!("vs {peer}")
        );
        let cpu_of = |r: &Vec<(f64, f64)>| Stat::of(r.iter().map(|x| x.1));
        let peer_cpu = servers
            .iter()
            .zip(rows)
            .find(|(s, _)| s.name.starts_with(peer))
            .map(|(_, r)| cpu_of(r).median);
        let mut ratios = Vec::new();
        for (s, r) in servers.iter().zip(rows) {
            let rate = Stat::of(r.iter().map(|x| x.0));
            let c = cpu_of(r);
            let ratio = peer_cpu.map(|n| c.median / n);
            let shown = ratio.map_or("-".into(), |x| format!("{x:.2}x"));
            let _ = writeln!(
                out,
                "  {:<17} {:>10.0} ({:.0}-{:.0}) {:>10.2} ({:.2}-{:.2}) {shown:>10}",
                s.name, rate.median, rate.min, rate.max, c.median, c.min, c.max
            );
            if let Some(x) = ratio.filter(|_| !s.name.starts_with(peer)) {
                ratios.push((s.name.clone(), x));
            }
        }
        self.ratios.push((group, ratios));
    }

    /// `chart.svg`: each statico's server CPU relative to the peer's, per scenario.
    pub fn chart(&self, path: &Path, title: &str) -> Result<()> {
        let mut servers: Vec<&str> = Vec::new();
        for (name, _) in self.ratios.iter().flat_map(|(_, r)| r) {
            if !servers.contains(&name.as_str()) {
                servers.push(name);
            }
        }
        let groups: Vec<&str> = self.ratios.iter().map(|(g, _)| *g).collect();
        let bars: Vec<Vec<f64>> = servers
            .iter()
            .map(|server| {
                let of = |r: &Vec<(String, f64)>| r.iter().find(|(n, _)| n == server).map(|x| x.1);
                self.ratios
                    .iter()
                    .map(|(_, r)| of(r).unwrap_or(0.0))
                    .collect()
            })
            .collect();
        bar_chart(path, title, &groups, &servers, &bars)
    }
}

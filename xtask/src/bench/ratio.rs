//! A report of rates and server CPU per unit, each server against nginx in the same run: the tables
//! of `bench --tls` and `bench --site`, and a chart of each statico's CPU relative to nginx's.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use super::measure::Stat;
use super::report::bar_chart;
use super::servers::ServerUnderTest;

/// The report's text, and per scenario each statico's server CPU relative to nginx's for the chart.
pub struct Report {
    pub text: String,
    ratios: Vec<(&'static str, Vec<(String, f64)>)>,
}

impl Report {
    pub fn new(heading: String) -> Report {
        Report {
            text: heading,
            ratios: Vec::new(),
        }
    }

    /// One scenario's lines: rate and CPU per unit, medians with min–max, and the ratio to nginx.
    pub fn table(
        &mut self,
        group: &'static str,
        scenario: &str,
        rate: &str,
        cpu: &str,
        servers: &[ServerUnderTest],
        rows: &[Vec<(f64, f64)>],
    ) {
        let out = &mut self.text;
        let _ = writeln!(
            out,
            "\n{scenario}\n  {:<17} {:>24} {:>24} {:>10}",
            "server", rate, cpu, "vs nginx"
        );
        let cpu_of = |r: &Vec<(f64, f64)>| Stat::of(r.iter().map(|x| x.1));
        let nginx = servers
            .iter()
            .zip(rows)
            .find(|(s, _)| s.name.starts_with("nginx"))
            .map(|(_, r)| cpu_of(r).median);
        let mut ratios = Vec::new();
        for (s, r) in servers.iter().zip(rows) {
            let rate = Stat::of(r.iter().map(|x| x.0));
            let c = cpu_of(r);
            let ratio = nginx.map(|n| c.median / n);
            let shown = ratio.map_or("-".into(), |x| format!("{x:.2}x"));
            let _ = writeln!(
                out,
                "  {:<17} {:>10.0} ({:.0}-{:.0}) {:>10.2} ({:.2}-{:.2}) {shown:>10}",
                s.name, rate.median, rate.min, rate.max, c.median, c.min, c.max
            );
            if let Some(x) = ratio.filter(|_| !s.name.starts_with("nginx")) {
                ratios.push((s.name.clone(), x));
            }
        }
        self.ratios.push((group, ratios));
    }

    /// `chart.svg`: each statico's server CPU relative to nginx's, per scenario.
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

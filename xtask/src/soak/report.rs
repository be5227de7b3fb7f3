//! What a soak leaves behind: `report.txt` (samples, flatness, what each client saw against the
//! ground truth, the hostile clients' closes, swaps, drains, the verdict), `results.json` (the same,
//! as data) and `chart.svg` (RSS, descriptors and CPU over time, with bench's line chart).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use serde_json::{json, Value};

use super::clients::Shared;
use super::judge::{add_truth, Counts, Sample, Swap, Truth, SAMPLE_EVERY_S};
use super::{route_totals, SoakArgs, SERVER_NAMES};
use crate::tools::chart::{line_chart, Line, LinePanel};
use crate::tools::procfs::{clock_ticks_per_second, machine};

/// One swap as made.
#[derive(Clone, Debug)]
pub struct SwapRecord {
    pub at_s: u64,
    pub swap: Swap,
    /// How long the fault routes' clients were held (gate closed to open), ms.
    pub held_ms: f64,
    /// The gate emptied (no request on a fault route in flight during the swap).
    pub quiet: bool,
    /// The generation it made, if it did.
    pub generation: Option<u64>,
}

/// How a drain ended.
#[derive(Clone, Debug)]
pub struct Drain {
    pub secs: f64,
    pub code: Option<i32>,
    pub exited: bool,
}

/// What the run gathered, per statico (TLS first, then plain).
#[derive(Default)]
pub struct Progress {
    pub samples: [Vec<Sample>; 2],
    /// At each sample: answers (whole, any status) so far per "server client", to tell whose load
    /// changed when statico's RSS or CPU did.
    pub answers: Vec<(f64, BTreeMap<String, u64>)>,
    pub swaps: Vec<SwapRecord>,
    /// The TLS statico's ground truth, the last read of each generation.
    pub generations: BTreeMap<u64, Value>,
    pub plain_truth: Value,
    /// Descriptors after the clients left (and the idle timeout passed).
    pub end_fds: [u64; 2],
    /// Connections open per `/metrics` then (accepted − closed).
    pub end_open_conns: [Option<i64>; 2],
    pub drains: [Option<Drain>; 2],
    /// Failures met while running (a statico died, a swap failed).
    pub problems: Vec<String>,
}

impl Progress {
    /// The truth summed: the TLS statico's over its generations, the plain one's.
    pub fn truths(&self) -> [Truth; 2] {
        let mut tls = Truth::new();
        for doc in self.generations.values() {
            add_truth(&mut tls, doc);
        }
        let mut plain = Truth::new();
        add_truth(&mut plain, &self.plain_truth);
        [tls, plain]
    }
}

/// CPU % of one core between consecutive samples.
fn cpu_percent(samples: &[Sample]) -> Vec<(f64, f64)> {
    let hz = clock_ticks_per_second();
    samples
        .windows(2)
        .map(|w| {
            let ticks = w[1].cpu_ticks.saturating_sub(w[0].cpu_ticks) as f64;
            (
                w[1].t_s,
                ticks / hz / (w[1].t_s - w[0].t_s).max(1e-3) * 100.0,
            )
        })
        .collect()
}

/// Writes report.txt, results.json and chart.svg into `out`.
pub fn write(
    out: &Path,
    args: &SoakArgs,
    commands: &[String],
    p: &Progress,
    shared: &Shared,
    failures: &[String],
) -> Result<()> {
    let text = text(args, commands, p, shared, failures);
    print!("{text}");
    std::fs::write(out.join("report.txt"), &text)?;
    let doc = to_json(args, commands, p, shared, failures);
    std::fs::write(
        out.join("results.json"),
        serde_json::to_string_pretty(&doc)?,
    )?;
    chart(&out.join("chart.svg"), p)
}

fn text(
    args: &SoakArgs,
    commands: &[String],
    p: &Progress,
    shared: &Shared,
    failures: &[String],
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "statico soak: {} minutes, runtime {}",
        args.minutes, args.runtime
    );
    for c in commands {
        let _ = writeln!(s, "  {c}");
    }
    samples_text(&mut s, p);
    answers_text(&mut s, p);
    clients_text(&mut s, p, shared);
    hostile_text(&mut s, p, shared);
    let _ = writeln!(
        s,
        "\nverdict: {}",
        if failures.is_empty() { "PASS" } else { "FAIL" }
    );
    for f in failures {
        let _ = writeln!(s, "  {f}");
    }
    s
}

fn samples_text(s: &mut String, p: &Progress) {
    for (i, name) in SERVER_NAMES.iter().enumerate() {
        let samples = &p.samples[i];
        let cpu = cpu_percent(samples);
        let _ = writeln!(
            s,
            "\n{name} statico, every 10 s:   t (s)   RSS (MiB)   anon   fds   CPU (% of a core)"
        );
        for (k, x) in samples.iter().enumerate() {
            let c = if k == 0 {
                String::from("-")
            } else {
                format!("{:.1}", cpu[k - 1].1)
            };
            let _ = writeln!(
                s,
                "{:>34.0} {:>11.1} {:>6.1} {:>5} {:>7}",
                x.t_s,
                x.rss_kib as f64 / 1024.0,
                x.rss_anon_kib as f64 / 1024.0,
                x.fds,
                c
            );
        }
        let _ = writeln!(
            s,
            "  after the clients left: {} descriptors, {} connections open (/metrics)",
            p.end_fds[i],
            p.end_open_conns[i].map_or("unknown".to_string(), |n| n.to_string())
        );
    }
}

/// Answers per second of each client, a row a minute: the load behind each stretch of the samples.
fn answers_text(s: &mut String, p: &Progress) {
    let Some((_, last)) = p.answers.last() else {
        return;
    };
    let names: Vec<&String> = last.keys().collect();
    let _ = writeln!(s, "\nanswers per second, each minute:");
    let _ = write!(s, "  {:>6}", "t (s)");
    for n in &names {
        let _ = write!(s, " {n:>16}");
    }
    let per_minute = (60.0 / SAMPLE_EVERY_S) as usize;
    let rows: Vec<_> = p.answers.iter().step_by(per_minute).collect();
    for w in rows.windows(2) {
        let ((t0, a0), (t1, a1)) = (w[0], w[1]);
        let _ = write!(s, "\n  {t1:>6.0}");
        for n in &names {
            let delta = a1.get(*n).unwrap_or(&0) - a0.get(*n).unwrap_or(&0);
            let _ = write!(s, " {:>16.0}", delta as f64 / (t1 - t0).max(1e-3));
        }
    }
    let _ = writeln!(s);
}

/// Answers so far per "server client" (routes summed), from the tally.
pub fn answers_now(tally: &BTreeMap<(String, String, String), Counts>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for ((client, server, _), c) in tally {
        *out.entry(format!("{server} {client}")).or_default() += c.ok + c.status;
    }
    out
}

fn clients_text(s: &mut String, p: &Progress, shared: &Shared) {
    let truths = p.truths();
    let tally = shared.tally.lock().unwrap();
    let _ = writeln!(
        s,
        "\nclients:  server  route  client  ok  non-2xx  reset  close  truncate  timeout  other  (unanswered behind a failure)"
    );
    for ((client, server, route), c) in tally.iter() {
        let _ = writeln!(
            s,
            "  {server:<5} {route:<11} {client:<10} {:>8} {:>4} {:>4} {:>4} {:>4} {:>4} {:>4} ({})",
            c.ok, c.status, c.reset, c.close, c.truncate, c.timeout, c.other, c.unanswered
        );
    }
    for (i, name) in SERVER_NAMES.iter().enumerate() {
        let totals = route_totals(&tally, name);
        let _ = writeln!(
            s,
            "\n{name}: per route, all clients against the ground truth's outcomes"
        );
        for (route, c) in &totals {
            let truth = truths[i]
                .get(route)
                .map_or_else(String::new, |o| format!("{o:?}"));
            let _ = writeln!(
                s,
                "  {route:<11} seen: {} ok, {} non-2xx, {} failures; truth: {truth}",
                c.ok,
                c.status,
                c.errors()
            );
        }
    }
    let messages = shared.messages.lock().unwrap();
    if !messages.is_empty() {
        let _ = writeln!(s, "\nthe tools' failures by message:");
        for (m, n) in messages.iter() {
            let _ = writeln!(s, "  {n:>6}  {m}");
        }
    }
}

fn hostile_text(s: &mut String, p: &Progress, shared: &Shared) {
    let _ = writeln!(s, "\nhostile clients: closed after (s), min / max / count (never: still open at the client's limit)");
    for ((what, server), closes) in shared.closes.lock().unwrap().iter() {
        let secs: Vec<f64> = closes.iter().flatten().copied().collect();
        let min = secs.iter().copied().fold(f64::MAX, f64::min);
        let max = secs.iter().copied().fold(0.0, f64::max);
        let never = closes.len() - secs.len();
        let _ = writeln!(
            s,
            "  {server:<5} {what:<14} {min:.1} / {max:.1} / {}  never: {never}",
            closes.len()
        );
    }
    let _ = writeln!(
        s,
        "\nswaps: at (s), kind, generation made, fault clients held (ms)"
    );
    for w in &p.swaps {
        let _ = writeln!(
            s,
            "  {:>5} {:<7} {:>5} {:>7.1}{}",
            w.at_s,
            format!("{:?}", w.swap),
            w.generation.map_or("none".to_string(), |g| g.to_string()),
            w.held_ms,
            if w.quiet { "" } else { "  (gate not empty)" }
        );
    }
    for (i, name) in SERVER_NAMES.iter().enumerate() {
        let drain = match &p.drains[i] {
            Some(d) if d.exited => format!(
                "exited in {:.2} s, status {}",
                d.secs,
                d.code
                    .map_or("none (a signal)".to_string(), |c| c.to_string())
            ),
            Some(d) => format!("still running after {:.2} s", d.secs),
            None => "not made".to_string(),
        };
        let _ = writeln!(s, "drain {name}: {drain}");
    }
}

fn counts_json(c: &Counts) -> Value {
    json!({"ok": c.ok, "non_2xx": c.status, "reset": c.reset, "close": c.close, "truncate": c.truncate,
           "timeout": c.timeout, "other": c.other, "unanswered": c.unanswered})
}

fn to_json(
    args: &SoakArgs,
    commands: &[String],
    p: &Progress,
    shared: &Shared,
    failures: &[String],
) -> Value {
    let truths = p.truths();
    let tally = shared.tally.lock().unwrap();
    let servers: Vec<Value> = SERVER_NAMES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let samples: Vec<Value> = p.samples[i]
                .iter()
                .map(|x| json!({"t_s": x.t_s, "rss_kib": x.rss_kib, "rss_anon_kib": x.rss_anon_kib, "fds": x.fds, "cpu_ticks": x.cpu_ticks}))
                .collect();
            let clients: Vec<Value> = tally
                .iter()
                .filter(|((_, s, _), _)| s == name)
                .map(|((client, _, route), c)| json!({"client": client, "route": route, "seen": counts_json(c)}))
                .collect();
            let drain = p.drains[i].as_ref().map(|d| json!({"secs": d.secs, "code": d.code, "exited": d.exited}));
            json!({"name": name, "command": commands.get(i), "samples": samples, "end_fds": p.end_fds[i], "end_open_conns": p.end_open_conns[i],
                   "clients": clients, "truth": truths[i], "drain": drain})
        })
        .collect();
    let closes: Vec<Value> = shared
        .closes
        .lock()
        .unwrap()
        .iter()
        .map(|((what, server), c)| json!({"client": what, "server": server, "closed_after_s": c}))
        .collect();
    let swaps: Vec<Value> = p
        .swaps
        .iter()
        .map(|w| json!({"at_s": w.at_s, "kind": format!("{:?}", w.swap), "generation": w.generation, "held_ms": w.held_ms, "quiet": w.quiet}))
        .collect();
    let answers: Vec<Value> = p
        .answers
        .iter()
        .map(|(t_s, a)| json!({"t_s": t_s, "answers": a}))
        .collect();
    json!({"minutes": args.minutes, "runtime": args.runtime, "machine": machine(), "servers": servers, "answers_so_far": answers,
           "hostile": closes, "swaps": swaps, "tool_failures": *shared.messages.lock().unwrap(),
           "passed": failures.is_empty(), "failures": failures})
}

fn chart(path: &Path, p: &Progress) -> Result<()> {
    let line = |i: usize, points: Vec<(f64, f64)>| Line {
        name: format!("statico {}", SERVER_NAMES[i]),
        points,
        measured: true,
        colour: i,
    };
    let panel = |title: &str, y_label: &str, f: &dyn Fn(usize) -> Vec<(f64, f64)>| LinePanel {
        title: title.into(),
        y_label: y_label.into(),
        log_y: false,
        lines: (0..2).map(|i| line(i, f(i))).collect(),
    };
    let panels = [
        panel("RSS", "MiB", &|i| {
            p.samples[i]
                .iter()
                .map(|s| (s.t_s, s.rss_kib as f64 / 1024.0))
                .collect()
        }),
        panel("open descriptors", "fds", &|i| {
            p.samples[i].iter().map(|s| (s.t_s, s.fds as f64)).collect()
        }),
        panel("CPU", "% of a core", &|i| cpu_percent(&p.samples[i])),
    ];
    line_chart(path, "seconds since the clients started", &panels)
}

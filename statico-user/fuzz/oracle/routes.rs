//! The `routes` oracle: what an operator writes — a `--route`, `--phase` or `--pool` flag, or a
//! routes TOML document (`--routes FILE`, SIGHUP, and the control API's `PUT /routes` body) — must
//! never panic; every refusal must be one line; what parses must build (`Routes::build`) without a
//! panic, its refusals one line too; and a flag whose table builds (so could be in force) must read
//! back: the TOML its table writes (`GET /routes`) parses again to the same value.
//!
//! The first byte picks the form (`b % 4`: `0` route, `1` TOML, `2` phase, `3` pool, so the seeds
//! read `0GET /api/* status=200`), the rest is the text (UTF-8, else ignored). Inputs that could name
//! a file (`body=@FILE`, read at parse time) are skipped: a lone `@`, or a TOML `\u0040` escape;
//! `@@TEXT` (a literal body) is kept. Tables with a `size=` body over 1 MiB are parsed but not
//! built (the body is made at build time, up to 1 GiB).
//!
//! Shared by the fuzz target (`fuzz_targets/routes.rs`) and the corpus replay
//! (`tests/fuzz_corpus.rs`), which include this file with `#[path]`.

use std::path::Path;

use statico::catalog::response::ResponseSpec;
use statico::catalog::route::phase_spec::parse_phase;
use statico::catalog::route::pool_spec::parse_pool;
use statico::catalog::route::spec::{parse_spec, BodySpec, RoutePool, RouteSpec};
use statico::catalog::route::table::{AsWritten, Table};
use statico::catalog::route::{Common, Routes};

/// The largest `size=` body a fuzzed table is built with.
const BUILT_SIZE: u64 = 1 << 20;

pub fn check(data: &[u8]) {
    let Some((&form, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    if names_a_file(text) {
        return;
    }
    match form % 4 {
        0 => {
            if let Some(spec) = ok(parse_spec(text), "parse_spec", text) {
                let written = [AsWritten {
                    text: text.to_owned(),
                    value: spec,
                }];
                let table = Table::of_flags(&[], &written, &[]);
                if !build(&table) {
                    return;
                }
                let back = reads_back(&table);
                assert_eq!(
                    unplaced(&back.routes),
                    unplaced(&table.routes),
                    "{}",
                    table.toml
                );
            }
        }
        1 => {
            if let Some(table) = ok(
                Table::of_toml(text, Path::new("fuzz")),
                "Table::of_toml",
                text,
            ) {
                build(&table);
            }
        }
        2 => {
            if let Some(phase) = ok(parse_phase(text, 0), "parse_phase", text) {
                let route = parse_spec("* status=200").unwrap();
                let table = Table::of_flags(
                    &[],
                    &[written("* status=200", route)],
                    &[written(text, phase)],
                );
                if !build(&table) {
                    return;
                }
                let back = reads_back(&table);
                let (a, b) = (&back.phases[0], &table.phases[0]);
                assert_eq!(
                    (&a.patch, &a.window, &a.path_text),
                    (&b.patch, &b.window, &b.path_text),
                    "{}",
                    table.toml
                );
            }
        }
        _ => {
            if let Some(pool) = ok(parse_pool(text), "parse_pool", text) {
                let Ok(route) = parse_spec(&format!("* pool={}", pool.name)) else {
                    return;
                };
                let text_of_route = format!("* pool={}", pool.name);
                let table = Table::of_flags(
                    &[written(text, pool)],
                    &[written(&text_of_route, route)],
                    &[],
                );
                if !build(&table) {
                    return;
                }
                let back = reads_back(&table);
                assert_eq!(back.pools[0].0, table.pools[0].0, "{}", table.toml);
            }
        }
    }
}

/// Whether parsing `text` could read a file: a `@` not next to another (`@FILE`, where `@@TEXT`
/// is a literal), or a TOML escape that is one.
fn names_a_file(text: &str) -> bool {
    let b = text.as_bytes();
    let lone = (0..b.len())
        .any(|i| b[i] == b'@' && !(i > 0 && b[i - 1] == b'@') && b.get(i + 1) != Some(&b'@'));
    lone || text.contains("u0040") || text.contains("U00000040")
}

/// The value, or `None` for a refusal, which must be one line.
fn ok<T>(parsed: Result<T, String>, what: &str, text: &str) -> Option<T> {
    match parsed {
        Ok(v) => Some(v),
        Err(e) => {
            assert!(
                !e.contains('\n'),
                "{what}({text:?}) refused in more than one line: {e:?}"
            );
            None
        }
    }
}

fn written<T>(text: &str, value: T) -> AsWritten<T> {
    AsWritten {
        text: text.to_owned(),
        value,
    }
}

/// The table's TOML (what `GET /routes` answers), parsed again: it must be.
fn reads_back(table: &Table) -> Table {
    match Table::of_toml(&table.toml, Path::new("GET /routes")) {
        Ok(back) => back,
        Err(e) => panic!("the flags' TOML does not read back: {e}\n{}", table.toml),
    }
}

/// Routes without where they and a `pool=NAME` were written (the flag, or the document's line).
fn unplaced(routes: &[RouteSpec]) -> Vec<RouteSpec> {
    let mut routes = routes.to_vec();
    for r in &mut routes {
        r.at.clear();
        if let Some(RoutePool::Named { at, .. }) = r.pool.as_mut() {
            at.clear();
        }
    }
    routes
}

/// Builds the table as the server would (HTTP/2 and HTTP/3 answers too): no panic, a one-line
/// refusal. Whether it built (`false` too when skipped for a large `size=` body).
fn build(table: &Table) -> bool {
    let big = |n: u64| n > BUILT_SIZE && n <= 1 << 30;
    let routes_big = (table.routes.iter()).any(|r| matches!(r.body, BodySpec::Size(n) if big(n)));
    let phases_big =
        (table.phases.iter()).any(|p| matches!(p.patch.body, Some(BodySpec::Size(n)) if big(n)));
    if routes_big || phases_big {
        return false;
    }
    let base = ResponseSpec {
        status: 200,
        headers: Vec::new(),
        body: b"statico".to_vec(),
    };
    match Routes::build(table, &Common::new(base, true, 1, None), None) {
        Ok(_) => true,
        Err(e) => {
            let e = format!("{e:#}");
            assert!(
                !e.contains('\n'),
                "Routes::build refused in more than one line: {e:?}\n{}",
                table.toml
            );
            false
        }
    }
}

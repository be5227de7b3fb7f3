//! The layers of `src/` import one way: down the path a request's bytes take (docs/architecture.md).
//! Every `crate::NAME` a module's code names (comments and unit-test modules aside) must be a layer
//! below its own, so a cycle between folders, or a protocol that reaches up into a connection, fails
//! here rather than in a reader's head.

use std::path::Path;

/// Top to bottom: each may use only the ones after it.
const LAYERS: [&str; 12] = [
    "server", "check", "config", "cli", "control", "runtime", "conn", "proto", "catalog", "kernel",
    "observe", "shutdown",
];

fn rank(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == name)
}

/// The code of a source file without comments and without its `#[cfg(test)] mod tests`.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules `crate::…` paths in `code` name.
fn named(code: &str) -> Vec<String> {
    code.match_indices("crate::")
        .map(|(at, _)| {
            code[at + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_layer_imports_only_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut wrong = Vec::new();
    for path in &all {
        let relative = path.strip_prefix(&src).unwrap();
        let top = relative.iter().next().unwrap().to_str().unwrap();
        let top = top.trim_end_matches(".rs");
        let Some(own) = rank(top) else {
            assert!(
                ["lib", "main"].contains(&top),
                "{top} is in no layer: add it to LAYERS"
            );
            continue;
        };
        let text = std::fs::read_to_string(path).unwrap();
        for name in named(&code(&text)) {
            match rank(&name) {
                Some(r) if r >= own => {}
                Some(_) => wrong.push(format!("{} uses crate::{name}", relative.display())),
                None => wrong.push(format!(
                    "{}: crate::{name} is in no layer",
                    relative.display()
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports up the layers:\n{}",
        wrong.join("\n")
    );
    assert!(all.len() > 40, "read {} files", all.len());
}

/// The runtimes only move bytes: a held answer's pool, queue and ticket are the catalog's delivery
/// machine's, reached through the connection (`Connection::queued`, `Connection::wait_with`), so no
/// runtime names them.
#[test]
fn no_runtime_knows_pools_or_tickets() {
    let runtime = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/runtime");
    let mut all = Vec::new();
    files(&runtime, &mut all);
    let mut wrong = Vec::new();
    for path in &all {
        let text = code(&std::fs::read_to_string(path).unwrap());
        for name in ["route::pool", "route::load", "Fate", "Ticket"] {
            if text.contains(name) {
                wrong.push(format!("{} names {name}", path.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(all.len() > 3, "read {} files", all.len());
}

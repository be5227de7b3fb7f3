//! The layers of `src/` import one way: down the path a request's bytes take (docs/architecture.md).
//! Every `crate::NAME` a module's code names (comments and unit-test modules aside) must be a layer
//! below its own, so a cycle between folders, or a protocol that reaches up into a connection, fails
//! here rather than in a reader's head.

use std::path::Path;

/// Top to bottom: each may use only the ones after it.
const LAYERS: [&str; 13] = [
    "server", "check", "config", "cli", "control", "side", "runtime", "conn", "proto", "catalog",
    "kernel", "observe", "shutdown",
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

/// The type names declared (`struct`, `enum`, `trait`, `type`, `union`) in a file's code, once each.
fn declared_types(code: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for line in code.lines() {
        let mut words = line.split_whitespace().skip_while(|w| w.starts_with("pub"));
        let (Some(kind), Some(name)) = (words.next(), words.next()) else {
            continue;
        };
        if ["struct", "enum", "trait", "type", "union"].contains(&kind) {
            let name: String = name
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.starts_with(|c: char| c.is_ascii_uppercase()) {
                names.insert(name);
            }
        }
    }
    names
}

/// Type names that two files of `src/` still both declare. The list may only shrink: a name fixed
/// must leave it (the test says so), and a new duplicate fails.
const SHARED_NAMES: [&str; 20] = [
    "Body",
    "ConnWake",
    "Deadlines",
    "Ended",
    "Http3",
    "Kind",
    "Limits",
    "Next",
    "Output",
    "Route",
    "RoutesFile",
    "Slot",
    "State",
    "Store",
    "Timers",
    "TlsConfig",
    "TlsOptions",
    "UringOptions",
    "Worker",
    "Sleep",
];

#[test]
fn one_type_per_name() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut by_name: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for path in &all {
        let relative = path.strip_prefix(&src).unwrap().display().to_string();
        for name in declared_types(&code(&std::fs::read_to_string(path).unwrap())) {
            by_name.entry(name).or_default().push(relative.clone());
        }
    }
    let shared: Vec<_> = by_name
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .collect();
    let new: Vec<_> = (shared.iter())
        .filter(|(name, _)| !SHARED_NAMES.contains(&name.as_str()))
        .map(|(name, files)| format!("{name}: {}", files.join(", ")))
        .collect();
    assert!(new.is_empty(), "one name, two types:\n{}", new.join("\n"));
    let fixed: Vec<_> = (SHARED_NAMES.iter())
        .filter(|name| !shared.iter().any(|(n, _)| n == *name))
        .collect();
    assert!(
        fixed.is_empty(),
        "no longer shared, take off SHARED_NAMES: {fixed:?}"
    );
    assert!(by_name.contains_key("Connection"), "read the declarations");
}

/// The `static` items (and `thread_local!`s) `code` declares: `static NAME:` or `static mut NAME:`
/// at an item's start, not a `'static` lifetime.
fn statics(code: &str) -> Vec<String> {
    let tokens: Vec<&str> = code
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '\'' || c == '!'))
        .filter(|t| !t.is_empty())
        .collect();
    let mut found = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let next = |n: usize| tokens.get(i + n).copied().unwrap_or("");
        match *token {
            "thread_local!" => found.push("thread_local!".to_string()),
            "static" => {
                let name = if next(1) == "mut" { next(2) } else { next(1) };
                if name.starts_with(|c: char| c.is_ascii_uppercase() || c == '_') {
                    found.push(format!("static {name}"));
                }
            }
            _ => {}
        }
    }
    found
}

/// The catalog is built per server and handed to whoever needs it: a process-wide `static` (a
/// pause state, a clock, a counter) would be shared by two servers in one process.
#[test]
fn the_catalog_declares_no_static_item() {
    let catalog = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/catalog");
    let mut all = Vec::new();
    files(&catalog, &mut all);
    let mut found = Vec::new();
    for path in &all {
        let text = std::fs::read_to_string(path).unwrap();
        let code: String = (text.lines())
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        for item in statics(&code) {
            found.push(format!("{}: {item}", path.display()));
        }
    }
    assert!(
        found.is_empty(),
        "process-wide state in the catalog (make it a handle the catalog carries):\n{}",
        found.join("\n")
    );
    assert!(all.len() > 10, "read {} files", all.len());
    assert_eq!(
        statics(
            "static A: u8 = 0;\nfn f() -> &'static str { static mut B: u8 = 0; }\nthread_local! {}"
        ),
        ["static A", "static B", "thread_local!"]
    );
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
        for name in ["model::pool", "model::load", "Fate", "Ticket"] {
            if text.contains(name) {
                wrong.push(format!("{} names {name}", path.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(all.len() > 3, "read {} files", all.len());
}

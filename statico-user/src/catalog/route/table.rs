//! A routes table as written: the routes, pools and phases that come into force together — at
//! start-up (the flags, then `--routes FILE`), on `PUT /routes` (a TOML body) and on SIGHUP (the
//! flags, then the file read again). It keeps its own text as a `--routes` TOML document, which is
//! what `GET /routes` answers: flags are written back as the tables they are equivalent to, and a
//! file's or a body's text as it was given, so what is read back can be put back.

use std::path::Path;

use super::phase_spec::PhaseSpec;
use super::pool_spec::PoolSpec;
use super::spec::{parse_toml_doc_from, RouteSpec, RoutesDoc};

/// One table of routes, pools and phases, with its TOML text.
#[derive(Clone, Debug, Default)]
pub struct Table {
    pub routes: Vec<RouteSpec>,
    /// Each with where it was written.
    pub pools: Vec<(PoolSpec, String)>,
    pub phases: Vec<PhaseSpec>,
    /// The table as a `--routes` document.
    pub toml: String,
}

/// A flag as it was written, and what it says.
#[derive(Clone, Debug)]
pub struct Written<T> {
    pub text: String,
    pub value: T,
}

impl Table {
    /// The flags' table: `--pool`, `--route` and `--phase` in that order.
    pub fn of_flags(
        pools: &[Written<PoolSpec>],
        routes: &[Written<RouteSpec>],
        phases: &[Written<PhaseSpec>],
    ) -> Table {
        let mut toml = String::new();
        for (kind, text) in (pools.iter().map(|p| ("pool", &p.text)))
            .chain(routes.iter().map(|r| ("route", &r.text)))
            .chain(phases.iter().map(|p| ("phase", &p.text)))
        {
            toml.push_str(&flag_as_toml(kind, text));
        }
        Table {
            routes: routes.iter().map(|r| r.value.clone()).collect(),
            pools: (pools.iter())
                .map(|p| (p.value.clone(), format!("--pool {:?}", p.value.name)))
                .collect(),
            phases: phases.iter().map(|p| p.value.clone()).collect(),
            toml,
        }
    }

    /// A TOML document (a `PUT /routes` body) named `origin` in errors, its relative `@FILE` paths
    /// from the working directory.
    pub fn of_toml(text: &str, origin: &Path) -> Result<Table, String> {
        Table::of_toml_in(text, origin, None)
    }

    /// A TOML document whose relative `@FILE` paths start at `base_dir`.
    fn of_toml_in(text: &str, origin: &Path, base_dir: Option<&Path>) -> Result<Table, String> {
        let RoutesDoc {
            routes,
            pools,
            phases,
        } = parse_toml_doc_from(text, origin, base_dir)?;
        Ok(Table {
            routes,
            pools,
            phases,
            toml: text.to_owned(),
        })
    }

    /// `--routes FILE` read now.
    pub fn of_file(path: &Path) -> Result<Table, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
        Table::of_toml_in(&text, path, path.parent())
    }

    /// This table, then `more` (the flags, then a file).
    pub fn and(mut self, more: Table) -> Table {
        self.routes.extend(more.routes);
        self.pools.extend(more.pools);
        // Unnamed phases are numbered across the table, the flags' first.
        let before = self.phases.len();
        self.phases
            .extend(more.phases.into_iter().enumerate().map(|(i, mut p)| {
                if !p.named {
                    p.name = format!("phase{}", before + i + 1);
                }
                p
            }));
        if !self.toml.is_empty() && !more.toml.is_empty() {
            self.toml.push('\n');
        }
        self.toml.push_str(&more.toml);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty() && self.pools.is_empty() && self.phases.is_empty()
    }
}

/// A `--route`, `--pool` or `--phase` flag as the `[[route]]`, `[[pool]]` or `[[phase]]` table it is
/// equivalent to (its keys are the same; repeated `header`s become an array).
fn flag_as_toml(kind: &str, text: &str) -> String {
    let mut tokens = text.split_whitespace().peekable();
    let mut keys: Vec<(String, Vec<String>)> = Vec::new();
    let mut put = |key: &str, value: &str| match keys.iter_mut().find(|(k, _)| k == key) {
        Some((_, values)) => values.push(value.to_owned()),
        None => keys.push((key.to_owned(), vec![value.to_owned()])),
    };
    match kind {
        "pool" => put("name", tokens.next().unwrap_or_default()),
        "route" => {
            if let Some(first) = tokens.next_if(|t| !t.starts_with('/') && *t != "*") {
                put("methods", first);
            }
            put("path", tokens.next().unwrap_or_default());
        }
        _ => {}
    }
    for token in tokens {
        match token.split_once('=') {
            Some((k, v)) => put(k, v),
            None => put("path", token),
        }
    }
    let mut out = format!("[[{kind}]]\n");
    for (key, values) in keys {
        let quoted: Vec<String> = values.iter().map(|v| quote(v)).collect();
        let value = match (key.as_str(), quoted.len()) {
            ("methods", _) => {
                let methods: Vec<String> = values[0].split(',').map(quote).collect();
                format!("[{}]", methods.join(", "))
            }
            (_, 1) => quoted[0].clone(),
            _ => format!("[{}]", quoted.join(", ")),
        };
        out.push_str(&format!("{} = {value}\n", quote_key(&key)));
    }
    out.push('\n');
    out
}

fn quote(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

fn quote_key(key: &str) -> String {
    match key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        true => key.to_owned(),
        false => quote(key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::route::phase_spec::parse_phase;
    use crate::catalog::route::pool_spec::parse_pool;
    use crate::catalog::route::spec::{parse_spec, RoutePool};

    fn written<T>(text: &str, parse: impl Fn(&str) -> Result<T, String>) -> Written<T> {
        Written {
            text: text.into(),
            value: parse(text).unwrap(),
        }
    }

    #[test]
    fn flags_read_back_as_toml_parse_to_the_same_table() {
        let routes = [
            written(
                "GET,HEAD /api/* status=200,503:1% header=A:b header=C:d delay=10ms pool=db",
                parse_spec,
            ),
            written("/health body=\"ok\"", parse_spec),
        ];
        let pools = [written("db capacity=2 queue=5", parse_pool)];
        let phases = [written("at=1s for=2s /api/* status=503", |s| {
            parse_phase(s, 0)
        })];
        let table = Table::of_flags(&pools, &routes, &phases);
        let back = Table::of_toml(&table.toml, Path::new("GET /routes")).unwrap();
        // Where a `pool=NAME` was written differs: the flag, or the line of the document.
        let unplaced = |routes: &[RouteSpec]| -> Vec<RouteSpec> {
            let mut routes = routes.to_vec();
            for r in &mut routes {
                if let Some(RoutePool::Named { at, .. }) = r.pool.as_mut() {
                    at.clear();
                }
            }
            routes
        };
        assert_eq!(
            unplaced(&back.routes),
            unplaced(&table.routes),
            "{}",
            table.toml
        );
        assert_eq!(back.pools[0].0, table.pools[0].0);
        assert_eq!(back.phases[0].keys, table.phases[0].keys);
        assert_eq!(back.phases[0].window, table.phases[0].window);
    }
}

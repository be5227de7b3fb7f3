//! A routes table as written: the routes, pools and phases that come into force together — at
//! start-up (the flags, then `--routes FILE`), on `PUT /routes` (a TOML body) and on SIGHUP (the
//! flags, then the file read again). It keeps its own text as a `--routes` TOML document, which is
//! what `GET /routes` answers: flags are written back as the tables they are equivalent to, and a
//! file's or a body's text as it was given, so what is read back can be put back.
//!
//! A document's `[[route]]`, `[[pool]]` and `[[phase]]` tables are each read by their own parser
//! ([`super::spec`], [`super::pool_spec`], [`super::phase_spec`]), the same keys as the flags';
//! an error names the document and the line: `routes.toml:7: delay "…": …`.

use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use toml::{Spanned, Value};

use super::phase_spec::{toml_phase, PhaseSpec};
use super::pool_spec::{PoolKeys, PoolSpec};
use super::spec::{one_text, toml_route, Located, RouteSpec, TomlRoute};

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
pub struct AsWritten<T> {
    pub text: String,
    pub value: T,
}

impl Table {
    /// The flags' table: `--pool`, `--route` and `--phase` in that order.
    pub fn of_flags(
        pools: &[AsWritten<PoolSpec>],
        routes: &[AsWritten<RouteSpec>],
        phases: &[AsWritten<PhaseSpec>],
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

    /// A TOML document named `origin` in errors, whose relative `@FILE` paths start at `base_dir`
    /// (none: the working directory).
    fn of_toml_in(text: &str, origin: &Path, base_dir: Option<&Path>) -> Result<Table, String> {
        let at = |span: Option<Range<usize>>| match span {
            Some(span) => format!("{}:{}", origin.display(), line_of(text, span.start)),
            None => origin.display().to_string(),
        };
        let file: RoutesFile = toml::from_str(text).map_err(|e| {
            let message = e.message().trim().replace('\n', "; ");
            format!("{}: {message}", at(e.span()))
        })?;
        if file.route.is_empty() {
            let shown = origin.display();
            return Err(format!(
                "{shown}: no routes; expected [[route]] tables with path = \"/...\""
            ));
        }
        let routes = file
            .route
            .iter()
            .map(|route| {
                let place = at(Some(route.span()));
                toml_route(route, base_dir, place)
                    .map_err(|(span, e)| format!("{}: {e}", at(Some(span))))
            })
            .collect::<Result<_, _>>()?;
        let pools = file
            .pool
            .iter()
            .map(|pool| {
                let spec =
                    toml_pool(pool).map_err(|(span, e)| format!("{}: {e}", at(Some(span))))?;
                Ok((spec, at(Some(pool.span()))))
            })
            .collect::<Result<_, String>>()?;
        let phases = (file.phase.iter().enumerate())
            .map(|(i, phase)| {
                let place = at(Some(phase.span()));
                toml_phase(phase.get_ref(), i, place.clone(), base_dir)
                    .map_err(|e| format!("{place}: [[phase]] {e}"))
            })
            .collect::<Result<_, String>>()?;
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

/// A `--routes` document: `[[route]]`, `[[pool]]` and `[[phase]]` tables and nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RoutesFile {
    #[serde(default)]
    route: Vec<Spanned<TomlRoute>>,
    #[serde(default)]
    pool: Vec<Spanned<TomlPool>>,
    #[serde(default)]
    phase: Vec<Spanned<toml::Table>>,
}

/// One `[[pool]]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlPool {
    name: Option<Spanned<Value>>,
    capacity: Option<Spanned<Value>>,
    queue: Option<Spanned<Value>>,
    #[serde(rename = "queue-timeout")]
    queue_timeout: Option<Spanned<Value>>,
    shed: Option<Spanned<Value>>,
}

/// One `[[pool]]` table as a pool, through the flag's key parsers.
fn toml_pool(table: &Spanned<TomlPool>) -> Result<PoolSpec, Located> {
    let pool = table.get_ref();
    let Some(name) = &pool.name else {
        return Err((
            table.span(),
            "the pool has no name; expected name = \"NAME\"".into(),
        ));
    };
    let name = one_text("name", name)?;
    let mut keys = PoolKeys::default();
    let keyed = [
        ("capacity", &pool.capacity),
        ("queue", &pool.queue),
        ("queue-timeout", &pool.queue_timeout),
        ("shed", &pool.shed),
    ];
    for (key, value) in keyed {
        if let Some(value) = value {
            let text = one_text(key, value)?;
            keys.set(key, &text).map_err(|e| (value.span(), e))?;
        }
    }
    keys.finish(&name).map_err(|e| (table.span(), e))
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let before = text.as_bytes().get(..offset).unwrap_or(text.as_bytes());
    before.iter().filter(|&&b| b == b'\n').count() + 1
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
    use crate::catalog::model::dist::Dist;
    use crate::catalog::model::fault::Fault;
    use crate::catalog::route::phase_spec::parse_phase;
    use crate::catalog::route::pool_spec::parse_pool;
    use crate::catalog::route::spec::{parse_spec, BodySpec, RoutePool};
    use std::time::Duration;

    fn written<T>(text: &str, parse: impl Fn(&str) -> Result<T, String>) -> AsWritten<T> {
        AsWritten {
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
            written(
                "/pkg.Svc/* grpc-status=UNAVAILABLE:5% grpc-message=busy events=3 gap=1ms size=8",
                parse_spec,
            ),
            written("/grpc.health.v1.Health/* health=NOT_SERVING", parse_spec),
        ];
        let pools = [written("db capacity=2 queue=5", parse_pool)];
        let phases = [written("at=1s for=2s /api/* status=503", |s| {
            parse_phase(s, 0)
        })];
        let table = Table::of_flags(&pools, &routes, &phases);
        let back = Table::of_toml(&table.toml, Path::new("GET /routes")).unwrap();
        // Where a route and its `pool=NAME` were written differ: the flag, or the line of the
        // document.
        let unplaced = |routes: &[RouteSpec]| -> Vec<RouteSpec> {
            let mut routes = routes.to_vec();
            for r in &mut routes {
                r.at.clear();
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
        assert_eq!(back.phases[0].patch, table.phases[0].patch);
        assert_eq!(back.phases[0].window, table.phases[0].window);
    }

    fn spec(s: &str) -> RouteSpec {
        parse_spec(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    /// A scratch directory for file tests, unique to the test.
    fn scratch(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("route-table-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    const ROUTES: &str = r#"# three routes
[[route]]
path = "/health"
body = "ok"

[[route]]
name = "api"
methods = ["get", "HEAD"]
path = "/api/*"
status = "503:10%,429:5%"
header = ["Cache-Control: no-store", "X-Served-By: statico"]
delay = "lognormal:10ms:80ms"
body-delay = "1ms"
fault = "reset:0.1%"
body = "@body.txt"

[[route]]
methods = "POST,PUT"
path = "/upload"
status = 201
size = 1024
rate = "1m"
"#;

    #[test]
    fn toml_file_with_three_routes() {
        let dir = scratch("toml");
        std::fs::write(dir.join("body.txt"), "api body").unwrap();
        let file = dir.join("routes.toml");
        std::fs::write(&file, ROUTES).unwrap();
        let routes = Table::of_file(&file).unwrap().routes;
        assert_eq!(routes.len(), 3);
        assert_eq!(
            routes[0],
            RouteSpec {
                body: BodySpec::Text(b"ok".to_vec()),
                at: format!("{}:2", file.display()),
                ..spec("/health")
            }
        );
        let api = &routes[1];
        assert_eq!(api.name, "api");
        assert_eq!(api.methods, ["GET", "HEAD"]);
        assert_eq!(api.status_mix, [(503, 0.1), (429, 0.05)]);
        assert_eq!(api.headers[1], ("X-Served-By".into(), "statico".into()));
        assert_eq!(api.delay, Dist::parse("lognormal:10ms:80ms").ok());
        assert_eq!(api.body_delay, Some(Dist::Fixed(Duration::from_millis(1))));
        assert_eq!(api.faults, [(Fault::Reset, 0.001)]);
        assert_eq!(
            api.body,
            BodySpec::File(dir.join("body.txt"), b"api body".to_vec())
        );
        let upload = &routes[2];
        assert_eq!(upload.name, "POST,PUT /upload");
        assert_eq!(
            (upload.status, &upload.body, upload.rate),
            (201, &BodySpec::Size(1024), Some(1 << 20))
        );
        assert!(Table::of_file(&dir.join("none.toml"))
            .unwrap_err()
            .contains("none.toml: cannot read: "));
    }

    fn toml_err(text: &str) -> String {
        Table::of_toml(text, Path::new("routes.toml")).expect_err(text)
    }

    #[test]
    fn toml_errors_name_file_and_line() {
        let text = "[[route]]\npath = \"/a\"\n\n[[route]]\npath = \"/b\"\nstatus = 200\ndelay = \"lognormal:80ms:10ms\"\n";
        assert_eq!(
            toml_err(text),
            "routes.toml:7: delay \"lognormal:80ms:10ms\": p99 (10ms) is below p50 (80ms); expected lognormal:P50:P99"
        );
        let e = toml_err("[[route]]\npath = \"/a\"\ncolour = \"red\"\n");
        assert!(
            e.starts_with("routes.toml:3: unknown field `colour`"),
            "{e}"
        );
        let e = toml_err("[[route]]\npath = \"/a\"\n\n[server]\nport = 1\n");
        assert!(
            e.starts_with("routes.toml:4: unknown field `server`"),
            "{e}"
        );
        let e = toml_err("[[route]]\npath = \"/a\nstatus = 200\n");
        assert!(e.starts_with("routes.toml:2: "), "{e}");
        let e = toml_err("[[route]]\npath = \"/a\"\n\n[[route]]\nstatus = 200\n");
        assert!(e.starts_with("routes.toml:4: the route has no path"), "{e}");
        let e = toml_err("[[route]]\npath = \"/a\"\nheader = 5\n");
        assert_eq!(
            e,
            "routes.toml:3: header must be a string or an array of strings"
        );
        let e = toml_err("[[route]]\npath = \"/a\"\nrate = 1.5\n");
        assert_eq!(e, "routes.toml:3: rate must be a string or an integer");
        let e = toml_err("[[route]]\npath = \"/a\"\nmethods = [\"GET\", \"G T\"]\n");
        assert!(
            e.starts_with("routes.toml:3: methods \"G T\": \"G T\" is not a method"),
            "{e}"
        );
        let e = toml_err("[[route]]\npath = \"/a\"\nbody = \"@nope.txt\"\n");
        assert!(
            e.starts_with("routes.toml:3: body \"@nope.txt\": cannot read nope.txt: "),
            "{e}"
        );
        assert_eq!(
            toml_err(""),
            "routes.toml: no routes; expected [[route]] tables with path = \"/...\""
        );
    }

    #[test]
    fn toml_spaces_and_single_strings() {
        let text = "[[route]]\npath = \"/\"\nbody = \"text with spaces\"\nheader = \"X-A: b c\"\nsize = \"64k\"\n";
        assert!(toml_err(text).contains("body and size can't both be given"));
        let text = "[[route]]\npath = \"/\"\nbody = \"text with spaces\"\nheader = \"X-A: b c\"\n";
        let r = Table::of_toml(text, Path::new("r.toml")).unwrap().routes;
        assert_eq!(r[0].body, BodySpec::Text(b"text with spaces".to_vec()));
        assert_eq!(r[0].headers, [("X-A".into(), "b c".into())]);
    }
}

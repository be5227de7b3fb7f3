//! `--admin ADDR:PORT`: the control API, on a listener of its own, served by the main thread (never
//! a worker), one short connection at a time like `--metrics`. It changes the server during a run
//! without a restart:
//!
//! | request | does |
//! |---|---|
//! | `GET /routes` | the routes table in force, as a `--routes` TOML document |
//! | `PUT /routes` | a TOML body replaces the routes, pools and phases for the next requests |
//! | `POST /pause?for=DUR`, `POST /resume` | a whole-server pause ([`crate::catalog::model::pause`]) |
//! | `GET /ground-truth` | the routes' ground truth (as `/ground-truth.json`) |
//! | `POST /ground-truth/reset` | that snapshot, then counting from zero |
//!
//! Who may use it: on a loopback address, anyone on the machine (as for `--metrics`); on any other,
//! only a client with `--admin-token FILE`'s token (`Authorization: Bearer …`, compared in constant
//! time) — start-up refuses a non-loopback `--admin` without one. The port is served by the side-port
//! server ([`crate::side`]): each connection on its own, with deadlines, a lingering close; a request
//! without the token, or to a path or method the API does not have, is refused at its head, before
//! its body is read; a body over [`MAX_BODY`] gets 413.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::catalog::route::table::Table;
use crate::catalog::Catalog;
use crate::side::{Door, Reply, Service, SideHead, SideRequest};

/// The largest `PUT /routes` body.
pub const MAX_BODY: u64 = 1 << 20;

/// What answers one request of the API (its path and method screened).
type Handler = fn(&SideRequest, &Catalog) -> Reply;

/// The control API: every path and method it takes, and what answers each (given the request and
/// the catalog). A path's methods are its `Allow` field; any other path is a 404 that lists these.
const API: [(&str, &str, Handler); 6] = [
    ("/routes", "GET", |_, c| get_routes(c)),
    ("/routes", "PUT", |r, c| put_routes(&r.body, c)),
    ("/pause", "POST", |r, c| pause(&r.head.query, c)),
    ("/resume", "POST", |_, c| resume(c)),
    ("/ground-truth", "GET", |_, c| ground_truth(c, false)),
    ("/ground-truth/reset", "POST", |_, c| ground_truth(c, true)),
];

/// The control API's listener and who may use it.
pub struct Admin {
    door: Door,
    token: Option<String>,
}

/// `--admin` and `--admin-token` as given, checked before anything else starts (exit 2 on error).
pub fn check(addr: Option<SocketAddr>, token_file: Option<&Path>) -> Result<Option<String>> {
    let Some(addr) = addr else { return Ok(None) };
    let Some(file) = token_file else {
        if !addr.ip().is_loopback() {
            anyhow::bail!("--admin {addr}: not a loopback address; give --admin-token FILE (a bearer token every request must carry) or listen on 127.0.0.1");
        }
        return Ok(None);
    };
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("--admin-token {}: cannot read", file.display()))?;
    let token = text.trim();
    if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        anyhow::bail!(
            "--admin-token {}: the file must hold one token (no spaces), like the output of openssl rand -hex 32",
            file.display()
        );
    }
    Ok(Some(token.to_owned()))
}

/// Binds `--admin`'s listener; the start-up line says where.
pub fn listen(addr: Option<SocketAddr>, token: Option<String>) -> Result<Option<Admin>> {
    let Some(addr) = addr else { return Ok(None) };
    let door = Door::bind("--admin", addr, MAX_BODY)?;
    let guarded = if token.is_some() {
        " (bearer token required)"
    } else {
        ""
    };
    eprintln!("statico: admin on http://{}/{guarded}", door.local_addr()?);
    Ok(Some(Admin { door, token }))
}

/// What SIGHUP and `PUT /routes` rebuild the routes from: the flags' own table, and the file.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    pub flags: Table,
    pub file: Option<PathBuf>,
}

/// SIGHUP: `--routes FILE` read again, after the flags' routes, put in force; a broken file keeps
/// the routes in force. Says which on stderr.
pub fn reload_routes(catalog: &Catalog, sources: &Sources) {
    let Some(file) = &sources.file else { return };
    let table = Table::of_file(file).map(|t| sources.flags.clone().and(t));
    match table.map_err(anyhow::Error::msg).and_then(|t| {
        let generation = catalog.replace_routes(&t)?;
        Ok((generation, t))
    }) {
        Ok((generation, t)) => eprintln!(
            "statico: SIGHUP: routes: generation {generation}: {}",
            summary(&t)
        ),
        Err(e) => eprintln!("statico: SIGHUP: kept the routes in force: {e:#}"),
    }
}

fn summary(t: &Table) -> String {
    format!(
        "{} routes, {} pools, {} phases",
        t.routes.len(),
        t.pools.len(),
        t.phases.len()
    )
}

/// Answers the control API on `admin` until the future is dropped (shutdown).
pub async fn serve(admin: Admin, catalog: &Catalog) {
    let api = Api {
        token: admin.token.as_deref(),
        catalog,
    };
    crate::side::serve(admin.door, &api).await;
}

/// The control API as a side port's service.
struct Api<'a> {
    token: Option<&'a str>,
    catalog: &'a Catalog,
}

impl Service for Api<'_> {
    fn screen(&self, head: &SideHead) -> Option<Reply> {
        if !authorized(head, self.token) {
            return Some(unauthorized());
        }
        let methods: Vec<&str> = (API.iter())
            .filter(|(path, ..)| *path == head.path)
            .map(|(_, method, _)| *method)
            .collect();
        if methods.is_empty() {
            return Some(Reply::text(
                404,
                &format!("the control API has {}\n", paths()),
            ));
        }
        if !methods.contains(&head.method.as_str()) {
            return Some(Reply::not_allowed(&head.path, &methods.join(", ")));
        }
        None
    }

    fn answer(&self, request: SideRequest) -> Reply {
        let head = &request.head;
        match API
            .iter()
            .find(|(path, method, _)| *path == head.path && *method == head.method)
        {
            Some((.., handler)) => handler(&request, self.catalog),
            None => Reply::text(404, &format!("{}: not in the control API\n", head.path)),
        }
    }
}

/// The API's paths, each once, in a sentence: `/a, /b and /c`.
fn paths() -> String {
    let mut paths: Vec<&str> = API.iter().map(|(path, ..)| *path).collect();
    paths.dedup();
    match paths.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

fn unauthorized() -> Reply {
    Reply {
        fields: vec![("WWW-Authenticate", "Bearer".into())],
        ..Reply::text(
            401,
            "a bearer token is required: Authorization: Bearer TOKEN (--admin-token)\n",
        )
    }
}

/// Whether `head` may use the API: no token is needed, or it carries the token.
fn authorized(head: &SideHead, token: Option<&str>) -> bool {
    let Some(token) = token else { return true };
    // The scheme is case-insensitive (RFC 9110 §11.1); the token is not.
    let given = (head.authorization.as_deref())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map_or("", |(_, token)| token.trim());
    same_token(given.as_bytes(), token.as_bytes())
}

/// Whether `given` is `token`, in a time that depends on the token's length only: every byte of the
/// token is compared (against 0 past the end of `given`), so neither where a guess goes wrong nor how
/// long it is shows (`subtle`'s slice comparison returns at once on a length mismatch).
fn same_token(given: &[u8], token: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    let mut same = given.len().ct_eq(&token.len());
    for (i, t) in token.iter().enumerate() {
        same &= given.get(i).copied().unwrap_or(0).ct_eq(t);
    }
    bool::from(same)
}

fn get_routes(catalog: &Catalog) -> Reply {
    let toml = (catalog.routes()).map_or(String::new(), |r| r.table().toml.clone());
    Reply::ok("application/toml", toml)
}

/// `PUT /routes`: the body as a `--routes` document, put in force; a bad one is a 400 saying why,
/// and the table in force stays.
fn put_routes(body: &[u8], catalog: &Catalog) -> Reply {
    let Ok(text) = std::str::from_utf8(body) else {
        return Reply::text(400, "statico: PUT /routes: the body is not UTF-8 TOML\n");
    };
    let table = Table::of_toml(text, Path::new("PUT /routes")).map_err(anyhow::Error::msg);
    match table.and_then(|t| Ok((catalog.replace_routes(&t)?, t))) {
        Ok((generation, t)) => {
            eprintln!(
                "statico: admin: PUT /routes: generation {generation}: {}",
                summary(&t)
            );
            Reply::json(format!("{{\"generation\":{generation}}}"))
        }
        Err(e) => Reply::text(400, &format!("statico: {e:#}\n")),
    }
}

/// `POST /pause?for=DUR`.
fn pause(query: &str, catalog: &Catalog) -> Reply {
    let value = (query.split('&')).find_map(|kv| kv.strip_prefix("for="));
    let length = match value.map(humantime::parse_duration) {
        Some(Ok(d)) if !d.is_zero() && d <= crate::catalog::model::pause::LONGEST => d,
        Some(Ok(_)) => return Reply::text(400, "for= must be above 0 and at most 1h\n"),
        Some(Err(e)) => return Reply::text(400, &format!("for={}: {e}\n", value.unwrap_or(""))),
        None => return Reply::text(400, "POST /pause?for=DUR, like /pause?for=1.4s\n"),
    };
    if catalog.pauses().inspect(|p| p.pause_for(length)).is_none() {
        return Reply::text(409, "pauses are not installed\n");
    }
    eprintln!(
        "statico: admin: paused for {}",
        humantime::format_duration(length)
    );
    Reply::json(format!("{{\"paused_ms\":{}}}", length.as_millis()))
}

/// `POST /resume`.
fn resume(catalog: &Catalog) -> Reply {
    catalog.pauses().inspect(|p| p.resume());
    eprintln!("statico: admin: resumed");
    Reply::json("{\"resumed\":true}".into())
}

fn ground_truth(catalog: &Catalog, reset: bool) -> Reply {
    match catalog.truth() {
        Some(truth) if reset => Reply::json(truth.reset()),
        Some(truth) => Reply::json(truth.json()),
        None => Reply::text(404, "no routes, so no ground truth\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(authorization: Option<&str>) -> SideHead {
        SideHead {
            method: "PUT".into(),
            path: "/routes".into(),
            query: String::new(),
            authorization: authorization.map(str::to_owned),
        }
    }

    #[test]
    fn a_token_is_compared_whole_and_the_scheme_in_any_case() {
        assert!(authorized(&head(None), None));
        assert!(authorized(&head(Some("Bearer abc")), Some("abc")));
        assert!(authorized(&head(Some("bearer abc")), Some("abc")));
        for wrong in [
            None,
            Some("Bearer abd"),
            Some("Bearer ab"),
            Some("Bearer abcd"),
            Some("Basic abc"),
        ] {
            assert!(!authorized(&head(wrong), Some("abc")), "{wrong:?}");
        }
        assert!(
            same_token(b"abc", b"abc") && !same_token(b"", b"abc") && !same_token(b"abc\0", b"abc")
        );
    }

    #[test]
    fn pause_wants_a_duration_within_an_hour() {
        let plan = crate::catalog::CatalogPlan {
            pausable: true,
            ..crate::catalog::CatalogPlan::of_response(crate::catalog::response::ResponseSpec {
                status: 200,
                headers: Vec::new(),
                body: Vec::new(),
            })
        };
        let catalog = Catalog::build(&plan).unwrap();
        for query in ["", "for=soon", "for=2h", "for=0s"] {
            assert_eq!(pause(query, &catalog).status, 400, "{query}");
        }
        assert_eq!(pause("for=1s", &catalog).status, 200);
    }

    #[test]
    fn a_path_or_method_the_api_has_not_is_refused_naming_what_it_has() {
        let catalog = Catalog::build(&crate::catalog::CatalogPlan::of_response(
            crate::catalog::response::ResponseSpec {
                status: 200,
                headers: Vec::new(),
                body: Vec::new(),
            },
        ))
        .unwrap();
        let api = Api {
            token: None,
            catalog: &catalog,
        };
        let screened = |method: &str, path: &str| {
            api.screen(&SideHead {
                method: method.into(),
                path: path.into(),
                ..head(None)
            })
        };
        let other = screened("GET", "/nothing").expect("a 404");
        assert_eq!(
            (other.status, other.body.as_str()),
            (
                404,
                "the control API has /routes, /pause, /resume, /ground-truth and /ground-truth/reset\n"
            )
        );
        for (method, path, allow) in [
            ("POST", "/routes", "GET, PUT"),
            ("GET", "/pause", "POST"),
            ("PUT", "/ground-truth", "GET"),
        ] {
            let r = screened(method, path).expect("a 405");
            assert_eq!(
                (r.status, r.fields[0].1.as_str()),
                (405, allow),
                "{method} {path}"
            );
        }
        for (path, method, _) in API {
            assert!(screened(method, path).is_none(), "{method} {path}");
        }
    }

    #[test]
    fn a_non_loopback_admin_needs_a_token() {
        let any: SocketAddr = "0.0.0.0:9000".parse().unwrap();
        let e = check(Some(any), None).unwrap_err().to_string();
        assert!(
            e.contains("--admin 0.0.0.0:9000") && e.contains("--admin-token"),
            "{e}"
        );
        assert_eq!(
            check(Some("127.0.0.1:9000".parse().unwrap()), None).unwrap(),
            None
        );
    }
}

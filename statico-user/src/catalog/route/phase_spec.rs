//! A phase as the user writes it: `--phase 'at=DUR for=DUR [every=DUR] [name=NAME] PATH key=value…'`
//! and `[[phase]]` tables in `--routes FILE`. For its window ([`crate::catalog::model::schedule`]) the routes
//! whose path is written `PATH` answer with the keys given replacing their own. The keys are parsed
//! once, with the phase, by the route's own key parsers into a [`RoutePatch`], so a key means the
//! same in a phase as on a route; building the table applies the patch to each route it names.

use std::path::Path;

use toml::Value;

use super::spec::{PathMatch, RoutePatch, RouteSpec};
use crate::catalog::model::schedule::{Window, WindowKeys, WINDOW_KEYS};

/// One phase: when, which routes, what changes.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseSpec {
    pub name: String,
    /// Whether the name was given (else it is `phaseN`, numbered across the table).
    pub named: bool,
    pub window: Window,
    /// The path as written, and as the routes match it.
    pub path_text: String,
    pub path: PathMatch,
    /// What it changes in each route it names.
    pub patch: RoutePatch,
    /// The route keys as written (`status=503 delay=100ms`), for the start-up line.
    pub written: String,
    /// Where it was written (`--phase "…"`, `FILE:LINE`), for errors.
    pub at: String,
}

const FORM: &str = "expected at=DUR for=DUR [every=DUR] [name=NAME] PATH key=value..., like at=30s for=10s /api/* status=503";

/// What the tokens of a phase say, one `key=value` (or the PATH) at a time.
#[derive(Default)]
pub struct PhaseKeys {
    window: WindowKeys,
    name: Option<String>,
    path: Option<String>,
    keys: Vec<(String, String)>,
}

impl PhaseKeys {
    /// Takes one key: a window key, `name`, `path` (the TOML form), or a route key.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        if key.is_empty() {
            return Err(format!("={value}: a key is missing before the ="));
        }
        if self.window.set(key, value)? {
            return Ok(());
        }
        let slot = match key {
            "name" => &mut self.name,
            "path" => &mut self.path,
            _ => {
                self.keys.push((key.to_owned(), value.to_owned()));
                return Ok(());
            }
        };
        if slot.replace(value.to_owned()).is_some() {
            return Err(format!("{key} given twice"));
        }
        Ok(())
    }

    /// The phase, numbered `index` (0-based) among the phases for its default name; a
    /// `body=@FILE` is read from `base_dir` (a TOML file's directory) when given.
    pub fn finish(
        self,
        index: usize,
        at: String,
        base_dir: Option<&Path>,
    ) -> Result<PhaseSpec, String> {
        let window = self.window.finish()?;
        let Some(path_text) = self.path else {
            return Err(format!("no PATH; {FORM}"));
        };
        let path = PathMatch::parse(&path_text).map_err(|e| format!("path {e}"))?;
        if self.keys.is_empty() {
            return Err(format!(
                "no route key to change ({} only); {FORM}",
                WINDOW_KEYS
            ));
        }
        let patch = RoutePatch::parse(&self.keys, base_dir)?;
        let written: Vec<String> = self.keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
        Ok(PhaseSpec {
            named: self.name.is_some(),
            name: self.name.unwrap_or_else(|| format!("phase{}", index + 1)),
            window,
            path_text,
            path,
            patch,
            written: written.join(" "),
            at,
        })
    }
}

/// Parses the `--phase` flag, the `index`th given (0-based).
pub fn parse_phase(s: &str, index: usize) -> Result<PhaseSpec, String> {
    let mut keys = PhaseKeys::default();
    for token in s.split_whitespace() {
        match token.split_once('=') {
            Some((key, value)) => keys.set(key, value)?,
            None if token.starts_with('/') || token == "*" => keys.set("path", token)?,
            None => return Err(format!("{token:?} is neither key=value nor a PATH; {FORM}")),
        }
    }
    keys.finish(index, format!("--phase {s:?}"), None)
}

/// One `[[phase]]` table: its keys as the flag's, each value as text (an array is one key per item).
pub(super) fn toml_phase(
    table: &toml::Table,
    index: usize,
    place: String,
    base_dir: Option<&Path>,
) -> Result<PhaseSpec, String> {
    let mut keys = PhaseKeys::default();
    for (key, value) in table {
        let items = match value {
            Value::Array(items) => items.iter().collect(),
            one => vec![one],
        };
        for item in items {
            let text = match item {
                Value::String(s) => s.clone(),
                Value::Integer(i) => i.to_string(),
                _ => return Err(format!("{key} must be a string or an integer")),
            };
            keys.set(key, &text)?;
        }
    }
    keys.finish(index, place, base_dir)
}

impl PhaseSpec {
    /// The phase as the start-up lines show it.
    pub fn describe(&self) -> String {
        format!(
            "{} {} {}: {}",
            self.name,
            self.window.describe(),
            self.path_text,
            self.written
        )
    }
}

/// The routes of a table with their phases' versions after them: what [`super::Routes`] builds.
pub struct Phased {
    /// The routes as given, then one version per (phase, route it changes).
    pub specs: Vec<RouteSpec>,
    /// Per route given: its phases' windows, each with the index of the version it answers with.
    pub windows: Vec<Vec<(Window, u16)>>,
    /// Per version: the route it is a version of, its phase's name, and whether it keeps the
    /// route's pool (its spec then names none, so that the pool is not made twice).
    versions: Vec<(usize, String, bool)>,
}

/// `specs` and, after them, each phase's version of each route whose path it names. A phase that
/// names no route's path, or two phases of one route open at once, is the user's error.
pub fn with_phases(specs: &[RouteSpec], phases: &[PhaseSpec]) -> anyhow::Result<Phased> {
    let mut phased = Phased {
        specs: specs.to_vec(),
        windows: vec![Vec::new(); specs.len()],
        versions: Vec::new(),
    };
    for phase in phases {
        let targets: Vec<usize> = (0..specs.len())
            .filter(|&i| specs[i].path == phase.path)
            .collect();
        if targets.is_empty() {
            anyhow::bail!(
                "{}: no route has the path {}; a phase changes the routes written with that path",
                phase.at,
                phase.path_text
            );
        }
        for i in targets {
            phased.add(i, &specs[i], phase)?;
        }
    }
    Ok(phased)
}

impl Phased {
    /// Phase `phase`'s version of route `i`.
    fn add(&mut self, i: usize, route: &RouteSpec, phase: &PhaseSpec) -> anyhow::Result<()> {
        if let Some((_, v)) = (self.windows[i].iter()).find(|(w, _)| w.overlaps(&phase.window)) {
            let other = &self.versions[usize::from(*v) - self.windows.len()].1;
            anyhow::bail!(
                "{}: phase {} overlaps phase {other} on route {}; a route is in one phase at a time",
                phase.at,
                phase.name,
                route.name
            );
        }
        // Its errors, found now or when it is built, name the phase and the route.
        let at = format!("{}: on route {}", phase.at, route.name);
        let mut version =
            (phase.patch.apply(route, &phase.name)).map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        version.at = at;
        let keeps_pool = phase.patch.keeps_pool();
        let index = u16::try_from(self.specs.len())
            .map_err(|_| anyhow::anyhow!("{}: too many routes with phases", phase.at))?;
        self.specs.push(version);
        self.windows[i].push((phase.window, index));
        self.versions.push((i, phase.name.clone(), keeps_pool));
        Ok(())
    }

    /// Each route's pool (an index), a version that keeps its route's pool given that pool.
    pub fn inherit_pools(&self, mut pool_of: Vec<Option<usize>>) -> Vec<Option<usize>> {
        let given = self.windows.len();
        for (k, (route, _, keeps)) in self.versions.iter().enumerate() {
            if *keeps {
                pool_of[given + k] = pool_of[*route];
            }
        }
        pool_of
    }

    /// The phase route `i` answers in, as the ground truth labels it: `base` for a route as given,
    /// the phase's name for a version; none when the table has no phases.
    pub fn phase_name(&self, i: usize) -> Option<String> {
        let given = self.windows.len();
        match (self.versions.is_empty(), i.checked_sub(given)) {
            (true, _) => None,
            (false, None) => Some("base".into()),
            (false, Some(k)) => Some(self.versions[k].1.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::feed::Feed;
    use crate::catalog::model::dist::Dist;
    use crate::catalog::model::events::Count;
    use crate::catalog::route::spec::{parse_spec, BodySpec, EventSpec, RoutePool};
    use std::time::Duration;

    #[test]
    fn a_phase_has_its_window_path_and_keys() {
        let p = parse_phase("at=30s for=10s every=60s /api/* status=503 delay=100ms", 0).unwrap();
        assert_eq!(p.name, "phase1");
        assert_eq!(p.window.at, Duration::from_secs(30));
        assert_eq!(p.window.every, Some(Duration::from_secs(60)));
        assert_eq!(p.path, PathMatch::Prefix("/api/".into()));
        assert_eq!(p.patch.status, Some((503, vec![])));
        assert_eq!(p.patch.delay, Some(Dist::Fixed(Duration::from_millis(100))));
        assert_eq!(p.written, "status=503 delay=100ms");
        let named = parse_phase("name=brownout at=1s for=1s /x delay=1s", 3).unwrap();
        assert_eq!(named.name, "brownout");
    }

    #[test]
    fn bad_phases_say_what_is_missing() {
        assert!(parse_phase("at=1s /x status=503", 0)
            .unwrap_err()
            .contains("for="));
        assert!(parse_phase("at=1s for=1s status=503", 0)
            .unwrap_err()
            .contains("no PATH"));
        assert!(parse_phase("at=1s for=1s /x", 0)
            .unwrap_err()
            .contains("no route key"));
        assert!(parse_phase("at=1s for=1s x /x", 0)
            .unwrap_err()
            .contains("neither key=value nor a PATH"));
    }

    #[test]
    fn a_phases_route_keys_are_parsed_with_it_by_the_routes_parsers() {
        let err = |s: &str| parse_phase(s, 0).unwrap_err();
        assert!(err("at=1s for=1s /x status=abc")
            .starts_with("status \"abc\": \"abc\" is not a status"));
        assert!(err("at=1s for=1s /x colour=red").starts_with("unknown key \"colour\""));
        assert_eq!(
            err("at=1s for=1s /x delay=1ms delay=2ms"),
            "delay given twice"
        );
        assert!(err("at=1s for=1s /x queue=1").starts_with("queue= needs capacity=C"));
        assert!(
            err("at=1s for=1s /x pool=db capacity=1").starts_with("pool=NAME and the pool keys")
        );
    }

    #[test]
    fn a_version_is_its_route_with_the_keys_given_replaced() {
        let route = parse_spec("/x status=404 header=A:b header=C:d delay=1ms body=x").unwrap();
        let phase = parse_phase("at=1s for=1s /x header=E:f size=1k", 0).unwrap();
        let version = &with_phases(std::slice::from_ref(&route), &[phase])
            .unwrap()
            .specs[1];
        assert_eq!(version.headers, [("E".to_string(), "f".to_string())]);
        assert_eq!(version.body, BodySpec::Size(1024));
        assert_eq!(
            (&version.name, version.status, &version.delay),
            (&route.name, route.status, &route.delay)
        );
    }

    /// Route `route`'s version for phase `phase`, or the error naming the phase.
    fn version(route: &str, phase: &str) -> Result<RouteSpec, String> {
        let route = parse_spec(route).unwrap();
        let phase = parse_phase(phase, 0).unwrap();
        with_phases(&[route], &[phase])
            .map(|mut phased| phased.specs.remove(1))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_phases_stream_keys_replace_its_routes_own() {
        let v = version(
            "/sse stream=sse events=5 gap=10ms",
            "at=1s for=1s /sse gap=1s",
        )
        .unwrap();
        let stream = v.stream.unwrap();
        assert_eq!(stream.feed, Feed::Sse);
        assert_eq!(stream.events, Count::Fixed(5));
        assert_eq!(stream.gap, Some(Dist::Fixed(Duration::from_secs(1))));
        let v = version(
            "/sse stream=ndjson event=x",
            "at=1s for=1s /sse events=2 first=1ms",
        )
        .unwrap();
        let stream = v.stream.unwrap();
        assert_eq!(
            (stream.feed, stream.events),
            (Feed::Ndjson, Count::Fixed(2))
        );
        assert_eq!(stream.event, EventSpec::Text("x".into()));
        assert_eq!(stream.first, Some(Dist::Fixed(Duration::from_millis(1))));
        let v = version(
            "/v1/* openai=on model=m gap=10ms",
            "at=1s for=1s /v1/* gap=1s tokens=5",
        )
        .unwrap();
        let openai = v.openai.unwrap();
        assert_eq!(openai.gap, Some(Dist::Fixed(Duration::from_secs(1))));
        assert_eq!(
            (openai.tokens, openai.models),
            (Some(Count::Fixed(5)), vec!["m".to_string()])
        );
        // On a gRPC route they make it server-streaming, as on the route.
        let v = version("/pkg.Svc/M size=8", "at=1s for=1s /pkg.Svc/M events=3").unwrap();
        let stream = v.stream.unwrap();
        assert_eq!((stream.feed, stream.events), (Feed::Grpc, Count::Fixed(3)));
        assert_eq!(stream.event, EventSpec::Reply);
    }

    #[test]
    fn a_phases_stream_key_its_route_has_nothing_for_is_refused_naming_the_phase() {
        let e = version("/x body=ok", "at=1s for=1s /x gap=1s").unwrap_err();
        assert!(
            e.starts_with("--phase \"at=1s for=1s /x gap=1s\": on route /x: gap needs stream=sse|ndjson|chunks (or openai=on)"),
            "{e}"
        );
        let e = version("/v1/* openai=on", "at=1s for=1s /v1/* events=3").unwrap_err();
        assert!(
            e.starts_with("--phase \"at=1s for=1s /v1/* events=3\": on route /v1/*: events can't be given for an openai route"),
            "{e}"
        );
        let e = version("/sse stream=sse", "at=1s for=1s /sse tokens=3").unwrap_err();
        assert!(e.contains("on route /sse: tokens needs openai=on"), "{e}");
        let e = version("/pkg.Svc/M", "at=1s for=1s /pkg.Svc/M event=x").unwrap_err();
        assert!(
            e.contains("on route /pkg.Svc/M: event can't be given for a gRPC route"),
            "{e}"
        );
        // A body given with them takes the stream away first.
        let e = version("/sse stream=sse", "at=1s for=1s /sse body=x gap=1s").unwrap_err();
        assert!(e.contains("gap needs stream="), "{e}");
    }

    #[test]
    fn a_version_keeps_its_routes_pool_unless_the_phase_gives_a_pool_key() {
        let route = parse_spec("/x pool=db").unwrap();
        let phases = [
            parse_phase("name=a at=1s for=1s /x status=503", 0).unwrap(),
            parse_phase("name=b at=3s for=1s /x capacity=2", 1).unwrap(),
            parse_phase("name=c at=5s for=1s /x pool=other", 2).unwrap(),
        ];
        assert!(phases[0].patch.keeps_pool() && !phases[1].patch.keeps_pool());
        let phased = with_phases(&[route], &phases).unwrap();
        // The version that keeps the pool names none: the route's is not made twice.
        assert_eq!(phased.specs[1].pool, None);
        assert!(
            matches!(&phased.specs[2].pool, Some(RoutePool::Own(p)) if p.name == "/x @b" && p.capacity == 2),
            "{:?}",
            phased.specs[2].pool
        );
        assert_eq!(
            phased.specs[3].pool,
            Some(RoutePool::Named {
                name: "other".into(),
                at: "phase c".into()
            })
        );
        let pool_of = phased.inherit_pools(vec![Some(0), None, Some(1), Some(2)]);
        assert_eq!(pool_of, [Some(0), Some(0), Some(1), Some(2)]);
    }
}

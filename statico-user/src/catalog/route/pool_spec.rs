//! A pool as the user writes it: the `--pool 'NAME capacity=C [queue=Q] [queue-timeout=DUR]
//! [shed=503|429|reset|close]'` flag, the same keys on a route (a pool of its own), and `[[pool]]`
//! tables in `--routes FILE`. One parser per key, shared by the three forms; what the keys mean is
//! [`crate::catalog::model::pool`]'s.

use std::time::Duration;

use crate::catalog::model::units::parse_duration;

/// A pool: C servers, a queue, how the overflow is shed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSpec {
    pub name: String,
    pub capacity: usize,
    /// The most requests waiting (`None`: unbounded).
    pub queue: Option<usize>,
    /// How long a request may wait before it is shed.
    pub queue_timeout: Option<Duration>,
    pub shed: Shed,
}

/// What a shed request gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shed {
    /// `503` or `429`: that status with the route's headers and no body.
    Status(u16),
    /// A reset (TCP RST, RST_STREAM, a QUIC stream reset).
    Reset,
    /// A close with no answer (FIN, GOAWAY).
    Close,
}

impl Shed {
    fn parse(value: &str) -> Result<Shed, String> {
        match value {
            "503" => Ok(Shed::Status(503)),
            "429" => Ok(Shed::Status(429)),
            "reset" => Ok(Shed::Reset),
            "close" => Ok(Shed::Close),
            _ => Err(format!("{value:?}: expected 503, 429, reset or close")),
        }
    }

    pub fn name(&self) -> String {
        match self {
            Shed::Status(s) => s.to_string(),
            Shed::Reset => "reset".into(),
            Shed::Close => "close".into(),
        }
    }
}

/// The pool keys, in the order errors list them.
pub const POOL_KEYS: [&str; 4] = ["capacity", "queue", "queue-timeout", "shed"];

/// A pool's keys as they are given, checked when all are in ([`PoolKeys::finish`]).
#[derive(Clone, Debug, Default)]
pub struct PoolKeys {
    capacity: Option<usize>,
    queue: Option<usize>,
    queue_timeout: Option<Duration>,
    shed: Option<Shed>,
}

impl PoolKeys {
    /// Whether `key` is a pool key.
    pub fn is_key(key: &str) -> bool {
        POOL_KEYS.contains(&key)
    }

    /// Whether any key was given.
    pub fn any(&self) -> bool {
        self.capacity.is_some()
            || self.queue.is_some()
            || self.queue_timeout.is_some()
            || self.shed.is_some()
    }

    /// Sets one key; errors start with the key.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let given_twice = match key {
            "capacity" => self.capacity.is_some(),
            "queue" => self.queue.is_some(),
            "queue-timeout" => self.queue_timeout.is_some(),
            _ => self.shed.is_some(),
        };
        if given_twice {
            return Err(format!("{key} given twice"));
        }
        let bad = |e: String| format!("{key} {e}");
        match key {
            "capacity" => match parse_count(value).map_err(bad)? {
                0 => return Err("capacity=0: a pool needs at least one server".into()),
                c => self.capacity = Some(c),
            },
            "queue" => self.queue = Some(parse_count(value).map_err(bad)?),
            "queue-timeout" => {
                self.queue_timeout =
                    Some(parse_duration(value).map_err(|e| bad(format!("{value:?}: {e}")))?)
            }
            "shed" => self.shed = Some(Shed::parse(value).map_err(bad)?),
            _ => {
                return Err(format!(
                    "unknown pool key {key:?}; expected one of {}",
                    POOL_KEYS.join(", ")
                ))
            }
        }
        Ok(())
    }

    /// The pool named `name`, or why the keys do not make one.
    pub fn finish(self, name: &str) -> Result<PoolSpec, String> {
        let Some(capacity) = self.capacity else {
            let given = [
                (self.queue.is_some(), "queue"),
                (self.queue_timeout.is_some(), "queue-timeout"),
                (self.shed.is_some(), "shed"),
            ];
            let key = given.iter().find(|(g, _)| *g).map_or("a pool", |(_, k)| *k);
            return Err(format!(
                "{key}= needs capacity=C: a pool is C servers and a queue in front of them"
            ));
        };
        Ok(PoolSpec {
            name: name.to_owned(),
            capacity,
            queue: self.queue,
            queue_timeout: self.queue_timeout,
            shed: self.shed.unwrap_or(Shed::Status(503)),
        })
    }
}

/// A count: a whole number (at most a million, more than any queue statico could hold).
fn parse_count(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if n <= 1_000_000 => Ok(n),
        _ => Err(format!("{value:?}: expected a whole number up to 1000000")),
    }
}

/// Parses the `--pool` flag: `NAME capacity=C [queue=Q] [queue-timeout=DUR] [shed=…]`.
pub fn parse_pool(s: &str) -> Result<PoolSpec, String> {
    const FORM: &str =
        "expected NAME capacity=C [queue=Q] [queue-timeout=DUR] [shed=503|429|reset|close]";
    let mut tokens = s.split_whitespace();
    let name = tokens
        .next()
        .filter(|n| !n.contains('='))
        .ok_or_else(|| format!("the pool has no NAME; {FORM}"))?;
    let mut keys = PoolKeys::default();
    for token in tokens {
        let (key, value) = token
            .split_once('=')
            .ok_or_else(|| format!("{token:?} is not key=value; {FORM}"))?;
        if !PoolKeys::is_key(key) {
            return Err(format!("unknown key {key:?}; {FORM}"));
        }
        keys.set(key, value)?;
    }
    keys.finish(name)
}

impl std::fmt::Display for PoolSpec {
    /// The flag form, as the start-up line shows it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} capacity={}", self.name, self.capacity)?;
        if let Some(q) = self.queue {
            write!(f, " queue={q}")?;
        }
        if let Some(t) = self.queue_timeout {
            write!(f, " queue-timeout={}", humantime::format_duration(t))?;
        }
        write!(f, " shed={}", self.shed.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_form() {
        let p = parse_pool("db capacity=8 queue=100 queue-timeout=50ms shed=429").unwrap();
        assert_eq!(
            p,
            PoolSpec {
                name: "db".into(),
                capacity: 8,
                queue: Some(100),
                queue_timeout: Some(Duration::from_millis(50)),
                shed: Shed::Status(429),
            }
        );
        assert_eq!(parse_pool("x capacity=1").unwrap().shed, Shed::Status(503));
        assert_eq!(parse_pool("x capacity=1").unwrap().queue, None);
    }

    #[test]
    fn errors_name_the_key() {
        let err = |s: &str| parse_pool(s).unwrap_err();
        assert!(err("db capacity=0").contains("capacity=0"));
        assert!(err("db queue=3").starts_with("queue= needs capacity=C"));
        assert!(err("db capacity=2 shed=500").starts_with("shed \"500\""));
        assert!(err("db capacity=x").starts_with("capacity \"x\""));
        assert!(err("db capacity=1 capacity=2").contains("given twice"));
        assert!(err("capacity=1").contains("no NAME"));
        assert!(err("db capacity=1 colour=red").contains("unknown key"));
        assert!(err("db capacity=1 queue-timeout=soon").starts_with("queue-timeout"));
    }
}

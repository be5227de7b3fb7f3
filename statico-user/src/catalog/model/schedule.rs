//! When something happens during a run: a window `at=DUR for=DUR [every=DUR]` on a clock that starts
//! when its table comes into force. Phases (a route answering differently for a while) and pauses
//! (the whole server answering nothing for a while) are both windows; this module parses the three
//! keys and answers the questions both ask of them — "am I inside, and until when?", "how many have
//! begun, and for how long in all?", "do two of them ever overlap?" — as arithmetic on durations,
//! with no clock of its own.

use std::time::Duration;

use super::units::parse_duration;

/// `at=DUR for=DUR [every=DUR]`: from `at`, for `length`, again every `every`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub at: Duration,
    pub length: Duration,
    pub every: Option<Duration>,
}

/// The window keys, as errors list them.
pub const WINDOW_KEYS: &str = "at=DUR for=DUR [every=DUR]";

/// A window's keys as they are given, checked when all are in ([`WindowKeys::finish`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct WindowKeys {
    at: Option<Duration>,
    length: Option<Duration>,
    every: Option<Duration>,
}

impl WindowKeys {
    /// Takes `key=value` if `key` is a window key (`Ok(false)` if it is not one).
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, String> {
        let slot = match key {
            "at" => &mut self.at,
            "for" => &mut self.length,
            "every" => &mut self.every,
            _ => return Ok(false),
        };
        if slot.is_some() {
            return Err(format!("{key}= is given twice"));
        }
        *slot = Some(parse_duration(value).map_err(|e| format!("{key}={value}: {e}"))?);
        Ok(true)
    }

    /// The window, if `at` and `for` are given and `every` (if given) leaves room for `for`.
    pub fn finish(self) -> Result<Window, String> {
        let (Some(at), Some(length)) = (self.at, self.length) else {
            return Err(format!(
                "at= and for= are both needed; expected {WINDOW_KEYS}"
            ));
        };
        if length.is_zero() {
            return Err("for= must be above 0".into());
        }
        if let Some(every) = self.every {
            if every <= length {
                return Err(format!(
                    "every={} must be longer than for={}",
                    show(every),
                    show(length)
                ));
            }
        }
        Ok(Window {
            at,
            length,
            every: self.every,
        })
    }
}

fn show(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

impl Window {
    /// Inside the window `elapsed` after its clock started: how long until this occurrence ends.
    #[inline]
    pub fn left(&self, elapsed: Duration) -> Option<Duration> {
        let since = elapsed.checked_sub(self.at)?;
        let into = match self.every {
            Some(every) => Duration::from_nanos((since.as_nanos() % every.as_nanos()) as u64),
            None => since,
        };
        self.length.checked_sub(into).filter(|l| !l.is_zero())
    }

    /// How many occurrences have begun by `elapsed`, and how long they have lasted in all by then.
    pub fn so_far(&self, elapsed: Duration) -> (u64, Duration) {
        let Some(since) = elapsed.checked_sub(self.at) else {
            return (0, Duration::ZERO);
        };
        let Some(every) = self.every else {
            return (1, since.min(self.length));
        };
        let whole = (since.as_nanos() / every.as_nanos()) as u64;
        let into = since - every * whole as u32;
        let total = self.length * whole as u32 + into.min(self.length);
        (whole + 1, total)
    }

    /// Whether the two windows are ever open at once (checked over the first hour of a run for
    /// repeating ones, past which a benchmark rarely goes, and at least two periods of each).
    pub fn overlaps(&self, other: &Window) -> bool {
        let horizon = [self, other]
            .iter()
            .map(|w| w.at + w.every.unwrap_or(w.length) * 2)
            .max()
            .unwrap_or_default()
            .max(Duration::from_secs(3600));
        let starts = |w: &Window| {
            let step = w.every.unwrap_or(horizon + Duration::from_secs(1));
            std::iter::successors(Some(w.at), move |s| Some(*s + step))
                .take_while(move |s| *s <= horizon)
                .take(100_000)
        };
        // Two windows overlap iff one begins while the other is open.
        starts(self).any(|s| other.left(s).is_some())
            || starts(other).any(|s| self.left(s).is_some())
    }

    /// `at=5s for=1.4s every=30s`, as written back.
    pub fn describe(&self) -> String {
        let mut out = format!("at={} for={}", show(self.at), show(self.length));
        if let Some(every) = self.every {
            out.push_str(&format!(" every={}", show(every)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(text: &str) -> Result<Window, String> {
        let mut keys = WindowKeys::default();
        for token in text.split_whitespace() {
            let (k, v) = token.split_once('=').unwrap();
            assert!(keys.set(k, v)?, "{k} is a window key");
        }
        keys.finish()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_window_is_open_from_at_for_its_length_and_repeats_every_period() {
        let w = window("at=1s for=500ms").unwrap();
        assert_eq!(w.left(ms(999)), None);
        assert_eq!(w.left(ms(1000)), Some(ms(500)));
        assert_eq!(w.left(ms(1400)), Some(ms(100)));
        assert_eq!(w.left(ms(1500)), None);
        assert_eq!(w.left(ms(9000)), None);
        let r = window("at=1s for=500ms every=2s").unwrap();
        assert_eq!(r.left(ms(3200)), Some(ms(300)));
        assert_eq!(r.left(ms(3600)), None);
        assert_eq!(r.so_far(ms(3200)), (2, ms(700)));
        assert_eq!(r.so_far(ms(500)), (0, Duration::ZERO));
        assert_eq!(w.so_far(ms(9000)), (1, ms(500)));
    }

    #[test]
    fn bad_windows_name_the_key() {
        assert!(window("at=1s").unwrap_err().contains("for="));
        assert!(window("at=1s for=2s every=2s")
            .unwrap_err()
            .contains("every=2s must be longer than for=2s"));
        assert!(window("at=x for=1s").unwrap_err().starts_with("at=x"));
        assert!(window("at=1s for=0s").unwrap_err().contains("above 0"));
        let mut keys = WindowKeys::default();
        assert_eq!(keys.set("status", "503"), Ok(false));
    }

    #[test]
    fn overlaps_are_found_for_single_and_repeating_windows() {
        let a = window("at=1s for=1s").unwrap();
        assert!(a.overlaps(&window("at=1500ms for=1s").unwrap()));
        assert!(!a.overlaps(&window("at=2s for=1s").unwrap()));
        let r = window("at=0s for=1s every=10s").unwrap();
        assert!(r.overlaps(&window("at=30500ms for=1s").unwrap()));
        assert!(!r.overlaps(&window("at=5s for=1s every=10s").unwrap()));
    }
}

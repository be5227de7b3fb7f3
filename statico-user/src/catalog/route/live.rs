//! The routes in force while statico runs, swapped whole (`PUT /routes`, SIGHUP) without stopping a
//! worker: the table sits behind an `ArcSwap`, and a generation number lets each worker see with one
//! relaxed load whether it still holds the table in force ([`crate::catalog::Local::refresh`]).
//! Answers already chosen keep the table they were chosen from (each worker keeps the one before
//! too, for a request whose body spans a swap); requests chosen after take the new one. The ground
//! truths of the last [`KEPT`] tables replaced stay readable ([`LiveRoutes::truth_of`]), so what a
//! generation answered, those answers that finish after its swap included, is not lost with it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use super::Routes;
use crate::observe::truth::{GroundTruth, KEPT_GENERATIONS as KEPT};

/// The routes table in force.
#[derive(Debug)]
pub struct LiveRoutes {
    current: arc_swap::ArcSwap<Routes>,
    generation: AtomicU32,
    /// Held while a new table is built from the one in force and put in its place, so that two
    /// replacements (the control API, SIGHUP) cannot both build on the same one.
    replacing: Mutex<()>,
    /// The ground truths of the tables replaced last, newest first, at most [`KEPT`].
    replaced: Mutex<VecDeque<Arc<GroundTruth>>>,
}

impl LiveRoutes {
    pub fn new(routes: Routes) -> LiveRoutes {
        LiveRoutes {
            generation: AtomicU32::new(routes.generation()),
            current: arc_swap::ArcSwap::from_pointee(routes),
            replacing: Mutex::new(()),
            replaced: Mutex::new(VecDeque::new()),
        }
    }

    /// The table in force.
    pub fn load(&self) -> Arc<Routes> {
        self.current.load_full()
    }

    /// The number of the table in force (one relaxed load).
    #[inline]
    pub fn generation(&self) -> u32 {
        self.generation.load(Relaxed)
    }

    /// Builds a table from the one in force with `build` and, if it is good, puts it in force; the
    /// replaced table's ground truth is kept (the oldest kept one goes past [`KEPT`]).
    pub fn replace<E>(
        &self,
        build: impl FnOnce(&Routes) -> Result<Routes, E>,
    ) -> Result<Arc<Routes>, E> {
        let _one_at_a_time = self.replacing.lock().unwrap_or_else(|e| e.into_inner());
        let new = Arc::new(build(&self.current.load())?);
        let old = self.current.swap(new.clone());
        self.generation.store(new.generation(), Relaxed);
        let mut replaced = self.replaced.lock().unwrap_or_else(|e| e.into_inner());
        replaced.push_front(old.truth().clone());
        replaced.truncate(KEPT);
        Ok(new)
    }

    /// Generation `generation`'s ground truth: the table in force's, or a replaced one's while kept.
    pub fn truth_of(&self, generation: u32) -> Option<Arc<GroundTruth>> {
        let current = self.current.load();
        if current.generation() == generation {
            return Some(current.truth().clone());
        }
        let replaced = self.replaced.lock().unwrap_or_else(|e| e.into_inner());
        replaced
            .iter()
            .find(|t| t.generation() == generation)
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::response::ResponseSpec;
    use crate::catalog::route::table::Table;

    fn build(previous: Option<&Routes>) -> Routes {
        let table =
            Table::of_toml("[[route]]\npath = \"/a\"\n", std::path::Path::new("t")).unwrap();
        let base = ResponseSpec {
            status: 200,
            headers: Vec::new(),
            body: Vec::new(),
        };
        Routes::build(&table, &base, false, 1, previous).unwrap()
    }

    #[test]
    fn the_last_replaced_generations_truths_stay_readable() {
        let live = LiveRoutes::new(build(None));
        let first = live.truth_of(1).expect("the one in force");
        for _ in 0..KEPT + 1 {
            live.replace(|current| Ok::<_, ()>(build(Some(current))))
                .unwrap();
        }
        let in_force = live.generation();
        assert_eq!(in_force, KEPT as u32 + 2);
        assert_eq!(live.truth_of(in_force).unwrap().generation(), in_force);
        // The in-force one and the KEPT replaced before it; the first is gone from the list.
        for g in 2..in_force {
            assert_eq!(live.truth_of(g).map(|t| t.generation()), Some(g), "{g}");
        }
        assert!(live.truth_of(1).is_none());
        assert!(live.truth_of(in_force + 1).is_none());
        // What answers from it still hold keeps it alive, and records there.
        assert_eq!(first.generation(), 1);
    }
}

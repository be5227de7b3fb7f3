//! The routes in force while statico runs, swapped whole (`PUT /routes`, SIGHUP) without stopping a
//! worker: the table sits behind an `ArcSwap`, and a generation number lets each worker see with one
//! relaxed load whether it still holds the table in force ([`crate::catalog::Local::refresh`]).
//! Answers already chosen keep the table they were chosen from (each worker keeps the one before
//! too, for a request whose body spans a swap); requests chosen after take the new one.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use super::Routes;

/// The routes table in force.
#[derive(Debug)]
pub struct LiveRoutes {
    current: arc_swap::ArcSwap<Routes>,
    generation: AtomicU32,
    /// Held while a new table is built from the one in force and put in its place, so that two
    /// replacements (the control API, SIGHUP) cannot both build on the same one.
    replacing: Mutex<()>,
}

impl LiveRoutes {
    pub fn new(routes: Routes) -> LiveRoutes {
        LiveRoutes {
            generation: AtomicU32::new(routes.generation()),
            current: arc_swap::ArcSwap::from_pointee(routes),
            replacing: Mutex::new(()),
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

    /// Builds a table from the one in force with `build` and, if it is good, puts it in force.
    pub fn replace<E>(
        &self,
        build: impl FnOnce(&Routes) -> Result<Routes, E>,
    ) -> Result<Arc<Routes>, E> {
        let _one_at_a_time = self.replacing.lock().unwrap_or_else(|e| e.into_inner());
        let new = Arc::new(build(&self.current.load())?);
        self.current.store(new.clone());
        self.generation.store(new.generation(), Relaxed);
        Ok(new)
    }
}

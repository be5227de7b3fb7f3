//! The worker's connection table: slots reused after a connection closes, each with a generation, so
//! that a completion for a slot's previous connection (its token carries slot and generation) finds
//! nothing rather than the new connection.

use super::ring::GEN_MASK;

/// A table of values addressed by (slot, generation).
pub struct Slots<T> {
    entries: Vec<(u32, Option<T>)>,
    free: Vec<usize>,
    live: usize,
}

impl<T> Slots<T> {
    pub fn new() -> Self {
        Slots {
            entries: Vec::new(),
            free: Vec::new(),
            live: 0,
        }
    }

    /// Stores `make(slot, gen)` in a free slot and returns the slot.
    pub fn insert(&mut self, make: impl FnOnce(usize, u32) -> T) -> usize {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.entries.push((0, None));
            self.entries.len() - 1
        });
        let (gen, value) = &mut self.entries[slot];
        *gen = gen.wrapping_add(1) & GEN_MASK;
        *value = Some(make(slot, *gen));
        self.live += 1;
        slot
    }

    /// The value in `slot` if `gen` is still its generation.
    pub fn get_mut(&mut self, slot: usize, gen: u32) -> Option<&mut T> {
        match self.entries.get_mut(slot) {
            Some((g, Some(value))) if *g == gen => Some(value),
            _ => None,
        }
    }

    /// The value in `slot`, whatever its generation (the caller just checked it).
    pub fn at(&mut self, slot: usize) -> Option<&mut T> {
        self.entries.get_mut(slot).and_then(|(_, v)| v.as_mut())
    }

    /// Takes the value out of `slot` and frees the slot, with its generation.
    pub fn remove(&mut self, slot: usize) -> Option<(T, u32)> {
        let (gen, value) = self.entries.get_mut(slot)?;
        let value = value.take()?;
        self.free.push(slot);
        self.live -= 1;
        Some((value, *gen))
    }

    /// How many slots there are (live or free): valid slots are below this.
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    pub fn live(&self) -> usize {
        self.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_slot_does_not_answer_to_its_old_generation() {
        let mut s = Slots::new();
        let a = s.insert(|_, g| g);
        let old = *s.at(a).unwrap();
        assert_eq!(s.remove(a).map(|(_, g)| g), Some(old));
        let b = s.insert(|_, g| g);
        assert_eq!(a, b);
        assert!(s.get_mut(a, old).is_none());
        let new = *s.at(b).unwrap();
        assert_eq!(s.get_mut(b, new), Some(&mut new.clone()));
        assert_eq!(s.live(), 1);
    }
}

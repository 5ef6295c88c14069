//! Embeddings: how stores keep them, and the in-process copy a store's
//! searches rank against.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// `vector` as stores keep it: scaled to length one (cosine similarity is
/// then a dot product), as little-endian `f32`s.
pub fn encode_vector(vector: &[f32]) -> Vec<u8> {
    unit(vector.to_vec()).iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A stored vector back (`None` when its length is not a multiple of 4).
pub fn decode_vector(bytes: &[u8]) -> Option<Vec<f32>> {
    if bytes.len() % 4 != 0 {
        return None;
    }
    let floats = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    Some(floats.collect())
}

/// `vector` scaled to length one (unchanged when it is all zeros), so that
/// cosine similarity is a dot product.
pub(crate) fn unit(mut vector: Vec<f32>) -> Vec<f32> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}

/// The dot product (cosine similarity of unit vectors).
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Four lanes the compiler vectorises.
    let mut sums = [0.0f32; 4];
    let (a4, b4) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ra, rb) = (a4.remainder(), b4.remainder());
    for (x, y) in a4.zip(b4) {
        for lane in 0..4 {
            sums[lane] += x[lane] * y[lane];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    sums.iter().sum::<f32>() + tail
}

/// What a committed write did to a row's vector, for [`VectorCache::apply`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum VectorChange {
    /// The row (new or replaced) now has this namespace (stored form) and
    /// vector (none: not embedded).
    Set {
        /// The row's id in the store.
        row: i64,
        /// Its namespace, as [`Namespace::stored`](super::Namespace::stored).
        namespace: String,
        /// Its vector as stored (unit length).
        vector: Option<Vec<f32>>,
    },
    /// The row is gone.
    Remove {
        /// The row's id.
        row: i64,
    },
}

/// An in-process copy of a store's vectors, so that a search with a query
/// scores every candidate in memory instead of reading every vector from
/// the database (for store authors).
///
/// Kept in step by an epoch: a counter the store raises in every
/// transaction that writes items. A search reads the epoch in its read
/// transaction; when the copy is at another epoch the store loads it anew
/// ([`VectorCache::replace`]). A process's own writes carry the copy along
/// ([`VectorCache::apply`]) when they follow its epoch directly, so a
/// single writer never reloads; a write by another process (or two of this
/// one committing out of order) costs one reload at the next search.
#[derive(Debug, Default)]
pub struct VectorCache {
    loaded: Mutex<Option<Loaded>>,
}

#[derive(Debug)]
struct Loaded {
    epoch: i64,
    rows: Vec<Entry>,
    /// Row id → index in `rows`.
    at: HashMap<i64, usize>,
}

#[derive(Debug)]
struct Entry {
    row: i64,
    namespace: String,
    vector: Vec<f32>,
}

impl VectorCache {
    /// Empty (loaded at the first search).
    pub fn new() -> Self {
        Self::default()
    }

    /// The epoch the copy holds, if loaded.
    pub fn epoch(&self) -> Option<i64> {
        self.lock().as_ref().map(|loaded| loaded.epoch)
    }

    /// Replaces the copy with `rows` (row id, stored namespace, vector as
    /// [`decode_vector`] reads it back) as of `epoch`.
    pub fn replace(&self, epoch: i64, rows: impl IntoIterator<Item = (i64, String, Vec<f32>)>) {
        let mut loaded = Loaded { epoch, rows: Vec::new(), at: HashMap::new() };
        for (row, namespace, vector) in rows {
            loaded.set(row, namespace, Some(vector));
        }
        *self.lock() = Some(loaded);
    }

    /// A committed write's changes, which took the store to `epoch`: kept
    /// when the copy was at the epoch just before, else the copy is
    /// dropped (the next search reloads it).
    pub fn apply(&self, epoch: i64, changes: Vec<VectorChange>) {
        let mut guard = self.lock();
        match guard.as_mut() {
            Some(loaded) if loaded.epoch + 1 == epoch => {
                for change in changes {
                    match change {
                        VectorChange::Set { row, namespace, vector } => {
                            loaded.set(row, namespace, vector)
                        }
                        VectorChange::Remove { row } => loaded.set(row, String::new(), None),
                    }
                }
                loaded.epoch = epoch;
            }
            _ => *guard = None,
        }
    }

    /// The rows under the stored namespace `prefix` scored against
    /// `query` (cosine similarity), best first, if the copy is at `epoch` (`None`
    /// otherwise: load it and ask again). With `top`, only that many best.
    pub fn rank(
        &self,
        epoch: i64,
        prefix: &str,
        query: &[f32],
        top: Option<usize>,
    ) -> Option<Ranking> {
        let guard = self.lock();
        let loaded = guard.as_ref().filter(|loaded| loaded.epoch == epoch)?;
        let ranking = Ranking::of(
            loaded
                .rows
                .iter()
                .map(|entry| (entry.row, entry.namespace.as_str(), &entry.vector[..])),
            prefix,
            query,
            top,
        );
        drop(guard);
        Some(ranking)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Loaded>> {
        self.loaded.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Rows scored against a query, best first ([`VectorCache::rank`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ranking {
    /// (cosine similarity, row), best first.
    pub scored: Vec<(f32, i64)>,
    /// When no vector under the prefix had the query's dimensions but some
    /// had others: those (the first seen).
    pub other_dimensions: Option<usize>,
}

impl Ranking {
    /// Ranks `rows` (row id, stored namespace, unit vector) under the
    /// stored namespace `prefix` against `query`; with `top`, only that
    /// many best.
    pub fn of<'a>(
        rows: impl Iterator<Item = (i64, &'a str, &'a [f32])>,
        prefix: &str,
        query: &[f32],
        top: Option<usize>,
    ) -> Self {
        let query = unit(query.to_vec());
        let query = query.as_slice();
        let mut other = None;
        let mut scored: Vec<(f32, i64)> = Vec::new();
        for (row, namespace, vector) in rows {
            if !namespace.starts_with(prefix) {
                continue;
            }
            if vector.len() == query.len() {
                scored.push((dot(vector, query), row));
            } else if other.is_none() {
                other = Some(vector.len());
            }
        }
        let other_dimensions = other.filter(|_| scored.is_empty());
        let best_first = |a: &(f32, i64), b: &(f32, i64)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if let Some(top) = top.filter(|top| *top < scored.len()) {
            if top == 0 {
                return Self { scored: Vec::new(), other_dimensions };
            }
            scored.select_nth_unstable_by(top - 1, best_first);
            scored.truncate(top);
        }
        scored.sort_unstable_by(best_first);
        Self { scored, other_dimensions }
    }
}

impl Loaded {
    fn set(&mut self, row: i64, namespace: String, vector: Option<Vec<f32>>) {
        match (self.at.get(&row).copied(), vector) {
            (Some(index), Some(vector)) => {
                self.rows[index] = Entry { row, namespace, vector };
            }
            (None, Some(vector)) => {
                self.at.insert(row, self.rows.len());
                self.rows.push(Entry { row, namespace, vector });
            }
            (Some(index), None) => {
                self.at.remove(&row);
                self.rows.swap_remove(index);
                if let Some(moved) = self.rows.get(index) {
                    self.at.insert(moved.row, index);
                }
            }
            (None, None) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_follows_its_epoch_and_ranks_best_first() {
        let cache = VectorCache::new();
        assert!(cache.rank(0, "", &[1.0, 0.0], None).is_none());
        cache.replace(3, [(1, "a/".into(), vec![1.0, 0.0]), (2, "b/".into(), vec![0.0, 1.0])]);
        let ranked = cache.rank(3, "", &[0.6, 0.8], None).unwrap();
        assert_eq!(ranked.scored.iter().map(|(_, row)| *row).collect::<Vec<_>>(), [2, 1]);
        assert_eq!(cache.rank(3, "a/", &[0.6, 0.8], None).unwrap().scored.len(), 1);
        // A query of other dimensions than every stored vector says so.
        let other = cache.rank(3, "", &[1.0, 0.0, 0.0], None).unwrap();
        assert_eq!((other.scored.len(), other.other_dimensions), (0, Some(2)));
        // A write that follows the epoch is kept; one that skips drops it.
        cache.apply(4, vec![VectorChange::Remove { row: 2 }]);
        assert_eq!(cache.rank(4, "", &[0.0, 1.0], Some(5)).unwrap().scored.len(), 1);
        cache.apply(6, vec![VectorChange::Remove { row: 1 }]);
        assert_eq!(cache.epoch(), None);
    }

    #[test]
    fn unit_vectors_round_trip_through_bytes() {
        let vector = vec![0.6, -0.8, 0.0];
        assert_eq!(decode_vector(&encode_vector(&vector)), Some(vector));
        assert_eq!(decode_vector(&[1, 2, 3]), None);
    }
}

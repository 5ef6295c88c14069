//! Retrieval doubles: a deterministic embedding, an in-memory vector store
//! and a record manager that skips unchanged documents.

use std::collections::BTreeMap;

use serde_json::Value;

/// Turns text into a vector.
pub trait Embedder {
    /// The vector of `text`.
    fn embed(&self, text: &str) -> Vec<f32>;
}

/// Same text, same vector (unit length), in `dimensions` dimensions; a
/// different `seed_namespace` gives different vectors for the same text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeterministicFakeEmbedding {
    /// Vector length.
    pub dimensions: usize,
    /// Mixed into every hash.
    pub seed_namespace: String,
}

impl DeterministicFakeEmbedding {
    /// An embedding of `dimensions` dimensions in `seed_namespace`.
    pub fn new(dimensions: usize, seed_namespace: impl Into<String>) -> Self {
        Self { dimensions, seed_namespace: seed_namespace.into() }
    }
}

/// FNV-1a, stable across platforms and releases.
pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in *part {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash ^= 0xff;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

impl Embedder for DeterministicFakeEmbedding {
    fn embed(&self, text: &str) -> Vec<f32> {
        let mut state = fnv1a(&[self.seed_namespace.as_bytes(), text.as_bytes()]);
        let mut vector: Vec<f32> = (0..self.dimensions)
            .map(|_| {
                // xorshift64*: a fixed sequence from the hash.
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                let bits = state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
                (bits as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect();
        let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            vector.iter_mut().for_each(|x| *x /= norm);
        }
        vector
    }
}

/// A stored document.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// Its id.
    pub id: String,
    /// Its text.
    pub text: String,
    /// Anything else.
    pub metadata: Value,
}

/// Vectors in a map, searched by cosine similarity.
#[derive(Debug, Default, Clone)]
pub struct InMemoryVectorStore {
    entries: BTreeMap<String, (Document, Vec<f32>)>,
    writes: u64,
}

impl InMemoryVectorStore {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores (or replaces) `document` with its vector.
    pub fn upsert(&mut self, document: Document, vector: Vec<f32>) {
        self.writes += 1;
        self.entries.insert(document.id.clone(), (document, vector));
    }

    /// Removes a document; `true` if it was there.
    pub fn delete(&mut self, id: &str) -> bool {
        self.writes += 1;
        self.entries.remove(id).is_some()
    }

    /// Documents stored.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Upserts and deletes so far (what re-indexing must not increase).
    pub fn writes(&self) -> u64 {
        self.writes
    }

    /// The `k` documents most similar to `query`, best first, with their
    /// cosine similarity; ties by id.
    pub fn search(&self, query: &[f32], k: usize) -> Vec<(Document, f32)> {
        let mut scored: Vec<(Document, f32)> = self
            .entries
            .values()
            .map(|(document, vector)| (document.clone(), cosine(query, vector)))
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.id.cmp(&b.0.id)));
        scored.truncate(k);
        scored
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm =
        a.iter().map(|x| x * x).sum::<f32>().sqrt() * b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm == 0.0 {
        0.0
    } else {
        dot / norm
    }
}

/// What an indexing pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexReport {
    /// New documents written.
    pub added: usize,
    /// Changed documents rewritten.
    pub updated: usize,
    /// Unchanged documents skipped.
    pub skipped: usize,
    /// Documents gone from the source, deleted.
    pub deleted: usize,
}

/// Remembers each document's content hash, so re-indexing writes only what
/// changed (LangChain's record manager).
#[derive(Debug, Default, Clone)]
pub struct RecordManager {
    hashes: BTreeMap<String, u64>,
}

impl RecordManager {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// The content hash of a document (text and metadata).
    pub fn hash(document: &Document) -> u64 {
        fnv1a(&[document.text.as_bytes(), document.metadata.to_string().as_bytes()])
    }

    /// The recorded hash of a document id.
    pub fn recorded(&self, id: &str) -> Option<u64> {
        self.hashes.get(id).copied()
    }

    /// Brings `store` in line with `documents` (the full source): embeds and
    /// writes new and changed ones, skips unchanged ones, deletes ones no
    /// longer in the source.
    pub fn index(
        &mut self,
        documents: &[Document],
        store: &mut InMemoryVectorStore,
        embedder: &dyn Embedder,
    ) -> IndexReport {
        let mut report = IndexReport::default();
        let mut seen = std::collections::BTreeSet::new();
        for document in documents {
            seen.insert(document.id.clone());
            let hash = Self::hash(document);
            match self.hashes.insert(document.id.clone(), hash) {
                Some(old) if old == hash => {
                    report.skipped += 1;
                    continue;
                }
                Some(_) => report.updated += 1,
                None => report.added += 1,
            }
            store.upsert(document.clone(), embedder.embed(&document.text));
        }
        let gone: Vec<String> =
            self.hashes.keys().filter(|id| !seen.contains(*id)).cloned().collect();
        for id in gone {
            self.hashes.remove(&id);
            store.delete(&id);
            report.deleted += 1;
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(id: &str, text: &str) -> Document {
        Document { id: id.into(), text: text.into(), metadata: json!({}) }
    }

    #[test]
    fn embeddings_are_deterministic_unit_vectors_per_namespace() {
        let a = DeterministicFakeEmbedding::new(16, "ns");
        let v = a.embed("hello");
        assert_eq!(v, a.embed("hello"));
        assert_eq!(v.len(), 16);
        assert!((v.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5);
        assert_ne!(v, a.embed("hello!"));
        assert_ne!(v, DeterministicFakeEmbedding::new(16, "other").embed("hello"));
    }

    #[test]
    fn search_ranks_by_cosine_and_reindexing_unchanged_documents_writes_nothing() {
        let embedder = DeterministicFakeEmbedding::new(32, "t");
        let mut store = InMemoryVectorStore::new();
        let mut manager = RecordManager::new();
        let docs = vec![doc("a", "refund policy"), doc("b", "shipping times"), doc("c", "returns")];
        let first = manager.index(&docs, &mut store, &embedder);
        assert_eq!(first, IndexReport { added: 3, ..IndexReport::default() });
        let hits = store.search(&embedder.embed("shipping times"), 2);
        assert_eq!(hits[0].0.id, "b");
        assert!((hits[0].1 - 1.0).abs() < 1e-5, "an identical text scores 1");
        assert!(hits[0].1 >= hits[1].1);

        let writes = store.writes();
        let again = manager.index(&docs, &mut store, &embedder);
        assert_eq!(again, IndexReport { skipped: 3, ..IndexReport::default() });
        assert_eq!(store.writes(), writes, "nothing written");

        let changed = vec![doc("a", "refund policy v2"), doc("b", "shipping times")];
        let third = manager.index(&changed, &mut store, &embedder);
        assert_eq!(third, IndexReport { updated: 1, skipped: 1, deleted: 1, added: 0 });
        assert_eq!(store.len(), 2);
    }
}

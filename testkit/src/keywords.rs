//! A deterministic embedder for long-term memory tests.

use async_trait::async_trait;
use tollgate_checkpoint::{EmbedError, Embedder};

use crate::retrieval::fnv1a;

/// An [`Embedder`] for tests, offline and deterministic: every word
/// (lower-cased runs of letters and digits, words of one or two characters
/// and a few common ones left out) adds one to a dimension chosen by its
/// hash, so texts sharing words are similar and the same text always has
/// the same vector. Counts every text it embedded.
///
/// ```
/// use tollgate_checkpoint::Embedder;
/// use tollgate_testkit::KeywordEmbedder;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let embedder = KeywordEmbedder::new(64);
/// let texts = ["prefers French".to_owned(), "French please".to_owned(), "tea".to_owned()];
/// let v = embedder.embed(&texts).await.unwrap();
/// let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
/// assert!(dot(&v[0], &v[1]) > dot(&v[0], &v[2]));
/// # });
/// ```
#[derive(Debug)]
pub struct KeywordEmbedder {
    dims: usize,
    embedded: std::sync::atomic::AtomicUsize,
}

const COMMON: &[&str] = &["the", "and", "for", "you", "are", "what", "was", "with", "that", "this"];

impl KeywordEmbedder {
    /// Vectors of `dims` dimensions.
    pub fn new(dims: usize) -> Self {
        Self { dims: dims.max(1), embedded: std::sync::atomic::AtomicUsize::new(0) }
    }

    /// How many texts it has embedded.
    pub fn embedded(&self) -> usize {
        self.embedded.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The vector of one text.
    pub fn vector(&self, text: &str) -> Vec<f32> {
        let mut vector = vec![0.0; self.dims];
        let lower = text.to_lowercase();
        let words = lower
            .split(|c: char| !c.is_alphanumeric())
            .filter(|word| word.chars().count() > 2 && !COMMON.contains(word));
        for word in words {
            let at = (fnv1a(&[word.as_bytes()]) % self.dims as u64) as usize;
            vector[at] += 1.0;
        }
        vector
    }
}

#[async_trait]
impl Embedder for KeywordEmbedder {
    fn name(&self) -> &str {
        "keywords"
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embedded.fetch_add(texts.len(), std::sync::atomic::Ordering::SeqCst);
        Ok(texts.iter().map(|text| self.vector(text)).collect())
    }
}

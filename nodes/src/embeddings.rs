//! OpenAI-compatible embeddings (`POST {base}/embeddings`), for long-term
//! memory's semantic search.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;
use tollgate_checkpoint::{EmbedError, Embedder};

use crate::error::HarnessError;
use crate::http::{client_parts, error_chain, redact_key};
use crate::openai::{DEFAULT_OPENAI_BASE_URL, DEFAULT_OPENAI_TIMEOUT};

const PROVIDER: &str = "openai";
/// The most texts sent in one request (the API takes up to 2048).
const BATCH: usize = 256;

/// An [`Embedder`] over an OpenAI-compatible `/v1/embeddings` endpoint:
/// same base URL and key handling as [`OpenAiModel`](crate::OpenAiModel)
/// (`OPENAI_BASE_URL`, `OPENAI_API_KEY`), the key scrubbed from every
/// error.
pub struct OpenAiEmbedder {
    client: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    model: String,
    name: String,
    dimensions: Option<usize>,
}

impl std::fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct Answer {
    data: Vec<Datum>,
}

#[derive(Deserialize)]
struct Datum {
    index: usize,
    embedding: Vec<f32>,
}

impl OpenAiEmbedder {
    /// `model` at `OPENAI_BASE_URL` (default [`DEFAULT_OPENAI_BASE_URL`])
    /// with the key in `OPENAI_API_KEY`.
    pub fn from_env(model: impl Into<String>) -> Result<Self, HarnessError> {
        let base_url =
            std::env::var("OPENAI_BASE_URL").unwrap_or_else(|_| DEFAULT_OPENAI_BASE_URL.into());
        let key = std::env::var("OPENAI_API_KEY").ok().filter(|key| !key.is_empty());
        Self::new(model, base_url, key)
    }

    /// `model` at `base_url` (up to and including `/v1`) with `api_key`.
    pub fn new(
        model: impl Into<String>,
        base_url: impl Into<String>,
        api_key: Option<String>,
    ) -> Result<Self, HarnessError> {
        let (client, base_url, api_key) =
            client_parts(PROVIDER, DEFAULT_OPENAI_TIMEOUT, base_url.into(), api_key)?;
        let model = model.into();
        Ok(Self {
            client,
            base_url,
            api_key,
            name: format!("openai:{model}"),
            model,
            dimensions: None,
        })
    }

    /// Asks for vectors of `dimensions` (models that can shorten theirs,
    /// such as `text-embedding-3-*`).
    pub fn dimensions(mut self, dimensions: usize) -> Self {
        self.dimensions = Some(dimensions);
        self
    }

    fn scrub(&self, text: &str) -> String {
        match &self.api_key {
            Some(key) => redact_key(text, key),
            None => text.to_owned(),
        }
    }

    async fn request(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut body = json!({"model": self.model, "input": texts, "encoding_format": "float"});
        if let Some(dimensions) = self.dimensions {
            body["dimensions"] = json!(dimensions);
        }
        let mut request = self.client.post(format!("{}/embeddings", self.base_url)).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|error| EmbedError::Request {
            source: self.scrub(&error_chain(&error)).into(),
        })?;
        let status = response.status();
        let text = response.text().await.map_err(|error| EmbedError::Request {
            source: self.scrub(&error_chain(&error)).into(),
        })?;
        if !status.is_success() {
            let body: String = self.scrub(&text).chars().take(500).collect();
            return Err(EmbedError::Status { status: status.as_u16(), body });
        }
        let answer: Answer = serde_json::from_str(&text)
            .map_err(|error| EmbedError::Response { source: Box::new(error) })?;
        if answer.data.len() != texts.len() {
            return Err(EmbedError::Count { asked: texts.len(), found: answer.data.len() });
        }
        let mut vectors = vec![Vec::new(); texts.len()];
        for datum in answer.data {
            match vectors.get_mut(datum.index) {
                Some(slot) => *slot = datum.embedding,
                None => {
                    return Err(EmbedError::Count { asked: texts.len(), found: datum.index + 1 })
                }
            }
        }
        Ok(vectors)
    }
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn name(&self) -> &str {
        &self.name
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let span = tracing::info_span!(
            "embed",
            otel.name = %format_args!("embed {}", self.model),
            texts = texts.len()
        );
        let mut vectors = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(BATCH) {
            vectors
                .extend(tracing::Instrument::instrument(self.request(chunk), span.clone()).await?);
        }
        Ok(vectors)
    }
}

//! The OpenAI-compatible embedder against the fake server: the request it
//! sends, vectors put back in input order, and errors that never carry the
//! key.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use serde_json::json;
use tollgate_checkpoint::{EmbedError, Embedder};
use tollgate_nodes::OpenAiEmbedder;
use tollgate_testkit::fake_openai::{FakeOpenAi, Reply};

const KEY: &str = "sk-test-0123456789abcdefghijklmnop";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn vectors_come_back_in_input_order_with_the_key_sent_as_a_bearer() {
    runtime().block_on(async {
        let server = FakeOpenAi::start_embeddings().await;
        server.push(Reply::Json {
            status: 200,
            headers: Vec::new(),
            body: json!({"object": "list", "data": [
                {"object": "embedding", "index": 1, "embedding": [0.0, 1.0]},
                {"object": "embedding", "index": 0, "embedding": [1.0, 0.0]},
            ]}),
        });
        let embedder =
            OpenAiEmbedder::new("text-embedding-3-small", server.base_url(), Some(KEY.into()))
                .unwrap()
                .dimensions(2);
        assert_eq!(embedder.name(), "openai:text-embedding-3-small");
        let vectors = embedder.embed(&["first".into(), "second".into()]).await.unwrap();
        assert_eq!(vectors, [vec![1.0, 0.0], vec![0.0, 1.0]]);
        let request = &server.requests()[0];
        assert_eq!(request.authorization.as_deref(), Some(format!("Bearer {KEY}").as_str()));
        assert_eq!(
            request.body,
            json!({"model": "text-embedding-3-small", "input": ["first", "second"],
                   "encoding_format": "float", "dimensions": 2})
        );
    });
}

#[test]
fn errors_are_typed_and_scrubbed_of_the_key() {
    runtime().block_on(async {
        let server = FakeOpenAi::start_embeddings().await;
        server.push(Reply::error(401, &format!("Incorrect API key provided: {KEY}")));
        server.push(Reply::Json {
            status: 200,
            headers: Vec::new(),
            body: json!({"data": [{"index": 0, "embedding": [1.0]}]}),
        });
        server.push(Reply::Json { status: 200, headers: Vec::new(), body: json!({"nope": 1}) });
        let embedder = OpenAiEmbedder::new("m", server.base_url(), Some(KEY.into())).unwrap();
        let texts = ["a".to_owned(), "b".to_owned()];
        let error = embedder.embed(&texts).await.unwrap_err();
        assert!(matches!(&error, EmbedError::Status { status: 401, .. }), "{error:?}");
        assert!(!format!("{error} {error:?}").contains(&KEY[3..15]), "{error}");
        assert!(format!("{error}").contains("[redacted]"), "{error}");
        let error = embedder.embed(&texts).await.unwrap_err();
        assert!(matches!(error, EmbedError::Count { asked: 2, found: 1 }), "{error:?}");
        let error = embedder.embed(&texts).await.unwrap_err();
        assert!(matches!(error, EmbedError::Response { .. }), "{error:?}");
        assert!(!format!("{embedder:?}").contains(KEY), "Debug hides the key");
    });
}

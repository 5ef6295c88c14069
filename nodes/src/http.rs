//! What the HTTP chat providers share: scrubbing their key out of text
//! that leaves them, the error chain of a failed request, `retry-after`
//! headers and tool-call arguments.

use std::time::Duration;

use serde_json::{json, Value};

/// How long a piece of the key, echoed anywhere in a provider's answer
/// (its start, its end, its middle), is scrubbed as if it were the key.
const ECHOED_FRAGMENT: usize = 12;

/// `text` with every occurrence of `key`, and of any piece of it at least
/// [`ECHOED_FRAGMENT`] bytes long (a key shorter than that only whole),
/// replaced by `[redacted]`. Matches are maximal: a run of the text that
/// follows the key from any point of it is scrubbed as far as it goes.
pub(crate) fn redact_key(text: &str, key: &str) -> String {
    let (text_bytes, key_bytes) = (text.as_bytes(), key.as_bytes());
    if key_bytes.is_empty() {
        return text.to_owned();
    }
    let least = ECHOED_FRAGMENT.min(key_bytes.len());
    // For each position of the text, the longest run from there that
    // equals a piece of the key (longest common substring, row by row).
    let mut hidden = vec![false; text_bytes.len()];
    let mut previous = vec![0usize; key_bytes.len() + 1];
    let mut current = vec![0usize; key_bytes.len() + 1];
    for (i, byte) in text_bytes.iter().enumerate() {
        for (j, key_byte) in key_bytes.iter().enumerate() {
            current[j + 1] = if byte == key_byte { previous[j] + 1 } else { 0 };
            if current[j + 1] >= least {
                let run = current[j + 1];
                hidden[i + 1 - run..=i].iter_mut().for_each(|flag| *flag = true);
            }
        }
        std::mem::swap(&mut previous, &mut current);
    }
    if !hidden.contains(&true) {
        return text.to_owned();
    }
    let mut out = Vec::with_capacity(text_bytes.len());
    let mut at = 0;
    while at < text_bytes.len() {
        if hidden[at] {
            out.extend_from_slice(b"[redacted]");
            while at < text_bytes.len() && hidden[at] {
                at += 1;
            }
        } else {
            out.push(text_bytes[at]);
            at += 1;
        }
    }
    // A run cut inside a character leaves broken UTF-8 at its edges.
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `retry-after-ms` (milliseconds) or `retry-after` (seconds; an HTTP date
/// is not read and falls back to the policy's backoff).
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let read = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = read("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return (ms >= 0.0).then(|| Duration::from_secs_f64(ms / 1000.0));
    }
    read("retry-after")
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// The HTTP client of a provider adapter (rustls installed once), its
/// base URL without a trailing `/`, and its key without the whitespace a
/// paste leaves around it (an empty key is none).
pub(crate) fn client_parts(
    provider: &str,
    timeout: Duration,
    base_url: String,
    api_key: Option<String>,
) -> Result<(reqwest::Client, String, Option<String>), crate::error::HarnessError> {
    crate::tls::install_crypto();
    let client = reqwest::Client::builder().timeout(timeout).build().map_err(|error| {
        crate::error::HarnessError::InvalidRequest {
            provider: provider.into(),
            status: None,
            message: error.to_string(),
        }
    })?;
    let base_url = base_url.trim_end_matches('/').to_owned();
    let api_key = api_key.map(|key| key.trim().to_owned()).filter(|key| !key.is_empty());
    Ok((client, base_url, api_key))
}

/// Tool-call arguments as the model wrote them (JSON text), as a value;
/// nothing at all is `{}`.
pub(crate) fn parse_args(raw: &str) -> Result<Value, String> {
    if raw.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(raw)
        .map_err(|error| format!("tool-call arguments are not JSON ({error}): {raw}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_scrubbed_whole_and_by_echoed_fragments() {
        let key = "sk-proj-0123456789abcdefXYZ";
        let cases = [
            (format!("bad key {key}!"), "bad key [redacted]!".to_owned()),
            (format!("key: {}...", &key[..14]), "key: [redacted]...".to_owned()),
            (key[..11].to_owned(), key[..11].to_owned()),
            // Without its first characters, or its last, or both.
            (format!("key ...{}", &key[3..]), "key ...[redacted]".to_owned()),
            (format!("<{}>", &key[5..19]), "<[redacted]>".to_owned()),
            (format!("({})", &key[8..20]), "([redacted])".to_owned()),
            (format!("({})", &key[8..19]), format!("({})", &key[8..19])),
            (
                format!("{key}{key} and {}", &key[..12]),
                // Two keys side by side are one run of key text.
                "[redacted] and [redacted]".to_owned(),
            ),
            ("nothing here".to_owned(), "nothing here".to_owned()),
        ];
        for (text, expected) in cases {
            assert_eq!(redact_key(&text, key), expected, "{text}");
        }
        assert_eq!(redact_key("short k", "k"), "short [redacted]", "short keys whole");
    }
}

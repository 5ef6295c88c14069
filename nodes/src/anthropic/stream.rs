//! A streamed Messages API answer put together from its events:
//! `message_start`, `content_block_start`/`delta`/`stop` (text, tool input
//! JSON in pieces, thinking and its signature), `message_delta` (stop
//! reason, output tokens) and `message_stop`.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::http::parse_args;
use crate::model::DeltaSink;

/// A streamed message, put together from its events.
#[derive(Default)]
pub(super) struct Streamed {
    message: Value,
    /// Content blocks by index, and the JSON text of tool inputs as it
    /// arrives.
    blocks: BTreeMap<u64, Value>,
    inputs: BTreeMap<u64, String>,
    pub(super) stopped: bool,
}

impl Streamed {
    /// Takes one event; `Err` for one that breaks the format.
    pub(super) fn take(
        &mut self,
        kind: &str,
        data: &Value,
        deltas: &mut (dyn DeltaSink + Send),
    ) -> Result<(), String> {
        match kind {
            "message_start" => self.message = data["message"].clone(),
            "content_block_start" => {
                let index = index_of(data)?;
                self.blocks.insert(index, data["content_block"].clone());
            }
            "content_block_delta" => {
                let index = index_of(data)?;
                let block = self
                    .blocks
                    .get_mut(&index)
                    .ok_or_else(|| format!("a delta for block {index}, which never started"))?;
                let delta = &data["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => {
                        let text = delta["text"].as_str().unwrap_or_default();
                        let whole = block["text"].as_str().unwrap_or_default().to_owned() + text;
                        block["text"] = json!(whole);
                        if !text.is_empty() {
                            deltas.text(text);
                        }
                    }
                    Some("input_json_delta") => {
                        let part = delta["partial_json"].as_str().unwrap_or_default();
                        self.inputs.entry(index).or_default().push_str(part);
                    }
                    Some("thinking_delta") => {
                        let part = delta["thinking"].as_str().unwrap_or_default();
                        let whole =
                            block["thinking"].as_str().unwrap_or_default().to_owned() + part;
                        block["thinking"] = json!(whole);
                    }
                    Some("signature_delta") => {
                        let part = delta["signature"].as_str().unwrap_or_default();
                        let whole =
                            block["signature"].as_str().unwrap_or_default().to_owned() + part;
                        block["signature"] = json!(whole);
                    }
                    // Delta types of later API versions change nothing we keep.
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = index_of(data)?;
                if let Some(raw) = self.inputs.remove(&index) {
                    let input = parse_args(&raw)?;
                    if let Some(block) = self.blocks.get_mut(&index) {
                        block["input"] = input;
                    }
                }
            }
            "message_delta" => {
                if let Some(reason) = data["delta"]["stop_reason"].as_str() {
                    self.message["stop_reason"] = json!(reason);
                }
                // The final output count; the input count came at the start.
                if let Some(usage) = data["usage"].as_object() {
                    for (key, value) in usage {
                        if !value.is_null() {
                            self.message["usage"][key] = value.clone();
                        }
                    }
                }
            }
            "message_stop" => self.stopped = true,
            // `ping`, and event types of later API versions.
            _ => {}
        }
        Ok(())
    }

    /// The message with its blocks, once `message_stop` came.
    pub(super) fn finish(mut self) -> Result<Value, String> {
        if !self.stopped {
            return Err("the stream ended before message_stop".into());
        }
        if let Some((index, _)) = self.inputs.iter().next() {
            return Err(format!("tool input of block {index} never finished"));
        }
        let blocks: Vec<Value> = std::mem::take(&mut self.blocks).into_values().collect();
        if !self.message.is_object() {
            self.message = json!({});
        }
        self.message["content"] = Value::Array(blocks);
        Ok(self.message)
    }
}

fn index_of(data: &Value) -> Result<u64, String> {
    data["index"].as_u64().ok_or_else(|| "a content block event without an index".to_owned())
}

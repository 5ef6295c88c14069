//! Node caching (`StateGraph::cache`): a node's output stored in the run's
//! store under the SHA-256 of its input, served to later tasks with the
//! same input until it expires.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tollgate_checkpoint::Codec;

use crate::node::{NodeContext, NodeFn, NodeOutput};
use crate::route::Command;
use crate::state::State;

use super::record::{TaskOutputRecord, TASK_OUTPUT_VERSION};

/// `run`, cached under `scope` (`graph@version:node`) for `ttl`.
pub(crate) fn cached<S: State>(run: NodeFn<S>, scope: String, ttl: Duration) -> NodeFn<S> {
    let scope: Arc<str> = Arc::from(scope);
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    Arc::new(move |state: Arc<S>, ctx: NodeContext| {
        let (run, scope) = (Arc::clone(&run), Arc::clone(&scope));
        Box::pin(async move {
            let Some(access) = ctx.cache.clone() else { return run(state, ctx).await };
            let input = match &ctx.input {
                Some(input) => serde_json::to_vec(&**input),
                None => serde_json::to_vec(&*state),
            };
            // A state that does not encode is simply not cached.
            let Ok(input) = input else { return run(state, ctx).await };
            let key: String = Sha256::digest(&input).iter().map(|b| format!("{b:02x}")).collect();
            let now = access.clock.now_ms();
            match access.store.cache_get(&scope, &key, now).await {
                Ok(Some(blob)) => match blob.decode::<TaskOutputRecord<S::Update>>() {
                    Ok(record) => {
                        access.hit.store(true, Ordering::SeqCst);
                        return Ok(match (record.update, record.goto) {
                            (Some(update), goto) if goto.is_empty() => NodeOutput::Update(update),
                            (update, goto) => NodeOutput::Command(Command { update, goto }),
                        });
                    }
                    Err(error) => {
                        tracing::warn!(%scope, %error, "a cached output does not decode; running the node")
                    }
                },
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(%scope, %error, "the cache could not be read; running the node")
                }
            }
            let output = run(state, ctx).await?;
            let record = match &output {
                NodeOutput::Update(update) => {
                    TaskOutputRecord { update: Some(update.clone()), goto: Vec::new() }
                }
                NodeOutput::Command(command) => {
                    TaskOutputRecord { update: command.update.clone(), goto: command.goto.clone() }
                }
            };
            match Codec::Json.encode(&record, TASK_OUTPUT_VERSION) {
                Ok(blob) => {
                    let expires = now.saturating_add(ttl_ms);
                    if let Err(error) =
                        access.store.cache_put(&scope, &key, blob, expires, now).await
                    {
                        tracing::warn!(%scope, %error, "the output could not be cached");
                    }
                }
                Err(error) => {
                    tracing::warn!(%scope, %error, "the output could not be encoded for the cache")
                }
            }
            Ok(output)
        })
    })
}

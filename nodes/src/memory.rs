//! Short-term memory: conversations kept per thread (long-term memory is
//! `tollgate_checkpoint::Memory`).

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;

use crate::error::HarnessError;
use crate::message::Message;

/// A thread's conversation, kept between runs: an agent loads it before a
/// run in that thread and saves the conversation after.
#[async_trait]
pub trait ShortTermMemory: Send + Sync + std::fmt::Debug {
    /// The thread's messages (empty for a new thread).
    async fn load(&self, thread: &str) -> Result<Vec<Message>, HarnessError>;
    /// Replaces the thread's messages.
    async fn save(&self, thread: &str, messages: &[Message]) -> Result<(), HarnessError>;
}

/// [`ShortTermMemory`] in a map (lost when the process ends).
#[derive(Debug, Default)]
pub struct InMemoryShortTermMemory {
    threads: Mutex<BTreeMap<String, Vec<Message>>>,
}

impl InMemoryShortTermMemory {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl ShortTermMemory for InMemoryShortTermMemory {
    async fn load(&self, thread: &str) -> Result<Vec<Message>, HarnessError> {
        let threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(threads.get(thread).cloned().unwrap_or_default())
    }

    async fn save(&self, thread: &str, messages: &[Message]) -> Result<(), HarnessError> {
        let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        threads.insert(thread.to_owned(), messages.to_vec());
        Ok(())
    }
}

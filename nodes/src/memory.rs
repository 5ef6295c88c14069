//! Memory: conversations kept per thread, and a namespaced key-value store.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use serde_json::Value;

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

/// Long-term memory: JSON values under a namespace and a key.
#[async_trait]
pub trait KeyValueStore: Send + Sync + std::fmt::Debug {
    /// Stores `value` (replacing any).
    async fn put(&self, namespace: &[&str], key: &str, value: Value) -> Result<(), HarnessError>;
    /// The value, if any.
    async fn get(&self, namespace: &[&str], key: &str) -> Result<Option<Value>, HarnessError>;
    /// Removes the value; `true` if there was one.
    async fn delete(&self, namespace: &[&str], key: &str) -> Result<bool, HarnessError>;
    /// Entries whose namespace starts with `namespace` and whose key starts
    /// with `key_prefix`, ordered by namespace then key.
    async fn search(
        &self,
        namespace: &[&str],
        key_prefix: &str,
    ) -> Result<Vec<StoreItem>, HarnessError>;
}

/// One entry of a [`KeyValueStore`].
#[derive(Debug, Clone, PartialEq)]
pub struct StoreItem {
    /// Its namespace.
    pub namespace: Vec<String>,
    /// Its key.
    pub key: String,
    /// Its value.
    pub value: Value,
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

/// [`KeyValueStore`] in a map (lost when the process ends).
#[derive(Debug, Default)]
pub struct InMemoryKeyValueStore {
    entries: Mutex<BTreeMap<(Vec<String>, String), Value>>,
}

impl InMemoryKeyValueStore {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }
}

fn owned(namespace: &[&str]) -> Vec<String> {
    namespace.iter().map(|part| (*part).to_owned()).collect()
}

#[async_trait]
impl KeyValueStore for InMemoryKeyValueStore {
    async fn put(&self, namespace: &[&str], key: &str, value: Value) -> Result<(), HarnessError> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.insert((owned(namespace), key.to_owned()), value);
        Ok(())
    }

    async fn get(&self, namespace: &[&str], key: &str) -> Result<Option<Value>, HarnessError> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(entries.get(&(owned(namespace), key.to_owned())).cloned())
    }

    async fn delete(&self, namespace: &[&str], key: &str) -> Result<bool, HarnessError> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(entries.remove(&(owned(namespace), key.to_owned())).is_some())
    }

    async fn search(
        &self,
        namespace: &[&str],
        key_prefix: &str,
    ) -> Result<Vec<StoreItem>, HarnessError> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(entries
            .iter()
            .filter(|((ns, key), _)| {
                ns.len() >= namespace.len()
                    && ns.iter().zip(namespace).all(|(a, b)| a == b)
                    && key.starts_with(key_prefix)
            })
            .map(|((ns, key), value)| StoreItem {
                namespace: ns.clone(),
                key: key.clone(),
                value: value.clone(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn the_store_lists_by_namespace_and_key_prefix() {
        let store = InMemoryKeyValueStore::new();
        store.put(&["users", "ann"], "pref:lang", json!("fr")).await.unwrap();
        store.put(&["users", "ann"], "pref:tz", json!("CET")).await.unwrap();
        store.put(&["users", "bob"], "pref:lang", json!("en")).await.unwrap();
        store.put(&["users", "ann"], "note", json!(1)).await.unwrap();
        let ann = store.search(&["users", "ann"], "pref:").await.unwrap();
        let keys: Vec<&str> = ann.iter().map(|item| item.key.as_str()).collect();
        assert_eq!(keys, ["pref:lang", "pref:tz"]);
        assert_eq!(store.search(&["users"], "pref:lang").await.unwrap().len(), 2);
        assert!(store.delete(&["users", "ann"], "note").await.unwrap());
        assert!(!store.delete(&["users", "ann"], "note").await.unwrap());
        assert_eq!(store.get(&["users", "bob"], "pref:lang").await.unwrap(), Some(json!("en")));
    }
}

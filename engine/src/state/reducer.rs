//! Reducers for typed states.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::ops::AddAssign;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Folds an update into a field of type `V`.
///
/// The built-in reducers are [`LastValue`] (the default), [`Append`],
/// [`Messages`], [`Sum`], [`Min`], [`Max`] and [`MergeMap`]. A custom
/// reducer is a unit struct implementing this trait, named in the derive:
/// `#[reducer(my_module::KeepLongest)]`.
pub trait Reducer<V> {
    /// What a node writes to the field.
    type Update: Clone + Send + Sync + Serialize + DeserializeOwned + std::fmt::Debug + 'static;
    /// `true` when a second write in the same super-step is an error rather
    /// than something to fold.
    const EXCLUSIVE: bool = false;
    /// Folds one update into the value.
    fn reduce(value: &mut V, update: Self::Update);
}

/// The default: the update replaces the value; two writes in one step are a
/// conflict.
#[derive(Debug, Clone, Copy, Default)]
pub struct LastValue;

impl<V> Reducer<V> for LastValue
where
    V: Clone + Send + Sync + Serialize + DeserializeOwned + std::fmt::Debug + 'static,
{
    type Update = V;
    const EXCLUSIVE: bool = true;
    fn reduce(value: &mut V, update: V) {
        *value = update;
    }
}

/// Appends the written items to a `Vec`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Append;

impl<T> Reducer<Vec<T>> for Append
where
    T: Clone + Send + Sync + Serialize + DeserializeOwned + std::fmt::Debug + 'static,
{
    type Update = Vec<T>;
    fn reduce(value: &mut Vec<T>, update: Vec<T>) {
        value.extend(update);
    }
}

/// Adds the written amount.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sum;

impl<V> Reducer<V> for Sum
where
    V: AddAssign + Clone + Send + Sync + Serialize + DeserializeOwned + std::fmt::Debug + 'static,
{
    type Update = V;
    fn reduce(value: &mut V, update: V) {
        *value += update;
    }
}

/// Keeps the smaller of the value and the update. Starts from the field's
/// initial value, so give the field a start that any real value beats.
#[derive(Debug, Clone, Copy, Default)]
pub struct Min;

impl<V> Reducer<V> for Min
where
    V: PartialOrd + Clone + Send + Sync + Serialize + DeserializeOwned + std::fmt::Debug + 'static,
{
    type Update = V;
    fn reduce(value: &mut V, update: V) {
        if update < *value {
            *value = update;
        }
    }
}

/// Keeps the larger of the value and the update (`Option` fields work:
/// `None` is below every `Some`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Max;

impl<V> Reducer<V> for Max
where
    V: PartialOrd + Clone + Send + Sync + Serialize + DeserializeOwned + std::fmt::Debug + 'static,
{
    type Update = V;
    fn reduce(value: &mut V, update: V) {
        if update > *value {
            *value = update;
        }
    }
}

/// Inserts every written entry into a map; a written key replaces the old
/// entry.
#[derive(Debug, Clone, Copy, Default)]
pub struct MergeMap;

impl<K, V> Reducer<BTreeMap<K, V>> for MergeMap
where
    K: Ord + Clone + Send + Sync + Serialize + DeserializeOwned + std::fmt::Debug + 'static,
    V: Clone + Send + Sync + Serialize + DeserializeOwned + std::fmt::Debug + 'static,
{
    type Update = BTreeMap<K, V>;
    fn reduce(value: &mut BTreeMap<K, V>, update: BTreeMap<K, V>) {
        value.extend(update);
    }
}

impl<K, V> Reducer<HashMap<K, V>> for MergeMap
where
    K: Eq + Hash + Clone + Send + Sync + Serialize + DeserializeOwned + std::fmt::Debug + 'static,
    V: Clone + Send + Sync + Serialize + DeserializeOwned + std::fmt::Debug + 'static,
{
    type Update = HashMap<K, V>;
    fn reduce(value: &mut HashMap<K, V>, update: HashMap<K, V>) {
        value.extend(update);
    }
}

/// A message that may carry an id, for the [`Messages`] reducer.
pub trait HasId {
    /// The message's id, if it has one.
    fn id(&self) -> Option<&str>;
}

/// One change to a message list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageOp<M> {
    /// Replaces the message with the same id in place, or appends it (a
    /// message without an id is always appended).
    Upsert(M),
    /// Removes the message with this id (no-op when absent).
    Remove {
        /// Id of the message to remove.
        id: String,
    },
    /// Removes every message.
    RemoveAll,
}

impl<M> From<M> for MessageOp<M> {
    fn from(message: M) -> Self {
        MessageOp::Upsert(message)
    }
}

/// A conversation: append, replace by id, remove by id.
#[derive(Debug, Clone, Copy, Default)]
pub struct Messages;

impl<M> Reducer<Vec<M>> for Messages
where
    M: HasId + Clone + Send + Sync + Serialize + DeserializeOwned + std::fmt::Debug + 'static,
{
    type Update = Vec<MessageOp<M>>;
    fn reduce(value: &mut Vec<M>, update: Vec<MessageOp<M>>) {
        for op in update {
            match op {
                MessageOp::Upsert(message) => {
                    let slot = message
                        .id()
                        .and_then(|id| value.iter().position(|old| old.id() == Some(id)));
                    match slot {
                        Some(index) => value[index] = message,
                        None => value.push(message),
                    }
                }
                MessageOp::Remove { id } => value.retain(|old| old.id() != Some(id.as_str())),
                MessageOp::RemoveAll => value.clear(),
            }
        }
    }
}

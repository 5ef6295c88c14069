//! A JSON-object state whose reducers are chosen at run time, for
//! blueprints, the CLI and the server.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{State, StateError, Write};

/// A state that is a JSON object. Its [`DynSchema`] names each field and
/// its reducer; updates are JSON objects holding some of those fields.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DynState(pub Map<String, Value>);

impl DynState {
    /// The field's value, if set.
    pub fn get(&self, field: &str) -> Option<&Value> {
        self.0.get(field)
    }
}

impl From<Map<String, Value>> for DynState {
    fn from(map: Map<String, Value>) -> Self {
        Self(map)
    }
}

/// Reducer of one [`DynState`] field; the same semantics as the typed ones.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum DynReducer {
    /// Replace; two writes in one step conflict.
    #[default]
    LastValue,
    /// Append the written array's items to the array.
    Append,
    /// Message list: each written object replaces the message with the same
    /// `"id"` or is appended; `{"$remove": ID}` removes one, `"$remove_all"`
    /// clears the list.
    Messages,
    /// Add numbers.
    Sum,
    /// Keep the smaller number.
    Min,
    /// Keep the larger number.
    Max,
    /// Insert the written object's entries into the object.
    Merge,
    /// A function of (current value, update).
    Custom(CustomReducer),
}

/// A custom reducer function for a [`DynState`] field.
pub type CustomReducer = Arc<
    dyn Fn(&mut Value, Value) -> Result<(), Box<dyn std::error::Error + Send + Sync>> + Send + Sync,
>;

impl DynReducer {
    fn name(&self) -> &'static str {
        match self {
            DynReducer::LastValue => "last_value",
            DynReducer::Append => "append",
            DynReducer::Messages => "messages",
            DynReducer::Sum => "sum",
            DynReducer::Min => "min",
            DynReducer::Max => "max",
            DynReducer::Merge => "merge",
            DynReducer::Custom(_) => "custom",
        }
    }
}

impl fmt::Debug for DynReducer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The fields of a [`DynState`] and their reducers.
#[derive(Debug, Clone, Default)]
pub struct DynSchema {
    fields: BTreeMap<String, DynReducer>,
}

impl DynSchema {
    /// A schema with no fields.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares a field.
    pub fn field(mut self, name: impl Into<String>, reducer: DynReducer) -> Self {
        self.fields.insert(name.into(), reducer);
        self
    }

    /// The declared fields.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &DynReducer)> {
        self.fields.iter().map(|(name, reducer)| (name.as_str(), reducer))
    }
}

impl State for DynState {
    type Update = Map<String, Value>;
    type Schema = DynSchema;

    fn apply(
        &mut self,
        schema: &DynSchema,
        writes: Vec<Write<Self::Update>>,
    ) -> Result<(), StateError> {
        // Validate everything first so a refused step changes nothing.
        for write in &writes {
            if let Some(field) = write.update.keys().find(|key| !schema.fields.contains_key(*key)) {
                return Err(StateError::UnknownField {
                    field: field.clone(),
                    node: write.node.to_string(),
                });
            }
        }
        for (field, reducer) in &schema.fields {
            if matches!(reducer, DynReducer::LastValue) {
                super::__check_exclusive(field, true, &writes, |update| {
                    update.contains_key(field)
                })?;
            }
        }
        for write in writes {
            for (field, update) in write.update {
                let reducer = &schema.fields[&field];
                let slot = self.0.entry(field.clone()).or_insert(Value::Null);
                reduce(reducer, slot, update)
                    .map_err(|fault| fault.into_error(field, &write.node))?;
            }
        }
        Ok(())
    }
}

enum Fault {
    Type { reducer: &'static str, expected: &'static str },
    Custom(Box<dyn std::error::Error + Send + Sync>),
}

impl Fault {
    fn into_error(self, field: String, node: &str) -> StateError {
        let node = node.to_owned();
        match self {
            Fault::Type { reducer, expected } => {
                StateError::TypeMismatch { field, node, reducer, expected }
            }
            Fault::Custom(source) => StateError::ReducerRejected { field, node, source },
        }
    }
}

fn reduce(reducer: &DynReducer, slot: &mut Value, update: Value) -> Result<(), Fault> {
    let mismatch = |expected| Fault::Type { reducer: reducer.name(), expected };
    match reducer {
        DynReducer::LastValue => *slot = update,
        DynReducer::Append => {
            let Value::Array(items) = update else { return Err(mismatch("an array")) };
            array_slot(slot).ok_or_else(|| mismatch("an array"))?.extend(items);
        }
        DynReducer::Messages => {
            let Value::Array(ops) = update else { return Err(mismatch("an array")) };
            let list = array_slot(slot).ok_or_else(|| mismatch("an array"))?;
            for op in ops {
                apply_message_op(list, op).ok_or_else(|| mismatch("objects or $remove ops"))?;
            }
        }
        DynReducer::Sum | DynReducer::Min | DynReducer::Max => {
            let Value::Number(new) = update else { return Err(mismatch("a number")) };
            let current = match slot {
                Value::Null => None,
                Value::Number(old) => Some(old.clone()),
                _ => return Err(mismatch("a number")),
            };
            *slot = Value::Number(match current {
                None => new,
                Some(old) => {
                    fold_number(reducer, &old, &new).ok_or_else(|| mismatch("a finite number"))?
                }
            });
        }
        DynReducer::Merge => {
            let Value::Object(entries) = update else { return Err(mismatch("an object")) };
            if slot.is_null() {
                *slot = Value::Object(Map::new());
            }
            let Value::Object(map) = slot else { return Err(mismatch("an object")) };
            map.extend(entries);
        }
        DynReducer::Custom(function) => function(slot, update).map_err(Fault::Custom)?,
    }
    Ok(())
}

fn array_slot(slot: &mut Value) -> Option<&mut Vec<Value>> {
    if slot.is_null() {
        *slot = Value::Array(Vec::new());
    }
    slot.as_array_mut()
}

fn apply_message_op(list: &mut Vec<Value>, op: Value) -> Option<()> {
    match op {
        Value::String(word) if word == "$remove_all" => list.clear(),
        Value::Object(ref object) if object.contains_key("$remove") => {
            let id = object.get("$remove")?.clone();
            list.retain(|message| message.get("id") != Some(&id));
        }
        Value::Object(_) => {
            let slot = op
                .get("id")
                .filter(|id| !id.is_null())
                .and_then(|id| list.iter().position(|old| old.get("id") == Some(id)));
            match slot {
                Some(index) => list[index] = op,
                None => list.push(op),
            }
        }
        _ => return None,
    }
    Some(())
}

fn fold_number(
    reducer: &DynReducer,
    old: &serde_json::Number,
    new: &serde_json::Number,
) -> Option<serde_json::Number> {
    if let (Some(a), Some(b)) = (old.as_i64(), new.as_i64()) {
        let folded = match reducer {
            DynReducer::Sum => a.checked_add(b)?,
            DynReducer::Min => a.min(b),
            _ => a.max(b),
        };
        return Some(folded.into());
    }
    let (a, b) = (old.as_f64()?, new.as_f64()?);
    let folded = match reducer {
        DynReducer::Sum => a + b,
        DynReducer::Min => a.min(b),
        _ => a.max(b),
    };
    serde_json::Number::from_f64(folded)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> DynSchema {
        DynSchema::new()
            .field("topic", DynReducer::LastValue)
            .field("log", DynReducer::Append)
            .field("messages", DynReducer::Messages)
            .field("total", DynReducer::Sum)
            .field("low", DynReducer::Min)
            .field("high", DynReducer::Max)
            .field("meta", DynReducer::Merge)
    }

    fn write(node: &str, update: Value) -> Write<Map<String, Value>> {
        let Value::Object(update) = update else { panic!("update must be an object") };
        Write { node: node.into(), update }
    }

    fn check(steps: Vec<Vec<Write<Map<String, Value>>>>, expect: Value) {
        let mut state = DynState::default();
        for writes in steps {
            state.apply(&schema(), writes).expect("apply");
        }
        assert_eq!(Value::Object(state.0), expect);
    }

    #[test]
    fn every_reducer_folds_like_its_typed_twin() {
        check(
            vec![
                vec![
                    write("a", json!({"topic": "x", "log": [1], "total": 2, "low": 5, "high": 5})),
                    write(
                        "b",
                        json!({"log": [2, 3], "total": 3, "low": 3, "high": 9, "meta": {"k": 1}}),
                    ),
                ],
                vec![write("c", json!({"topic": "y", "meta": {"k": 2, "j": 0}, "total": 0.5}))],
            ],
            json!({"topic": "y", "log": [1, 2, 3], "total": 5.5, "low": 3, "high": 9,
                   "meta": {"k": 2, "j": 0}}),
        );
    }

    #[test]
    fn messages_append_replace_and_remove_by_id() {
        check(
            vec![
                vec![write(
                    "a",
                    json!({"messages": [{"id": "1", "text": "hi"}, {"id": "2", "text": "yo"}, {"text": "anon"}]}),
                )],
                vec![write(
                    "b",
                    json!({"messages": [{"id": "1", "text": "hello"}, {"$remove": "2"}]}),
                )],
            ],
            json!({"messages": [{"id": "1", "text": "hello"}, {"text": "anon"}]}),
        );
        check(
            vec![vec![write("a", json!({"messages": [{"id": "1"}, "$remove_all", {"id": "3"}]}))]],
            json!({"messages": [{"id": "3"}]}),
        );
    }

    #[test]
    fn refused_steps_name_field_node_and_change_nothing() {
        let cases = [
            (
                vec![write("a", json!({"topic": 1})), write("b", json!({"topic": 2}))],
                "field `topic` was written by 2 nodes in one step (a, b)",
            ),
            (
                vec![write("a", json!({"nope": 1}))],
                "node `a` wrote field `nope`, which the state schema does not declare",
            ),
            (
                vec![write("a", json!({"log": 1}))],
                "node `a` wrote field `log`: the append reducer needs an array",
            ),
            (
                vec![write("a", json!({"total": "x"}))],
                "node `a` wrote field `total`: the sum reducer needs a number",
            ),
        ];
        for (writes, message) in cases {
            let mut state = DynState::default();
            let err = state.apply(&schema(), writes).expect_err(message);
            assert!(err.to_string().starts_with(message), "{err}");
            if message.contains("one step") || message.contains("declare") {
                assert!(state.0.is_empty(), "a refused step changed the state: {state:?}");
            }
        }
    }
}

//! Filters on an item's value: `{"kind": "pref", "n": {"$gte": 3}}`.

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::{ItemError, MAX_FILTER_CONDITIONS, MAX_IN_VALUES};

/// Conditions on the fields of items' values, all of which must hold.
///
/// Written as JSON, a field (a dotted path into nested objects:
/// `"author.name"`) maps to a value (equal to it) or to operators:
/// `$eq $ne $gt $gte $lt $lte $in`. Numbers compare as numbers (`1` equals
/// `1.0`); `$gt`, `$gte`, `$lt` and `$lte` compare a number with numbers
/// and a string with strings (by bytes), and never hold across types or on
/// a missing field; `$ne` holds on a missing field; `$in` takes an array
/// and holds when the field equals one of its values.
///
/// ```
/// use serde_json::json;
/// use tollgate_checkpoint::Filter;
///
/// let filter = Filter::from_json(&json!({"kind": "pref", "n": {"$gte": 3}})).unwrap();
/// assert!(filter.matches(&json!({"kind": "pref", "n": 4})));
/// assert!(!filter.matches(&json!({"kind": "pref", "n": 2})));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    conditions: Vec<Condition>,
}

/// One condition of a [`Filter`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Condition {
    /// The field as written (`author.name`).
    pub field: String,
    /// Its path (`["author", "name"]`).
    pub path: Vec<String>,
    /// The comparison.
    pub op: FilterOp,
    /// What the field is compared with (an array for [`FilterOp::In`]).
    pub operand: Value,
}

/// A comparison of a [`Condition`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FilterOp {
    /// `$eq`: equal.
    Eq,
    /// `$ne`: missing or not equal.
    Ne,
    /// `$gt`: greater.
    Gt,
    /// `$gte`: greater or equal.
    Gte,
    /// `$lt`: less.
    Lt,
    /// `$lte`: less or equal.
    Lte,
    /// `$in`: equal to one of an array's values.
    In,
}

impl FilterOp {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "$eq" => FilterOp::Eq,
            "$ne" => FilterOp::Ne,
            "$gt" => FilterOp::Gt,
            "$gte" => FilterOp::Gte,
            "$lt" => FilterOp::Lt,
            "$lte" => FilterOp::Lte,
            "$in" => FilterOp::In,
            _ => return None,
        })
    }

    /// Its name in JSON (`$gte`).
    pub fn name(self) -> &'static str {
        match self {
            FilterOp::Eq => "$eq",
            FilterOp::Ne => "$ne",
            FilterOp::Gt => "$gt",
            FilterOp::Gte => "$gte",
            FilterOp::Lt => "$lt",
            FilterOp::Lte => "$lte",
            FilterOp::In => "$in",
        }
    }

    /// The comparison's operator in SQL and most languages (`>=`), for the
    /// four orderings.
    pub fn comparison(self) -> Option<&'static str> {
        Some(match self {
            FilterOp::Gt => ">",
            FilterOp::Gte => ">=",
            FilterOp::Lt => "<",
            FilterOp::Lte => "<=",
            _ => return None,
        })
    }
}

impl Filter {
    /// The filter a JSON object describes (`null` or `{}`: none).
    pub fn from_json(json: &Value) -> Result<Self, ItemError> {
        let fields = match json {
            Value::Null => return Ok(Self::default()),
            Value::Object(fields) => fields,
            _ => return Err(ItemError::FilterNotObject),
        };
        let mut conditions = Vec::new();
        for (field, want) in fields {
            let path: Vec<String> = field.split('.').map(str::to_owned).collect();
            match operators(want) {
                Some(operators) => {
                    for (name, operand) in operators {
                        let op =
                            FilterOp::parse(name).ok_or_else(|| ItemError::UnknownOperator {
                                field: field.clone(),
                                operator: name.clone(),
                            })?;
                        check_operand(field, op, operand)?;
                        conditions.push(Condition {
                            field: field.clone(),
                            path: path.clone(),
                            op,
                            operand: operand.clone(),
                        });
                    }
                }
                None => conditions.push(Condition {
                    field: field.clone(),
                    path,
                    op: FilterOp::Eq,
                    operand: want.clone(),
                }),
            }
        }
        if conditions.len() > MAX_FILTER_CONDITIONS {
            return Err(ItemError::FilterTooLarge {
                conditions: conditions.len(),
                limit: MAX_FILTER_CONDITIONS,
            });
        }
        Ok(Self { conditions })
    }

    /// Its conditions.
    pub fn conditions(&self) -> &[Condition] {
        &self.conditions
    }

    /// Whether it has no conditions.
    pub fn is_empty(&self) -> bool {
        self.conditions.is_empty()
    }

    /// Whether `value` meets every condition.
    pub fn matches(&self, value: &Value) -> bool {
        self.conditions.iter().all(|condition| condition.holds(value))
    }
}

/// A field's operators, when its object's keys all start with `$`.
fn operators(want: &Value) -> Option<&Map<String, Value>> {
    match want {
        Value::Object(map) if !map.is_empty() && map.keys().any(|key| key.starts_with('$')) => {
            Some(map)
        }
        _ => None,
    }
}

fn check_operand(field: &str, op: FilterOp, operand: &Value) -> Result<(), ItemError> {
    let invalid =
        |needs| ItemError::InvalidOperand { field: field.to_owned(), operator: op.name(), needs };
    match op {
        FilterOp::Gt | FilterOp::Gte | FilterOp::Lt | FilterOp::Lte => match operand {
            Value::Number(_) | Value::String(_) => Ok(()),
            _ => Err(invalid("a number or a string")),
        },
        FilterOp::In => match operand {
            Value::Array(values) if values.len() > MAX_IN_VALUES => Err(ItemError::InTooLong {
                field: field.to_owned(),
                values: values.len(),
                limit: MAX_IN_VALUES,
            }),
            Value::Array(_) => Ok(()),
            _ => Err(invalid("an array")),
        },
        FilterOp::Eq | FilterOp::Ne => Ok(()),
    }
}

impl Condition {
    /// Whether `value` meets it.
    pub fn holds(&self, value: &Value) -> bool {
        let found = self.path.iter().try_fold(value, |at, part| at.as_object()?.get(part));
        match (self.op, found) {
            (FilterOp::Ne, None) => true,
            (_, None) => false,
            (FilterOp::Eq, Some(found)) => json_eq(found, &self.operand),
            (FilterOp::Ne, Some(found)) => !json_eq(found, &self.operand),
            (FilterOp::In, Some(found)) => {
                self.operand.as_array().is_some_and(|all| all.iter().any(|one| json_eq(found, one)))
            }
            (op, Some(found)) => match compare(found, &self.operand) {
                Some(order) => match op {
                    FilterOp::Gt => order == Ordering::Greater,
                    FilterOp::Gte => order != Ordering::Less,
                    FilterOp::Lt => order == Ordering::Less,
                    _ => order != Ordering::Greater,
                },
                None => false,
            },
        }
    }
}

/// JSON equality with numbers compared by value (`1 == 1.0`).
pub(crate) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(key, a)| b.get(key).is_some_and(|b| json_eq(a, b)))
        }
        (a, b) => a == b,
    }
}

/// Numbers with numbers, strings with strings; `None` across types.
fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(a), Value::Number(b)) => a.as_f64()?.partial_cmp(&b.as_f64()?),
        (Value::String(a), Value::String(b)) => Some(a.as_str().cmp(b.as_str())),
        _ => None,
    }
}

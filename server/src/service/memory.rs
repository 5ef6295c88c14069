//! The memory store as both APIs ask for it: reading one item, and
//! the operations their request bodies describe.

use serde_json::Value;
use tollgate_checkpoint::{Filter, GetOp, Item, Namespace, SearchOp};

use crate::error::ServiceError;

use super::Runs;

impl Runs {
    /// The item, or a 404 naming it.
    pub(crate) async fn item(
        &self,
        namespace: Namespace,
        key: String,
        refresh_ttl: bool,
    ) -> Result<Item, ServiceError> {
        let mut op = GetOp::new(namespace.clone(), key.clone());
        op.refresh_ttl = refresh_ttl;
        self.memory().get_op(op).await?.ok_or_else(|| {
            ServiceError::missing(format!("no item `{key}` in namespace `{namespace}`"))
        })
    }
}

/// `index` as a put takes it: `false` (not embedded) or the fields.
pub(crate) fn index_fields(index: Option<Value>) -> Result<Option<Vec<String>>, ServiceError> {
    match index {
        None | Some(Value::Null) | Some(Value::Bool(true)) => Ok(None),
        Some(Value::Bool(false)) => Ok(Some(Vec::new())),
        Some(Value::Array(fields)) => fields
            .into_iter()
            .map(|field| match field {
                Value::String(field) => Ok(field),
                _ => Err(ServiceError::invalid("`index` lists field names (strings)")),
            })
            .collect::<Result<_, _>>()
            .map(Some),
        Some(_) => Err(ServiceError::invalid("`index` is false or a list of fields")),
    }
}

/// A search as the API bodies describe it.
pub(crate) fn search_op(
    prefix: Namespace,
    filter: Option<&Value>,
    query: Option<String>,
    limit: Option<usize>,
    offset: Option<usize>,
    refresh_ttl: Option<bool>,
) -> Result<SearchOp, ServiceError> {
    let mut op = SearchOp::new(prefix)
        .filter(Filter::from_json(filter.unwrap_or(&Value::Null))?)
        .limit(limit.unwrap_or(10))
        .offset(offset.unwrap_or(0));
    if let Some(query) = query.filter(|query| !query.trim().is_empty()) {
        op = op.query(query);
    }
    op.refresh_ttl = refresh_ttl.unwrap_or(true);
    Ok(op)
}

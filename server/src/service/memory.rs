//! The memory store as both APIs ask for it: reading one item, the
//! operations their request bodies describe, and a narrowed caller's own
//! part of it (their shelf: [`Caller::shelf`]).

use serde_json::Value;
use tollgate_checkpoint::{Filter, GetOp, Item, Namespace, NamespaceQuery, SearchOp};

use crate::error::ServiceError;
use crate::identity::Caller;

use super::Runs;

impl Runs {
    /// The item of `caller`'s `namespace` (under their shelf), shown as
    /// they name it, or a 404 naming it.
    pub(crate) async fn item(
        &self,
        caller: &Caller,
        namespace: Namespace,
        key: String,
        refresh_ttl: bool,
    ) -> Result<Item, ServiceError> {
        let mut op = GetOp::new(shelved(caller, &namespace)?, key.clone());
        op.refresh_ttl = refresh_ttl;
        match self.memory().get_op(op).await? {
            Some(item) => Ok(unshelved(caller, item)),
            None => {
                Err(ServiceError::missing(format!("no item `{key}` in namespace `{namespace}`")))
            }
        }
    }
}

/// `namespace` as `caller` names it, where it lies in the store: under
/// their shelf ([`Caller::shelf`]).
pub(crate) fn shelved(caller: &Caller, namespace: &Namespace) -> Result<Namespace, ServiceError> {
    let shelf = caller.shelf();
    if shelf.is_empty() {
        return Ok(namespace.clone());
    }
    Ok(Namespace::new(shelf.into_iter().chain(namespace.parts().iter().cloned()))?)
}

/// `item` as `caller` sees it: its namespace without their shelf.
pub(crate) fn unshelved(caller: &Caller, mut item: Item) -> Item {
    item.namespace = unshelved_namespace(caller, &item.namespace);
    item
}

/// A stored namespace as `caller` names it.
pub(crate) fn unshelved_namespace(caller: &Caller, namespace: &Namespace) -> Namespace {
    let shelf = caller.shelf();
    match namespace.parts().strip_prefix(shelf.as_slice()) {
        Some(rest) if !shelf.is_empty() => {
            Namespace::new(rest.iter().cloned()).unwrap_or_else(|_| namespace.clone())
        }
        _ => namespace.clone(),
    }
}

/// A namespace listing as `caller` asks for it: under their shelf, its
/// depth counted below it.
pub(crate) fn shelved_query(caller: &Caller, mut query: NamespaceQuery) -> NamespaceQuery {
    let shelf = caller.shelf();
    if shelf.is_empty() {
        return query;
    }
    query.max_depth = query.max_depth.map(|depth| depth + shelf.len());
    let asked = std::mem::take(&mut query.prefix);
    query.prefix(shelf.into_iter().chain(asked))
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

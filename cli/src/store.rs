//! `tollgate store …`: long-term memory from the command line.

use serde_json::json;
use tollgate_checkpoint::{Filter, Item, Namespace, NamespaceQuery, PutOp, SearchOp};
use tollgate_server::{code, Runs, ServiceError};

use crate::args::StoreCommand;
use crate::{json_arg, parse_age, print_json};

fn namespace(text: &str) -> Result<Namespace, ServiceError> {
    Ok(Namespace::parse(text)?)
}

fn parts(text: Option<String>) -> Vec<String> {
    text.filter(|text| !text.is_empty())
        .map(|text| text.split('/').map(str::to_owned).collect())
        .unwrap_or_default()
}

/// One line per item: `namespace key value` (and the score of a ranked
/// search).
fn line(item: &Item) -> String {
    match item.score {
        Some(score) => format!("{}\t{}\t{:.3}\t{}", item.namespace, item.key, score, item.value),
        None => format!("{}\t{}\t{}", item.namespace, item.key, item.value),
    }
}

pub(crate) async fn store_command(runs: &Runs, command: StoreCommand) -> Result<u8, ServiceError> {
    let memory = runs.memory();
    match command {
        StoreCommand::Put { namespace: ns, key, value, ttl, json } => {
            let mut op = PutOp::new(namespace(&ns)?, key.clone(), json_arg("VALUE", &value)?);
            if let Some(ttl) = ttl {
                let ms = parse_age("--ttl", &ttl)?;
                op = op.ttl(std::time::Duration::from_millis(ms.max(1) as u64));
            }
            memory.put_op(op).await?;
            if json {
                print_json(&json!({"stored": true, "namespace": ns, "key": key}));
            } else {
                say!("stored {ns} {key}");
            }
            Ok(code::OK)
        }
        StoreCommand::Get { namespace: ns, key, json } => {
            let Some(item) = memory.get(&namespace(&ns)?, &key).await? else {
                return Err(ServiceError::missing(format!("no item `{key}` in namespace `{ns}`")));
            };
            if json {
                print_json(&item);
            } else {
                say!("{}", item.value);
            }
            Ok(code::OK)
        }
        StoreCommand::Search { prefix, filter, query, limit, offset, json } => {
            search(runs, &prefix, (filter, query), (limit, offset), json).await
        }
        StoreCommand::Delete { namespace: ns, key, json } => {
            if !memory.delete(&namespace(&ns)?, &key).await? {
                return Err(ServiceError::missing(format!("no item `{key}` in namespace `{ns}`")));
            }
            if json {
                print_json(&json!({"deleted": true, "namespace": ns, "key": key}));
            } else {
                say!("deleted {ns} {key}");
            }
            Ok(code::OK)
        }
        StoreCommand::Namespaces { prefix, suffix, max_depth, limit, json } => {
            let mut query =
                NamespaceQuery::new().prefix(parts(prefix)).suffix(parts(suffix)).page(limit, 0);
            if let Some(depth) = max_depth {
                query = query.max_depth(depth);
            }
            let found = memory.list_namespaces(query).await?;
            let names: Vec<String> = found.iter().map(ToString::to_string).collect();
            if json {
                print_json(&json!({"namespaces": names}));
            } else {
                for name in &names {
                    say!("{name}");
                }
            }
            Ok(code::OK)
        }
    }
}

/// `store search`: items under a prefix, filtered, ranked by a query.
async fn search(
    runs: &Runs,
    prefix: &str,
    (filter, query): (Option<String>, Option<String>),
    (limit, offset): (usize, usize),
    json: bool,
) -> Result<u8, ServiceError> {
    let memory = runs.memory();
    let filter = match filter {
        Some(text) => Filter::from_json(&json_arg("--filter", &text)?)?,
        None => Filter::default(),
    };
    let mut op = SearchOp::new(namespace(prefix)?).filter(filter).limit(limit).offset(offset);
    let semantic = query.is_some();
    if let Some(query) = query {
        op = op.query(query);
    }
    let found = memory.search_ranked(op).await?;
    let items = &found.items;
    if json {
        let mut shown = json!({"items": items});
        if semantic {
            shown["unindexed"] = json!(found.unindexed);
        }
        print_json(&shown);
    } else {
        if items.is_empty() {
            // Said, so that an empty answer is not taken for a
            // failure to print (stderr: stdout stays the items).
            eprintln!("nothing under {prefix} matched");
        }
        for item in items {
            say!("{}", line(item));
        }
        if found.unindexed > 0 {
            eprintln!(
                "{} item(s) under {prefix} have no vector (stored without an embedder): no query can match them",
                found.unindexed
            );
        }
    }
    Ok(code::OK)
}

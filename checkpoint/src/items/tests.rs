use serde_json::json;

use super::*;

#[test]
fn namespaces_are_checked_and_stored_as_one_range() {
    let ns = Namespace::parse("users/42/memories").unwrap();
    assert_eq!(ns.parts(), ["users", "42", "memories"]);
    assert_eq!(ns.to_string(), "users/42/memories");
    assert_eq!(ns.stored(), "users/42/memories/");
    assert_eq!(Namespace::from_stored(&ns.stored()), ns);
    let prefix = Namespace::parse("users/4").unwrap();
    // `users/42/` is not under `users/4/`: the range ends before it.
    assert!(ns.stored() >= prefix.stored_end().unwrap() || ns.stored() < prefix.stored());
    assert_eq!(Namespace::parse("").unwrap().stored_end(), None);
    for bad in ["a//b", "/a", "a/", "a/\u{7}"] {
        assert!(
            matches!(Namespace::parse(bad), Err(ItemError::InvalidNamespacePart { .. })),
            "{bad:?} was taken"
        );
    }
    let parts: Vec<String> = (0..=MAX_PARTS).map(|n| n.to_string()).collect();
    assert!(matches!(Namespace::new(parts), Err(ItemError::TooManyParts { .. })));
    let json: Result<Namespace, _> = serde_json::from_value(json!(["a", "b/c"]));
    assert!(json.is_err());
}

#[test]
fn keys_and_values_are_checked() {
    let ns = Namespace::parse("a").unwrap();
    let put = |key: &str, value| ItemOp::Put(PutOp::new(ns.clone(), key, value)).check();
    assert!(matches!(put("", json!(1)), Err(ItemError::InvalidKey { .. })));
    assert!(matches!(put("a\nb", json!(1)), Err(ItemError::InvalidKey { .. })));
    let big = json!("x".repeat(MAX_VALUE_BYTES));
    assert!(matches!(put("k", big), Err(ItemError::ValueTooLarge { .. })));
    assert!(put("k/with/slashes", json!({"fine": true})).is_ok());
    let empty = ItemOp::Get(GetOp::new(Namespace::default(), "k")).check();
    assert!(matches!(empty, Err(ItemError::EmptyNamespace)));
}

#[test]
fn filters_parse_every_operator_and_refuse_the_rest() {
    let filter = Filter::from_json(&json!({
        "kind": "pref",
        "n": {"$gte": 1, "$lt": 5},
        "tag": {"$in": ["a", "b"]},
        "who.name": {"$ne": "bob"},
    }))
    .unwrap();
    assert_eq!(filter.conditions().len(), 5);
    assert!(filter.matches(&json!({"kind": "pref", "n": 1.0, "tag": "b", "who": {"name": "ann"}})));
    assert!(filter.matches(&json!({"kind": "pref", "n": 4, "tag": "a"})));
    assert!(!filter.matches(&json!({"kind": "pref", "n": 5, "tag": "a"})));
    assert!(!filter.matches(&json!({"kind": "pref", "n": "3", "tag": "a"})));
    assert!(!filter.matches(&json!({"kind": "pref", "n": 2, "tag": "a", "who": {"name": "bob"}})));
    let unknown = Filter::from_json(&json!({"n": {"$regex": "x"}}));
    assert!(matches!(unknown, Err(ItemError::UnknownOperator { .. })));
    let operand = Filter::from_json(&json!({"n": {"$in": 3}}));
    assert!(matches!(operand, Err(ItemError::InvalidOperand { .. })));
    let operand = Filter::from_json(&json!({"n": {"$gt": [1]}}));
    assert!(matches!(operand, Err(ItemError::InvalidOperand { .. })));
    assert!(matches!(Filter::from_json(&json!([1])), Err(ItemError::FilterNotObject)));
    // An object without operators is compared whole.
    let whole = Filter::from_json(&json!({"meta": {"a": 1}})).unwrap();
    assert!(whole.matches(&json!({"meta": {"a": 1.0}})));
    assert!(!whole.matches(&json!({"meta": {"a": 1, "b": 2}})));
}

#[test]
fn namespace_queries_match_wildcards_and_cut_to_depth() {
    let all: Vec<Namespace> = ["a/x/m", "a/y/m", "a/y/n", "b/x/m"]
        .iter()
        .map(|text| Namespace::parse(text).unwrap())
        .collect();
    let names = |query: NamespaceQuery| -> Vec<String> {
        query.select(all.clone()).iter().map(ToString::to_string).collect()
    };
    assert_eq!(names(NamespaceQuery::new().prefix(["a"])), ["a/x/m", "a/y/m", "a/y/n"]);
    assert_eq!(names(NamespaceQuery::new().suffix(["m"])), ["a/x/m", "a/y/m", "b/x/m"]);
    assert_eq!(names(NamespaceQuery::new().prefix(["*", "x"])), ["a/x/m", "b/x/m"]);
    assert_eq!(names(NamespaceQuery::new().max_depth(1)), ["a", "b"]);
    assert_eq!(names(NamespaceQuery::new().max_depth(2).page(2, 1)), ["a/y", "b/x"]);
}

#[tokio::test]
async fn the_reference_store_keeps_the_contract() {
    crate::conformance::check_item_store(|| async { InMemoryItemStore::new() }).await;
}

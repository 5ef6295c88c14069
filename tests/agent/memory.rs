//! Threads remember their conversation (durably, in the store; the
//! short-term memory gets a copy).

use std::sync::Arc;

use tollgate::{Agent, InMemoryShortTermMemory, RunConfig, ShortTermMemory};

use crate::support::{self, model, text};

#[test]
fn a_second_run_in_a_thread_sees_the_first_conversation() {
    let rt = support::runtime();
    let memory = Arc::new(InMemoryShortTermMemory::new());
    let executor = support::executor();
    let first = Agent::new("a", model(vec![text("Hi Ann.")]))
        .compile()
        .unwrap()
        .with_memory(memory.clone());
    rt.block_on(first.run_in_thread(&executor, "t1", "I am Ann.", RunConfig::new())).unwrap();
    let second = Agent::new("a", model(vec![text("You are Ann.")]))
        .compile()
        .unwrap()
        .with_memory(memory.clone());
    let run =
        rt.block_on(second.run_in_thread(&executor, "t1", "Who am I?", RunConfig::new())).unwrap();
    let texts: Vec<&str> = run.messages.iter().map(|m| m.content()).collect();
    assert_eq!(texts, ["I am Ann.", "Hi Ann.", "Who am I?", "You are Ann."]);
    let saved = rt.block_on(memory.load("t1")).unwrap();
    assert_eq!(saved.len(), 4);
    assert!(rt.block_on(memory.load("other")).unwrap().is_empty(), "threads are apart");
}

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

/// An executor whose runs have long-term memory (in memory, semantic
/// search with the testkit's embedder).
fn with_memory() -> (tollgate::Executor, tollgate::Memory) {
    let memory = tollgate::Memory::new(Arc::new(tollgate::InMemoryItemStore::new())).with_index(
        tollgate::IndexConfig::new(64).fields(["text"]),
        Arc::new(tollgate_testkit::KeywordEmbedder::new(64)),
    );
    (support::executor().with_memory(memory.clone()), memory)
}

fn asking(user: &str, message: &str) -> tollgate::AgentState {
    tollgate::AgentState {
        messages: vec![tollgate::Message::user("input.0", message)],
        context: [("user_id".to_owned(), serde_json::json!(user))].into(),
        ..tollgate::AgentState::default()
    }
}

#[test]
fn memories_best_matching_the_question_are_recalled_into_the_system_prompt() {
    let rt = support::runtime();
    let (executor, memory) = with_memory();
    let ns = tollgate::Namespace::parse("users/ann").unwrap();
    for (key, text) in
        [("lang", "Ann prefers French"), ("food", "Ann is vegetarian"), ("pet", "Ann has a cat")]
    {
        rt.block_on(memory.put(&ns, key, serde_json::json!({"text": text}))).unwrap();
    }
    let model = tollgate_testkit::ScriptedModel::builder().reply("Bonjour.").build();
    let agent = Agent::new("a", Arc::new(model.clone()))
        .system("Be brief.")
        .memory(
            tollgate::AgentMemory::new(["users", "{user_id}"])
                .tools(Vec::<String>::new())
                .recall_into_prompt(1),
        )
        .compile()
        .unwrap();
    let run = rt.block_on(executor.run(
        agent.graph(),
        asking("ann", "Which language: French?"),
        RunConfig::new(),
    ));
    assert_eq!(run.unwrap().status, tollgate::RunStatus::Completed);
    let system = model.requests()[0].system.clone().unwrap();
    assert_eq!(
        system,
        "Be brief.\n\nWhat you remember from earlier conversations:\n- Ann prefers French"
    );
    assert!(model.requests()[0].tools.is_empty(), "no memory tools were asked for");
}

#[test]
fn an_agent_with_memory_on_an_executor_without_fails_with_a_config_error() {
    let rt = support::runtime();
    let agent = Agent::new("a", model(vec![text("Hi.")]))
        .memory(tollgate::AgentMemory::new(["users", "{user_id}"]).recall_into_prompt(1))
        .compile()
        .unwrap();
    let error = rt
        .block_on(support::executor().run(agent.graph(), asking("ann", "Hi"), RunConfig::new()))
        .unwrap_err();
    assert!(error.to_string().contains("uses long-term memory, but its run has none"), "{error}");
}

//! The tollgate agent harness: messages, chat models, tools, registries,
//! the agent graph, middleware and structured output.
//!
//! Nothing is here yet: the harness is built on the engine in a later step
//! (see the project's open issues). The crate exists now so the workspace
//! has its final shape and dependency direction: `tollgate-nodes` depends
//! on `tollgate-engine`, never the reverse, and knows no SQL.

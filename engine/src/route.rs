//! Where control goes after a node: routes, `Send`s and commands.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Name of the virtual entry node. Edges from `START` pick the first step.
pub const START: &str = "__start__";
/// Name of the virtual exit node. A branch that reaches `END` stops.
pub const END: &str = "__end__";

/// A dynamic branch: run `node` once with its own `input`, beside whatever
/// else the step schedules. Several `Send`s to one node run as separate
/// tasks in the same step (map), merged through the reducers (reduce).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Send {
    /// Node to run.
    pub node: Cow<'static, str>,
    /// The branch's input, read in the node with
    /// [`NodeContext::input`](crate::NodeContext::input).
    pub input: Value,
}

impl Send {
    /// A branch of `node` with `input`.
    pub fn new(node: impl Into<Cow<'static, str>>, input: Value) -> Self {
        Self { node: node.into(), input }
    }
}

/// One target of a route or command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Goto {
    /// Run this node next (once per step, however many sources name it).
    Node(Cow<'static, str>),
    /// Run this node as its own branch with its own input.
    Send(Send),
    /// Stop this branch.
    End,
}

impl Goto {
    /// The node this target names (`END` for [`Goto::End`]).
    pub fn node(&self) -> &str {
        match self {
            Goto::Node(node) => node,
            Goto::Send(send) => &send.node,
            Goto::End => END,
        }
    }
}

impl From<&'static str> for Goto {
    fn from(node: &'static str) -> Self {
        if node == END {
            Goto::End
        } else {
            Goto::Node(Cow::Borrowed(node))
        }
    }
}

impl From<String> for Goto {
    fn from(node: String) -> Self {
        if node == END {
            Goto::End
        } else {
            Goto::Node(Cow::Owned(node))
        }
    }
}

impl From<Send> for Goto {
    fn from(send: Send) -> Self {
        Goto::Send(send)
    }
}

/// What a conditional route returns: one node, several, `END`, or `Send`s.
/// Every node it can name must be declared with the route.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Route {
    targets: Vec<Goto>,
}

impl Route {
    /// Go to one node (or `END`).
    pub fn to(target: impl Into<Goto>) -> Self {
        Self { targets: vec![target.into()] }
    }

    /// Stop this branch.
    pub fn end() -> Self {
        Self { targets: vec![Goto::End] }
    }

    /// Go to several targets at once (a fork).
    pub fn all<T: Into<Goto>>(targets: impl IntoIterator<Item = T>) -> Self {
        Self { targets: targets.into_iter().map(Into::into).collect() }
    }

    /// Fan out: one branch per `Send`.
    pub fn send(sends: impl IntoIterator<Item = Send>) -> Self {
        Self { targets: sends.into_iter().map(Goto::Send).collect() }
    }

    /// Adds a target.
    pub fn and(mut self, target: impl Into<Goto>) -> Self {
        self.targets.push(target.into());
        self
    }

    /// The targets, in order.
    pub fn targets(&self) -> &[Goto] {
        &self.targets
    }

    pub(crate) fn into_targets(self) -> Vec<Goto> {
        self.targets
    }
}

/// What a command node returns: an optional update and where to go, in
/// addition to the node's static edges.
#[derive(Debug, Clone, PartialEq)]
pub struct Command<U> {
    /// The partial update, if any.
    pub update: Option<U>,
    /// Targets; each must be among the node's declared destinations.
    pub goto: Vec<Goto>,
}

impl<U> Command<U> {
    /// Go to `target` without an update.
    pub fn goto(target: impl Into<Goto>) -> Self {
        Self { update: None, goto: vec![target.into()] }
    }

    /// Apply `update` and go nowhere beyond the static edges.
    pub fn update(update: U) -> Self {
        Self { update: Some(update), goto: Vec::new() }
    }

    /// Sets the update.
    pub fn with_update(mut self, update: U) -> Self {
        self.update = Some(update);
        self
    }

    /// Adds a target.
    pub fn and_goto(mut self, target: impl Into<Goto>) -> Self {
        self.goto.push(target.into());
        self
    }
}

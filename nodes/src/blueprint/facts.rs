//! What a blueprint says about itself, for a server to decide with: the
//! tools that run programs, the reviewer groups its approvals name
//! (`approval.rs`).

use super::Blueprint;

impl Blueprint {
    /// The tools of every agent that run a program (`command`), as
    /// `agent.tool`: a server accepting blueprints from clients refuses
    /// these unless told otherwise.
    /// Nested blueprints' tools are named by their path
    /// (`review/checker.run_tests`).
    pub fn command_tools(&self) -> Vec<String> {
        let agents = self.own_agents();
        let mut tools: Vec<String> = agents
            .iter()
            .flat_map(|agent| {
                agent
                    .tools
                    .iter()
                    .filter(|tool| tool.command.is_some())
                    .map(move |tool| format!("{}.{}", agent.name, tool.name))
            })
            .collect();
        for (name, nested) in &self.subgraphs {
            tools.extend(nested.command_tools().into_iter().map(|tool| format!("{name}/{tool}")));
        }
        tools
    }

    /// The reviewer groups its tools' approvals name
    /// (`"approval": {"reviewers": [...]}`), nested blueprints' included,
    /// sorted, each once: a server lets members of these groups see and
    /// decide a run of it while it waits for a decision.
    pub fn reviewers(&self) -> Vec<String> {
        let mut groups: Vec<String> = self
            .own_agents()
            .iter()
            .flat_map(|agent| agent.tools.iter())
            .flat_map(|tool| tool.approval.reviewers().iter().cloned())
            .collect();
        for nested in self.subgraphs.values() {
            groups.extend(nested.reviewers());
        }
        groups.sort();
        groups.dedup();
        groups
    }
}

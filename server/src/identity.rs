//! Who calls and what they reach, below both the HTTP layer (which finds
//! the caller) and the service (which stamps and filters by them): a
//! [`Principal`] with its [`Role`], the [`Policy`] that gives each one a
//! [`Scope`], and the [`Caller`] the service is handed.

use std::path::{Path, PathBuf};

pub use tollgate_checkpoint::Holder;
use tollgate_checkpoint::ThreadRecord;

/// What a caller may do. Each role from `read` on may do what the ones
/// before it may; `user` stands apart (see [`Role::User`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Role {
    /// A person: starts runs, reads, changes and decides what the
    /// [`Policy`] gives them (their own threads and runs by default), and
    /// nothing server-wide (schedules, `/metrics`, the change feed, runs
    /// cancelled in bulk). The lowest: a credential that also names
    /// another role has that one.
    User,
    /// List, show and follow runs and threads (every `GET`).
    Read,
    /// Also decide (resume, reject), cancel and continue runs.
    Decide,
    /// Also start, delete and prune runs.
    Admin,
}

impl Role {
    /// The role named `text` (`user`, `read`, `decide`, `admin`).
    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text {
            "user" => Some(Role::User),
            "read" => Some(Role::Read),
            "decide" => Some(Role::Decide),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Read => "read",
            Role::Decide => "decide",
            Role::Admin => "admin",
        }
    }

    /// Whether it may make a request that needs `needed`: a `user` may
    /// make any (its scope decides what it reaches), the others what
    /// their place in the order allows.
    pub(crate) fn allows(self, needed: Role) -> bool {
        self == Role::User || self >= needed
    }
}

/// Who is calling, as the check found: recorded as `decided_by` of the
/// decisions they make, and as the owner of the threads they create.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Principal {
    /// Their name (a JWT's subject).
    pub name: String,
    /// What they may do.
    pub role: Role,
    /// The groups they belong to (a JWT's `groups`; none for a token).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Their tenant (a JWT's `tenant`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

impl Principal {
    /// `name` with `role`, in no group and no tenant.
    pub fn new(name: impl Into<String>, role: Role) -> Self {
        Self { name: name.into(), role, groups: Vec::new(), tenant: None }
    }

    /// The same, in `groups`.
    pub fn groups(mut self, groups: Vec<String>) -> Self {
        self.groups = groups;
        self
    }

    /// The same, of `tenant`.
    pub fn tenant(mut self, tenant: Option<String>) -> Self {
        self.tenant = tenant;
        self
    }
}

/// Which threads and runs (and so their state, history, events and
/// decisions) a caller sees and changes. Anything else is, to them, not
/// there: a 404 as for an id nobody used.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scope {
    /// Everything on the server.
    All,
    /// The threads this holder holds (their records' owner and tenant),
    /// and the runs on them; besides, to see and decide only, the threads
    /// whose latest run waits for a decision one of the `reviews` groups
    /// reviews ([`ThreadRecord::reviewers`]).
    Only {
        /// Whose threads.
        holder: Holder,
        /// The groups whose waiting threads are shown too.
        reviews: Vec<String>,
    },
}

impl Scope {
    /// `holder`'s threads, reviewing none.
    pub fn held_by(holder: Holder) -> Self {
        Scope::Only { holder, reviews: Vec::new() }
    }

    /// Whether a thread with `record` (`None`: a thread only its runs
    /// name, or no thread) is held in the scope: everything of it reached.
    pub fn holds(&self, record: Option<&ThreadRecord>) -> bool {
        match self {
            Scope::All => true,
            Scope::Only { holder, .. } => record.is_some_and(|record| {
                holder.holds(record.owner.as_deref(), record.tenant.as_deref())
            }),
        }
    }

    /// Whether one of the scope's groups reviews a thread with `record`
    /// (seen and decided while its latest run waits for a decision).
    pub fn reviews(&self, record: Option<&ThreadRecord>) -> bool {
        match self {
            Scope::All => false,
            Scope::Only { reviews, .. } => record
                .is_some_and(|record| reviews.iter().any(|group| record.reviewers.contains(group))),
        }
    }

    /// The holder a listing keeps (`None`: everything).
    pub fn holder(&self) -> Option<Holder> {
        match self {
            Scope::All => None,
            Scope::Only { holder, .. } => Some(holder.clone()),
        }
    }

    /// The groups whose waiting threads a listing adds to the holder's.
    pub fn reviewing(&self) -> Vec<String> {
        match self {
            Scope::All => Vec::new(),
            Scope::Only { reviews, .. } => reviews.clone(),
        }
    }
}

/// How far a role reaches, as a policy file says it
/// ([`RolePolicy::parse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reach {
    /// Everything (`all`).
    All,
    /// The threads of the caller's tenant (`tenant`); their own, for a
    /// caller without one.
    Tenant,
    /// The threads they created (`own`).
    Own,
}

/// Decides what each caller reaches: the server's authorization hook. An
/// embedding service gives its own ([`ServeOptions::policy`](crate::ServeOptions));
/// `serve --policy FILE` reads a [`RolePolicy`].
///
/// ```
/// use tollgate_server::{Holder, Policy, Principal, Role, Scope};
///
/// #[derive(Debug)]
/// struct PerTenant;
///
/// impl Policy for PerTenant {
///     fn scope(&self, who: &Principal) -> Scope {
///         match &who.tenant {
///             Some(tenant) => Scope::held_by(Holder::Tenant(tenant.clone())),
///             None => Scope::All,
///         }
///     }
/// }
///
/// let ann = Principal::new("ann", Role::User).tenant(Some("acme".into()));
/// assert_eq!(PerTenant.scope(&ann), Scope::held_by(Holder::Tenant("acme".into())));
/// ```
pub trait Policy: Send + Sync + std::fmt::Debug + 'static {
    /// The scope of `who`'s requests: everything, or a holder whose
    /// threads alone they see, change and list.
    fn scope(&self, who: &Principal) -> Scope;
}

/// The built-in policy: a reach for each role. By default `user` reaches
/// its own, `read`, `decide` and `admin` everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolePolicy {
    reach: [(Role, Reach); 4],
}

impl Default for RolePolicy {
    fn default() -> Self {
        Self {
            reach: [
                (Role::User, Reach::Own),
                (Role::Read, Reach::All),
                (Role::Decide, Reach::All),
                (Role::Admin, Reach::All),
            ],
        }
    }
}

/// Why a policy file was refused: the line and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The file could not be read.
    #[error("cannot read the policy file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not `ROLE REACH`.
    #[error("policy file, line {line}: `{text}` is not `ROLE REACH` (as `user own`)")]
    Malformed {
        /// Its number, from 1.
        line: usize,
        /// What it says.
        text: String,
    },
    /// A role tollgate does not know.
    #[error("policy file, line {line}: no role `{role}` (user, read, decide, admin)")]
    UnknownRole {
        /// Its number, from 1.
        line: usize,
        /// The role named.
        role: String,
    },
    /// A reach tollgate does not know.
    #[error("policy file, line {line}: no reach `{reach}` (all, tenant, own)")]
    UnknownReach {
        /// Its number, from 1.
        line: usize,
        /// The reach named.
        reach: String,
    },
    /// A role given twice.
    #[error("policy file, line {line}: role `{role}` is given a reach twice")]
    Repeated {
        /// Its number, from 1.
        line: usize,
        /// The role.
        role: &'static str,
    },
    /// `user all`: a user is not let reach everything (give such a person
    /// `read`, `decide` or `admin`).
    #[error("policy file, line {line}: role `user` reaches `own` or `tenant`, not `all` (give such callers `read`, `decide` or `admin`)")]
    UserReachesAll {
        /// Its number, from 1.
        line: usize,
    },
}

impl RolePolicy {
    /// How far `role` reaches.
    pub fn reach(&self, role: Role) -> Reach {
        self.reach.iter().find(|(known, _)| *known == role).map_or(Reach::Own, |(_, reach)| *reach)
    }

    /// Reads a policy file ([`RolePolicy::parse`]).
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| PolicyError::Read { path: path.to_owned(), source })?;
        Self::parse(&text)
    }

    /// Reads the text of a policy file: a line `ROLE REACH` for each role
    /// whose reach is not the default's (`all`, `tenant` or `own`; blank
    /// lines and `#` comments skipped), as
    ///
    /// ```text
    /// # readers see their tenant's threads, not everyone's
    /// read tenant
    /// user own
    /// ```
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        let mut policy = Self::default();
        let mut given: Vec<Role> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line_number = index + 1;
            let content = line.split('#').next().unwrap_or_default().trim();
            if content.is_empty() {
                continue;
            }
            let fields: Vec<&str> = content.split_whitespace().collect();
            let [role, reach] = fields.as_slice() else {
                return Err(PolicyError::Malformed { line: line_number, text: content.into() });
            };
            let role = Role::parse(role).ok_or_else(|| PolicyError::UnknownRole {
                line: line_number,
                role: (*role).to_owned(),
            })?;
            let reach = match *reach {
                "all" => Reach::All,
                "tenant" => Reach::Tenant,
                "own" => Reach::Own,
                other => {
                    return Err(PolicyError::UnknownReach {
                        line: line_number,
                        reach: other.to_owned(),
                    })
                }
            };
            if role == Role::User && reach == Reach::All {
                return Err(PolicyError::UserReachesAll { line: line_number });
            }
            if given.contains(&role) {
                return Err(PolicyError::Repeated { line: line_number, role: role.as_str() });
            }
            given.push(role);
            for entry in &mut policy.reach {
                if entry.0 == role {
                    entry.1 = reach;
                }
            }
        }
        Ok(policy)
    }
}

impl Policy for RolePolicy {
    /// A narrowed caller also reviews for each of their groups.
    fn scope(&self, who: &Principal) -> Scope {
        let own = || Holder::Owner { name: who.name.clone(), tenant: who.tenant.clone() };
        let holder = match (self.reach(who.role), &who.tenant) {
            (Reach::All, _) => return Scope::All,
            (Reach::Tenant, Some(tenant)) => Holder::Tenant(tenant.clone()),
            (Reach::Tenant, None) | (Reach::Own, _) => own(),
        };
        Scope::Only { holder, reviews: who.groups.clone() }
    }
}

/// The caller of a service call: who they are (`None` on a server that
/// names nobody: one token, or none) and their scope.
#[derive(Debug, Clone)]
pub struct Caller {
    principal: Option<Principal>,
    scope: Scope,
    /// Admitted to a thread they only review: a decision is all they may
    /// ask of it.
    decides_only: bool,
}

impl Caller {
    /// Nobody in particular, reaching everything (an open server, the
    /// single token, the CLI).
    pub fn anyone() -> Self {
        Self { principal: None, scope: Scope::All, decides_only: false }
    }

    /// `principal`, with the scope `policy` gives them.
    pub fn of(principal: Principal, policy: &dyn Policy) -> Self {
        let scope = policy.scope(&principal);
        Self { principal: Some(principal), scope, decides_only: false }
    }

    /// The same caller, admitted to a thread they only review.
    pub(crate) fn deciding_only(mut self) -> Self {
        self.decides_only = true;
        self
    }

    /// Whether they reached the thread they ask about as its reviewer
    /// only: they may decide what it waits for, nothing else.
    pub fn decides_only(&self) -> bool {
        self.decides_only
    }

    /// Their name, if the server names them.
    pub fn name(&self) -> Option<&str> {
        self.principal.as_ref().map(|who| who.name.as_str())
    }

    /// Their scope.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Whether they reach less than everything.
    pub fn is_restricted(&self) -> bool {
        self.scope != Scope::All
    }

    /// The principal, if the server names one.
    pub fn principal(&self) -> Option<&Principal> {
        self.principal.as_ref()
    }

    /// The parts their own part of long-term memory begins with: every
    /// namespace they name through the APIs, and every namespace their
    /// runs' agents remember in, lies under it (`users/NAME`,
    /// `tenants/TENANT/users/NAME` for a user of a tenant,
    /// `tenants/TENANT` for a caller who reaches their tenant); none for a
    /// caller who reaches everything.
    pub fn shelf(&self) -> Vec<String> {
        let Scope::Only { holder, .. } = &self.scope else { return Vec::new() };
        let parts: Vec<&str> = match holder {
            Holder::Owner { name, tenant: None } => vec!["users", name],
            Holder::Owner { name, tenant: Some(tenant) } => vec!["tenants", tenant, "users", name],
            Holder::Tenant(tenant) => vec!["tenants", tenant],
            // A holder this server does not know keeps to the caller's name.
            _ => vec!["users", self.name().unwrap_or_default()],
        };
        parts.into_iter().map(str::to_owned).collect()
    }

    /// `record` stamped as theirs: owned by them, of their tenant.
    pub(crate) fn stamp(&self, record: ThreadRecord) -> ThreadRecord {
        match &self.principal {
            Some(who) => record.with_owner(Some(who.name.clone()), who.tenant.clone()),
            None => record,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Caller, Policy, PolicyError, Principal, Reach, Role, RolePolicy, Scope};
    use tollgate_checkpoint::{Holder, ThreadRecord};

    #[test]
    fn a_policy_file_sets_each_roles_reach_and_refuses_bad_lines_by_number() {
        let policy = RolePolicy::parse("# who sees what\n\nread tenant  # a comment\nuser own\n")
            .expect("parses");
        assert_eq!(policy.reach(Role::Read), Reach::Tenant);
        assert_eq!(policy.reach(Role::Admin), Reach::All, "not named: the default");
        let refused = |text: &str| RolePolicy::parse(text).expect_err(text);
        assert!(matches!(refused("read\n"), PolicyError::Malformed { line: 1, .. }));
        assert!(matches!(refused("\nboss all"), PolicyError::UnknownRole { line: 2, .. }));
        assert!(matches!(refused("read some"), PolicyError::UnknownReach { line: 1, .. }));
        assert!(matches!(refused("user all"), PolicyError::UserReachesAll { line: 1 }));
        let twice = refused("read own\nread all");
        assert!(matches!(twice, PolicyError::Repeated { line: 2, role: "read" }), "{twice}");
        assert!(twice.to_string().contains("line 2"), "{twice}");
    }

    #[test]
    fn scopes_follow_the_reach_and_admit_the_holders_threads_only() {
        let policy = RolePolicy::parse("read tenant").expect("parses");
        let ann = Principal::new("ann", Role::User).tenant(Some("acme".into()));
        let reader = Principal::new("rita", Role::Read).tenant(Some("acme".into()));
        let loner = Principal::new("lou", Role::Read);
        let owned = Holder::Owner { name: "ann".into(), tenant: Some("acme".into()) };
        assert_eq!(policy.scope(&ann), Scope::held_by(owned));
        assert_eq!(policy.scope(&reader), Scope::held_by(Holder::Tenant("acme".into())));
        let lou = Holder::Owner { name: "lou".into(), tenant: None };
        assert_eq!(policy.scope(&loner), Scope::held_by(lou), "a tenant reach without a tenant");
        let auditor = Principal::new("al", Role::User).groups(vec!["finance".into()]);
        let scope = policy.scope(&auditor);
        assert_eq!(scope.reviewing(), ["finance"]);
        assert_eq!(policy.scope(&Principal::new("root", Role::Admin)), Scope::All);

        let caller = Caller::of(ann, &policy);
        let mine = caller.stamp(ThreadRecord::new("t", 1, serde_json::json!({})));
        assert_eq!((mine.owner.as_deref(), mine.tenant.as_deref()), (Some("ann"), Some("acme")));
        assert!(caller.scope().holds(Some(&mine)));
        let mut bobs = mine.clone().with_owner(Some("bob".into()), Some("acme".into()));
        assert!(!caller.scope().holds(Some(&bobs)));
        assert!(!caller.scope().holds(None), "a thread without a record is nobody's");
        assert!(Caller::of(reader, &policy).scope().holds(Some(&bobs)), "same tenant");
        assert!(Scope::All.holds(None));
        assert!(!scope.reviews(Some(&bobs)));
        bobs.reviewers = vec!["ops".into(), "finance".into()];
        assert!(scope.reviews(Some(&bobs)) && !scope.holds(Some(&bobs)));
        assert!(!caller.scope().reviews(Some(&bobs)), "ann is in no group");
        assert_eq!(caller.shelf(), ["tenants", "acme", "users", "ann"]);
        assert_eq!(Caller::of(auditor, &policy).shelf(), ["users", "al"]);
        assert!(Caller::anyone().shelf().is_empty());
        assert!(Role::User.allows(Role::Admin) && !Role::Read.allows(Role::Decide));
    }
}

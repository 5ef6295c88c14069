//! Who may call the API: the built-in bearer token (the default), named
//! tokens with roles ([`Tokens`]), no check here when the embedding
//! service's own middleware decides, or a check the service supplies
//! ([`Authenticate`]). `/healthz`, the review page's own files and CORS
//! preflights are always let through. A caller known by name and role
//! ([`Principal`]) may do what its role allows, and decides as itself.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::errors::ApiError;
use super::jwt::{looks_like_jwt, Jwt};
use super::{page, App};
use crate::identity::{Principal, Role};

/// The prefix of the WebSocket subprotocol that carries the token.
const TOKEN_PROTOCOL: &str = "tollgate.token.";

/// How the API authenticates requests.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum Auth {
    /// The bearer token of [`ServeOptions::token`](crate::ServeOptions):
    /// `Authorization: Bearer TOKEN`, or for a browser's WebSocket the
    /// subprotocol `tollgate.token.HEX`. No token: no check.
    #[default]
    Token,
    /// Named tokens, each with a role (`serve --tokens-file`).
    Tokens(Tokens),
    /// JWTs (`serve --jwt-secret-file`, `--jwks-file`), with named tokens
    /// beside them when given (a credential that is not a JWT is looked
    /// up among them).
    Jwt(Jwt, Option<Tokens>),
    /// No check here: the service that nests the router checks callers
    /// with its own middleware (a tower layer around the router).
    External,
    /// This check, on every request but `/healthz`, the page's files and
    /// CORS preflights.
    Custom(Arc<dyn Authenticate>),
}

/// A check a service supplies: maps a request's headers to who is calling,
/// or refuses it.
pub trait Authenticate: Send + Sync + std::fmt::Debug + 'static {
    /// Who is calling, with their role, or why not (answered 401 with the
    /// JSON error shape).
    fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, Refusal>;
}

/// Named tokens with roles: each line of a tokens file is `NAME ROLE
/// SHA256`, the SHA-256 of the token in hex (`printf %s TOKEN |
/// sha256sum`), the role `read`, `decide` or `admin`; blank lines and
/// lines starting with `#` are skipped. Only hashes are kept.
#[derive(Clone)]
pub struct Tokens {
    entries: Vec<(String, Role, [u8; 32])>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.entries.iter().map(|(name, ..)| name.as_str()).collect();
        f.debug_struct("Tokens").field("names", &names).finish()
    }
}

impl Tokens {
    /// Reads a tokens file.
    pub fn load(path: &std::path::Path) -> Result<Self, crate::ServiceError> {
        let text = std::fs::read_to_string(path).map_err(|error| {
            crate::ServiceError::invalid(format!(
                "cannot read the tokens file {}: {error}",
                path.display()
            ))
        })?;
        Self::parse(&text)
    }

    /// Reads the text of a tokens file; a bad line is refused, named by
    /// its number (never its hash).
    pub fn parse(text: &str) -> Result<Self, crate::ServiceError> {
        let mut entries: Vec<(String, Role, [u8; 32])> = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: &str| {
                crate::ServiceError::invalid(format!(
                    "tokens file, line {}: {why} (each line is `NAME ROLE SHA256`)",
                    number + 1
                ))
            };
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [name, role, hash] = fields.as_slice() else {
                return Err(bad("three fields expected"));
            };
            let role =
                Role::parse(role).ok_or_else(|| bad("the role is user, read, decide or admin"))?;
            let hash: [u8; 32] = crate::hex::decode(&hash.to_ascii_lowercase())
                .and_then(|bytes| bytes.try_into().ok())
                .ok_or_else(|| bad("the hash is 64 hex digits (SHA-256 of the token)"))?;
            if entries.iter().any(|(known, ..)| known == name) {
                return Err(bad("the name is given twice"));
            }
            entries.push(((*name).to_owned(), role, hash));
        }
        if entries.is_empty() {
            return Err(crate::ServiceError::invalid("the tokens file names no token"));
        }
        Ok(Self { entries })
    }

    /// Who holds `token`, if anyone. Every entry is compared, in time that
    /// does not depend on where the hashes differ.
    fn holder(&self, token: &[u8]) -> Option<Principal> {
        use sha2::Digest as _;
        let hash = sha2::Sha256::digest(token);
        let mut found = None;
        for (name, role, known) in &self.entries {
            if same(hash.as_slice(), known) && found.is_none() {
                found = Some(Principal::new(name.clone(), *role));
            }
        }
        found
    }
}

/// Why [`Authenticate`] refused a request: said in the 401's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What the caller should know (never a secret).
    pub message: String,
}

impl Refusal {
    /// A refusal saying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into() }
    }
}

/// The check the router runs, as configured.
#[derive(Debug)]
pub(crate) enum Check {
    /// Nothing to check (no token, or the service checks).
    Open,
    /// The bearer token.
    Token(String),
    /// Named tokens.
    Tokens(Tokens),
    /// JWTs, and named tokens beside them.
    Jwt(Box<Jwt>, Option<Tokens>),
    /// The service's check.
    Custom(Arc<dyn Authenticate>),
}

/// Lets a request through when nothing is to be checked, when it asks for
/// `/healthz` or one of the page's files, or is a CORS preflight (browsers
/// send those without credentials), or when it passes the check: the
/// token as `Authorization: Bearer TOKEN` (the scheme in any case) or, for
/// a WebSocket (where browsers cannot set headers), the subprotocol
/// `tollgate.token.HEX` with the token's bytes in hex; or the service's
/// own check. Answers 401 otherwise.
pub(crate) async fn check(State(app): State<App>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let exempt = path == "/healthz" || page::is_page(path) || request.method() == Method::OPTIONS;
    let principal = match &app.settings.auth {
        Check::Open => return next.run(request).await,
        _ if exempt => return next.run(request).await,
        Check::Token(token) => match given_token(request.headers()) {
            Some(given) if same(&given, token.as_bytes()) => return next.run(request).await,
            Some(_) => {
                let message =
                    format!("the {} is not the server's token", offered_as(request.headers()));
                return unauthorized(&message);
            }
            None => return unauthorized(NEEDS_TOKEN),
        },
        Check::Tokens(tokens) => match given_token(request.headers()) {
            Some(given) => match named(tokens, &given, request.headers()) {
                Ok(principal) => principal,
                Err(refused) => return refused.into_response(),
            },
            None => return unauthorized(NEEDS_TOKEN),
        },
        Check::Jwt(jwt, tokens) => match given_token(request.headers()) {
            Some(given) => match by_jwt(jwt, tokens.as_ref(), &given, request.headers()) {
                Ok(principal) => principal,
                Err(refused) => return refused.into_response(),
            },
            None => return unauthorized(NEEDS_TOKEN),
        },
        Check::Custom(check) => match check.authenticate(request.headers()) {
            Ok(principal) => principal,
            Err(refusal) => return unauthorized(&refusal.message),
        },
    };
    let needed = match app.settings.langgraph.as_deref().and_then(|prefix| {
        request.uri().path().strip_prefix(prefix).filter(|rest| rest.starts_with('/'))
    }) {
        Some(rest) => langgraph_role(request.method(), rest),
        None => needed_role(request.method(), request.uri().path()),
    };
    if !principal.role.allows(needed) {
        let message = format!(
            "`{}` (role {}) may not do this: it needs role {}",
            principal.name,
            principal.role.as_str(),
            needed.as_str()
        );
        return ApiError::new(StatusCode::FORBIDDEN, "forbidden", message).into_response();
    }
    super::gate::admit(&app, principal, request, next).await
}

/// Why a credential was refused: 401 with this message, or (a verified
/// token whose roles give nothing) 403.
enum Refused {
    Unauthorized(String),
    Forbidden(String),
}

impl Refused {
    fn into_response(self) -> Response {
        match self {
            Refused::Unauthorized(message) => unauthorized(&message),
            Refused::Forbidden(message) => {
                ApiError::new(StatusCode::FORBIDDEN, "forbidden", message).into_response()
            }
        }
    }
}

/// The holder of the named token `given`, or why it is none.
fn named(tokens: &Tokens, given: &[u8], headers: &HeaderMap) -> Result<Principal, Refused> {
    tokens.holder(given).ok_or_else(|| {
        Refused::Unauthorized(format!(
            "the {} is not one of the server's tokens",
            offered_as(headers)
        ))
    })
}

/// Who the credential `given` names: a JWT verified, or else (with named
/// tokens beside) the holder of a named token; why not otherwise.
fn by_jwt(
    jwt: &Jwt,
    tokens: Option<&Tokens>,
    given: &[u8],
    headers: &HeaderMap,
) -> Result<Principal, Refused> {
    if let (Some(tokens), false) = (tokens, looks_like_jwt(given)) {
        return named(tokens, given, headers);
    }
    let token = std::str::from_utf8(given)
        .map_err(|_| Refused::Unauthorized("the token is not text".to_owned()))?;
    jwt.verify(token).map_err(|error| {
        let message = format!("the {} was refused: {error}", offered_as(headers));
        if error.forbids() {
            Refused::Forbidden(message)
        } else {
            Refused::Unauthorized(message)
        }
    })
}

/// The role a request needs: reading is `read`; deciding, cancelling and
/// continuing a run `decide`; starting, deleting and anything else
/// `admin`.
fn needed_role(method: &Method, path: &str) -> Role {
    if method == Method::GET || method == Method::HEAD {
        return Role::Read;
    }
    if method == Method::POST && path == "/store/search" {
        return Role::Read;
    }
    let decides = method == Method::POST
        && path.strip_prefix("/runs/").is_some_and(|rest| {
            rest.split_once('/').is_some_and(|(_, verb)| {
                matches!(verb, "resume" | "reject" | "cancel" | "continue")
            })
        });
    if decides {
        Role::Decide
    } else {
        Role::Admin
    }
}

/// The role a LangGraph API request needs (`path` below the prefix):
/// reading, and the searches and histories it asks with `POST`, is
/// `read`; cancelling a run `decide` (cancelling many at once,
/// `POST /runs/cancel`, `admin`); anything else (creating threads,
/// starting runs, resuming one with `Command(resume=…)`, which starts a
/// run in LangGraph's terms) `admin`, as starting runs is in the native
/// API.
fn langgraph_role(method: &Method, path: &str) -> Role {
    let reads = method == Method::GET
        || method == Method::HEAD
        || (method == Method::POST
            && (path.ends_with("/search")
                || path == "/store/namespaces"
                || path.ends_with("/count")
                || path.ends_with("/history")));
    if reads {
        Role::Read
    } else if method == Method::POST && path.ends_with("/cancel") && path != "/runs/cancel" {
        Role::Decide
    } else {
        Role::Admin
    }
}

/// What a request without a token is told.
const NEEDS_TOKEN: &str =
    "this endpoint needs the server's token: `Authorization: Bearer TOKEN` or `x-api-key: TOKEN`";

/// Where the token a request offers came from, as [`given_token`] reads
/// it: for a refusal that names what the caller sent.
fn offered_as(headers: &HeaderMap) -> &'static str {
    if headers.contains_key(header::AUTHORIZATION) {
        "bearer token"
    } else if headers.contains_key("x-api-key") {
        "`x-api-key`"
    } else {
        "WebSocket subprotocol's token"
    }
}

/// The credential a request carries the way tollgate's own clients send
/// it: `Authorization: Bearer KEY`, `x-api-key: KEY` (LangGraph's clients),
/// or, from the review page's WebSocket (a browser cannot set headers
/// there), the subprotocol `tollgate.token.HEX` (the key's bytes in hex).
/// For an embedding service's own check behind [`Auth::External`]: read
/// the key with this, and the page's live updates pass it too.
///
/// ```
/// use axum::http::HeaderMap;
/// let mut headers = HeaderMap::new();
/// headers.insert("sec-websocket-protocol", "tollgate.token.6b6579".parse().unwrap());
/// assert_eq!(tollgate_server::credential(&headers).as_deref(), Some("key"));
/// ```
pub fn credential(headers: &HeaderMap) -> Option<String> {
    given_token(headers).and_then(|bytes| String::from_utf8(bytes).ok())
}

/// The token a request offers: the bearer header, LangGraph's clients'
/// `x-api-key`, else the WebSocket subprotocol.
fn given_token(headers: &HeaderMap) -> Option<Vec<u8>> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, credentials)| credentials.trim().as_bytes().to_vec())
        .or_else(|| {
            headers
                .get("x-api-key")
                .and_then(|value| value.to_str().ok())
                .map(|key| key.trim().as_bytes().to_vec())
        })
        .or_else(|| {
            headers
                .get_all(header::SEC_WEBSOCKET_PROTOCOL)
                .iter()
                .filter_map(|value| value.to_str().ok())
                .flat_map(|value| value.split(','))
                .find_map(|offered| offered.trim().strip_prefix(TOKEN_PROTOCOL))
                .map(|hex| crate::hex::decode(hex).unwrap_or_default())
        })
}

fn unauthorized(message: &str) -> Response {
    let mut response =
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    response
}

/// Compares in time that depends on the lengths only, not on where the
/// bytes first differ.
fn same(given: &[u8], token: &[u8]) -> bool {
    let mut difference = given.len() ^ token.len();
    for index in 0..given.len().max(token.len()) {
        let (a, b) = (given.get(index).copied(), token.get(index).copied());
        difference |= usize::from(a.unwrap_or(0) ^ b.unwrap_or(0));
    }
    difference == 0
}

#[cfg(test)]
mod tests {
    use super::{langgraph_role, needed_role, same, Role, Tokens};
    use axum::http::Method;

    #[test]
    fn roles_cover_what_a_request_does() {
        assert_eq!(needed_role(&Method::GET, "/runs/x/events"), Role::Read);
        assert_eq!(needed_role(&Method::POST, "/runs/x/resume"), Role::Decide);
        assert_eq!(needed_role(&Method::POST, "/runs/x/cancel"), Role::Decide);
        assert_eq!(needed_role(&Method::POST, "/runs"), Role::Admin);
        assert_eq!(needed_role(&Method::DELETE, "/runs/x"), Role::Admin);
        assert_eq!(needed_role(&Method::POST, "/runs/x/other"), Role::Admin);
        assert_eq!(needed_role(&Method::POST, "/store/search"), Role::Read);
        assert_eq!(needed_role(&Method::PUT, "/store/items"), Role::Admin);
        assert_eq!(needed_role(&Method::DELETE, "/store/items"), Role::Admin);
        // The LangGraph API: one run cancelled is a decision, many at once
        // (and pruning threads) an administrator's.
        assert_eq!(langgraph_role(&Method::POST, "/threads/t/runs/r/cancel"), Role::Decide);
        assert_eq!(langgraph_role(&Method::POST, "/runs/cancel"), Role::Admin);
        assert_eq!(langgraph_role(&Method::POST, "/threads/prune"), Role::Admin);
        assert_eq!(langgraph_role(&Method::POST, "/threads/search"), Role::Read);
    }

    #[test]
    fn tokens_files_are_read_strictly_and_match_by_hash() {
        let hash = "5d41402abc4b2a76b9719d911017c592"; // not 64 digits
        for bad in [
            format!("ana admin {hash}"),
            "ana boss 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824".into(),
            "ana admin".into(),
            "# only a comment".into(),
        ] {
            let error = Tokens::parse(&bad).expect_err(&bad).to_string();
            assert!(!error.contains("2cf24dba"), "the hash is not echoed: {error}");
        }
        // SHA-256 of "hello".
        let tokens = Tokens::parse(
            "# people\nana decide 2CF24DBA5FB0A30E26E83B2AC5B9E29E1B161E5C1FA7425E73043362938B9824\n",
        )
        .expect("a good file");
        let ana = tokens.holder(b"hello").expect("ana");
        assert_eq!((ana.name.as_str(), ana.role), ("ana", Role::Decide));
        assert!(tokens.holder(b"hello!").is_none());
    }

    #[test]
    fn tokens_match_only_when_equal() {
        assert!(same(b"s3cret", b"s3cret"));
        for other in [&b"s3cre"[..], b"s3cret!", b"S3cret", b"", b"s3cres"] {
            assert!(!same(other, b"s3cret"), "{other:?}");
        }
        assert!(same(b"", b""));
    }
}

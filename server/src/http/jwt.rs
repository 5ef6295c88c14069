//! JSON Web Tokens (`serve --jwt-secret-file`, `--jwks-file`): a bearer
//! token signed by the server's secret (HS256) or by a key of a JWKS file
//! (RS256, ES256), mapped to a [`Principal`] by claim names: the subject
//! (`sub`), roles (`roles`), groups (`groups`) and tenant (`tenant`) by
//! default. Unsigned (`alg: none`), malformed, expired, not yet valid,
//! wrongly signed tokens, tokens of another issuer or audience and tokens
//! without a subject or an expiry are refused, each with its reason.
//! Verification is `jsonwebtoken`'s (ring underneath, as for TLS).

use std::collections::HashSet;

use base64::Engine as _;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use crate::error::ServiceError;
use crate::identity::{Principal, Role};

/// The shortest HS256 secret taken (RFC 7518: a key as long as the hash).
const MIN_SECRET: usize = 32;
/// Seconds of clock difference allowed on `exp` and `nbf`.
const LEEWAY_S: u64 = 30;

/// How a server verifies JWTs and reads who they name.
#[derive(Clone)]
pub struct Jwt {
    keys: Keys,
    claims: ClaimNames,
    issuer: Option<String>,
    audience: Option<String>,
}

impl std::fmt::Debug for Jwt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = match &self.keys {
            Keys::Secret(_) => "HS256 secret".to_owned(),
            Keys::Set(keys) => format!("{} JWKS key(s)", keys.len()),
        };
        f.debug_struct("Jwt").field("keys", &keys).field("claims", &self.claims).finish()
    }
}

#[derive(Clone)]
enum Keys {
    /// HS256 with one secret.
    Secret(DecodingKey),
    /// Public keys by id, each with its algorithm.
    Set(Vec<(Option<String>, Algorithm, DecodingKey)>),
}

/// The claims a token's principal is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimNames {
    /// Who it is (the principal's name): `sub`.
    pub subject: String,
    /// Its roles, an array of `read`, `decide`, `admin` (or one string):
    /// `roles`.
    pub roles: String,
    /// The groups it belongs to, an array of strings: `groups`.
    pub groups: String,
    /// Its tenant, a string: `tenant`.
    pub tenant: String,
}

impl Default for ClaimNames {
    fn default() -> Self {
        Self {
            subject: "sub".into(),
            roles: "roles".into(),
            groups: "groups".into(),
            tenant: "tenant".into(),
        }
    }
}

/// Why a token was refused: the reason a 401 (or, for a token whose
/// roles give nothing, a 403) says.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum JwtError {
    /// Not three dot-separated base64url parts with a JSON header.
    #[error("the token is not a well-formed JWT")]
    Malformed,
    /// `alg: none`.
    #[error("the token is unsigned (`alg: none`); this server takes only signed tokens")]
    Unsigned,
    /// An algorithm the server's keys are not for.
    #[error("the token is signed with {alg}, which this server does not take ({expected})")]
    Algorithm {
        /// The token's algorithm.
        alg: String,
        /// What the server takes.
        expected: String,
    },
    /// No key of the JWKS has the token's `kid`.
    #[error("the token names key `{kid}`, which is not one of this server's keys")]
    UnknownKey {
        /// The key id the token names.
        kid: String,
    },
    /// The token names no key (`kid`) and the JWKS has several.
    #[error("the token names no key (`kid`), and this server has several")]
    NoKeyId,
    /// The signature does not verify.
    #[error("the token's signature does not verify")]
    Signature,
    /// `exp` has passed.
    #[error("the token has expired")]
    Expired,
    /// `nbf` has not come yet.
    #[error("the token is not valid yet (`nbf`)")]
    NotYetValid,
    /// Another issuer than the server's `--jwt-issuer`.
    #[error("the token was issued by another issuer than this server takes")]
    Issuer,
    /// Not for the server's `--jwt-audience`.
    #[error("the token is for another audience than this server")]
    Audience,
    /// A claim the server needs is missing or of the wrong type.
    #[error("the token has no claim `{claim}` ({what})")]
    Claim {
        /// The claim's name.
        claim: String,
        /// What it must be.
        what: &'static str,
    },
    /// Its roles give it nothing to do here (403).
    #[error("{0}")]
    Roles(String),
}

impl JwtError {
    /// Whether the token was verified but gives nothing (403) rather than
    /// not accepted (401).
    pub(crate) fn forbids(&self) -> bool {
        matches!(self, JwtError::Roles(_))
    }
}

impl Jwt {
    /// HS256 tokens signed with `secret` (at least 32 bytes).
    pub fn hs256(secret: &[u8]) -> Result<Self, ServiceError> {
        if secret.len() < MIN_SECRET {
            return Err(ServiceError::invalid(format!(
                "a JWT secret has at least {MIN_SECRET} bytes (this one has {})",
                secret.len()
            )));
        }
        Ok(Self::with(Keys::Secret(DecodingKey::from_secret(secret))))
    }

    /// Tokens signed by a key of the JWKS `text` (RS256 and ES256 keys on
    /// P-256; a key of another kind is refused, naming it).
    pub fn jwks(text: &str) -> Result<Self, ServiceError> {
        let set: JwkSet = serde_json::from_str(text).map_err(|error| {
            ServiceError::invalid(format!("the JWKS is not a JSON Web Key Set: {error}"))
        })?;
        let mut keys = Vec::new();
        for (index, jwk) in set.keys.iter().enumerate() {
            let name = jwk.common.key_id.clone().unwrap_or_else(|| format!("#{index}"));
            let bad = |why: &str| ServiceError::invalid(format!("JWKS key {name}: {why}"));
            let alg = match (&jwk.algorithm, &jwk.common.key_algorithm) {
                (AlgorithmParameters::RSA(_), None | Some(KeyAlgorithm::RS256)) => Algorithm::RS256,
                (AlgorithmParameters::EllipticCurve(ec), None | Some(KeyAlgorithm::ES256))
                    if ec.curve == EllipticCurve::P256 =>
                {
                    Algorithm::ES256
                }
                _ => return Err(bad("only RS256 keys and ES256 keys on P-256 are taken")),
            };
            let key = DecodingKey::from_jwk(jwk).map_err(|error| bad(&error.to_string()))?;
            keys.push((jwk.common.key_id.clone(), alg, key));
        }
        if keys.is_empty() {
            return Err(ServiceError::invalid("the JWKS has no key"));
        }
        Ok(Self::with(Keys::Set(keys)))
    }

    /// [`Jwt::hs256`] with the secret of file `path` (its bytes, one
    /// trailing newline dropped).
    pub fn load_secret(path: &std::path::Path) -> Result<Self, ServiceError> {
        let mut secret = read(path, "JWT secret")?;
        if secret.last() == Some(&b'\n') {
            secret.pop();
        }
        Self::hs256(&secret)
    }

    /// [`Jwt::jwks`] with the JWKS of file `path`.
    pub fn load_jwks(path: &std::path::Path) -> Result<Self, ServiceError> {
        let text = String::from_utf8(read(path, "JWKS")?)
            .map_err(|_| ServiceError::invalid(format!("{} is not UTF-8", path.display())))?;
        Self::jwks(&text)
    }

    fn with(keys: Keys) -> Self {
        Self { keys, claims: ClaimNames::default(), issuer: None, audience: None }
    }

    /// The same, reading the principal from `claims`.
    pub fn claims(mut self, claims: ClaimNames) -> Self {
        self.claims = claims;
        self
    }

    /// The same, taking only tokens whose `iss` is `issuer`.
    pub fn issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    /// The same, taking only tokens whose `aud` names `audience`.
    pub fn audience(mut self, audience: impl Into<String>) -> Self {
        self.audience = Some(audience.into());
        self
    }

    /// Who `token` names, once verified.
    pub fn verify(&self, token: &str) -> Result<Principal, JwtError> {
        let (alg, kid) = header(token)?;
        let (algorithm, key) = self.key(&alg, kid.as_deref())?;
        let mut validation = Validation::new(algorithm);
        validation.leeway = LEEWAY_S;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp"]);
        if let Some(issuer) = &self.issuer {
            validation.set_issuer(&[issuer]);
        }
        match &self.audience {
            Some(audience) => validation.set_audience(&[audience]),
            None => validation.validate_aud = false,
        }
        let claims = jsonwebtoken::decode::<Value>(token, key, &validation)
            .map_err(|error| refusal(error.kind()))?
            .claims;
        self.principal(&claims)
    }

    /// The key for a token of `alg` naming `kid`.
    fn key(&self, alg: &str, kid: Option<&str>) -> Result<(Algorithm, &DecodingKey), JwtError> {
        match &self.keys {
            Keys::Secret(key) if alg == "HS256" => Ok((Algorithm::HS256, key)),
            Keys::Secret(_) => {
                Err(JwtError::Algorithm { alg: alg.to_owned(), expected: "HS256".into() })
            }
            Keys::Set(keys) => {
                let found = match kid {
                    Some(kid) => keys
                        .iter()
                        .find(|(id, ..)| id.as_deref() == Some(kid))
                        .ok_or_else(|| JwtError::UnknownKey { kid: kid.to_owned() }),
                    None if keys.len() == 1 => keys.first().ok_or(JwtError::NoKeyId),
                    None => Err(JwtError::NoKeyId),
                };
                let (_, algorithm, key) = found?;
                if format!("{algorithm:?}") != alg {
                    let expected = format!("{algorithm:?} for this key");
                    return Err(JwtError::Algorithm { alg: alg.to_owned(), expected });
                }
                Ok((*algorithm, key))
            }
        }
    }

    /// The principal the verified `claims` name.
    fn principal(&self, claims: &Value) -> Result<Principal, JwtError> {
        let names = &self.claims;
        let missing = |claim: &str, what| JwtError::Claim { claim: claim.to_owned(), what };
        let subject = claims
            .get(&names.subject)
            .and_then(Value::as_str)
            .filter(|subject| !subject.is_empty())
            .ok_or_else(|| missing(&names.subject, "a string naming who it is"))?;
        let roles = strings(claims.get(&names.roles))
            .ok_or_else(|| missing(&names.roles, "an array of roles"))?;
        let groups = match claims.get(&names.groups) {
            None | Some(Value::Null) => Vec::new(),
            given => strings(given).ok_or_else(|| missing(&names.groups, "an array of strings"))?,
        };
        let tenant = match claims.get(&names.tenant) {
            None | Some(Value::Null) => None,
            Some(Value::String(tenant)) => Some(tenant.clone()),
            Some(_) => return Err(missing(&names.tenant, "a string")),
        };
        let role = role_of(&roles)?;
        Ok(Principal::new(subject, role).groups(groups).tenant(tenant))
    }
}

/// The highest of `roles` tollgate knows (`user` the lowest: a token
/// that also names `read` is a reader's).
fn role_of(roles: &[String]) -> Result<Role, JwtError> {
    roles.iter().filter_map(|role| Role::parse(role)).max().ok_or_else(|| {
        JwtError::Roles(format!(
            "the token's roles ({}) are none of `user`, `read`, `decide`, `admin`",
            roles.join(", ")
        ))
    })
}

/// An array of strings, or one string (one role), or a space-separated
/// string (as OAuth scopes are written).
fn strings(value: Option<&Value>) -> Option<Vec<String>> {
    match value? {
        Value::String(text) => Some(text.split_whitespace().map(str::to_owned).collect()),
        Value::Array(items) => {
            items.iter().map(|item| item.as_str().map(str::to_owned)).collect::<Option<_>>()
        }
        _ => None,
    }
}

/// The token's `alg` and `kid`, read before anything is verified (to pick
/// the key, and to name an unsigned token as such).
fn header(token: &str) -> Result<(String, Option<String>), JwtError> {
    let mut parts = token.split('.');
    let (Some(head), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwtError::Malformed);
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(head.trim_end_matches('='))
        .map_err(|_| JwtError::Malformed)?;
    let header: Value = serde_json::from_slice(&bytes).map_err(|_| JwtError::Malformed)?;
    let alg = header.get("alg").and_then(Value::as_str).ok_or(JwtError::Malformed)?;
    if alg.eq_ignore_ascii_case("none") {
        return Err(JwtError::Unsigned);
    }
    let kid = header.get("kid").and_then(Value::as_str).map(str::to_owned);
    Ok((alg.to_owned(), kid))
}

/// The refusal a verification error stands for.
fn refusal(kind: &ErrorKind) -> JwtError {
    match kind {
        ErrorKind::ExpiredSignature => JwtError::Expired,
        ErrorKind::ImmatureSignature => JwtError::NotYetValid,
        ErrorKind::InvalidIssuer => JwtError::Issuer,
        ErrorKind::InvalidAudience => JwtError::Audience,
        ErrorKind::MissingRequiredClaim(claim) => {
            JwtError::Claim { claim: claim.clone(), what: "tokens must expire" }
        }
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
            JwtError::Algorithm { alg: "another algorithm".into(), expected: "its key's".into() }
        }
        ErrorKind::InvalidSignature | ErrorKind::Crypto(_) => JwtError::Signature,
        _ => JwtError::Malformed,
    }
}

fn read(path: &std::path::Path, what: &str) -> Result<Vec<u8>, ServiceError> {
    std::fs::read(path).map_err(|error| {
        ServiceError::invalid(format!("cannot read the {what} file {}: {error}", path.display()))
    })
}

/// Whether a bearer credential looks like a JWT (three dot-separated
/// parts) rather than a named token.
pub(crate) fn looks_like_jwt(token: &[u8]) -> bool {
    token.iter().filter(|byte| **byte == b'.').count() == 2
}

/// The names of the claim kinds `--jwt-claim KIND=NAME` takes.
pub(crate) const CLAIM_KINDS: [&str; 4] = ["subject", "roles", "groups", "tenant"];

impl ClaimNames {
    /// The same, with the claim of `kind` (`subject`, `roles`, `groups`,
    /// `tenant`) named `name`.
    pub fn named(mut self, kind: &str, name: &str) -> Result<Self, ServiceError> {
        let slot = match kind {
            "subject" => &mut self.subject,
            "roles" => &mut self.roles,
            "groups" => &mut self.groups,
            "tenant" => &mut self.tenant,
            _ => {
                return Err(ServiceError::invalid(format!(
                    "`{kind}` is not a claim kind ({})",
                    CLAIM_KINDS.join(", ")
                )))
            }
        };
        *slot = name.to_owned();
        let all: HashSet<&str> =
            [&self.subject, &self.roles, &self.groups, &self.tenant].map(String::as_str).into();
        if all.len() < CLAIM_KINDS.len() {
            return Err(ServiceError::invalid("two claim kinds cannot read the same claim"));
        }
        Ok(self)
    }
}

#[cfg(test)]
#[path = "jwt_tests.rs"]
mod tests;

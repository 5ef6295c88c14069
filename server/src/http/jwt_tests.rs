//! JWTs signed here (HS256 with a secret, RS256 and ES256 with the test
//! keys of `server/testdata/jwt`) verified, mapped, and refused.

use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use super::{ClaimNames, Jwt, JwtError};
use crate::identity::Role;

const SECRET: &[u8] = b"a secret of thirty-two bytes, ok!";
const JWKS: &str = include_str!("../../testdata/jwt/jwks.json");
const RSA: &[u8] = include_bytes!("../../testdata/jwt/rsa.pem");
const EC: &[u8] = include_bytes!("../../testdata/jwt/ec.pem");

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() as i64)
}

/// Claims of `ann`, an admin in group `finance` of tenant `acme`, valid for
/// an hour, with `extra` over them.
fn claims(extra: Value) -> Value {
    let mut claims = json!({
        "sub": "ann", "roles": ["user", "admin"], "groups": ["finance"], "tenant": "acme",
        "exp": now() + 3_600, "iat": now(),
    });
    if let (Some(claims), Value::Object(extra)) = (claims.as_object_mut(), extra) {
        claims.extend(extra);
    }
    claims
}

fn hs256(claims: &Value) -> String {
    encode(&Header::new(Algorithm::HS256), claims, &EncodingKey::from_secret(SECRET)).unwrap()
}

fn signed(alg: Algorithm, kid: &str, claims: &Value) -> String {
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(RSA).unwrap(),
        _ => EncodingKey::from_ec_pem(EC).unwrap(),
    };
    let header = Header { kid: Some(kid.to_owned()), ..Header::new(alg) };
    encode(&header, claims, &key).unwrap()
}

/// `token` with its header replaced by `header` (signature kept).
fn reheaded(token: &str, header: &Value) -> String {
    use base64::Engine as _;
    let rest = token.split_once('.').unwrap().1;
    let head = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(header.to_string());
    format!("{head}.{rest}")
}

#[test]
fn a_signed_token_names_its_principal() {
    let jwt = Jwt::hs256(SECRET).unwrap();
    let ann = jwt.verify(&hs256(&claims(json!({})))).unwrap();
    assert_eq!((ann.name.as_str(), ann.role), ("ann", Role::Admin));
    assert_eq!((ann.groups, ann.tenant.as_deref()), (vec!["finance".to_owned()], Some("acme")));
    // One role as a string, or space-separated; the highest known wins.
    let one = json!({"roles": "read decide", "groups": null, "tenant": null});
    let bob = jwt.verify(&hs256(&claims(one))).unwrap();
    assert_eq!((bob.role, bob.groups.len(), bob.tenant), (Role::Decide, 0, None));
    // Claims under other names.
    let names = ClaimNames::default().named("subject", "email").unwrap();
    let names = names.named("roles", "https://example.com/roles").unwrap();
    let other = json!({"email": "cy@example.com", "https://example.com/roles": ["read"]});
    let cy = jwt.clone().claims(names).verify(&hs256(&claims(other))).unwrap();
    assert_eq!((cy.name.as_str(), cy.role), ("cy@example.com", Role::Read));
}

#[test]
fn keys_of_a_jwks_verify_rs256_and_es256() {
    let jwt = Jwt::jwks(JWKS).unwrap();
    for (alg, kid) in [(Algorithm::RS256, "rsa-1"), (Algorithm::ES256, "ec-1")] {
        let ann = jwt.verify(&signed(alg, kid, &claims(json!({})))).unwrap();
        assert_eq!(ann.name, "ann", "{alg:?}");
    }
    // Another key's id, a token of one key under the other's id, the
    // secret's algorithm against a key set.
    let token = signed(Algorithm::RS256, "rsa-2", &claims(json!({})));
    assert_eq!(jwt.verify(&token), Err(JwtError::UnknownKey { kid: "rsa-2".into() }));
    let token = signed(Algorithm::ES256, "rsa-1", &claims(json!({})));
    assert!(matches!(jwt.verify(&token), Err(JwtError::Algorithm { .. })));
    assert_eq!(jwt.verify(&hs256(&claims(json!({})))), Err(JwtError::NoKeyId), "no kid, two keys");
    // A secret takes no RS256 token.
    let rs = signed(Algorithm::RS256, "rsa-1", &claims(json!({})));
    assert!(matches!(Jwt::hs256(SECRET).unwrap().verify(&rs), Err(JwtError::Algorithm { .. })));
}

#[test]
fn bad_tokens_are_refused_with_their_reason() {
    let jwt = Jwt::hs256(SECRET).unwrap().issuer("https://id.example").audience("tollgate");
    let good = claims(json!({"iss": "https://id.example", "aud": "tollgate"}));
    assert!(jwt.verify(&hs256(&good)).is_ok());
    let with = |extra: Value| {
        let mut claims = good.clone();
        if let (Some(claims), Value::Object(extra)) = (claims.as_object_mut(), extra) {
            claims.extend(extra);
        }
        hs256(&claims)
    };
    let forged = encode(
        &Header::new(Algorithm::HS256),
        &good,
        &EncodingKey::from_secret(b"another secret of thirty-two byte"),
    )
    .unwrap();
    let valid = hs256(&good);
    let unsigned = reheaded(&valid, &json!({"alg": "none", "typ": "JWT"}));
    let unsigned_upper = reheaded(&valid, &json!({"alg": "NONE"}));
    let mut no_exp = good.clone();
    no_exp.as_object_mut().unwrap().remove("exp");
    let cases = [
        (forged, JwtError::Signature),
        (unsigned, JwtError::Unsigned),
        (unsigned_upper, JwtError::Unsigned),
        (with(json!({"exp": now() - 3_600})), JwtError::Expired),
        (with(json!({"nbf": now() + 3_600})), JwtError::NotYetValid),
        (with(json!({"iss": "https://evil.example"})), JwtError::Issuer),
        (with(json!({"aud": "someone-else"})), JwtError::Audience),
        (hs256(&no_exp), JwtError::Claim { claim: "exp".into(), what: "tokens must expire" }),
        (
            with(json!({"sub": ""})),
            JwtError::Claim { claim: "sub".into(), what: "a string naming who it is" },
        ),
        (
            with(json!({"roles": 7})),
            JwtError::Claim { claim: "roles".into(), what: "an array of roles" },
        ),
        (with(json!({"tenant": 7})), JwtError::Claim { claim: "tenant".into(), what: "a string" }),
        ("not.a.jwt".into(), JwtError::Malformed),
        ("a.b".into(), JwtError::Malformed),
        (format!("{valid}.extra"), JwtError::Malformed),
    ];
    for (token, expected) in cases {
        assert_eq!(jwt.verify(&token), Err(expected.clone()), "{expected}");
        assert!(!expected.forbids());
    }
    // Verified, but its roles give nothing here: forbidden, not unknown.
    let error = jwt.verify(&with(json!({"roles": ["viewer"]}))).unwrap_err();
    assert!(error.forbids(), "{error}");
    assert!(error.to_string().contains("none of `user`"), "{error}");
    // `user` alone is a user; beside another role, the other decides.
    let user = jwt.verify(&with(json!({"roles": ["user"]}))).expect("a user");
    assert_eq!(user.role, Role::User);
    let reader = jwt.verify(&with(json!({"roles": ["read", "user"]}))).expect("a reader");
    assert_eq!(reader.role, Role::Read);
}

#[test]
fn keys_and_claim_names_are_checked_when_given() {
    assert!(Jwt::hs256(b"short").unwrap_err().to_string().contains("32 bytes"));
    for (jwks, says) in [
        ("{", "not a JSON Web Key Set"),
        (r#"{"keys": []}"#, "no key"),
        (r#"{"keys": [{"kty": "oct", "kid": "k", "k": "c2VjcmV0"}]}"#, "JWKS key k"),
    ] {
        let error = Jwt::jwks(jwks).unwrap_err().to_string();
        assert!(error.contains(says), "{jwks}: {error}");
    }
    assert!(ClaimNames::default().named("colour", "c").is_err());
    assert!(ClaimNames::default().named("roles", "sub").is_err(), "two kinds, one claim");
}

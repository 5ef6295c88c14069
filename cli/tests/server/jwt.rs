//! `serve --jwt-secret-file` and `--jwks-file`: JWTs signed here are taken
//! as `Authorization: Bearer` and `x-api-key` on both APIs and map to their
//! principal; named tokens keep working beside them; bad tokens are
//! refused with their reason; bad options stop the server before it starts.

use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use crate::support::{anonymous, code, runtime, sha256_hex, Fixture, Served};

const SECRET: &str = "the secret of this test, 40 bytes long!!";

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() as i64)
}

fn claims(extra: Value) -> Value {
    let mut claims = json!({"sub": "ann", "roles": ["admin"], "groups": ["finance"],
                            "tenant": "acme", "exp": now() + 600});
    if let (Some(claims), Value::Object(extra)) = (claims.as_object_mut(), extra) {
        claims.extend(extra);
    }
    claims
}

fn hs256(claims: &Value) -> String {
    let key = EncodingKey::from_secret(SECRET.as_bytes());
    encode(&Header::new(Algorithm::HS256), claims, &key).unwrap()
}

fn testdata(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../server/testdata/jwt").join(name)
}

#[test]
fn jwts_name_their_principal_and_bad_ones_are_refused_with_a_reason() {
    let fx = Fixture::new();
    std::fs::write(fx.path("jwt-secret"), format!("{SECRET}\n")).unwrap();
    std::fs::write(fx.path("tokens"), format!("ops admin {}\n", sha256_hex("ops-token"))).unwrap();
    let (secret, tokens) = (fx.path("jwt-secret"), fx.path("tokens"));
    let args =
        ["--jwt-secret-file", secret.to_str().unwrap(), "--tokens-file", tokens.to_str().unwrap()];
    let server = Served::start_with(&fx, &args, None);
    let client = anonymous();
    runtime().block_on(async {
        let me = |token: String| client.get(server.url("/me")).bearer_auth(token).send();
        let ann: Value = me(hs256(&claims(json!({})))).await.unwrap().json().await.unwrap();
        assert_eq!(
            ann,
            json!({"name": "ann", "role": "admin", "groups": ["finance"], "tenant": "acme"})
        );
        // The named token beside it.
        let ops: Value = me("ops-token".into()).await.unwrap().json().await.unwrap();
        assert_eq!(ops, json!({"name": "ops", "role": "admin"}));
        // LangGraph's clients send it as `x-api-key`.
        let search = client
            .post(server.url("/lg/threads/search"))
            .header("x-api-key", hs256(&claims(json!({"roles": ["read"]}))))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(search.status(), 200);
        // A reader may not start runs.
        let reader = hs256(&claims(json!({"roles": "read"})));
        let start = client.post(server.url("/runs")).bearer_auth(reader).json(&json!({}));
        assert_eq!(start.send().await.unwrap().status(), 403);

        let forged = encode(
            &Header::new(Algorithm::HS256),
            &claims(json!({})),
            &EncodingKey::from_secret(b"another secret, forty bytes long as well"),
        )
        .unwrap();
        let valid = hs256(&claims(json!({})));
        let unsigned = {
            use base64::Engine as _;
            let head = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#);
            let body = valid.split('.').nth(1).unwrap();
            format!("{head}.{body}.")
        };
        for (token, status, says) in [
            (hs256(&claims(json!({"exp": now() - 600}))), 401, "expired"),
            (forged, 401, "signature"),
            (unsigned, 401, "unsigned"),
            ("x.y.z".to_owned(), 401, "well-formed"),
            ("not-a-token".to_owned(), 401, "not one of the server's tokens"),
            (hs256(&claims(json!({"roles": ["viewer"]}))), 403, "none of `user`"),
        ] {
            let response = me(token).await.unwrap();
            assert_eq!(response.status().as_u16(), status, "{says}");
            let error: Value = response.json().await.unwrap();
            let message = error["error"]["message"].as_str().unwrap();
            assert!(message.contains(says), "{says}: {message}");
        }
    });
}

#[test]
fn a_jwks_file_takes_rs256_and_es256_tokens() {
    let fx = Fixture::new();
    let jwks = testdata("jwks.json");
    let args = ["--jwks-file", jwks.to_str().unwrap(), "--jwt-claim", "subject=email"];
    let server = Served::start_with(&fx, &args, None);
    let client = anonymous();
    runtime().block_on(async {
        let rsa = std::fs::read(testdata("rsa.pem")).unwrap();
        let ec = std::fs::read(testdata("ec.pem")).unwrap();
        for (alg, kid, key) in [
            (Algorithm::RS256, "rsa-1", EncodingKey::from_rsa_pem(&rsa).unwrap()),
            (Algorithm::ES256, "ec-1", EncodingKey::from_ec_pem(&ec).unwrap()),
        ] {
            let header = Header { kid: Some(kid.into()), ..Header::new(alg) };
            let claims = json!({"email": "bo@example.com", "roles": ["decide"], "exp": now() + 60});
            let token = encode(&header, &claims, &key).unwrap();
            let response = client.get(server.url("/me")).bearer_auth(token).send().await.unwrap();
            let me: Value = response.json().await.unwrap();
            assert_eq!(me, json!({"name": "bo@example.com", "role": "decide"}), "{alg:?}");
        }
    });
}

#[test]
fn bad_jwt_options_stop_the_server_before_it_starts() {
    let fx = Fixture::new();
    std::fs::write(fx.path("short"), "too short").unwrap();
    std::fs::write(fx.path("jwks"), r#"{"keys": [{"kty": "oct", "kid": "k", "k": "c2VjcmV0"}]}"#)
        .unwrap();
    std::fs::write(fx.path("policy"), "# who reaches what\nread tenant\nuser everything\n")
        .unwrap();
    let (short, jwks, policy) = (fx.path("short"), fx.path("jwks"), fx.path("policy"));
    let (short, jwks) = (short.to_str().unwrap(), jwks.to_str().unwrap());
    let policy = policy.to_str().unwrap();
    let real = testdata("jwks.json");
    for (args, says) in [
        (vec!["serve", "--jwt-secret-file", short], "32 bytes"),
        (vec!["serve", "--jwks-file", jwks], "JWKS key k"),
        (
            vec!["serve", "--jwks-file", real.to_str().unwrap(), "--jwt-claim", "colour=c"],
            "claim kind",
        ),
        (vec!["serve", "--jwks-file", real.to_str().unwrap(), "--jwt-claim", "roles"], "KIND=NAME"),
        (vec!["serve", "--jwt-issuer", "https://id.example"], "need --jwt-secret-file"),
        (vec!["serve", "--policy", policy], "policy file, line 3: no reach `everything`"),
        (vec!["serve", "--policy", "no-such-policy"], "cannot read the policy file"),
    ] {
        let output = fx.run(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(code(&output), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!fx.db().exists(), "nothing made before the refusal");
    }
}

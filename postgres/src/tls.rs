//! TLS as libpq reads a connection string: `sslmode` (`disable`, `allow`,
//! `prefer`, the default, `require`, `verify-ca`, `verify-full`),
//! `sslrootcert`, `sslcert` and `sslkey`, from the URL or from the
//! `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT` and `PGSSLKEY` variables.
//! tokio-postgres knows only `disable`, `prefer` and `require`, and none
//! of the files: these parameters are taken off the string before it
//! parses it, and the rustls configuration is built here.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use percent_encoding::percent_decode_str;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use tokio_postgres::config::SslMode as WireMode;
use tokio_postgres_rustls::MakeRustlsConnect;
use tollgate_checkpoint::StoreError;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server insists (taken as `prefer`: tokio-postgres
    /// cannot try without TLS first).
    Allow,
    /// TLS when the server offers it, the certificate not checked.
    Prefer,
    /// TLS always, the certificate not checked (checked as by `verify-ca`
    /// when a root certificate is given, as libpq does).
    Require,
    /// TLS always, the certificate checked against the roots, not the
    /// host name.
    VerifyCa,
    /// TLS always, the certificate checked against the roots and the host
    /// name.
    VerifyFull,
}

impl SslMode {
    fn parse(text: &str) -> Result<Self, StoreError> {
        Ok(match text {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => return Err(invalid(TlsError::Mode { given: other.to_owned() })),
        })
    }

    fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// The TLS parameters of a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    pub(crate) mode: SslMode,
    /// `sslrootcert`: a PEM file of roots, or `system` for the Mozilla
    /// roots.
    pub(crate) rootcert: Option<String>,
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
}

/// tollgate's own keys of a URL, about its pool (not libpq's: taken off
/// with the TLS ones, as tokio-postgres would refuse them), or of the
/// environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PoolKeys {
    /// `pool_mode` (`TOLLGATE_PG_POOL_MODE`).
    pub(crate) mode: Option<String>,
    /// `pool_size` (`TOLLGATE_PG_POOL_SIZE`).
    pub(crate) size: Option<String>,
}

/// A TLS parameter or file that cannot be used.
#[derive(Debug, thiserror::Error)]
enum TlsError {
    #[error(
        "sslmode `{given}` is not one of disable, allow, prefer, require, verify-ca, verify-full"
    )]
    Mode { given: String },
    #[error("{parameter} `{}` cannot be read: {source}", path.display())]
    File {
        parameter: &'static str,
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{parameter} `{}` holds no certificate", path.display())]
    NoCertificate { parameter: &'static str, path: PathBuf },
    #[error("sslcert and sslkey go together: give both, or neither")]
    HalfAPair,
    #[error("the TLS settings are not usable: {source}")]
    Rustls {
        #[source]
        source: rustls::Error,
    },
}

fn invalid(error: TlsError) -> StoreError {
    StoreError::InvalidSettings { source: Box::new(error) }
}

/// The libpq TLS parameters this module takes off a connection string.
const OURS: [&str; 6] = ["sslmode", "sslrootcert", "sslcert", "sslkey", "pool_mode", "pool_size"];

/// `url` without its TLS parameters and tollgate's pool keys, and those
/// (with the environment's `PGSSL*` and `TOLLGATE_PG_POOL_*` for those it
/// does not set). Both the URL form
/// (`postgres://…?sslmode=verify-full&sslrootcert=/path`, values
/// percent-encoded) and the `key=value` form are read.
pub(crate) fn split(
    url: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(String, TlsSettings, PoolKeys), StoreError> {
    let mut found: Vec<(String, String)> = Vec::new();
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        match url.split_once('?') {
            None => url.to_owned(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|pair| !pair.is_empty()) {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    if OURS.contains(&key) {
                        let value = percent_decode_str(value).decode_utf8_lossy().into_owned();
                        found.push((key.to_owned(), value));
                    } else {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        let mut kept = Vec::new();
        for token in url.split_whitespace() {
            match token.split_once('=') {
                Some((key, value)) if OURS.contains(&key) => {
                    found.push((key.to_owned(), value.trim_matches('\'').to_owned()));
                }
                _ => kept.push(token),
            }
        }
        kept.join(" ")
    };
    let given = |key: &str, var: &str| {
        found.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.clone()).or_else(|| env(var))
    };
    let mode = match given("sslmode", "PGSSLMODE") {
        Some(text) => SslMode::parse(&text)?,
        None => SslMode::Prefer,
    };
    let settings = TlsSettings {
        mode,
        rootcert: given("sslrootcert", "PGSSLROOTCERT").filter(|text| !text.is_empty()),
        cert: given("sslcert", "PGSSLCERT").filter(|text| !text.is_empty()).map(PathBuf::from),
        key: given("sslkey", "PGSSLKEY").filter(|text| !text.is_empty()).map(PathBuf::from),
    };
    let pool = PoolKeys {
        mode: given("pool_mode", "TOLLGATE_PG_POOL_MODE"),
        size: given("pool_size", "TOLLGATE_PG_POOL_SIZE"),
    };
    Ok((rest, settings, pool))
}

/// What tokio-postgres asks the server for, and the connector that checks
/// what it answers as `settings` say.
pub(crate) fn connector(
    settings: &TlsSettings,
) -> Result<(WireMode, MakeRustlsConnect), StoreError> {
    // ring rather than aws-lc-rs: a smaller build that needs no CMake. rustls
    // 0.23.48 deprecates ring's provider (no post-quantum key exchange); the
    // choice stands, so a newer rustls does not warn in a dependent's build.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let wire = match settings.mode {
        SslMode::Disable => WireMode::Disable,
        SslMode::Allow | SslMode::Prefer => WireMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireMode::Require,
    };
    let check = match (settings.mode, &settings.rootcert) {
        (SslMode::VerifyFull, _) => Check::Full,
        (SslMode::VerifyCa, _) | (SslMode::Require, Some(_)) => Check::Chain,
        _ => Check::Nothing,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match check {
        Check::Nothing => Arc::new(Unchecked { provider: Arc::clone(&provider) }),
        Check::Chain | Check::Full => {
            let roots = roots(settings.rootcert.as_deref())?;
            let inner =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                    .build()
                    .map_err(|error| {
                        invalid(TlsError::Rustls {
                            source: rustls::Error::General(error.to_string()),
                        })
                    })?;
            Arc::new(Checked { inner, mode: settings.mode, names: check == Check::Full })
        }
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|source| invalid(TlsError::Rustls { source }))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match (&settings.cert, &settings.key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let chain = certificates("sslcert", cert)?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|source| {
                invalid(TlsError::File { parameter: "sslkey", path: key.clone(), source })
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|source| invalid(TlsError::Rustls { source }))?
        }
        _ => return Err(invalid(TlsError::HalfAPair)),
    };
    Ok((wire, MakeRustlsConnect::new(config)))
}

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    Full,
}

/// The roots `sslrootcert` names: a PEM file, or `system` (and, when not
/// given, `~/.postgresql/root.crt` if it exists, as libpq reads it, else
/// the Mozilla roots).
fn roots(rootcert: Option<&str>) -> Result<rustls::RootCertStore, StoreError> {
    let mozilla = || rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    let path = match rootcert {
        Some("system") => return Ok(mozilla()),
        Some(path) => PathBuf::from(path),
        None => match std::env::var_os("HOME")
            .map(|home| Path::new(&home).join(".postgresql/root.crt"))
        {
            Some(path) if path.is_file() => path,
            _ => return Ok(mozilla()),
        },
    };
    let mut store = rustls::RootCertStore::empty();
    for certificate in certificates("sslrootcert", &path)? {
        store.add(certificate).map_err(|source| invalid(TlsError::Rustls { source }))?;
    }
    Ok(store)
}

/// The certificates of a PEM file, at least one.
fn certificates(
    parameter: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, StoreError> {
    let read = |source| invalid(TlsError::File { parameter, path: path.to_owned(), source });
    let found = CertificateDer::pem_file_iter(path)
        .map_err(read)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read)?;
    if found.is_empty() {
        return Err(invalid(TlsError::NoCertificate { parameter, path: path.to_owned() }));
    }
    Ok(found)
}

/// `prefer`, `require`: any certificate (the connection is encrypted, its
/// peer not authenticated), the handshake's signatures still checked.
#[derive(Debug)]
struct Unchecked {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca` (`names` false) and `verify-full`: the chain checked
/// against the roots, and with `names` the host name; a refusal says
/// which mode refused what.
#[derive(Debug)]
struct Checked {
    inner: Arc<WebPkiServerVerifier>,
    mode: SslMode,
    names: bool,
}

impl ServerCertVerifier for Checked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let checked = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        let error = match checked {
            Ok(verified) => return Ok(verified),
            Err(error) => error,
        };
        let wrong_name = matches!(
            error,
            rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
            )
        );
        if wrong_name && !self.names {
            return Ok(ServerCertVerified::assertion());
        }
        let why = if wrong_name {
            format!("the server's certificate is not valid for host `{}` ({error}); connect by a name the certificate lists, or use sslmode=verify-ca", server_name.to_str())
        } else {
            format!("the server's certificate does not verify against the roots ({error}); give the CA that signed it with sslrootcert=PATH")
        };
        Err(rustls::Error::General(format!("sslmode={}: {why}", self.mode.name())))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn libpq_parameters_come_off_the_url_and_the_rest_stays() {
        let (rest, tls, _) = split(
            "postgres://u:p@h1:5432,h2:5433/db?sslmode=verify-full&target_session_attrs=read-write&sslrootcert=%2Ftmp%2Fca%20x.pem",
            none,
        )
        .unwrap();
        assert_eq!(rest, "postgres://u:p@h1:5432,h2:5433/db?target_session_attrs=read-write");
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.rootcert.as_deref(), Some("/tmp/ca x.pem"));
        let (rest, tls, _) = split("postgres://u@h/db?sslmode=disable", none).unwrap();
        assert_eq!((rest.as_str(), tls.mode), ("postgres://u@h/db", SslMode::Disable));
        let (rest, tls, _) =
            split("host=h user=u sslmode=require sslcert=/c sslkey=/k", none).unwrap();
        assert_eq!(rest, "host=h user=u");
        assert_eq!(
            (tls.mode, tls.cert, tls.key),
            (SslMode::Require, Some("/c".into()), Some("/k".into()))
        );
    }

    #[test]
    fn pool_keys_come_off_the_url_or_from_the_environment() {
        let (rest, _, pool) =
            split("postgres://u@h/db?pool_mode=transaction&application_name=x&pool_size=4", none)
                .unwrap();
        assert_eq!(rest, "postgres://u@h/db?application_name=x");
        assert_eq!(pool.mode.as_deref(), Some("transaction"));
        assert_eq!(pool.size.as_deref(), Some("4"));
        let env = |name: &str| (name == "TOLLGATE_PG_POOL_SIZE").then(|| "9".to_owned());
        let (rest, _, pool) = split("host=h pool_mode=session", env).unwrap();
        assert_eq!(rest, "host=h");
        assert_eq!((pool.mode.as_deref(), pool.size.as_deref()), (Some("session"), Some("9")));
    }

    #[test]
    fn prefer_is_the_default_and_the_environment_fills_in() {
        let (_, tls, _) = split("postgres://u@h/db", none).unwrap();
        assert_eq!((tls.mode, tls.rootcert), (SslMode::Prefer, None));
        let env = |name: &str| match name {
            "PGSSLMODE" => Some("verify-ca".to_owned()),
            "PGSSLROOTCERT" => Some("/etc/ca.pem".to_owned()),
            _ => None,
        };
        let (_, tls, _) = split("postgres://u@h/db", env).unwrap();
        assert_eq!((tls.mode, tls.rootcert.as_deref()), (SslMode::VerifyCa, Some("/etc/ca.pem")));
        let (_, tls, _) = split("postgres://u@h/db?sslmode=disable", env).unwrap();
        assert_eq!(tls.mode, SslMode::Disable, "the URL wins");
    }

    #[test]
    fn bad_modes_and_files_are_named() {
        let error = split("postgres://u@h/db?sslmode=verify", none).unwrap_err();
        assert!(error.to_string().contains("sslmode `verify` is not one of"), "{error}");
        let (_, tls, _) =
            split("postgres://u@h/db?sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem", none)
                .unwrap();
        let error = connector(&tls).err().unwrap();
        assert!(
            error.to_string().contains("sslrootcert `/nonexistent/ca.pem` cannot be read"),
            "{error}"
        );
        let (_, tls, _) = split("postgres://u@h/db?sslcert=/c.pem", none).unwrap();
        let error = connector(&tls).err().unwrap();
        assert!(error.to_string().contains("sslcert and sslkey go together"), "{error}");
        // Modes that check nothing need no files.
        let (_, tls, _) = split("postgres://u@h/db?sslmode=require", none).unwrap();
        assert!(connector(&tls).is_ok());
    }
}

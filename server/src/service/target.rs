//! Where a webhook may go: an `http(s)` URL on a host the server allows
//! (`--allow-webhook-host`), whose host name resolves to no loopback,
//! link-local or unspecified address unless that address is itself
//! allowed, and which is not this server (decided from the addresses it
//! listens on, not from what a request says). A delivery connects to the
//! addresses checked (a name resolving elsewhere later changes nothing)
//! and follows no redirect.

use std::net::{IpAddr, SocketAddr};

use super::admission::host_allowed;

/// Why a webhook URL is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum TargetError {
    /// Not a URL.
    #[error("webhook `{url}` is not a URL")]
    NotUrl {
        /// The URL given.
        url: String,
    },
    /// Not `http` or `https`, or without a host.
    #[error("webhook `{url}` must be an http or https URL with a host")]
    Scheme {
        /// The URL given.
        url: String,
    },
    /// A host the server does not send webhooks to.
    #[error(
        "webhook `{url}` is on a host this server does not send webhooks to (serve --allow-webhook-host HOST)"
    )]
    HostNotAllowed {
        /// The URL given.
        url: String,
    },
    /// The host name did not resolve.
    #[error("webhook `{url}`: its host `{host}` does not resolve: {source}")]
    Unresolved {
        /// The URL given.
        url: String,
        /// Its host.
        host: String,
        /// What the resolver said.
        source: std::io::Error,
    },
    /// The host name resolves to an internal address not itself allowed.
    #[error(
        "webhook `{url}`: its host `{host}` resolves to {addr}, a loopback or link-local address that is not itself allowed (--allow-webhook-host {ip})",
        ip = .addr.ip()
    )]
    Internal {
        /// The URL given.
        url: String,
        /// Its host.
        host: String,
        /// The address it resolved to.
        addr: SocketAddr,
    },
    /// This server.
    #[error(
        "webhook `{url}` is this server ({addr}): a webhook is never sent to the server itself"
    )]
    Itself {
        /// The URL given.
        url: String,
        /// The address of this server it names.
        addr: SocketAddr,
    },
}

/// A webhook URL checked, with the addresses a delivery connects to.
#[derive(Debug)]
pub(crate) struct Target {
    /// The URL.
    pub(crate) url: reqwest::Url,
    /// Its host's addresses, checked.
    pub(crate) addrs: Vec<SocketAddr>,
}

/// Checks `given` against the `allowed` hosts and the addresses this
/// server listens on (`own`), resolving its host.
pub(crate) async fn check(
    given: &str,
    allowed: &[String],
    own: &[SocketAddr],
) -> Result<Target, TargetError> {
    let url = reqwest::Url::parse(given).map_err(|_| TargetError::NotUrl { url: given.into() })?;
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return Err(TargetError::Scheme { url: given.into() });
    };
    if !matches!(url.scheme(), "http" | "https") {
        return Err(TargetError::Scheme { url: given.into() });
    }
    if !host_allowed(given, allowed) {
        return Err(TargetError::HostNotAllowed { url: given.into() });
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    let literal = bare.parse::<IpAddr>().ok();
    let addrs: Vec<SocketAddr> = match literal {
        Some(ip) => vec![SocketAddr::new(ip, port)],
        None => tokio::net::lookup_host((bare.as_str(), port))
            .await
            .map_err(|source| TargetError::Unresolved {
                url: given.into(),
                host: bare.clone(),
                source,
            })?
            .collect(),
    };
    for addr in &addrs {
        let ip = addr.ip().to_canonical();
        // A literal address was allowed by name above.
        let allowed_itself = literal.is_some()
            || host_allowed(&format!("http://{}", SocketAddr::new(ip, port)), allowed);
        if internal(ip) && !allowed_itself {
            return Err(TargetError::Internal { url: given.into(), host: bare, addr: *addr });
        }
        if own.iter().any(|own| is_own(*own, SocketAddr::new(ip, port))) {
            return Err(TargetError::Itself { url: given.into(), addr: *addr });
        }
    }
    Ok(Target { url, addrs })
}

/// Loopback, link-local or unspecified: where a name must not lead a
/// webhook unless the address is allowed as such.
fn internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_link_local() || v4.is_unspecified(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.is_unspecified() || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

/// Whether `target` is an address this server listens on as `own`: the
/// same port, and the same address, or (listening on every address) one
/// of this machine's, which a socket can be bound to.
fn is_own(own: SocketAddr, target: SocketAddr) -> bool {
    if own.port() != target.port() {
        return false;
    }
    let (own_ip, ip) = (own.ip().to_canonical(), target.ip().to_canonical());
    own_ip == ip
        || (own_ip.is_unspecified()
            && (ip.is_unspecified() || std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(hosts: &[&str]) -> Vec<String> {
        hosts.iter().map(|host| (*host).to_owned()).collect()
    }

    #[tokio::test]
    async fn names_resolving_inside_are_refused_unless_the_address_is_allowed() {
        let by_name = allowed(&["localhost"]);
        let refused = check("http://localhost:9/hook", &by_name, &[]).await.unwrap_err();
        assert!(matches!(refused, TargetError::Internal { .. }), "{refused:?}");
        assert!(refused.to_string().contains("--allow-webhook-host 127.0.0.1"), "{refused}");
        let both = allowed(&["localhost", "127.0.0.1", "::1"]);
        let target = check("http://localhost:9/hook", &both, &[]).await.expect("allowed");
        assert!(target.addrs.iter().all(|addr| addr.port() == 9 && addr.ip().is_loopback()));
        let literal = allowed(&["127.0.0.1"]);
        assert!(check("http://127.0.0.1:9/hook", &literal, &[]).await.is_ok());
        let link_local = allowed(&["169.254.169.254"]);
        assert!(check("http://169.254.169.254/latest", &link_local, &[]).await.is_ok());
        let refused = check("http://example.invalid/hook", &allowed(&["other"]), &[]).await;
        assert!(matches!(refused, Err(TargetError::HostNotAllowed { .. })), "{refused:?}");
        let refused = check("ftp://127.0.0.1/hook", &literal, &[]).await;
        assert!(matches!(refused, Err(TargetError::Scheme { .. })), "{refused:?}");
    }

    #[tokio::test]
    async fn this_server_is_known_by_the_addresses_it_listens_on() {
        let any = allowed(&["127.0.0.1", "localhost"]);
        let own: SocketAddr = "127.0.0.1:8123".parse().unwrap();
        let refused = check("http://127.0.0.1:8123/runs", &any, &[own]).await;
        assert!(matches!(refused, Err(TargetError::Itself { .. })), "{refused:?}");
        assert!(check("http://127.0.0.1:8124/runs", &any, &[own]).await.is_ok());
        // Listening on every address: any of the machine's is this server.
        let everywhere: SocketAddr = "0.0.0.0:8123".parse().unwrap();
        let refused = check("http://127.0.0.1:8123/runs", &any, &[everywhere]).await;
        assert!(matches!(refused, Err(TargetError::Itself { .. })), "{refused:?}");
        let far = allowed(&["192.0.2.1"]);
        assert!(check("http://192.0.2.1:8123/runs", &far, &[everywhere]).await.is_ok());
    }
}

//! TLS for this crate's HTTPS clients: the OpenAI and Anthropic providers and MCP servers
//! reached by URL.

use std::sync::Once;

/// Installs rustls's ring provider once for the process.
pub(crate) fn install_crypto() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Another library may have installed one first; either works.
        // ring rather than aws-lc-rs: a smaller build that needs no CMake. rustls
        // 0.23.48 deprecates ring's provider (no post-quantum key exchange); the
        // choice stands, so a newer rustls does not warn in a dependent's build.
        #[allow(deprecated)]
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

//! Lowercase hex, for key files, signatures, hashes and the WebSocket
//! token subprotocol.

/// `bytes` as lowercase hex.
pub(crate) fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Bytes from lowercase or uppercase hex; `None` when it is not hex.
pub(crate) fn decode(text: &str) -> Option<Vec<u8>> {
    // `from_str_radix` alone would take a leading `+`.
    if text.len() % 2 != 0 || !text.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{decode, encode};

    #[test]
    fn hex_round_trips_and_refuses_what_is_not_hex() {
        assert_eq!(decode("73336372657421").as_deref(), Some(&b"s3cret!"[..]));
        assert_eq!(decode("7A7a").as_deref(), Some(&b"zz"[..]));
        assert_eq!(decode("").as_deref(), Some(&b""[..]));
        for bad in ["7", "zz", "7g", "é1", "+1"] {
            assert_eq!(decode(bad), None, "{bad}");
        }
        assert_eq!(encode(&[0, 15, 255]), "000fff");
        assert_eq!(decode(&encode(b"any bytes")).as_deref(), Some(&b"any bytes"[..]));
    }
}

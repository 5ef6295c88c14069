//! Codecs: how state, updates and frontiers become stored bytes.
//!
//! Every stored value is a [`Blob`]: a codec tag, the schema version of the
//! record inside it, a CRC-32 of the payload and the payload. A blob is
//! checked before it is decoded, so a flipped bit or a cut-off write is a
//! typed error instead of a garbled state.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Which encoding a blob's payload uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Codec {
    /// JSON text (serde_json). Self-describing: any process can read and
    /// edit it without the user's Rust types. The default.
    Json,
    /// bincode 2 (standard configuration): compact, for plain-struct
    /// states. Not self-describing: it cannot decode `serde_json::Value`,
    /// internally tagged enums or skipped fields, so the engine decodes
    /// every blob it writes with it and refuses a run at its first write
    /// when that fails.
    Bincode,
}

impl std::fmt::Display for Codec {
    /// `json` or `bincode`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Codec::Json => "json",
            Codec::Bincode => "bincode",
        })
    }
}

impl Codec {
    /// The one-byte tag written in front of every blob of this codec.
    pub fn tag(self) -> u8 {
        match self {
            Codec::Json => 1,
            Codec::Bincode => 2,
        }
    }

    /// Whether a blob can be read without knowing its Rust type.
    pub fn is_self_describing(self) -> bool {
        matches!(self, Codec::Json)
    }

    /// The codec for a stored tag.
    pub fn from_tag(tag: u8) -> Result<Self, CodecError> {
        match tag {
            1 => Ok(Codec::Json),
            2 => Ok(Codec::Bincode),
            other => Err(CodecError::UnknownCodec { tag: other }),
        }
    }

    /// Encodes `value` as a blob holding a record of `schema_version`.
    pub fn encode<T: Serialize + ?Sized>(
        self,
        value: &T,
        schema_version: u16,
    ) -> Result<Blob, CodecError> {
        let encode_error = |source: Box<dyn std::error::Error + Send + Sync>| CodecError::Encode {
            codec: self,
            source,
        };
        let bytes = match self {
            Codec::Json => serde_json::to_vec(value).map_err(|e| encode_error(Box::new(e)))?,
            Codec::Bincode => bincode::serde::encode_to_vec(value, bincode::config::standard())
                .map_err(|e| encode_error(Box::new(e)))?,
        };
        Ok(Blob::new(self, schema_version, bytes))
    }
}

/// One stored value: codec, record schema version, checksum and payload.
#[derive(Clone, PartialEq, Eq)]
pub struct Blob {
    codec: Codec,
    schema_version: u16,
    checksum: u32,
    bytes: Vec<u8>,
}

/// Length of the header [`Blob::to_bytes`] writes before the payload.
const HEADER_LEN: usize = 1 + 2 + 4;

impl Blob {
    fn new(codec: Codec, schema_version: u16, bytes: Vec<u8>) -> Self {
        let checksum = crc32fast::hash(&bytes);
        Self { codec, schema_version, checksum, bytes }
    }

    /// The codec of the payload.
    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// Schema version of the record inside.
    pub fn schema_version(&self) -> u16 {
        self.schema_version
    }

    /// The encoded payload.
    pub fn payload(&self) -> &[u8] {
        &self.bytes
    }

    /// Size of the blob as stored, header included.
    pub fn stored_len(&self) -> usize {
        HEADER_LEN + self.bytes.len()
    }

    /// Verifies the checksum and decodes the payload.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, CodecError> {
        let found = crc32fast::hash(&self.bytes);
        if found != self.checksum {
            return Err(CodecError::ChecksumMismatch { expected: self.checksum, found });
        }
        let codec = self.codec;
        match codec {
            Codec::Json => serde_json::from_slice(&self.bytes)
                .map_err(|source| CodecError::Decode { codec, source: Box::new(source) }),
            Codec::Bincode => {
                bincode::serde::decode_from_slice(&self.bytes, bincode::config::standard())
                    .map(|(value, _)| value)
                    .map_err(|source| CodecError::Decode { codec, source: Box::new(source) })
            }
        }
    }

    /// The stored form: `[codec tag][schema version LE u16][crc32 LE u32][payload]`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.stored_len());
        out.push(self.codec.tag());
        out.extend_from_slice(&self.schema_version.to_le_bytes());
        out.extend_from_slice(&self.checksum.to_le_bytes());
        out.extend_from_slice(&self.bytes);
        out
    }

    /// Parses the stored form written by [`Blob::to_bytes`]. The checksum is
    /// verified on [`Blob::decode`].
    pub fn from_bytes(stored: &[u8]) -> Result<Self, CodecError> {
        if stored.len() < HEADER_LEN {
            return Err(CodecError::Truncated { len: stored.len(), min: HEADER_LEN });
        }
        let codec = Codec::from_tag(stored[0])?;
        let schema_version = u16::from_le_bytes([stored[1], stored[2]]);
        let checksum = u32::from_le_bytes([stored[3], stored[4], stored[5], stored[6]]);
        Ok(Self { codec, schema_version, checksum, bytes: stored[HEADER_LEN..].to_vec() })
    }
}

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blob")
            .field("codec", &self.codec)
            .field("schema_version", &self.schema_version)
            .field("checksum", &format_args!("{:08x}", self.checksum))
            .field("len", &self.bytes.len())
            .finish()
    }
}

/// A value could not be encoded or a stored blob could not be read back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// Serialising the value failed.
    #[error("could not encode a value with {codec}: {source}")]
    Encode {
        /// Codec in use.
        codec: Codec,
        /// What the serializer reported.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The payload is intact but does not decode into the requested type
    /// (the state type changed, or the blob holds another record).
    #[error("could not decode a {codec} blob into the expected type: {source}")]
    Decode {
        /// Codec of the blob.
        codec: Codec,
        /// What the deserializer reported.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The payload's checksum does not match the one stored with it.
    #[error("checksum mismatch: stored {expected:08x}, payload hashes to {found:08x}")]
    ChecksumMismatch {
        /// Checksum written with the blob.
        expected: u32,
        /// Checksum of the payload as read.
        found: u32,
    },
    /// The stored bytes are shorter than a blob header.
    #[error("truncated blob: {len} bytes, a blob has at least {min}")]
    Truncated {
        /// Bytes found.
        len: usize,
        /// Minimum length of a blob.
        min: usize,
    },
    /// A record stored in parts lacks one of them.
    #[error("part {part} of the record is missing")]
    PartMissing {
        /// The first missing part (counted from 0).
        part: u64,
    },
    /// The codec tag is not one this build knows.
    #[error("unknown codec tag {tag}")]
    UnknownCodec {
        /// The stored tag.
        tag: u8,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_stored_form() {
        let value = serde_json::json!({"a": [1, 2, 3], "b": {"kind": "x"}});
        let blob = Codec::Json.encode(&value, 3).expect("encode");
        let back = Blob::from_bytes(&blob.to_bytes()).expect("parse");
        assert_eq!(back.schema_version(), 3);
        assert_eq!(back.decode::<serde_json::Value>().expect("decode"), value);
    }

    #[test]
    fn bincode_round_trips_plain_structs_and_cannot_decode_json_values() {
        #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        struct Plain {
            name: String,
            items: Vec<u32>,
            maybe: Option<i64>,
        }
        let plain = Plain { name: "x".into(), items: vec![1, 2], maybe: None };
        let blob = Codec::Bincode.encode(&plain, 1).expect("encode");
        let json = Codec::Json.encode(&plain, 1).expect("encode");
        assert!(blob.payload().len() < json.payload().len(), "bincode is compact");
        let back = Blob::from_bytes(&blob.to_bytes()).expect("parse");
        assert_eq!(back.codec(), Codec::Bincode);
        assert_eq!(back.decode::<Plain>().expect("decode"), plain);

        let value = serde_json::json!({"a": 1});
        let blob = Codec::Bincode.encode(&value, 1).expect("bincode encodes a Value");
        let error = blob.decode::<serde_json::Value>().expect_err("but cannot decode it");
        assert!(matches!(error, CodecError::Decode { codec: Codec::Bincode, .. }), "{error}");
    }

    #[test]
    fn flipped_bit_is_a_checksum_error() {
        let blob = Codec::Json.encode(&vec![1u32, 2, 3], 1).expect("encode");
        let mut stored = blob.to_bytes();
        let last = stored.len() - 2;
        stored[last] ^= 0x01;
        let err = Blob::from_bytes(&stored).expect("parse").decode::<Vec<u32>>().unwrap_err();
        assert!(matches!(err, CodecError::ChecksumMismatch { .. }), "{err}");
    }

    #[test]
    fn short_input_is_truncated_and_unknown_tag_is_refused() {
        assert!(matches!(Blob::from_bytes(&[1, 0]), Err(CodecError::Truncated { len: 2, .. })));
        let err = Blob::from_bytes(&[9, 0, 0, 0, 0, 0, 0]).unwrap_err();
        assert!(matches!(err, CodecError::UnknownCodec { tag: 9 }));
    }
}

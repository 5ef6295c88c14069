//! Where items live: a [`Namespace`] of checked parts, and the checks of
//! keys and item namespaces.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::error::ItemError;
use super::limits::{MAX_KEY_BYTES, MAX_PARTS, MAX_PART_BYTES};

/// Where items live: a path of parts such as `users/42/memories`. Parts are
/// non-empty, at most [`MAX_PART_BYTES`] long, and hold no `/` and no
/// control characters. A namespace used as a prefix may be empty (every
/// item); an item's has at least one part.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "Vec<String>", into = "Vec<String>")]
pub struct Namespace(pub(super) Vec<String>);

impl Namespace {
    /// A namespace of `parts`, checked.
    pub fn new<I, S>(parts: I) -> Result<Self, ItemError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let parts: Vec<String> = parts.into_iter().map(Into::into).collect();
        if parts.len() > MAX_PARTS {
            return Err(ItemError::TooManyParts { parts: parts.len(), limit: MAX_PARTS });
        }
        for part in &parts {
            check_part(part)?;
        }
        Ok(Self(parts))
    }

    /// A namespace written with slashes (`users/42/memories`); the empty
    /// string is the empty namespace.
    pub fn parse(text: &str) -> Result<Self, ItemError> {
        match text {
            "" => Ok(Self::default()),
            text => Self::new(text.split('/')),
        }
    }

    /// Its parts.
    pub fn parts(&self) -> &[String] {
        &self.0
    }

    /// Whether it has no parts.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `prefix`'s parts begin this namespace.
    pub fn starts_with(&self, prefix: &Namespace) -> bool {
        self.0.starts_with(&prefix.0)
    }

    /// The form stores index by: every part followed by `/`
    /// (`users/42/`), so that a prefix's items are one range of strings
    /// (from [`Namespace::stored`] up to [`Namespace::stored_end`]).
    pub fn stored(&self) -> String {
        let mut text = String::with_capacity(self.0.iter().map(|part| part.len() + 1).sum());
        for part in &self.0 {
            text.push_str(part);
            text.push('/');
        }
        text
    }

    /// The first string past every stored namespace beginning with this
    /// one (the final `/` of [`Namespace::stored`] raised to `0`); `None`
    /// for the empty namespace, which begins every one.
    pub fn stored_end(&self) -> Option<String> {
        let mut text = self.stored();
        text.pop().map(|_| {
            text.push('0');
            text
        })
    }

    /// The namespace back from [`Namespace::stored`].
    pub fn from_stored(text: &str) -> Self {
        Self(text.split_terminator('/').map(str::to_owned).collect())
    }
}

impl TryFrom<Vec<String>> for Namespace {
    type Error = ItemError;

    fn try_from(parts: Vec<String>) -> Result<Self, ItemError> {
        Self::new(parts)
    }
}

impl From<Namespace> for Vec<String> {
    fn from(namespace: Namespace) -> Self {
        namespace.0
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("/"))
    }
}

fn check_part(part: &str) -> Result<(), ItemError> {
    let reason = if part.is_empty() {
        "is empty"
    } else if part.len() > MAX_PART_BYTES {
        "is longer than 256 bytes"
    } else if part.contains('/') {
        "holds a `/` (the separator)"
    } else if part.chars().any(char::is_control) {
        "holds a control character"
    } else {
        return Ok(());
    };
    Err(ItemError::InvalidNamespacePart { part: part.to_owned(), reason })
}

pub(super) fn check_key(key: &str) -> Result<(), ItemError> {
    let reason = if key.is_empty() {
        "is empty"
    } else if key.len() > MAX_KEY_BYTES {
        "is longer than 1024 bytes"
    } else if key.chars().any(char::is_control) {
        "holds a control character"
    } else {
        return Ok(());
    };
    Err(ItemError::InvalidKey { key: key.chars().take(64).collect(), reason })
}

pub(super) fn check_item_namespace(namespace: &Namespace) -> Result<(), ItemError> {
    match namespace.is_empty() {
        true => Err(ItemError::EmptyNamespace),
        false => Ok(()),
    }
}

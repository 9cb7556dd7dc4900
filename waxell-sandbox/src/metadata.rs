//! User metadata on files (E2B's `X-Metadata-*` upload headers): the rules every backend applies
//! before storing it, and where it is stored (`user.e2b.*` extended attributes, as envd does, so
//! the code in the sandbox sees and can set the same values with `getfattr`/`setfattr`).

use std::collections::BTreeMap;

use waxell::sandbox::SandboxError;

/// The extended-attribute namespace of user metadata.
pub(crate) const XATTR_PREFIX: &str = "user.e2b.";
/// Longest key: an xattr name is at most 255 bytes, prefix included.
const MAX_KEY_BYTES: usize = 255 - XATTR_PREFIX.len();
/// Most bytes of names and values in one file's metadata (tmpfs keeps xattrs in kernel memory).
const MAX_TOTAL_BYTES: usize = 4096;

/// Refuse metadata envd would refuse: empty or over-long keys, bytes outside printable ASCII, more
/// than [`MAX_TOTAL_BYTES`] in all.
pub(crate) fn check(metadata: &BTreeMap<String, String>) -> Result<(), SandboxError> {
    let mut total = 0;
    for (key, value) in metadata {
        if key.is_empty() {
            return Err(invalid("a metadata key is empty".into()));
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(invalid(format!(
                "metadata key {key:?} is longer than {MAX_KEY_BYTES} bytes"
            )));
        }
        for (what, text) in [("key", key.as_str()), ("value", value.as_str())] {
            if let Some(byte) = text.bytes().find(|b| !(0x20..=0x7e).contains(b)) {
                return Err(invalid(format!(
                    "metadata {what} for key {key:?} holds byte 0x{byte:02x}: only printable ASCII is allowed"
                )));
            }
        }
        total += XATTR_PREFIX.len() + key.len() + value.len();
    }
    if total > MAX_TOTAL_BYTES {
        return Err(invalid(format!(
            "metadata of {total} bytes exceeds the {MAX_TOTAL_BYTES} byte limit per file"
        )));
    }
    Ok(())
}

fn invalid(message: String) -> SandboxError {
    SandboxError::InvalidArgument(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(key: &str, value: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(key.to_owned(), value.to_owned())])
    }

    #[test]
    fn printable_ascii_within_the_caps_is_accepted() {
        assert!(check(&one("author", "mish ~!")).is_ok());
        assert!(check(&BTreeMap::new()).is_ok());
    }

    #[test]
    fn bad_keys_values_and_sizes_are_refused_with_the_reason() {
        let message = |m: &BTreeMap<String, String>| check(m).unwrap_err().to_string();
        assert!(message(&one("", "v")).contains("empty"));
        assert!(message(&one(&"k".repeat(247), "v")).contains("longer than 246"));
        assert!(message(&one("k", "line\nbreak")).contains("0x0a"));
        assert!(message(&one("ключ", "v")).contains("0xd0"));
        let big: BTreeMap<_, _> = (0..40).map(|i| (format!("k{i}"), "v".repeat(100))).collect();
        assert!(message(&big).contains("4096 byte limit"));
    }
}

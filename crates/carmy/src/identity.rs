//! Validation of the caller-supplied parts of an identity (docs/semantics.md §2).

/// The longest `request_id` or `session_id` accepted, in bytes of UTF-8.
pub const MAX_IDENTIFIER_BYTES: usize = 255;

/// Why an identifier was refused; the text is safe to show to the caller.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdentifierError {
    /// Zero bytes long.
    #[error("{field} must not be empty")]
    Empty {
        /// `request_id` or `session_id`.
        field: &'static str,
    },
    /// Longer than [`MAX_IDENTIFIER_BYTES`].
    #[error("{field} is {len} bytes long; the limit is 255 bytes of UTF-8")]
    TooLong {
        /// `request_id` or `session_id`.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// Holds a control character (Unicode category Cc: U+0000-U+001F, U+007F-U+009F).
    #[error("{field} must not contain control characters")]
    ControlCharacter {
        /// `request_id` or `session_id`.
        field: &'static str,
    },
}

/// Checks a `request_id` or `session_id`: 1 to 255 bytes of UTF-8 with no control characters.
///
/// `field` names the member in the error. The value is never echoed back (it may be huge).
///
/// # Errors
/// [`IdentifierError`] describing the first rule broken.
pub fn validate_identifier(field: &'static str, value: &str) -> Result<(), IdentifierError> {
    if value.is_empty() {
        return Err(IdentifierError::Empty { field });
    }
    if value.len() > MAX_IDENTIFIER_BYTES {
        return Err(IdentifierError::TooLong {
            field,
            len: value.len(),
        });
    }
    if value.chars().any(char::is_control) {
        return Err(IdentifierError::ControlCharacter { field });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert_eq!(validate_identifier("request_id", "a"), Ok(()));
        assert_eq!(validate_identifier("request_id", &"a".repeat(255)), Ok(()));
        assert_eq!(
            validate_identifier("request_id", &"a".repeat(256)),
            Err(IdentifierError::TooLong {
                field: "request_id",
                len: 256
            })
        );
        // 85 three-byte characters = 255 bytes; one more is 258.
        assert_eq!(validate_identifier("session_id", &"€".repeat(85)), Ok(()));
        assert!(validate_identifier("session_id", &"€".repeat(86)).is_err());
        assert_eq!(
            validate_identifier("request_id", ""),
            Err(IdentifierError::Empty {
                field: "request_id"
            })
        );
        for bad in ["a\u{0}b", "a\nb", "a\u{7f}", "a\u{85}"] {
            assert_eq!(
                validate_identifier("request_id", bad),
                Err(IdentifierError::ControlCharacter {
                    field: "request_id"
                })
            );
        }
        assert_eq!(validate_identifier("request_id", "a:b/c d"), Ok(()));
    }
}

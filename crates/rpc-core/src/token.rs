//! Shared-secret checks for daemons that take a token.

use subtle::{Choice, ConstantTimeEq};

/// Whether `given` equals `expected`, in time that depends only on the length
/// of `expected` (the secret), never on where the first difference is or on
/// how long the guess is.
pub fn token_matches(expected: &str, given: &str) -> bool {
    let (expected, given) = (expected.as_bytes(), given.as_bytes());
    let mut same = Choice::from(u8::from(expected.len() == given.len()));
    for (i, byte) in expected.iter().enumerate() {
        same &= byte.ct_eq(&given.get(i).copied().unwrap_or(0));
    }
    same.into()
}

#[cfg(test)]
mod tests {
    use super::token_matches;

    #[test]
    fn only_the_exact_token_matches() {
        assert!(token_matches("s3cret", "s3cret"));
        for wrong in ["s3cre", "s3cret!", "S3cret", "", "s3cret\0", "x3cret"] {
            assert!(!token_matches("s3cret", wrong), "{wrong:?}");
        }
        assert!(!token_matches("ab", "ab\0"));
    }
}

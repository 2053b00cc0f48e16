//! Names and free text of things clients create: teams, users, projects,
//! secrets, descriptions.

use crate::error::{Error, Result};

/// Longest name accepted.
pub const MAX_LEN: usize = 64;

/// Team, user and project names: 1 to 64 of `A-Z a-z 0-9 _ . -`, starting
/// with a letter or digit. They appear in URLs and in `team/project` headers.
pub fn validate(field: &str, value: &str) -> Result<()> {
    let ok = (1..=MAX_LEN).contains(&value.len())
        && value.starts_with(|c: char| c.is_ascii_alphanumeric())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    check(ok, field, || {
        format!(
            "{field} '{value}' is not valid: use 1 to {MAX_LEN} letters, digits, '_', '.' or '-', starting with a letter or digit"
        )
    })
}

/// Secret names are referenced as `${NAME}` in payload templates, so they are
/// identifiers: a letter or `_`, then letters, digits or `_`.
pub fn validate_secret(field: &str, value: &str) -> Result<()> {
    let ok = (1..=MAX_LEN).contains(&value.len())
        && value.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    check(ok, field, || {
        format!(
            "secret name '{value}' is not valid: use 1 to {MAX_LEN} letters, digits and '_', starting with a letter or '_' (it is referenced as ${{NAME}})"
        )
    })
}

/// A new thing's name and description, as a client gives them.
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    /// Checked by [`validate`].
    pub name: &'a str,
    /// Free text, checked by [`validate_text`]; may be empty.
    pub description: &'a str,
}

impl Named<'_> {
    /// Checks both, naming the field at fault.
    pub fn check(&self) -> Result<()> {
        validate("name", self.name)?;
        validate_text("description", self.description)
    }
}

/// `Ok` when `ok`; otherwise a 400 about `field` that `why` words.
pub fn check(ok: bool, field: &str, why: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(field, why()))
    }
}

/// Longest description accepted.
pub const MAX_TEXT_LEN: usize = 2048;

/// Free text such as descriptions: up to [`MAX_TEXT_LEN`] bytes, no control
/// characters other than newlines and tabs.
pub fn validate_text(field: &str, value: &str) -> Result<()> {
    if value.len() > MAX_TEXT_LEN {
        return Err(Error::invalid(
            field,
            format!(
                "{field} is {} bytes; the limit is {MAX_TEXT_LEN}",
                value.len()
            ),
        ));
    }
    if value
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err(Error::invalid(
            field,
            format!("{field} contains a control character; use plain text"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate("name", "ml-team_1.x").is_ok());
        for bad in ["", "-x", "a/b", "a b", "x\0", &"a".repeat(65)] {
            assert!(validate("name", bad).is_err(), "{bad:?}");
        }
        assert!(validate_secret("name", "GITHUB_TOKEN").is_ok());
        for bad in ["1X", "A-B", "A.B", ""] {
            assert!(validate_secret("name", bad).is_err(), "{bad:?}");
        }
        assert!(validate_text("description", "two\nlines\tok").is_ok());
        assert!(validate_text("description", "bell\u{7}").is_err());
        assert!(validate_text("description", &"x".repeat(MAX_TEXT_LEN + 1)).is_err());
    }
}

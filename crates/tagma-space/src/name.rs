//! Space names: 1 to [`SPACE_NAME_BYTES_MAX`] bytes of ASCII letters, digits, `_`, `.` and
//! `-`, so a name is safe in a file name, a URL and a log line as it is.

/// The most bytes of a space name.
pub const SPACE_NAME_BYTES_MAX: usize = 64;

/// Checks a space name; the error says what is wrong and what a name may hold.
pub fn check_space_name(name: &str) -> Result<(), String> {
    const ALLOWED: &str = "1 to 64 ASCII letters, digits, `_`, `.` or `-`";
    if name.is_empty() {
        return Err(format!("a space name is empty: use {ALLOWED}"));
    }
    if name.len() > SPACE_NAME_BYTES_MAX {
        return Err(format!(
            "the space name `{}…` has {} bytes: use {ALLOWED}",
            name.chars().take(16).collect::<String>().escape_debug(),
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "the space name `{}` holds {c:?}: use {ALLOWED}",
            name.escape_debug()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_allowed_characters_and_length_pass_others_name_the_rule() {
        for good in ["a", "locks", "job-queue_2.v1", &"x".repeat(64)] {
            assert_eq!(check_space_name(good), Ok(()), "{good}");
        }
        for bad in ["", "a b", "ünï", "a/b", &"x".repeat(65), "nul\0"] {
            let e = check_space_name(bad).unwrap_err();
            assert!(e.contains("1 to 64 ASCII letters"), "{bad}: {e}");
        }
    }
}

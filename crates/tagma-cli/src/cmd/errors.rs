//! How the `tagma` command prints an error: its message and the causes under it, each
//! once (many errors repeat their cause in their own message).

/// The error and its causes joined by ": ", leaving out a cause whose text the message
/// printed so far already holds.
pub fn render(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read tagma.toml: {source} — fix: pass the right --dir")]
    struct Repeats {
        source: std::io::Error,
    }

    #[test]
    fn a_cause_the_message_already_holds_is_printed_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = anyhow::Error::new(Repeats { source: io });
        let text = render(&e);
        assert_eq!(text.matches("No such file").count(), 1, "{text}");
        assert_eq!(
            text,
            "cannot read tagma.toml: No such file — fix: pass the right --dir"
        );
        // A context adds its own line, and a cause not yet shown is kept.
        let e = anyhow::anyhow!("inner cause").context("outer");
        assert_eq!(render(&e), "outer: inner cause");
    }
}

//! Redis's glob-style patterns (`KEYS`, `SCAN MATCH`): `*` any run of bytes, `?` one byte,
//! `[abc]`, `[^a]` and `[a-z]` classes, `\x` the byte `x` itself.

/// Whether `text` matches `pattern`.
pub fn matches(pattern: &[u8], text: &[u8]) -> bool {
    // Iterative with one backtrack point per `*`: linear memory, no recursion to exhaust.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    while p < pattern.len() && pattern[p] == b'*' {
                        p += 1;
                    }
                    if p == pattern.len() {
                        return true;
                    }
                    star = Some((p, t));
                    continue;
                }
                b'?' => {
                    p += 1;
                    t += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class(pattern, p, text[t])
                        && matched
                    {
                        p = next;
                        t += 1;
                        continue;
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if pattern[p + 1] == text[t] {
                        p += 2;
                        t += 1;
                        continue;
                    }
                }
                c => {
                    if c == text[t] {
                        p += 1;
                        t += 1;
                        continue;
                    }
                }
            }
        }
        // A mismatch: let the last `*` take one more byte, or fail.
        match star {
            Some((sp, st)) => {
                p = sp;
                t = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// The class starting at `pattern[at] == b'['`: whether `c` is in it, and where the pattern
/// goes on after it. An unclosed class runs to the end of the pattern, as in Redis.
fn class(pattern: &[u8], at: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = at + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    while i < pattern.len() && pattern[i] != b']' {
        if pattern[i] == b'\\' && i + 1 < pattern.len() {
            matched |= pattern[i + 1] == c;
            i += 2;
        } else if i + 2 < pattern.len() && pattern[i + 1] == b'-' && pattern[i + 2] != b']' {
            let (lo, hi) = (
                pattern[i].min(pattern[i + 2]),
                pattern[i].max(pattern[i + 2]),
            );
            matched |= (lo..=hi).contains(&c);
            i += 3;
        } else {
            matched |= pattern[i] == c;
            i += 1;
        }
    }
    let next = (i + 1).min(pattern.len());
    Some((matched != negate, next))
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn patterns_match_as_in_redis() {
        let yes = [
            ("*", ""),
            ("*", "anything"),
            ("h?llo", "hello"),
            ("h*llo", "heeeello"),
            ("h[ae]llo", "hallo"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("user:*:name", "user:42:name"),
            ("\\*", "*"),
            ("a*b*c", "aXbYbZc"),
        ];
        for (p, t) in yes {
            assert!(matches(p.as_bytes(), t.as_bytes()), "{p} ~ {t}");
        }
        let no = [
            ("h?llo", "hllo"),
            ("h[ae]llo", "hillo"),
            ("h[^e]llo", "hello"),
            ("user:*:name", "user:42:age"),
            ("\\*", "a"),
            ("abc", "abcd"),
            ("", "a"),
        ];
        for (p, t) in no {
            assert!(!matches(p.as_bytes(), t.as_bytes()), "{p} !~ {t}");
        }
    }

    #[test]
    fn many_stars_take_linear_time() {
        let pattern = "*a".repeat(40) + "b";
        let text = "a".repeat(5_000);
        assert!(!matches(pattern.as_bytes(), text.as_bytes()));
    }
}

//! How deeply JSON nests, counted without parsing it.
//!
//! Stored records wrap what a client sent in a few levels of their own (an
//! event around a version around its metadata), and each must stay readable
//! within serde_json's recursion limit of 128. So request bodies, and the
//! payload templates that render into stored and sent JSON, may nest arrays
//! and objects at most [`MAX_DEPTH`] deep.

/// Deepest nesting of arrays and objects accepted from a client.
pub const MAX_DEPTH: usize = 32;

/// How deeply `text` nests arrays and objects, counting no further than
/// one past [`MAX_DEPTH`]. Brackets inside strings do not count.
pub fn depth(text: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in text {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
                if deepest > MAX_DEPTH {
                    break;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_brackets_outside_strings_count() {
        assert_eq!(depth(br#"{"a":[1,{"b":"[[[{{{"}]}"#), 3);
        assert_eq!(depth(br#"{"a":"\"[[["}"#), 1);
        assert_eq!(depth(b"1"), 0);
    }

    #[test]
    fn counting_stops_past_the_limit() {
        let deep = "[".repeat(100_000);
        assert_eq!(depth(deep.as_bytes()), MAX_DEPTH + 1);
    }
}

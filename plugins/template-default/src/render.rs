//! The renderer itself, plain Rust so it can be unit-tested and benchmarked natively.

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde_json::Value;

/// A template problem, with the byte offset it is about.
#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    /// `unknown-variable`, `invalid-template` or `invalid-json`.
    pub code: &'static str,
    /// What was wrong and how to fix it.
    pub message: String,
    /// Byte offset into the template.
    pub position: Option<u32>,
}

const METADATA: &str = "artifact_metadata";

/// One piece of a parsed template.
enum Piece<'t> {
    Text(&'t str),
    /// A variable, its byte offset, and whether it sits inside a string literal.
    Var {
        name: &'t str,
        at: usize,
        in_string: bool,
        whole_string: bool,
    },
}

/// Checks `template` against the `known` variable names; returns the names used.
pub fn validate(template: &str, known: &[String]) -> Result<Vec<String>, Error> {
    let pieces = parse(template)?;
    let mut used = Vec::new();
    let mut vars = Vec::new();
    for piece in &pieces {
        if let Piece::Var { name, at, .. } = piece {
            let (base, key) = name.split_once('.').unwrap_or((*name, ""));
            if base == METADATA && key.contains('.') {
                return Err(invalid(
                    template,
                    *at,
                    &format!(
                        "'${{{name}}}' reaches below the top level of the metadata, but only top-level keys are usable: write '${{{METADATA}.{}}}' and read the rest from its value",
                        key.split('.').next().unwrap_or("")
                    ),
                ));
            }
            let ok = known.iter().any(|k| k == name)
                || (base == METADATA && known.iter().any(|k| k == METADATA));
            if !ok {
                return Err(unknown(template, name, *at, known));
            }
            if !used.iter().any(|u| u == name) {
                used.push(name.to_string());
            }
        }
    }
    // Render with stand-in values to prove the result is valid JSON.
    for name in known {
        vars.push((name.clone(), "\"x\"".to_string()));
    }
    if known.iter().any(|k| k == METADATA) {
        vars.retain(|(n, _)| n != METADATA);
        vars.push((METADATA.to_string(), "{}".to_string()));
    }
    assemble(template, &pieces, &vars)?;
    Ok(used)
}

/// Renders `template` with `(name, JSON value)` pairs.
pub fn render(template: &str, vars: &[(String, String)]) -> Result<String, Error> {
    let pieces = parse(template)?;
    assemble(template, &pieces, vars)
}

fn assemble(
    template: &str,
    pieces: &[Piece<'_>],
    vars: &[(String, String)],
) -> Result<String, Error> {
    let mut out = String::with_capacity(template.len() + 64);
    for piece in pieces {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Var {
                name,
                at,
                in_string,
                whole_string,
            } => {
                let raw = lookup(template, vars, name, *at)?;
                let raw = raw.trim_matches(is_json_space);
                check_json(raw, name)?;
                if *whole_string || !*in_string {
                    // `"${x}"` (quotes excluded by the parser) and bare `${x}`
                    // become the JSON value itself: one complete value, so it
                    // cannot break the structure around it.
                    out.push_str(raw);
                } else if raw.starts_with('"') {
                    // A JSON string's contents are already escaped for use
                    // inside another JSON string.
                    out.push_str(&raw[1..raw.len() - 1]);
                } else if raw != "null" {
                    // A number, boolean, object or array as text: compact it,
                    // then escape it.
                    let compact = parse_value(raw, name)?.to_string();
                    let quoted = Value::String(compact).to_string();
                    out.push_str(&quoted[1..quoted.len() - 1]);
                }
            }
        }
    }
    if let Err(e) = serde_json::from_str::<IgnoredAny>(&out) {
        return Err(Error {
            code: "invalid-json",
            message: format!(
                "the template does not produce valid JSON ({e}); write the template as JSON, with variables inside strings or in value positions"
            ),
            position: None,
        });
    }
    Ok(out)
}

/// The JSON text of variable `name`.
fn lookup<'v>(
    template: &str,
    vars: &'v [(String, String)],
    name: &str,
    at: usize,
) -> Result<Cow<'v, str>, Error> {
    let find = |n: &str| vars.iter().find(|(k, _)| k == n).map(|(_, v)| v);
    if let Some(raw) = find(name) {
        return Ok(Cow::Borrowed(raw));
    }
    let Some(key) = name.strip_prefix("artifact_metadata.") else {
        let known: Vec<String> = vars.iter().map(|(k, _)| k.clone()).collect();
        return Err(unknown(template, name, at, &known));
    };
    let metadata = find(METADATA)
        .map(|m| parse_value(m, METADATA))
        .transpose()?;
    let value = metadata.as_ref().and_then(|m| m.get(key));
    Ok(Cow::Owned(value.unwrap_or(&Value::Null).to_string()))
}

fn is_json_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// Checks that `raw` is exactly one JSON value, without building it.
fn check_json(raw: &str, name: &str) -> Result<(), Error> {
    serde_json::from_str::<IgnoredAny>(raw)
        .map(|_| ())
        .map_err(|e| not_json(name, e))
}

fn parse_value(raw: &str, name: &str) -> Result<Value, Error> {
    serde_json::from_str(raw).map_err(|e| not_json(name, e))
}

fn not_json(name: &str, e: serde_json::Error) -> Error {
    Error {
        code: "invalid-variable",
        message: format!("the value of variable '{name}' is not JSON: {e}"),
        position: None,
    }
}

fn unknown(template: &str, name: &str, at: usize, known: &[String]) -> Error {
    let (line, column) = line_column(template, at);
    let mut names: Vec<&str> = known.iter().map(String::as_str).collect();
    names.sort_unstable();
    Error {
        code: "unknown-variable",
        message: format!(
            "unknown variable '${{{name}}}' at line {line} column {column}; available: {}",
            names
                .iter()
                .map(|n| format!("${{{n}}}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        position: Some(at as u32),
    }
}

fn invalid(template: &str, at: usize, what: &str) -> Error {
    let (line, column) = line_column(template, at);
    Error {
        code: "invalid-template",
        message: format!("{what} at line {line} column {column}"),
        position: Some(at as u32),
    }
}

fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.len(), |nl| before.len() - nl - 1)
        + 1;
    (line, column)
}

/// Splits the template into text and variables, tracking JSON string state.
fn parse(template: &str) -> Result<Vec<Piece<'_>>, Error> {
    let bytes = template.as_bytes();
    let mut pieces = Vec::new();
    let (mut i, mut text_start) = (0, 0);
    let mut in_string = false;
    let mut string_start = 0;
    while i < bytes.len() {
        // Only `\`, `"` and `$` matter: skip the rest in a tight loop.
        // (Templates are dense with quotes, so memchr's set-up per hop
        // costs more than it saves.)
        let Some(skip) = bytes[i..]
            .iter()
            .position(|b| matches!(b, b'\\' | b'"' | b'$'))
        else {
            break;
        };
        i += skip;
        match bytes[i] {
            b'\\' if in_string => i += 2,
            b'"' => {
                in_string = !in_string;
                string_start = i;
                i += 1;
            }
            b'$' if bytes.get(i + 1) == Some(&b'$') && bytes.get(i + 2) == Some(&b'{') => {
                pieces.push(Piece::Text(&template[text_start..i]));
                text_start = i + 1;
                i += 3;
            }
            b'$' if bytes.get(i + 1) == Some(&b'{') => {
                let close = template[i + 2..]
                    .find('}')
                    .ok_or_else(|| invalid(template, i, "'${' is never closed with '}'"))?;
                let name = &template[i + 2..i + 2 + close];
                if !valid_name(name) {
                    return Err(invalid(
                        template,
                        i,
                        &format!(
                            "'${{{name}}}' is not a variable name (letters, digits, '_', '-' and '.')"
                        ),
                    ));
                }
                let end = i + 3 + close;
                let whole_string =
                    in_string && string_start + 1 == i && bytes.get(end) == Some(&b'"');
                // A whole-string variable takes its quotes with it.
                let text_end = if whole_string { i - 1 } else { i };
                pieces.push(Piece::Text(&template[text_start..text_end]));
                pieces.push(Piece::Var {
                    name,
                    at: i,
                    in_string,
                    whole_string,
                });
                i = if whole_string { end + 1 } else { end };
                if whole_string {
                    in_string = false;
                }
                text_start = i;
            }
            _ => i += 1,
        }
    }
    if in_string {
        return Err(invalid(template, string_start, "a string is never closed"));
    }
    pieces.push(Piece::Text(&template[text_start.min(template.len())..]));
    Ok(pieces)
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn hostile_values_stay_inside_their_string() {
        let hostile = serde_json::to_string("\"}, \"x\": \\ \n ${event_type}").unwrap();
        let out = render(
            r#"{"a": "by ${event_author}!"}"#,
            &vars(&[("event_author", &hostile), ("event_type", "\"T\"")]),
        )
        .unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["a"], "by \"}, \"x\": \\ \n ${event_type}!");
        assert_eq!(v.as_object().unwrap().len(), 1);
    }

    #[test]
    fn a_whole_string_variable_takes_the_json_value() {
        let out = render(
            r#"{"v": "${artifact_version}", "s": "${alias}"}"#,
            &vars(&[
                ("artifact_version", r#"{"version":"v3"}"#),
                ("alias", "\"prod\""),
            ]),
        )
        .unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["v"]["version"], "v3");
        assert_eq!(v["s"], "prod");
    }

    #[test]
    fn metadata_keys_are_top_level_only() {
        let meta = r#"{"acc": 0.9, "a.b": "dotted", "nested": {"x": 1}}"#;
        let out = render(r#"{"acc": ${artifact_metadata.acc}, "d": "${artifact_metadata.a.b}", "m": "${artifact_metadata.missing}"}"#, &vars(&[("artifact_metadata", meta)])).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["acc"], 0.9);
        assert_eq!(v["d"], "dotted");
        assert_eq!(v["m"], Value::Null);
    }

    #[test]
    fn unknown_variables_are_reported_with_position() {
        let err = validate("{\n  \"a\": \"${nope}\"}", &["alias".into()]).unwrap_err();
        assert_eq!(err.code, "unknown-variable");
        assert_eq!(err.position, Some(10));
        assert!(err.message.contains("line 2 column 9"), "{}", err.message);
        assert!(err.message.contains("${alias}"), "{}", err.message);
    }

    #[test]
    fn metadata_below_the_top_level_is_refused_with_position() {
        let known = [METADATA.to_string()];
        assert!(validate(r#"{"a": ${artifact_metadata.acc}}"#, &known).is_ok());
        let err = validate(r#"{"a": ${artifact_metadata.a.b}}"#, &known).unwrap_err();
        assert_eq!((err.code, err.position), ("invalid-template", Some(6)));
        assert!(
            err.message.contains("only top-level keys"),
            "{}",
            err.message
        );
        assert!(
            err.message.contains("${artifact_metadata.a}"),
            "{}",
            err.message
        );
    }

    #[test]
    fn invalid_templates_are_reported() {
        assert_eq!(
            validate(r#"{"a": "${oops"}"#, &[]).unwrap_err().code,
            "invalid-template"
        );
        assert_eq!(
            validate(r#"{"a": 1,}"#, &[]).unwrap_err().code,
            "invalid-json"
        );
        assert_eq!(
            validate(r#"{"a": "${1x}"}"#, &[]).unwrap_err().code,
            "invalid-template"
        );
    }

    #[test]
    fn values_of_every_json_type_are_placed_safely() {
        let out = render(
            r#"{"s": "n=${n} o=${o} z=${z} t=${t}", "n": ${n}, "o": "${o}"}"#,
            &vars(&[
                ("n", " 1.5\n"),
                ("o", "{ \"k\": [1, \"\\\"\"] }"),
                ("z", "null"),
                ("t", "\"a\\u0022b\""),
            ]),
        )
        .unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["s"], r#"n=1.5 o={"k":[1,"\""]} z= t=a"b"#);
        assert_eq!(v["n"], 1.5);
        assert_eq!(v["o"]["k"][1], "\"");
    }

    #[test]
    fn a_value_that_is_not_one_json_value_is_reported() {
        for bad in ["\"open", "1 2", "", "\u{a0}1"] {
            let err = render(r#"{"a": "${x}"}"#, &vars(&[("x", bad)])).unwrap_err();
            assert_eq!(err.code, "invalid-variable", "{bad:?}");
            assert!(err.message.contains("'x'"), "{}", err.message);
        }
    }

    #[test]
    fn dollar_dollar_is_a_literal() {
        let out = render(r#"{"a": "$${alias} $5"}"#, &[]).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&out).unwrap()["a"],
            "${alias} $5"
        );
    }
}

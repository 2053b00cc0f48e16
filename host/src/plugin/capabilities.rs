//! What each kind of plugin may import. Nothing is ambient: a component whose
//! imports fall outside its kind's list is refused at load time, with the
//! offending imports named.
//!
//! The host's WASI implementation is linked for every kind, but templates and
//! filters get a context with no preopened directories, no environment, no
//! arguments and no network, so the filesystem imports Rust's std pulls in find
//! nothing to open.

use super::types::{Kind, LoadError};

/// WASI interfaces any plugin may import (`*` allows the whole package).
const BASE: &[&str] = &[
    "wasi:io/*",
    "wasi:clocks/*",
    "wasi:random/*",
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "switchyard:plugin/types",
];

/// Interfaces a kind may import beyond [`BASE`].
fn extra(kind: Kind) -> &'static [&'static str] {
    match kind {
        // Toolchains (componentize-py, jco) import sockets whatever the
        // code does; the import is linked, and every use of it is denied
        // (see `state.rs`).
        Kind::PayloadTemplate | Kind::EventFilter => &["wasi:sockets/*"],
        // The network only as `wasi:http`, and only to hosts its grant lists
        // (see `backend::egress`). Sockets are linked for the toolchains'
        // sake, as above, and every use is denied.
        Kind::ModelBackend => &[
            "switchyard:plugin/output",
            "switchyard:plugin/parallel",
            "wasi:http/*",
            "wasi:sockets/*",
        ],
    }
}

/// The component's imports, or why its kind may not have them (or why
/// `bytes` is not a component). Reads the binary without compiling it, so
/// a refusal comes before the compile's seconds and leaves no cache entry.
pub fn check(kind: Kind, bytes: &[u8]) -> Result<Vec<String>, LoadError> {
    let imports = imports(bytes)?;
    let denied = disallowed_imports(kind, imports.iter().map(String::as_str));
    if denied.is_empty() {
        return Ok(imports);
    }
    Err(LoadError::Refused {
        kind,
        imports: denied,
    })
}

/// The names a component imports at its top level (not its inner modules').
fn imports(bytes: &[u8]) -> Result<Vec<String>, LoadError> {
    use wasmparser::{Encoding, Parser, Payload};
    let invalid = |e: wasmparser::BinaryReaderError| LoadError::NotAComponent(e.to_string());
    let mut names = Vec::new();
    // Inner modules and components each end with their own `End`.
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(invalid)? {
            Payload::Version { encoding, .. } if depth == 0 && encoding != Encoding::Component => {
                return Err(LoadError::CoreModule);
            }
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) if depth > 0 => depth -= 1,
            Payload::ComponentImportSection(section) if depth == 0 => {
                for import in section {
                    names.push(import.map_err(invalid)?.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    Ok(names)
}

/// The imports of a component that its kind does not allow.
pub fn disallowed_imports<'a>(
    kind: Kind,
    imports: impl IntoIterator<Item = &'a str>,
) -> Vec<String> {
    imports
        .into_iter()
        .filter(|name| !allowed(kind, name))
        .map(str::to_string)
        .collect()
}

fn allowed(kind: Kind, import: &str) -> bool {
    // `wasi:io/streams@0.2.4` → `wasi:io/streams`
    let unversioned = import.split('@').next().unwrap_or(import);
    let package = unversioned.split('/').next().unwrap_or(unversioned);
    BASE.iter()
        .chain(extra(kind))
        .any(|entry| match entry.strip_suffix("/*") {
            Some(allowed_package) => package == allowed_package,
            None => unversioned == *entry,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_importing_wasi_http_is_refused_with_the_jco_flag_that_drops_it() {
        // model-openai imports wasi:http, as a jco build without the flag does.
        let path = format!("{}/model_openai.wasm", switchyard_components::DIR);
        let bytes = std::fs::read(path).unwrap();
        let err = check(Kind::PayloadTemplate, &bytes).unwrap_err();
        let LoadError::Refused { kind, imports } = &err else {
            panic!("refused for its imports, not {err:?}");
        };
        assert_eq!(*kind, Kind::PayloadTemplate);
        assert!(
            imports.iter().any(|i| i.starts_with("wasi:http/")),
            "{imports:?}"
        );
        let err = err.to_string();
        assert!(err.contains("wasi:http/outgoing-handler"), "{err}");
        assert!(err.contains("--disable http fetch-event"), "{err}");
        assert!(check(Kind::ModelBackend, &bytes).is_ok());
    }

    #[test]
    fn only_components_are_read() {
        let core_module = b"\0asm\x01\0\0\0";
        let err = check(Kind::PayloadTemplate, core_module).unwrap_err();
        assert_eq!(err, LoadError::CoreModule);
        let err = err.to_string();
        assert!(err.contains("core WebAssembly module"), "{err}");
        let err = check(Kind::PayloadTemplate, b"not wasm")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a valid WebAssembly component"), "{err}");
        // An empty component imports nothing, and may.
        let empty_component = b"\0asm\x0d\0\x01\0";
        assert_eq!(check(Kind::EventFilter, empty_component), Ok(Vec::new()));
    }

    #[test]
    fn templates_may_import_sockets_but_not_http() {
        let imports = [
            "wasi:io/streams@0.2.4",
            "wasi:sockets/tcp@0.2.4",
            "wasi:http/outgoing-handler@0.2.4",
            "wasi:cli/stdout@0.2.4",
        ];
        assert_eq!(
            disallowed_imports(Kind::PayloadTemplate, imports),
            ["wasi:http/outgoing-handler@0.2.4"]
        );
    }

    #[test]
    fn filters_may_not_import_model_output_or_parallel() {
        let imports = [
            "switchyard:plugin/output@0.1.0",
            "switchyard:plugin/parallel@0.1.0",
        ];
        assert_eq!(disallowed_imports(Kind::EventFilter, imports).len(), 2);
    }

    #[test]
    fn model_backends_may_emit_split_work_and_use_http_and_denied_sockets() {
        let imports = [
            "switchyard:plugin/output@0.1.0",
            "switchyard:plugin/parallel@0.1.0",
            "wasi:http/outgoing-handler@0.2.4",
            "wasi:sockets/tcp@0.2.4",
            "switchyard:plugin/template@0.1.0",
        ];
        assert_eq!(
            disallowed_imports(Kind::ModelBackend, imports),
            ["switchyard:plugin/template@0.1.0"]
        );
    }

    #[test]
    fn package_wildcards_do_not_match_lookalikes() {
        assert_eq!(
            disallowed_imports(Kind::EventFilter, ["wasi:iox/evil"]).len(),
            1
        );
        assert!(
            disallowed_imports(Kind::EventFilter, ["wasi:clocks/monotonic-clock@0.2.0"]).is_empty()
        );
    }
}

//! What each kind of plugin may import. Nothing is ambient: a component whose
//! imports fall outside its kind's list is refused at load time, with the
//! offending imports named.
//!
//! The host's WASI implementation is linked for every kind, but templates and
//! filters get a context with no preopened directories, no environment, no
//! arguments and no network, so the filesystem imports Rust's std pulls in find
//! nothing to open.

use wasmtime::Engine;
use wasmtime::component::Component;

use super::Kind;

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
        Kind::PayloadTemplate | Kind::EventFilter => &[],
        // The network only as `wasi:http`, and only to hosts its grant lists
        // (see `inference::egress`); never raw sockets.
        Kind::ModelBackend => &[
            "switchyard:plugin/output",
            "switchyard:plugin/parallel",
            "wasi:http/*",
        ],
    }
}

/// The component's imports, or why its kind may not have them.
pub fn check(engine: &Engine, kind: Kind, component: &Component) -> Result<Vec<String>, String> {
    let ty = component.component_type();
    let imports: Vec<String> = ty
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let denied = disallowed_imports(kind, imports.iter().map(String::as_str));
    if denied.is_empty() {
        return Ok(imports);
    }
    let why = match kind {
        Kind::PayloadTemplate | Kind::EventFilter => {
            "they get no network and no host access beyond WASI basics"
        }
        Kind::ModelBackend => "they reach the network only through wasi:http, to the hosts granted",
    };
    Err(format!(
        "plugins of kind {kind} may not import {}; remove those imports ({why})",
        denied.join(", ")
    ))
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
    fn templates_may_not_open_sockets_or_make_http_calls() {
        let imports = [
            "wasi:io/streams@0.2.4",
            "wasi:sockets/tcp@0.2.4",
            "wasi:http/outgoing-handler@0.2.4",
            "wasi:cli/stdout@0.2.4",
        ];
        assert_eq!(
            disallowed_imports(Kind::PayloadTemplate, imports),
            ["wasi:sockets/tcp@0.2.4", "wasi:http/outgoing-handler@0.2.4"]
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
    fn model_backends_may_emit_split_work_and_use_http_but_not_sockets() {
        let imports = [
            "switchyard:plugin/output@0.1.0",
            "switchyard:plugin/parallel@0.1.0",
            "wasi:http/outgoing-handler@0.2.4",
            "wasi:sockets/tcp@0.2.4",
        ];
        assert_eq!(
            disallowed_imports(Kind::ModelBackend, imports),
            ["wasi:sockets/tcp@0.2.4"]
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

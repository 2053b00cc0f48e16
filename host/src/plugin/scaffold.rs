//! `switchyard plugin new`: a standalone plugin project in Rust, Python or
//! JavaScript that builds with its language's own toolchain, anywhere.
//!
//! The project carries the WIT files of the current interface version, the
//! build file, a minimal working plugin (from `host/scaffold/`), a sample
//! input and a README with the one build command.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::Kind;

/// The languages a plugin can be started in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust, with cargo and wit-bindgen.
    Rust,
    /// Python, with componentize-py.
    Python,
    /// JavaScript, with jco (componentize-js).
    Js,
}

/// The interface a template or filter scaffold implements, as its `wit/`
/// directory.
const WIT: [(&str, &str); 3] = [
    ("types.wit", include_str!("../../../wit/v0.1.0/types.wit")),
    (
        "template.wit",
        include_str!("../../../wit/v0.1.0/template.wit"),
    ),
    ("filter.wit", include_str!("../../../wit/v0.1.0/filter.wit")),
];

/// The interface a model-backend scaffold implements: the newest.
const BACKEND_WIT: [(&str, &str); 2] = [
    ("types.wit", include_str!("../../../wit/v0.4.0/types.wit")),
    ("model.wit", include_str!("../../../wit/v0.4.0/model.wit")),
];

/// The package version of each kind's `wit/`, and its files.
fn wit(kind: Kind) -> (&'static str, &'static [(&'static str, &'static str)]) {
    match kind {
        Kind::ModelBackend => ("0.4.0", &BACKEND_WIT),
        Kind::PayloadTemplate | Kind::EventFilter => ("0.1.0", &WIT),
    }
}

/// The componentize-py release the Python scaffold is built and tested with.
pub const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";

/// jco and componentize-js releases the JavaScript scaffold pins.
const JCO: &str = "1.30.0";
const COMPONENTIZE_JS: &str = "0.23.0";

impl Lang {
    /// The one command that builds the project, run in its directory.
    pub fn build_command(self, name: &str, kind: Kind) -> String {
        match self {
            Lang::Rust => "cargo build --release".into(),
            Lang::Python => {
                format!("componentize-py -d wit -w {kind} componentize app -o {name}.wasm")
            }
            Lang::Js => "npm install && npm run build".into(),
        }
    }

    /// Where the build leaves the component, relative to the project.
    pub fn output(self, name: &str) -> PathBuf {
        match self {
            Lang::Rust => PathBuf::from(format!(
                "target/wasm32-wasip2/release/{}.wasm",
                name.replace('-', "_")
            )),
            Lang::Python | Lang::Js => PathBuf::from(format!("{name}.wasm")),
        }
    }

    /// What to install once before building.
    fn setup(self) -> String {
        match self {
            Lang::Rust => "rustup target add wasm32-wasip2".into(),
            Lang::Python => format!("pip install {COMPONENTIZE_PY}"),
            Lang::Js => "(Node.js 20 or later; `npm install` fetches jco)".into(),
        }
    }

    /// The project's files besides `wit/`: name and contents.
    fn files(self, name: &str, kind: Kind) -> Vec<(String, String)> {
        let code = code(self, kind).replace(NAME, name);
        match self {
            Lang::Rust => vec![
                ("Cargo.toml".into(), cargo_toml(name, kind)),
                (
                    ".cargo/config.toml".into(),
                    "[build]\ntarget = \"wasm32-wasip2\"\n".into(),
                ),
                ("src/lib.rs".into(), code),
                (".gitignore".into(), "/target\n".into()),
            ],
            Lang::Python => vec![
                ("app.py".into(), code),
                (
                    ".gitignore".into(),
                    "*.wasm\n__pycache__/\nwit_world/\ncomponentize_py_*\n".into(),
                ),
            ],
            Lang::Js => vec![
                ("package.json".into(), package_json(name, kind)),
                ("plugin.js".into(), code),
                (".gitignore".into(), "*.wasm\nnode_modules/\n".into()),
            ],
        }
    }
}

/// What stands for the plugin's name in [`code`].
const NAME: &str = "__PLUGIN_NAME__";

/// The minimal working plugin of `kind` in `lang`.
fn code(lang: Lang, kind: Kind) -> &'static str {
    match (lang, kind) {
        (Lang::Rust, Kind::PayloadTemplate) => include_str!("../../scaffold/rust/template.rs"),
        (Lang::Rust, Kind::EventFilter) => include_str!("../../scaffold/rust/filter.rs"),
        (Lang::Rust, Kind::ModelBackend) => include_str!("../../scaffold/rust/backend.rs"),
        (Lang::Python, Kind::PayloadTemplate) => include_str!("../../scaffold/python/template.py"),
        (Lang::Python, Kind::EventFilter) => include_str!("../../scaffold/python/filter.py"),
        (Lang::Python, Kind::ModelBackend) => include_str!("../../scaffold/python/backend.py"),
        (Lang::Js, Kind::PayloadTemplate) => include_str!("../../scaffold/js/template.js"),
        (Lang::Js, Kind::EventFilter) => include_str!("../../scaffold/js/filter.js"),
        (Lang::Js, Kind::ModelBackend) => include_str!("../../scaffold/js/backend.js"),
    }
}

fn cargo_toml(name: &str, kind: Kind) -> String {
    let dependency = match kind {
        Kind::PayloadTemplate => "serde_json = \"1\"\n",
        Kind::EventFilter => {
            "regex = { version = \"1\", default-features = false, features = [\"std\", \"unicode-perl\"] }\n"
        }
        Kind::ModelBackend => "",
    };
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"

[lib]
crate-type = ["cdylib"]

[dependencies]
{dependency}wit-bindgen = "0.61"

[profile.release]
lto = true
codegen-units = 1
strip = true
panic = "abort"

# A project of its own, even inside another cargo workspace.
[workspace]
"#
    )
}

fn package_json(name: &str, kind: Kind) -> String {
    // StarlingMonkey links wasi:http for fetch() unless told not to, and
    // templates and filters may not import it.
    let build = format!(
        "jco componentize plugin.js --wit wit --world-name {kind} --disable http fetch-event -o {name}.wasm"
    );
    let package = serde_json::json!({
        "name": name,
        "version": "0.1.0",
        "private": true,
        "type": "module",
        "scripts": { "build": build },
        "devDependencies": {
            "@bytecodealliance/jco": JCO,
            "@bytecodealliance/componentize-js": COMPONENTIZE_JS,
        },
    });
    format!("{package:#}\n")
}

/// A sample input for `switchyard plugin check --input`.
fn sample_input(kind: Kind) -> String {
    let input = match kind {
        Kind::PayloadTemplate => serde_json::json!({
            "template": "{\"text\": ${event_type}, \"by\": ${event_author}, \"version\": ${artifact_version_string}}",
            "variables": {
                "event_type": "ADD_ARTIFACT_ALIAS",
                "event_author": "alice",
                "artifact_version_string": "acme/models/resnet:v3",
            },
        }),
        _ => serde_json::json!({
            "config": { "alias_regex": "^prod" },
            "event": { "event_type": "ADD_ARTIFACT_ALIAS", "alias": "production" },
        }),
    };
    format!("{input:#}\n")
}

fn readme(name: &str, lang: Lang, kind: Kind) -> String {
    let (setup, build) = (lang.setup(), lang.build_command(name, kind));
    let wasm = lang.output(name);
    let wasm = wasm.display();
    let (version, _) = wit(kind);
    if kind == Kind::ModelBackend {
        return backend_readme(name, &setup, &build, &wasm.to_string());
    }
    format!(
        r#"# {name}

A Switchyard `{kind}` plugin, started by `switchyard plugin new`.

## Build

Once: {setup}

    {build}

The component is `{wasm}`.

## Try it

    switchyard plugin check {wasm} --kind {kind} --input sample-input.json

## Load it

    switchyard plugin upload {name} {wasm} --kind {kind} --url http://127.0.0.1:8080 --key "$SWITCHYARD_KEY"

or copy it into the host's plugins directory as `{name}.wasm`, beside a
`{name}.toml` that says `kind = "{kind}"`.

`wit/` holds the `switchyard:plugin@{version}` interface the plugin implements.
"#
    )
}

fn backend_readme(name: &str, setup: &str, build: &str, wasm: &str) -> String {
    let (version, _) = wit(Kind::ModelBackend);
    format!(
        r#"# {name}

A Switchyard `model-backend` plugin, started by `switchyard plugin new`.
It serves the model `{name}`, which answers a chat with its last user
message; put your engine in `reply`.

## Build

Once: {setup}

    {build}

The component is `{wasm}`.

## Load it and chat

    switchyard plugin upload {name} {wasm} --kind model-backend --url http://127.0.0.1:8080 --key "$SWITCHYARD_KEY"
    curl -s http://127.0.0.1:8080/v1/chat/completions -H "authorization: Bearer $SWITCHYARD_KEY" \
      -d '{{"model": "{name}", "messages": [{{"role": "user", "content": "Hello there"}}]}}'

`switchyard plugin check {wasm} --kind model-backend` lists its models.
A backend that calls an upstream over `wasi:http` is granted its hosts by
the operator, and the host adds the upstream's key to each request, so
the plugin never holds it.

`wit/` holds the `switchyard:plugin@{version}` interface the plugin implements.
"#
    )
}

/// Writes the project for plugin `name` into `dir`, which must not exist or
/// be empty. Returns the files written, relative to `dir`.
pub fn write(dir: &Path, name: &str, lang: Lang, kind: Kind) -> anyhow::Result<Vec<PathBuf>> {
    super::manifest::validate_name(name).map_err(anyhow::Error::msg)?;
    if dir
        .read_dir()
        .is_ok_and(|mut entries| entries.next().is_some())
    {
        anyhow::bail!(
            "{} already exists and is not empty; choose another directory with --dir",
            dir.display()
        );
    }
    let (_, wit) = wit(kind);
    let mut files: Vec<(String, String)> = wit
        .iter()
        .map(|(file, text)| (format!("wit/{file}"), text.to_string()))
        .collect();
    files.extend(lang.files(name, kind));
    if kind != Kind::ModelBackend {
        files.push(("sample-input.json".into(), sample_input(kind)));
    }
    files.push(("README.md".into(), readme(name, lang, kind)));
    let mut written = Vec::new();
    for (file, text) in files {
        let path = dir.join(&file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        written.push(PathBuf::from(file));
    }
    Ok(written)
}

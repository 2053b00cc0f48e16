//! Plugins as `switchyard plugin new` starts them, in Rust, Python and
//! JavaScript, built by their own toolchains and measured on one workload:
//! cold compile, cached load, and a render on a kept and on a fresh
//! instance. A language whose toolchain is missing is skipped, saying so.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard::plugin::Variable;
use switchyard::plugin::scaffold::{self, COMPONENTIZE_PY, Lang};
use switchyard::plugin::{Kind, Plugins};
use switchyard::plugin::{Source, Spec};

use super::{TEAM, median, phases};

const TARGET: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../target");

pub async fn run(plugins: &Arc<Plugins>) {
    let (template, vars) = workload();
    for lang in [Lang::Rust, Lang::Python, Lang::Js] {
        let name = format!("bench-{lang:?}").to_lowercase();
        match build(lang, &name) {
            Ok(bytes) => measure(plugins, &name, bytes, &template, &vars).await,
            Err(why) => println!("{name}: skipped: {why}"),
        }
    }
}

/// A ~1 KB template placing 12 variables' JSON values.
fn workload() -> (String, Vec<Variable>) {
    let vars: Vec<Variable> = (0..12)
        .map(|i| Variable {
            name: format!("var_{i}"),
            value: format!("\"value {i} with \\\"quotes\\\"\""),
        })
        .collect();
    let fields: Vec<String> = vars
        .iter()
        .map(|v| format!("\"{0}\": ${{{0}}}", v.name))
        .collect();
    let mut template = format!("{{{}", fields.join(", "));
    while template.len() < 1000 {
        template.push_str(", \"padding\": \"lorem ipsum dolor sit amet consectetur\"");
    }
    template.push('}');
    (template, vars)
}

/// Writes the scaffold into `target/bench-scaffolds/NAME` and builds it with
/// its README's command; returns the component.
fn build(lang: Lang, name: &str) -> Result<Vec<u8>, String> {
    let dir = PathBuf::from(format!("{TARGET}/bench-scaffolds/{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    scaffold::write(&dir, name, lang, Kind::PayloadTemplate).map_err(|e| format!("{e:#}"))?;
    let build = lang.build_command(name, Kind::PayloadTemplate);
    let mut command = Command::new("sh");
    command.current_dir(&dir).args(["-c", &build]);
    let mut wasm = dir.join(lang.output(name));
    match lang {
        Lang::Rust => {
            for (key, _) in std::env::vars_os() {
                let key = key.to_string_lossy().into_owned();
                if key.starts_with("CARGO_") && key != "CARGO_HOME" || key.contains("RUSTFLAGS") {
                    command.env_remove(key);
                }
            }
            let target = format!("{TARGET}/scaffolds");
            command.env("CARGO_TARGET_DIR", &target);
            wasm = Path::new(&target).join(
                lang.output(name)
                    .strip_prefix("target")
                    .expect("under target/"),
            );
        }
        Lang::Python => {
            let bin = componentize_py()?;
            let path = std::env::var("PATH").unwrap_or_default();
            command.env("PATH", format!("{}:{path}", bin.display()));
        }
        Lang::Js => {}
    }
    let out = command
        .output()
        .map_err(|e| format!("running {build}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{build} failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ));
    }
    std::fs::read(&wasm).map_err(|e| format!("reading {}: {e}", wasm.display()))
}

/// The `bin` of a venv with componentize-py: the tests' if they made it.
fn componentize_py() -> Result<PathBuf, String> {
    let venv = PathBuf::from(format!("{TARGET}/componentize-py"));
    let bin = venv.join("bin");
    if !bin.join("componentize-py").exists() {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success())
            && Command::new(bin.join("python"))
                .args(["-m", "pip", "install", "-q", COMPONENTIZE_PY])
                .status()
                .is_ok_and(|s| s.success());
        if !made {
            return Err(format!(
                "could not install {COMPONENTIZE_PY} with python3 -m venv and pip"
            ));
        }
    }
    Ok(bin)
}

fn spec(name: &str, bytes: Vec<u8>) -> Spec {
    Spec {
        name: name.into(),
        kind: Kind::PayloadTemplate,
        version: "0.1.0".into(),
        limits: None,
        source: Source::Upload,
        grant: None,
        bytes,
    }
}

async fn measure(
    plugins: &Arc<Plugins>,
    name: &str,
    bytes: Vec<u8>,
    template: &str,
    vars: &[Variable],
) {
    let size = bytes.len();
    let started = Instant::now();
    plugins.load(spec(name, bytes.clone())).await.unwrap();
    let cold = started.elapsed();
    let mut loads: Vec<Duration> = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        plugins.load(spec(name, bytes.clone())).await.unwrap();
        loads.push(started.elapsed());
    }
    let plugin = plugins.get(name).unwrap();
    let mut renders = Vec::with_capacity(2000);
    for _ in 0..2000 {
        let started = Instant::now();
        plugins
            .render_with(&plugin, TEAM, template, vars)
            .await
            .unwrap();
        renders.push(started.elapsed());
    }
    println!(
        "{name} ({:.1} MB): cold compile {:.0} ms, cached load {:.1} ms (median of 5)",
        size as f64 / 1e6,
        cold.as_secs_f64() * 1e3,
        median(&mut loads).as_secs_f64() * 1e3,
    );
    println!(
        "{name}: render {} B template p50 {:.1} µs through the real path (kept instance)",
        template.len(),
        median(&mut renders).as_secs_f64() * 1e6
    );
    println!("{name}: a fresh instance per call, by phase:");
    phases(plugins, &plugin, template, vars).await;
}

//! Builds the plugins workspace (`plugins/`) for wasm32-wasip2, so the host can
//! embed its built-in plugins and the tests can load the fixtures.
//!
//! The nested cargo gets its own target directory (two cargos sharing one
//! would wait on each other's lock) and none of the outer cargo's `CARGO_*`
//! or `RUSTFLAGS` variables, which describe the host build, not this one.

use std::path::{Path, PathBuf};
use std::process::Command;

const MEMBERS: &[&str] = &[
    "template-default",
    "filter-default",
    "model-openai",
    "fixtures/misbehave",
    "fixtures/sockets",
];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap();
    let plugins = root.join("plugins");
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("plugins");

    for path in ["Cargo.toml", "Cargo.lock", ".cargo/config.toml"] {
        rerun_if_changed(&plugins.join(path));
    }
    for member in MEMBERS {
        rerun_if_changed(&plugins.join(member));
    }
    rerun_if_changed(&root.join("wit"));

    // The embedded model has its own workspace (see its Cargo.toml).
    let model = plugins.join("model-smollm");
    for path in ["Cargo.toml", "Cargo.lock", "src", ".cargo/config.toml"] {
        rerun_if_changed(&model.join(path));
    }
    build(&plugins, &target_dir);
    build(&model, &target_dir);
    let out = target_dir.join("wasm32-wasip2").join("release");
    println!(
        "cargo:rustc-env=SWITCHYARD_PLUGIN_BUILD_DIR={}",
        out.display()
    );
}

/// `cargo build --release` of the workspace at `dir` for wasm32-wasip2.
fn build(dir: &Path, target_dir: &Path) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(dir)
        .args([
            "build",
            "--release",
            "--locked",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(target_dir);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_") && key != "CARGO_HOME"
            || key.contains("RUSTFLAGS")
            || key == "RUSTC_WORKSPACE_WRAPPER"
        {
            command.env_remove(key.as_ref());
        }
    }
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("running cargo to build {}: {e}", dir.display()));
    assert!(
        status.success(),
        "building {} for wasm32-wasip2 failed ({status}); is the target installed? \
         `rustup target add wasm32-wasip2`",
        dir.display()
    );
}

fn rerun_if_changed(path: &Path) {
    println!("cargo:rerun-if-changed={}", path.display());
}

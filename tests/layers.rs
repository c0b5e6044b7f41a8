//! The shim's layers hold: a top-level module uses only those below it
//! (ARCHITECTURE.md), and no crate's top-level modules use each other in a
//! circle. Read from the `crate::` paths of the sources.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The shim's top-level modules, from the C boundary inwards.
const SHIM_LAYERS: &[&str] = &[
    "exports",
    "lifecycle",
    "watcher",
    "policy",
    "state",
    "cuda",
    "log",
    "config",
];

/// Each top-level module of the crate at `src`, and the other top-level
/// modules its files name through `crate::` (comments left out).
fn edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    let mut folders = vec![src.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let top_of = |path: &Path| {
        let relative = path.strip_prefix(src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        first.to_string_lossy().trim_end_matches(".rs").to_string()
    };
    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in &files {
        let top = top_of(path);
        if top == "lib" || top == "main" {
            continue;
        }
        let text: String = std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|line| line.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        let mut named = BTreeSet::new();
        for part in text.split("crate::").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            named.insert(name);
        }
        for group in text.split("use crate::{").skip(1) {
            let inside = group.split('}').next().unwrap_or("");
            for item in inside.split(',') {
                named.insert(item.trim().split("::").next().unwrap_or("").to_string());
            }
        }
        named.remove(&top);
        modules.entry(top).or_default().extend(named);
    }
    let known: BTreeSet<String> = modules.keys().cloned().collect();
    for named in modules.values_mut() {
        named.retain(|m| known.contains(m));
    }
    modules
}

fn crate_src(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

#[test]
fn a_shim_module_uses_only_the_layers_below_it() {
    let modules = edges(&crate_src("shim"));
    let rank = |m: &str| SHIM_LAYERS.iter().position(|l| *l == m);
    for (module, named) in &modules {
        let Some(own) = rank(module) else {
            panic!("{module} is in no layer: add it to SHIM_LAYERS and ARCHITECTURE.md");
        };
        for other in named {
            assert!(
                rank(other).is_some_and(|r| r > own),
                "{module} uses {other}, which is not below it"
            );
        }
    }
}

#[test]
fn no_crate_has_a_circle_of_modules() {
    for name in ["shim", "cli", "common", "cudart-sys"] {
        let modules = edges(&crate_src(name));
        // Depth-first, looking for a module reached again on its own path.
        fn visit<'a>(
            at: &'a str,
            modules: &'a BTreeMap<String, BTreeSet<String>>,
            path: &mut Vec<&'a str>,
            done: &mut BTreeSet<&'a str>,
        ) -> Option<Vec<String>> {
            if let Some(start) = path.iter().position(|m| *m == at) {
                return Some(path[start..].iter().map(|m| m.to_string()).collect());
            }
            if !done.insert(at) {
                return None;
            }
            path.push(at);
            for next in &modules[at] {
                if let Some(circle) = visit(next, modules, path, done) {
                    return Some(circle);
                }
            }
            path.pop();
            None
        }
        let mut done = BTreeSet::new();
        for module in modules.keys() {
            let circle = visit(module, &modules, &mut Vec::new(), &mut done);
            assert_eq!(
                circle, None,
                "{name}: these modules use each other in a circle"
            );
        }
    }
}

//! Tidy checks over the source tree: every Rust file says what it owns in a `//!` doc,
//! and no stub macros or ignored tests slip in.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_source_file_has_a_module_doc_and_no_stubs() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    rust_files(&crates, &mut files);
    assert!(
        files.len() > 20,
        "found only {} files under {}",
        files.len(),
        crates.display()
    );
    let stub_markers = [
        concat!("todo", "!("),
        concat!("unimplemented", "!("),
        concat!("#[", "ignore", "]"),
    ];
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        assert!(
            first.starts_with("//!"),
            "{} does not start with a //! module doc",
            file.display()
        );
        for marker in stub_markers {
            assert!(
                !text.contains(marker),
                "{} contains {marker}",
                file.display()
            );
        }
    }
}

/// The modules of one crate's `src/` (a file is a module: `a/b.rs` and `a/b/mod.rs`
/// are `a::b`) and which others each names through `crate::` outside its tests.
fn module_imports(src: &Path) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let module_of = |file: &Path| {
        let rel = file.strip_prefix(src).unwrap().with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if matches!(
            parts.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            parts.pop();
        }
        parts.join("::")
    };
    let modules: std::collections::BTreeSet<String> = files.iter().map(|f| module_of(f)).collect();
    let mut graph = std::collections::BTreeMap::new();
    for file in &files {
        let me = module_of(file);
        let text = std::fs::read_to_string(file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let mut named = Vec::new();
        let mut paths: Vec<String> = Vec::new();
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let inside = group.split('}').next().unwrap_or("");
                paths.extend(inside.split(',').map(|p| p.trim().to_owned()));
            } else {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(rest.len());
                paths.push(rest[..end].to_owned());
            }
        }
        for path in paths {
            let parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
            // The longest prefix that is a module of this crate.
            let target = (1..=parts.len())
                .rev()
                .map(|n| parts[..n].join("::"))
                .find(|m| modules.contains(m));
            if let Some(target) = target.filter(|t| *t != me) {
                named.push(target);
            }
        }
        named.sort();
        named.dedup();
        graph.insert(me, named);
    }
    graph
}

/// A circle of modules each naming the next, if the graph has one.
fn a_circle(graph: &std::collections::BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &std::collections::BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_owned());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    graph
        .keys()
        .find_map(|start| visit(start, graph, &mut Vec::new(), &mut done))
}

/// Modules form a tree of dependencies inside each crate, as crates do across the
/// workspace: no module reaches itself through others (`a -> b -> a`).
#[test]
fn no_crate_has_an_import_circle() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut checked = 0;
    for entry in std::fs::read_dir(&crates).unwrap() {
        let src = entry.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        let graph = module_imports(&src);
        checked += graph.len();
        if let Some(circle) = a_circle(&graph) {
            panic!(
                "import circle in {}: {}",
                src.display(),
                circle.join(" -> ")
            );
        }
    }
    assert!(checked > 100, "only {checked} modules found");
}

#[test]
fn the_circle_check_finds_a_circle() {
    let graph = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_owned(), to.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(
        a_circle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

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

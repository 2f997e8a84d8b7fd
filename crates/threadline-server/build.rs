//! Embeds the web UI (`ui/`) into the binary: memory-serve reads the files at build
//! time (compressed with brotli and gzip in release builds), so the binary serves them
//! with no files beside it and no Node toolchain anywhere.
fn main() {
    println!("cargo:rerun-if-changed=ui");
    memory_serve::load_directory_with_embed("ui", true);
}

//! Embeds the web UI (`ui/`) into release binaries: memory-serve reads the files at
//! build time and compresses them with brotli and gzip, so the binary serves them with
//! no files beside it and no Node toolchain anywhere. Debug builds read the same files
//! from this source tree when asked (edit, reload; no rebuild).
fn main() {
    println!("cargo:rerun-if-changed=ui");
    memory_serve::load_directory("ui");
}

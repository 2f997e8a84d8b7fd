//! Reading a store's files for a string, as an erasure test must: raw, inside zstd
//! frames, and inside ClickHouse's compressed column blocks.

use std::path::{Path, PathBuf};

/// Every file below `dir`, recursively.
pub(crate) fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Where `needle` is in `bytes`: as is, or inside one of its zstd frames.
pub(crate) fn holds_raw_or_in_zstd(bytes: &[u8], needle: &[u8]) -> Option<String> {
    const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
    if contains(bytes, needle) {
        return Some("raw".to_owned());
    }
    let mut at = 0;
    while let Some(found) = bytes[at..].windows(4).position(|w| w == ZSTD_MAGIC) {
        let start = at + found;
        let mut decoded = Vec::new();
        if let Ok(mut decoder) = zstd::stream::read::Decoder::new(&bytes[start..]) {
            let mut chunk = [0u8; 64 * 1024];
            while let Ok(n) = std::io::Read::read(&mut decoder, &mut chunk) {
                if n == 0 || decoded.len() > 64 << 20 {
                    break;
                }
                decoded.extend_from_slice(&chunk[..n]);
            }
        }
        if contains(&decoded, needle) {
            return Some(format!("zstd frame at {start}"));
        }
        at = start + 1;
    }
    None
}

/// Where `needle` is in a ClickHouse file: as is, or inside one of its compressed
/// blocks (16-byte checksum, method byte, compressed and uncompressed sizes, data:
/// 0x02 none, 0x82 LZ4, 0x90 ZSTD).
pub(crate) fn holds_in_clickhouse_blocks(bytes: &[u8], needle: &[u8]) -> Option<String> {
    if contains(bytes, needle) {
        return Some("raw".to_owned());
    }
    let mut at = 0usize;
    while at + 25 <= bytes.len() {
        let method = bytes[at + 16];
        let size = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap()) as usize;
        let (compressed, plain) = (size(at + 17), size(at + 21));
        if compressed < 9 || at + 16 + compressed > bytes.len() {
            break;
        }
        let data = &bytes[at + 25..at + 16 + compressed];
        let decoded = match method {
            0x02 => Some(data.to_vec()),
            0x82 => lz4_flex::block::decompress(data, plain).ok(),
            0x90 => zstd::bulk::decompress(data, plain.max(1)).ok(),
            _ => None,
        };
        match decoded {
            Some(d) if contains(&d, needle) => return Some(format!("block at {at}")),
            Some(_) => {}
            None => break,
        }
        at += 16 + compressed;
    }
    None
}

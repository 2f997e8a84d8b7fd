//! One process per data directory: `open` takes an exclusive lock on
//! `threadline.lock` (released by the OS when the process ends, however it ends) and
//! writes its process id there, so a second `serve` on the same directory refuses to
//! start and names the process that holds it, instead of writing into the same
//! database (or spool) beside it. Both backends take it.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::StoreError;

/// The lock file's name in the data directory.
pub(crate) const LOCK_FILE_NAME: &str = "threadline.lock";

/// How long `open` waits for a lock held by a store of this process that is still
/// closing (its background threads finishing) before it calls the directory taken.
const WAIT: Duration = Duration::from_secs(2);

/// The held lock; released when dropped.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
}

impl DirLock {
    pub(crate) fn acquire(data_dir: &Path) -> Result<Self, StoreError> {
        let path = data_dir.join(LOCK_FILE_NAME);
        let open_error = |source: std::io::Error| {
            StoreError::unavailable(format!("cannot open {}", path.display())).with_source(source)
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(open_error)?;
        let deadline = Instant::now() + WAIT;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(StoreError::unavailable(format!(
                        "data directory {} is in use by {}: stop it, or give this one another data directory",
                        data_dir.display(),
                        holder(&mut file)
                    )))
                }
                Err(TryLockError::Error(e)) => return Err(open_error(e)),
            }
        }
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .and_then(|()| file.sync_data())
            .map_err(open_error)?;
        Ok(Self { _file: file })
    }
}

/// Who holds the lock: the process id its holder wrote, with its command line where
/// the system tells it.
fn holder(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    let Ok(pid) = text.trim().parse::<u32>() else {
        return "another process".to_owned();
    };
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(raw) if !raw.is_empty() => {
            let command: String = String::from_utf8_lossy(&raw)
                .split('\0')
                .filter(|a| !a.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
                .chars()
                .take(200)
                .collect();
            format!("process {pid} ({command})")
        }
        _ => format!("process {pid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_a_directory_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let held = DirLock::acquire(dir.path()).unwrap();
        let refused = DirLock::acquire(dir.path()).unwrap_err().to_string();
        assert!(
            refused.contains(&format!("process {}", std::process::id())),
            "{refused}"
        );
        drop(held);
        DirLock::acquire(dir.path()).unwrap();
    }
}

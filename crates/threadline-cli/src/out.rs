//! Standard output that a closed pipe does not crash: `threadline search | head -1`
//! must end quietly, as Unix tools do. Rust ignores SIGPIPE, so a write to a closed
//! pipe fails with `BrokenPipe`, on which `println!` panics; these macros instead stop
//! writing and let the command finish (so it still cleans up, e.g. the demo's
//! temporary store).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `args` (and a newline when `line`) to stdout, unless the reader has gone.
pub(crate) fn write(args: std::fmt::Arguments<'_>, line: bool) {
    write_with(|out| {
        out.write_fmt(args)?;
        if line {
            out.write_all(b"\n")?;
        }
        Ok(())
    });
}

/// Writes raw bytes to stdout, unless the reader has gone.
pub(crate) fn write_bytes(bytes: &[u8]) {
    write_with(|out| out.write_all(bytes));
}

fn write_with(f: impl FnOnce(&mut std::io::StdoutLock<'static>) -> std::io::Result<()>) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    let result = f(&mut out).and_then(|()| out.flush());
    match result {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            CLOSED.store(true, Ordering::Relaxed);
        }
        Err(e) => {
            CLOSED.store(true, Ordering::Relaxed);
            eprintln!("error: cannot write to standard output: {e}");
        }
    }
}

/// `println!` to stdout that stops quietly once the reader has closed the pipe.
macro_rules! outln {
    () => { $crate::out::write(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::out::write(format_args!($($arg)*), true) };
}

/// `print!` to stdout that stops quietly once the reader has closed the pipe.
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::write(format_args!($($arg)*), false) };
}

pub(crate) use {out, outln};

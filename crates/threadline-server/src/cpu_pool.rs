//! The ingest CPU pool: a few dedicated threads (cores + 1) that decode, convert and
//! encode exports. They run at a lower scheduling priority than everything else in
//! the process, so the store's single writer thread — the serial stage every ack
//! waits on — gets a core as soon as it is runnable instead of queueing behind a
//! decode. (Measured: the writer spent ~35% of its wall time waiting for a CPU.)
//! Dedicated threads rather than tokio's blocking pool, because a thread's priority
//! can only be lowered, never raised back, and query reads use the blocking pool.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

type Job = Box<dyn FnOnce() + Send>;

/// Niceness of the pool's threads (0 is normal; 19 the lowest). At 10 a thread gets
/// about a tenth of the CPU share of a normal-priority thread when both want it.
const POOL_NICENESS: i32 = 10;

pub(crate) struct CpuPool {
    sender: Sender<Job>,
}

/// Why work sent to the pool produced no result.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CpuPoolError {
    #[error("the ingest worker panicked")]
    Panicked,
    #[error("the ingest workers have stopped")]
    Stopped,
}

impl CpuPool {
    /// Starts `threads` workers; they stop when the pool is dropped.
    pub(crate) fn start(threads: usize) -> std::io::Result<Self> {
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        for i in 0..threads.max(1) {
            let receiver = Arc::clone(&receiver);
            std::thread::Builder::new()
                .name(format!("threadline-ingest-{i}"))
                .spawn(move || worker(&receiver))?;
        }
        Ok(Self { sender })
    }

    /// Runs `work` on a pool thread and waits (asynchronously) for its result.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, CpuPoolError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            // A panic drops `tx`: the caller sees `Panicked`, the thread lives on.
            if let Ok(value) = std::panic::catch_unwind(AssertUnwindSafe(work)) {
                let _ = tx.send(value);
            }
        });
        self.sender.send(job).map_err(|_| CpuPoolError::Stopped)?;
        rx.await.map_err(|_| CpuPoolError::Panicked)
    }
}

fn worker(receiver: &Mutex<Receiver<Job>>) {
    lower_priority();
    loop {
        // The lock is held only while taking a job, never while running it.
        let job = match receiver.lock() {
            Ok(guard) => guard.recv(),
            Err(_) => return,
        };
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

/// Lowers the calling thread's priority; on Linux niceness is per thread.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    if let Err(e) =
        rustix::process::setpriority_process(Some(rustix::thread::gettid()), POOL_NICENESS)
    {
        tracing::debug!(error = %e, "could not lower the ingest threads' priority");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_work_and_survives_a_panic() {
        let pool = CpuPool::start(1).unwrap();
        assert_eq!(pool.run(|| 6 * 7).await.unwrap(), 42);
        let panicked = pool.run(|| -> u32 { panic!("bad input") }).await;
        assert!(matches!(panicked, Err(CpuPoolError::Panicked)));
        // The single worker thread is still there.
        assert_eq!(pool.run(|| "still up").await.unwrap(), "still up");
    }
}

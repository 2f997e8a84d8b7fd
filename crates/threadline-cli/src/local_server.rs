//! The server in this process, for commands that bring their own (`demo`, `bench ui`):
//! started, told where it listens, and stopped.

use anyhow::{bail, Context};
use threadline_server::{BoundAddrs, ServeError, ServerConfig};

pub(crate) struct LocalServer {
    pub(crate) addrs: BoundAddrs,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl LocalServer {
    /// Settings for a server of a command's own: every listener on a free loopback
    /// port, its store in `data_dir`.
    pub(crate) fn loopback(data_dir: std::path::PathBuf) -> threadline_server::ConfigOverrides {
        let any_port = Some("127.0.0.1:0".to_owned());
        threadline_server::ConfigOverrides {
            otlp_http: any_port.clone(),
            otlp_grpc: any_port.clone(),
            http: any_port,
            data_dir: Some(data_dir),
            store: None,
            allow_unauthenticated: false,
        }
    }

    /// Starts serving `config`; returns once every listener is bound.
    pub(crate) async fn start(config: ServerConfig) -> anyhow::Result<Self> {
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(threadline_server::serve_reporting(
            config,
            async {
                let _ = stop_rx.await;
            },
            Some(ready_tx),
        ));
        match ready_rx.await {
            Ok(addrs) => Ok(Self { addrs, stop, task }),
            Err(_) => {
                task.await.context("server task failed")??;
                bail!("the server stopped before it listened");
            }
        }
    }

    /// Stops it and waits until it has.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.task.await.context("server task failed")??;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server's own threads (store, ingest workers) still running in this process:
    /// those named `threadline-…` but its main thread (Linux: /proc).
    fn server_threads() -> Vec<String> {
        let main = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
        std::fs::read_dir("/proc/self/task")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
            .filter(|name| *name != main && name.starts_with("threadline-"))
            .map(|name| name.trim_end().to_owned())
            .collect()
    }

    /// A stopped server closes its store: no writer, indexer, compactor or ingest
    /// thread outlives it (they once piled up, five per server, in `bench diagnosis`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stopped_server_leaves_no_thread_behind() {
        let temp = tempfile::tempdir().unwrap();
        for round in 0..3 {
            let overrides = threadline_server::ConfigOverrides {
                otlp_http: Some("127.0.0.1:0".to_owned()),
                otlp_grpc: Some("127.0.0.1:0".to_owned()),
                http: Some("127.0.0.1:0".to_owned()),
                data_dir: Some(temp.path().join(format!("data-{round}"))),
                store: None,
                allow_unauthenticated: false,
            };
            let config = ServerConfig::load(None, &overrides).unwrap();
            let server = LocalServer::start(config).await.unwrap();
            assert!(!server_threads().is_empty());
            server.stop().await.unwrap();
        }
        let mut left = server_threads();
        for _ in 0..100 {
            if left.is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            left = server_threads();
        }
        assert!(
            left.is_empty(),
            "threads still running after stop: {left:?}"
        );
    }
}

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

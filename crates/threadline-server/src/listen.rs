//! The listeners' connection handling: every accepted connection is closed once
//! nothing has moved on it either way for the idle timeout (a half-sent request, a
//! keep-alive connection between requests, a silent gRPC connection), and HTTP/1
//! headers must arrive within the header-read timeout (a slow-loris dripping bytes).
//! The HTTP listeners are served here with hyper directly, since `axum::serve` sets
//! no timer; the gRPC listener goes through tonic with the same idle-closing streams.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

/// How long a client may take, per connection.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectionTimeouts {
    pub(crate) header_read: Duration,
    pub(crate) idle: Duration,
}

/// A TCP stream that fails its reads and writes once nothing has been read or written
/// for `idle`, so the connection's task ends and the socket closes.
pub(crate) struct IdleClosing {
    stream: TcpStream,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl IdleClosing {
    pub(crate) fn new(stream: TcpStream, idle: Duration) -> Self {
        Self {
            stream,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
        }
    }

    fn moved(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.idle);
    }

    /// A write's outcome: bytes written are progress; Pending waits for the stream or
    /// the idle deadline.
    fn after_write(
        &mut self,
        cx: &mut Context<'_>,
        written: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match written {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.moved();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.idle_or_pending(cx),
        }
    }

    /// After the inner stream said Pending: an error once the idle time is over
    /// (the deadline's waker is registered either way).
    fn idle_or_pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "connection idle for longer than the idle timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for IdleClosing {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.moved();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.idle_or_pending(cx),
        }
    }
}

impl AsyncWrite for IdleClosing {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.after_write(cx, written)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.after_write(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for IdleClosing {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

/// Accepts connections until `accept` fails for good, sleeping briefly through
/// transient failures (out of file descriptors, a connection reset before accept).
pub(crate) async fn accept(listener: &TcpListener) -> io::Result<TcpStream> {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => return Ok(stream),
            Err(e) if transient(&e) => {
                tracing::warn!(error = %e, "accept failed; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The connections `listener` accepts, each closing after `idle`, for tonic (which
/// goes on past a failed accept: the brief sleep keeps a persistent failure, out of
/// file descriptors, from spinning).
pub(crate) fn idle_closing(
    listener: TcpListener,
    idle: Duration,
) -> impl tokio_stream::Stream<Item = io::Result<IdleClosing>> {
    tokio_stream::StreamExt::then(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        move |accepted| async move {
            if let Err(e) = &accepted {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            accepted.map(|stream| IdleClosing::new(stream, idle))
        },
    )
}

fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    ) || e
        .raw_os_error()
        .is_some_and(|code| code == 23 || code == 24) // ENFILE, EMFILE
}

/// Serves `app` on `listener` (HTTP/1 and HTTP/2) until `stopped` resolves, then lets
/// requests under way finish (for at most `drain`).
pub(crate) async fn serve_http(
    listener: TcpListener,
    app: Router,
    timeouts: ConnectionTimeouts,
    nodelay: bool,
    stopped: impl Future<Output = ()>,
) -> io::Result<()> {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut stopped = std::pin::pin!(stopped);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(timeouts.header_read);
    builder.http2().timer(TokioTimer::new());
    loop {
        let stream = tokio::select! {
            () = &mut stopped => break,
            stream = accept(&listener) => stream?,
        };
        if nodelay {
            // No Nagle delay: a streamed answer's small last chunk would otherwise
            // wait for the client's delayed ACK (40 ms).
            let _ = stream.set_nodelay(true);
        }
        let io = TokioIo::new(IdleClosing::new(stream, timeouts.idle));
        let app = app.clone();
        let service =
            hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                app.clone().oneshot(request.map(axum::body::Body::new))
            });
        let connection = graceful.watch(
            builder
                .serve_connection_with_upgrades(io, service)
                .into_owned(),
        );
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still under way after {DRAIN:?}: stopping anyway");
    }
    Ok(())
}

/// How long a stopping server waits for requests under way.
const DRAIN: Duration = Duration::from_secs(30);

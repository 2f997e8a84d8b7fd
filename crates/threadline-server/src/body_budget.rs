//! Request bodies read under one byte budget shared by every client and listener
//! (`[limits] max_inflight_body_bytes`), the per-body limit (`[server]
//! max_body_bytes`) and the body-read timeout. A body announced larger than the limit
//! is refused before it is read; a body the budget cannot hold gets 429 with
//! Retry-After. A refused body is drained (up to a bound) before the answer, so a
//! client that writes its whole body before it reads — Python's `urllib`, curl without
//! `Expect` — receives the answer instead of a broken pipe.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bodies larger than this are never drained: the connection is closed instead.
const MAX_DRAIN_BYTES: u64 = 256 * 1024 * 1024;
/// How long a refused body is drained at most.
const MAX_DRAIN_TIME: Duration = Duration::from_secs(10);

/// The shared budget and the per-body rules.
#[derive(Clone)]
pub(crate) struct BodyBudget {
    bytes: Arc<Semaphore>,
    total: usize,
    max_body_bytes: usize,
    read_timeout: Duration,
}

/// Why a body was not taken.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyRefusal {
    #[error("request body exceeds the limit of {limit} bytes (max_body_bytes)")]
    TooLarge { limit: usize },
    #[error("the server holds {total} bytes of request bodies at most and is full; retry later")]
    OverBudget { total: usize },
    #[error("request body not received within {0:?}")]
    Timeout(Duration),
    #[error("request body could not be read: {0}")]
    Broken(String),
}

impl BodyRefusal {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            BodyRefusal::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyRefusal::OverBudget { .. } => StatusCode::TOO_MANY_REQUESTS,
            BodyRefusal::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            BodyRefusal::Broken(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// Bytes of the budget held by one request; released when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<Semaphore>,
    held: Option<OwnedSemaphorePermit>,
}

impl Reservation {
    /// Holds `bytes` more, if the budget has them.
    pub(crate) fn grow(&mut self, bytes: usize) -> bool {
        if bytes == 0 {
            return true;
        }
        let Ok(n) = u32::try_from(bytes) else {
            return false;
        };
        match Arc::clone(&self.budget).try_acquire_many_owned(n) {
            Ok(permit) => {
                match &mut self.held {
                    Some(held) => held.merge(permit),
                    None => self.held = Some(permit),
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Bytes held.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.as_ref().map_or(0, |p| p.num_permits())
    }
}

impl threadline_ingest::InflateBudget for Reservation {
    fn grant(&mut self, bytes: usize) -> bool {
        self.grow(bytes)
    }
}

impl BodyBudget {
    pub(crate) fn new(total: usize, max_body_bytes: usize, read_timeout: Duration) -> Self {
        Self {
            bytes: Arc::new(Semaphore::new(total.min(Semaphore::MAX_PERMITS))),
            total,
            max_body_bytes,
            read_timeout,
        }
    }

    /// The per-body limit, for decoding what was read.
    pub(crate) fn limits(&self) -> threadline_ingest::BodyLimits {
        threadline_ingest::BodyLimits {
            max_body_bytes: self.max_body_bytes,
        }
    }

    /// An empty reservation, to grow.
    pub(crate) fn reserve(&self) -> Reservation {
        Reservation {
            budget: Arc::clone(&self.bytes),
            held: None,
        }
    }

    /// Reads a whole body within the limit, the budget and the timeout. The returned
    /// reservation holds the body's bytes until dropped.
    pub(crate) async fn read(
        &self,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<(Bytes, Reservation), BodyRefusal> {
        let announced = content_length(headers);
        let mut reservation = self.reserve();
        if let Some(len) = announced {
            if len > self.max_body_bytes as u64 {
                drain(body, len).await;
                return Err(BodyRefusal::TooLarge {
                    limit: self.max_body_bytes,
                });
            }
            if !reservation.grow(len as usize) {
                drain(body, len).await;
                return Err(BodyRefusal::OverBudget { total: self.total });
            }
        }
        let limit = self.max_body_bytes;
        let total = self.total;
        let read = async {
            let mut body = body;
            let mut out = BytesMut::with_capacity(announced.unwrap_or(0) as usize);
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| BodyRefusal::Broken(e.to_string()))?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if out.len() + data.len() > limit {
                    drain(body, announced.unwrap_or(MAX_DRAIN_BYTES)).await;
                    return Err(BodyRefusal::TooLarge { limit });
                }
                // A body without a length (chunked) is reserved as it comes; one with
                // a length was reserved whole (a client sending more than it announced
                // is cut off by hyper).
                if announced.is_none() && !reservation.grow(data.len()) {
                    drain(body, MAX_DRAIN_BYTES).await;
                    return Err(BodyRefusal::OverBudget { total });
                }
                out.extend_from_slice(&data);
            }
            Ok(out.freeze())
        };
        match tokio::time::timeout(self.read_timeout, read).await {
            Ok(Ok(bytes)) => Ok((bytes, reservation)),
            Ok(Err(refusal)) => Err(refusal),
            Err(_) => Err(BodyRefusal::Timeout(self.read_timeout)),
        }
    }
}

/// Reads and drops what is left of a refused body, up to `announced` bytes (and
/// `MAX_DRAIN_BYTES`, `MAX_DRAIN_TIME`), so its answer reaches the client.
pub(crate) async fn drain(mut body: Body, announced: u64) {
    if announced > MAX_DRAIN_BYTES {
        return;
    }
    let _ = tokio::time::timeout(MAX_DRAIN_TIME, async {
        let mut seen = 0u64;
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(data) = frame.data_ref() {
                seen += data.len() as u64;
                if seen > MAX_DRAIN_BYTES {
                    break;
                }
            }
        }
    })
    .await;
}

/// The HTTP status of a body that could not be inflated or decoded.
pub(crate) fn decode_status(e: &threadline_ingest::DecodeError) -> StatusCode {
    use threadline_ingest::DecodeError;
    match e {
        DecodeError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        DecodeError::OverBudget => StatusCode::TOO_MANY_REQUESTS,
        DecodeError::UnsupportedMediaType(_) | DecodeError::UnsupportedEncoding(_) => {
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        }
        DecodeError::Malformed(_) => StatusCode::BAD_REQUEST,
    }
}

/// The length a request announces (0 when it announces none): how much a refusal
/// drains.
pub(crate) fn announced(headers: &HeaderMap) -> u64 {
    content_length(headers).unwrap_or(0)
}

/// The `Content-Length` header, when there is a valid one.
fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(len: Option<usize>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(len) = len {
            h.insert(header::CONTENT_LENGTH, len.into());
        }
        h
    }

    #[tokio::test]
    async fn bodies_share_the_budget_and_give_it_back_when_dropped() {
        let budget = BodyBudget::new(1000, 800, Duration::from_secs(5));
        let (bytes, held) = budget
            .read(&headers(Some(600)), Body::from(vec![1u8; 600]))
            .await
            .unwrap();
        assert_eq!(bytes.len(), 600);
        assert_eq!(held.held(), 600);
        let refused = budget
            .read(&headers(Some(500)), Body::from(vec![1u8; 500]))
            .await
            .unwrap_err();
        assert!(
            matches!(refused, BodyRefusal::OverBudget { total: 1000 }),
            "{refused}"
        );
        // Chunked (no length): reserved as it comes.
        let refused = budget
            .read(&headers(None), Body::from(vec![1u8; 500]))
            .await
            .unwrap_err();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        drop(held);
        let (_, held) = budget
            .read(&headers(None), Body::from(vec![1u8; 500]))
            .await
            .unwrap();
        assert_eq!(held.held(), 500);
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_announced_or_not() {
        let budget = BodyBudget::new(10_000, 800, Duration::from_secs(5));
        for len in [Some(900), None] {
            let refused = budget
                .read(&headers(len), Body::from(vec![1u8; 900]))
                .await
                .unwrap_err();
            assert!(
                matches!(refused, BodyRefusal::TooLarge { limit: 800 }),
                "{refused}"
            );
        }
        assert_eq!(budget.bytes.available_permits(), 10_000);
    }

    #[tokio::test]
    async fn a_body_that_does_not_come_times_out() {
        let budget = BodyBudget::new(10_000, 800, Duration::from_millis(100));
        let (_tx, body) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        let stream = tokio_stream::wrappers::ReceiverStream::new(body);
        let refused = budget
            .read(&headers(Some(10)), Body::from_stream(stream))
            .await
            .unwrap_err();
        assert_eq!(refused.status(), StatusCode::REQUEST_TIMEOUT);
    }
}

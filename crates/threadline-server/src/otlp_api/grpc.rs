//! OTLP/gRPC receiver: `opentelemetry.proto.collector.trace.v1.TraceService/Export` and
//! `opentelemetry.proto.collector.logs.v1.LogsService/Export`, one service per signal
//! (`OtlpGrpcService<S: Signal>`).
//!
//! Served by hand instead of through the generated `TraceServiceServer` for two
//! reasons: the generated codec decodes the request on the async runtime and answers a
//! malformed message with INTERNAL, where OTLP asks for INVALID_ARGUMENT. Here the
//! codec hands over the raw message and the decode runs with the rest of the CPU-bound
//! ingest work on the blocking pool, failing with INVALID_ARGUMENT.
//!
//! A message's bytes are taken from the server's in-flight byte budget as they arrive
//! (`BudgetedBody`): beyond it the export gets RESOURCE_EXHAUSTED with RetryInfo. A
//! message over `max_body_bytes`, compressed or inflated, gets INVALID_ARGUMENT — tonic
//! says OUT_OF_RANGE or RESOURCE_EXHAUSTED, which OTLP exporters retry, forever, for a
//! message that will never fit.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use prost::Message;
use std::marker::PhantomData;

use tonic::codec::{
    Codec, CompressionEncoding, DecodeBuf, Decoder, EnabledCompressionEncodings, EncodeBuf, Encoder,
};
use tonic::codegen::{http, BoxFuture, Service, StdError};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::body_budget::{BodyBudget, Reservation};
use crate::otlp_api::ingest::{IngestContext, IngestFailure, Logs, Signal, Traces};

/// One signal's export service, mounted on the gRPC listener.
pub(crate) struct OtlpGrpcService<S> {
    ctx: IngestContext,
    max_message_bytes: usize,
    budget: BodyBudget,
    signal: PhantomData<fn() -> S>,
}

impl<S> Clone for OtlpGrpcService<S> {
    fn clone(&self) -> Self {
        Self {
            ctx: self.ctx.clone(),
            max_message_bytes: self.max_message_bytes,
            budget: self.budget.clone(),
            signal: PhantomData,
        }
    }
}

pub(crate) fn service<S: Signal>(
    ctx: IngestContext,
    max_message_bytes: usize,
    budget: BodyBudget,
) -> OtlpGrpcService<S> {
    OtlpGrpcService {
        ctx,
        max_message_bytes,
        budget,
        signal: PhantomData,
    }
}

/// What one call's body took from the budget, and whether the budget refused it.
struct CallBudget {
    reservation: Mutex<Reservation>,
    refused: AtomicBool,
}

/// A request body whose data frames are taken from the in-flight budget as they
/// arrive; the first frame the budget cannot hold ends the body with an error.
struct BudgetedBody<B> {
    inner: Pin<Box<B>>,
    budget: Arc<CallBudget>,
}

impl<B> tonic::codegen::Body for BudgetedBody<B>
where
    B: tonic::codegen::Body,
    B::Error: Into<StdError>,
{
    type Data = B::Data;
    type Error = StdError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        match self.inner.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let granted = self
                        .budget
                        .reservation
                        .lock()
                        .map(|mut r| r.grow(data.remaining()))
                        .unwrap_or(false);
                    if !granted {
                        self.budget.refused.store(true, Ordering::Relaxed);
                        return Poll::Ready(Some(Err("the in-flight byte budget is full".into())));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// OTLP metrics, refused with a reason (UNIMPLEMENTED, not retried by SDKs) rather
/// than the bare "unknown service" an unmounted service gets.
#[derive(Clone)]
pub(crate) struct MetricsRefusal;

impl NamedService for MetricsRefusal {
    const NAME: &'static str = "opentelemetry.proto.collector.metrics.v1.MetricsService";
}

impl<B: Send + 'static> Service<http::Request<B>> for MetricsRefusal {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: http::Request<B>) -> Self::Future {
        Box::pin(async {
            Ok(Status::unimplemented(crate::otlp_api::http::METRICS_NOT_SUPPORTED).into_http())
        })
    }
}

impl NamedService for OtlpGrpcService<Traces> {
    const NAME: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
}

impl NamedService for OtlpGrpcService<Logs> {
    const NAME: &'static str = "opentelemetry.proto.collector.logs.v1.LogsService";
}

impl<S: Signal, B> Service<http::Request<B>> for OtlpGrpcService<S>
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != S::GRPC_PATH {
            return Box::pin(async move {
                Ok(
                    Status::unimplemented(format!("no gRPC method {}", req.uri().path()))
                        .into_http(),
                )
            });
        }
        if let Err(refusal) = crate::guard::single_authorization(req.headers()) {
            return Box::pin(
                async move { Ok(Status::invalid_argument(refusal.message).into_http()) },
            );
        }
        let mut gzip = EnabledCompressionEncodings::default();
        gzip.enable(CompressionEncoding::Gzip);
        let max = self.max_message_bytes;
        let mut grpc = Grpc::new(RawRequestCodec::<S::Response>(PhantomData))
            .apply_compression_config(gzip, gzip)
            .apply_max_message_size_config(Some(max), None);
        let ran = Arc::new(AtomicBool::new(false));
        let method = ExportMethod::<S>(self.ctx.clone(), Arc::clone(&ran), PhantomData);
        let budget = Arc::new(CallBudget {
            reservation: Mutex::new(self.budget.reserve()),
            refused: AtomicBool::new(false),
        });
        let req = req.map(|body| BudgetedBody {
            inner: Box::pin(body),
            budget: Arc::clone(&budget),
        });
        let ctx = self.ctx.clone();
        Box::pin(async move {
            let response = grpc.unary(method, req).await;
            // `budget` (and so the message's reservation) lives until here: the bytes
            // count until the export is answered.
            if budget.refused.load(Ordering::Relaxed) {
                ctx.stats.requests_throttled.fetch_add(1, Ordering::Relaxed);
                return Ok(to_status(IngestFailure::Busy(
                    "the server holds too many request bytes at once".to_owned(),
                ))
                .into_http());
            }
            let code = response
                .headers()
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<i32>().ok());
            let too_large = [
                tonic::Code::OutOfRange as i32,
                tonic::Code::ResourceExhausted as i32,
            ];
            if !ran.load(Ordering::Relaxed) && code.is_some_and(|c| too_large.contains(&c)) {
                return Ok(Status::invalid_argument(format!(
                    "message exceeds the limit of {max} bytes (max_body_bytes), as sent or once decompressed"
                ))
                .into_http());
            }
            Ok(response)
        })
    }
}

/// `Export`: the request arrives as raw protobuf bytes. Sets its flag once called (the
/// message was read whole).
struct ExportMethod<S>(IngestContext, Arc<AtomicBool>, PhantomData<fn() -> S>);

impl<S: Signal> UnaryService<Bytes> for ExportMethod<S> {
    type Response = S::Response;
    type Future = BoxFuture<Response<Self::Response>, Status>;

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let ctx = self.0.clone();
        self.1.store(true, Ordering::Relaxed);
        Box::pin(async move {
            let authorization = request
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let tenant = ctx
                .auth
                .authenticate(authorization.as_deref())
                .map_err(|e| Status::unauthenticated(e.to_string()))?;
            let body = request.into_inner();
            let store = ctx.store.clone();
            let bounds = ctx.time_bounds();
            let ready = ctx
                .run_cpu(move || {
                    let coming = store.write_coming();
                    let decoded =
                        S::decode(threadline_ingest::ContentKind::Protobuf, &body, &bounds)
                            .map_err(|e| Status::invalid_argument(e.to_string()))?;
                    drop(body);
                    S::prepare(&store, &tenant, decoded, coming).map_err(to_status)
                })
                .await
                .map_err(to_status)??;
            let response = S::commit(&ctx, ready).await.map_err(to_status)?;
            Ok(Response::new(response))
        })
    }
}

/// Decodes nothing (the bytes go to the blocking pool), encodes responses (`R`) with
/// prost.
struct RawRequestCodec<R>(PhantomData<fn() -> R>);

impl<R> Default for RawRequestCodec<R> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<R: Message + Send + 'static> Codec for RawRequestCodec<R> {
    type Encode = R;
    type Decode = Bytes;
    type Encoder = RawRequestCodec<R>;
    type Decoder = RawRequestCodec<R>;

    fn encoder(&mut self) -> Self::Encoder {
        RawRequestCodec::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawRequestCodec::default()
    }
}

impl<R: Message> Encoder for RawRequestCodec<R> {
    type Item = R;
    type Error = Status;

    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("cannot encode the response: {e}")))
    }
}

impl<R> Decoder for RawRequestCodec<R> {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        let len = src.remaining();
        Ok(Some(src.copy_to_bytes(len)))
    }
}

fn to_status(e: IngestFailure) -> Status {
    match e.statuses().1 {
        // RetryInfo makes RESOURCE_EXHAUSTED retryable for OTLP clients.
        tonic::Code::ResourceExhausted => {
            let mut status = Status::with_error_details(
                tonic::Code::ResourceExhausted,
                e.to_string(),
                ErrorDetails::with_retry_info(Some(Duration::from_secs(
                    crate::error::RETRY_AFTER_SECONDS,
                ))),
            );
            status.metadata_mut().insert(
                "retry-after",
                tonic::metadata::MetadataValue::from(crate::error::RETRY_AFTER_SECONDS),
            );
            status
        }
        code => Status::new(code, e.to_string()),
    }
}

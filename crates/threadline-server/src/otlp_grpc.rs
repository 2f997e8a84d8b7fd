//! OTLP/gRPC receiver: `opentelemetry.proto.collector.trace.v1.TraceService/Export`.

use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use threadline_ingest::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::ingest::{self, IngestContext, IngestFailure};

pub(crate) struct GrpcTraceService {
    ctx: IngestContext,
}

pub(crate) fn service(
    ctx: IngestContext,
    max_message_bytes: usize,
) -> TraceServiceServer<GrpcTraceService> {
    TraceServiceServer::new(GrpcTraceService { ctx })
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(max_message_bytes)
}

#[tonic::async_trait]
impl TraceService for GrpcTraceService {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let authorization = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let tenant = self
            .ctx
            .auth
            .authenticate(authorization.as_deref())
            .map_err(|e| Status::unauthenticated(e.to_string()))?;
        let store = self.ctx.store.clone();
        let body = request.into_inner();
        let ready = self
            .ctx
            .run_cpu(move || ingest::prepare(&store, &tenant, body))
            .await
            .and_then(|prepared| prepared)
            .map_err(to_status)?;
        let response = ingest::commit(&self.ctx.store, &self.ctx.stats, ready)
            .await
            .map_err(to_status)?;
        Ok(Response::new(response))
    }
}

fn to_status(e: IngestFailure) -> Status {
    match e {
        // RetryInfo makes RESOURCE_EXHAUSTED retryable for OTLP clients.
        IngestFailure::Busy(_) => {
            let mut status = Status::with_error_details(
                tonic::Code::ResourceExhausted,
                e.to_string(),
                ErrorDetails::with_retry_info(Some(Duration::from_secs(1))),
            );
            status.metadata_mut().insert(
                "retry-after",
                tonic::metadata::MetadataValue::from_static("1"),
            );
            status
        }
        IngestFailure::Unavailable(_) => Status::unavailable(e.to_string()),
    }
}

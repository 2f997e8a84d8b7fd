//! OTLP receivers: OTLP/HTTP (`http`) and OTLP/gRPC (`grpc`) over one ingest
//! pipeline (`ingest`): decode, convert and observe off the async runtime, write, and
//! answer once the write is durable.

pub(crate) mod grpc;
pub(crate) mod http;
pub(crate) mod ingest;

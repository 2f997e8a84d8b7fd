//! Protobuf export requests decoded record by record when the whole message does not
//! decode: one span or log record carrying a string that is not UTF-8 (a sender that
//! truncated a multi-byte character) makes prost refuse the entire batch, where OTLP
//! asks for the rest to be kept and the bad records reported through partial success.
//! The message's outer layers are read with their records left as bytes, then each
//! record is decoded on its own; a resource or scope that does not decode takes its
//! records with it.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

use crate::convert::MAX_REPORTED_ERRORS;

/// Records refused while decoding, before conversion.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Undecodable {
    pub records: u64,
    /// The first few reasons.
    pub errors: Vec<String>,
}

impl Undecodable {
    /// Adds these to a conversion's refused count and reasons, their reasons first.
    pub(crate) fn count_into(self, rejected: &mut u64, errors: &mut Vec<String>) {
        *rejected += self.records;
        let mut reasons = self.errors;
        reasons.append(errors);
        reasons.truncate(MAX_REPORTED_ERRORS);
        *errors = reasons;
    }

    fn push(&mut self, count: u64, reason: String) {
        self.records += count;
        if self.errors.len() < MAX_REPORTED_ERRORS {
            self.errors.push(reason);
        }
    }
}

/// The two export messages share one layout (tag 1: resources; in each, tag 1 the
/// resource, tag 2 the scopes, tag 3 the schema URL; in each scope, tag 1 the scope,
/// tag 2 the records, tag 3 the schema URL), read here with the records as bytes.
#[derive(Clone, PartialEq, Message)]
struct RawRequest {
    #[prost(bytes = "vec", repeated, tag = "1")]
    resources: Vec<Vec<u8>>,
}

/// A resource or a scope, left as bytes: its own message (`Resource`,
/// `InstrumentationScope`), what it holds (scopes, records) and its schema URL.
#[derive(Clone, PartialEq, Message)]
struct RawLayer {
    #[prost(bytes = "vec", optional, tag = "1")]
    head: Option<Vec<u8>>,
    #[prost(bytes = "vec", repeated, tag = "2")]
    items: Vec<Vec<u8>>,
    #[prost(bytes = "vec", tag = "3")]
    schema_url: Vec<u8>,
}

impl RawLayer {
    fn decode_head<M: Message + Default>(&self) -> Result<Option<M>, prost::DecodeError> {
        self.head.as_deref().map(M::decode).transpose()
    }
}

/// An export request the lenient decode can rebuild from its records.
pub trait RecordWise: Sized {
    /// The record's name in messages ("span", "log record").
    const RECORD: &'static str;
    type Record: Message + Default;
    type Scope;
    type Resource;
    fn scope(
        scope: Option<InstrumentationScope>,
        records: Vec<Self::Record>,
        schema_url: String,
    ) -> Self::Scope;
    fn resource(
        resource: Option<Resource>,
        scopes: Vec<Self::Scope>,
        schema_url: String,
    ) -> Self::Resource;
    fn request(resources: Vec<Self::Resource>) -> Self;
}

/// `RecordWise` for one export message: its record's name and types, and the fields
/// its scope, resource and request keep them in.
macro_rules! record_wise {
    ($request:ty, $name:literal, $record:ty, $scope:ident . $records:ident,
     $resource:ident . $scopes:ident, $resources:ident) => {
        impl RecordWise for $request {
            const RECORD: &'static str = $name;
            type Record = $record;
            type Scope = $scope;
            type Resource = $resource;
            fn scope(
                scope: Option<InstrumentationScope>,
                $records: Vec<$record>,
                schema_url: String,
            ) -> $scope {
                $scope {
                    scope,
                    $records,
                    schema_url,
                }
            }
            fn resource(
                resource: Option<Resource>,
                $scopes: Vec<$scope>,
                schema_url: String,
            ) -> $resource {
                $resource {
                    resource,
                    $scopes,
                    schema_url,
                }
            }
            fn request($resources: Vec<$resource>) -> Self {
                Self { $resources }
            }
        }
    };
}

record_wise!(
    ExportTraceServiceRequest,
    "span",
    Span,
    ScopeSpans.spans,
    ResourceSpans.scope_spans,
    resource_spans
);
record_wise!(
    ExportLogsServiceRequest,
    "log record",
    LogRecord,
    ScopeLogs.log_records,
    ResourceLogs.scope_logs,
    resource_logs
);

/// Decodes `bytes` record by record: the records that decode, and those that did not.
/// `Err` when the message's own layers are not protobuf at all.
pub(crate) fn decode_record_wise<R: RecordWise>(
    bytes: &[u8],
) -> Result<(R, Undecodable), prost::DecodeError> {
    let raw = RawRequest::decode(bytes)?;
    let mut refused = Undecodable::default();
    let mut resources = Vec::with_capacity(raw.resources.len());
    for (r, resource_bytes) in raw.resources.iter().enumerate() {
        let raw_resource = RawLayer::decode(resource_bytes.as_slice())?;
        let raw_scopes = raw_resource
            .items
            .iter()
            .map(|s| RawLayer::decode(s.as_slice()))
            .collect::<Result<Vec<_>, _>>()?;
        let resource = match raw_resource.decode_head::<Resource>() {
            Ok(resource) => resource,
            Err(e) => {
                let in_resource: u64 = raw_scopes.iter().map(|s| s.items.len() as u64).sum();
                refused.push(
                    in_resource,
                    format!("resource {r} and its {in_resource} {}(s): {e}", R::RECORD),
                );
                continue;
            }
        };
        let mut scopes = Vec::with_capacity(raw_scopes.len());
        for (s, raw_scope) in raw_scopes.into_iter().enumerate() {
            let scope = match raw_scope.decode_head::<InstrumentationScope>() {
                Ok(scope) => scope,
                Err(e) => {
                    let in_scope = raw_scope.items.len() as u64;
                    refused.push(
                        in_scope,
                        format!(
                            "scope {s} of resource {r} and its {in_scope} {}(s): {e}",
                            R::RECORD
                        ),
                    );
                    continue;
                }
            };
            let mut records = Vec::with_capacity(raw_scope.items.len());
            for (i, record) in raw_scope.items.iter().enumerate() {
                match R::Record::decode(record.as_slice()) {
                    Ok(record) => records.push(record),
                    Err(e) => refused.push(
                        1,
                        format!("{} {i} of scope {s} of resource {r}: {e}", R::RECORD),
                    ),
                }
            }
            scopes.push(R::scope(scope, records, lossy(raw_scope.schema_url)));
        }
        resources.push(R::resource(
            resource,
            scopes,
            lossy(raw_resource.schema_url),
        ));
    }
    Ok((R::request(resources), refused))
}

fn lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request whose second span's name is not UTF-8: protobuf's own decode refuses
    /// all of it; record by record, the first and third spans are kept.
    #[test]
    fn a_span_with_a_broken_string_is_refused_alone() {
        let span = |id: u8, name: &str| Span {
            trace_id: vec![1; 16],
            span_id: vec![id; 8],
            name: name.into(),
            start_time_unix_nano: 1,
            end_time_unix_nano: 2,
            ..Default::default()
        };
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![span(1, "a"), span(2, "XX"), span(3, "c")],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let mut bytes = request.encode_to_vec();
        let at = bytes.windows(2).position(|w| w == b"XX").unwrap();
        bytes[at] = 0xff;
        assert!(ExportTraceServiceRequest::decode(bytes.as_slice()).is_err());
        let (kept, refused) = decode_record_wise::<ExportTraceServiceRequest>(&bytes).unwrap();
        let names: Vec<&str> = kept.resource_spans[0].scope_spans[0]
            .spans
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(refused.records, 1);
        assert!(
            refused.errors[0].starts_with("span 1 of scope 0 of resource 0"),
            "{:?}",
            refused.errors
        );
        assert!(decode_record_wise::<ExportTraceServiceRequest>(&[0xff, 0xff, 0xff]).is_err());
    }
}

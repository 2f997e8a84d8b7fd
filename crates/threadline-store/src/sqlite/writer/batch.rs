//! Encoding a batch of spans into the rows one transaction writes, on the submitting
//! thread.

use super::*;
use crate::sqlite::distinct::{address, sorted_distinct_interned};

impl PreparedBatch {
    pub(crate) fn encode<'a>(
        tenant: &TenantId,
        spans: &'a [SpanRecord],
        observed: &[threadline_analysis::Observed],
    ) -> Result<Self, StoreError> {
        let mut origins = codec::BatchOrigins::default();
        let mut rows = Vec::with_capacity(spans.len());
        let mut strings = Interned::default();
        let mut filter = crate::sqlite::attr_filter::FilterBuilder::default();
        let block = codec::encode_block(spans.iter().map(|s| (&s.detail, &s.llm)))?;
        let texts = crate::sqlite::text_index::BlockTexts::of_spans(spans);
        let mut encoded_bytes = block.blob.len() + texts.bytes();
        for (span, (block_offset, block_len)) in spans.iter().zip(block.slots) {
            let (origin_hash, first_seen) = origins.hash(&span.origin)?;
            if first_seen {
                filter.add_attributes(&span.origin.resource_attributes);
            }
            filter.add_attributes(&span.detail.attributes);
            let llm = span.llm.as_ref();
            let field =
                |strings: &mut Interned<'a>,
                 f: fn(&'a threadline_model::LlmView) -> Option<&'a String>| {
                    llm.and_then(f).map(|v| strings.get(v))
                };
            encoded_bytes += span.name.len() + span.service.len() + 128;
            rows.push(SpanRow {
                trace_id: span.trace_id.0,
                span_id: span.span_id.0,
                parent_span_id: span.parent_span_id.map(|p| p.0),
                name: strings.get(&span.name),
                service: strings.get(&span.service),
                kind: span.kind.to_otlp(),
                // Nanosecond times are u64 on the wire; stored bit-for-bit as i64.
                start_ns: span.start_time_unix_nano as i64,
                end_ns: span.end_time_unix_nano as i64,
                duration_ns: span.duration_nanos().min(i64::MAX as u64) as i64,
                status_code: span.detail.status.code.to_otlp(),
                origin_hash,
                model: llm.and_then(|l| l.model()).map(|m| strings.get(m)),
                route: field(&mut strings, |l| l.route.as_ref()),
                adapter: field(&mut strings, |l| l.adapter_id.as_ref()),
                ab_group: field(&mut strings, |l| l.ab_group.as_ref()),
                instance: field(&mut strings, |l| l.instance_id.as_ref()),
                image: field(&mut strings, |l| l.image.as_ref()),
                prompt_version: field(&mut strings, |l| l.prompt_template_version.as_ref()),
                user_id: field(&mut strings, |l| l.user_id.as_ref()),
                session_id: field(&mut strings, |l| l.session_id.as_ref()),
                total_tokens: llm.and_then(|l| l.total_tokens),
                input_tokens: llm.and_then(|l| l.input_tokens),
                response_model: llm
                    .and_then(|l| l.response_model.as_ref())
                    .filter(|r| Some(r.as_str()) != llm.and_then(|l| l.model()))
                    .map(|r| strings.get(r)),
                output_tokens: llm.and_then(|l| l.output_tokens),
                block_offset,
                block_len,
            });
        }
        let ids = sorted_distinct(rows.iter().map(|r| r.trace_id));
        // Borrowed while deduplicated: a batch's rows share a few names.
        let services = sorted_distinct_interned(rows.iter().map(|r| &*r.service), |s| address(s))
            .into_iter()
            .map(str::to_owned)
            .collect();
        let operations = sorted_distinct_interned(
            rows.iter().map(|r| (&*r.service, &*r.name, r.kind)),
            |(service, name, kind)| (address(service), address(name), *kind),
        )
        .into_iter()
        .map(|(service, name, kind)| (service.to_owned(), name.to_owned(), kind))
        .collect();
        let models = sorted_distinct_interned(
            rows.iter().filter_map(|r| {
                Some((
                    r.model.as_deref()?,
                    r.response_model.as_deref().unwrap_or_default(),
                ))
            }),
            |(model, response)| (address(model), address(response)),
        )
        .into_iter()
        .map(|(m, r)| (m.to_owned(), r.to_owned()))
        .collect();
        let values = crate::sqlite::block_values::BlockValues::of_spans(rows.iter().map(|r| {
            crate::sqlite::block_values::SpanValues {
                service: &r.service,
                model: r.model.as_deref(),
                route: r.route.as_deref(),
                adapter: r.adapter.as_deref(),
                instance: r.instance.as_deref(),
                image: r.image.as_deref(),
                prompt_version: r.prompt_version.as_deref(),
                ab_group: r.ab_group.as_deref(),
                error: r.status_code == 2,
            }
        }));
        let sessions = crate::sqlite::sessions::BlockSessions::of_rows(
            rows.iter()
                .filter_map(|r| Some((r.session_id.as_deref()?, r.user_id.as_deref()))),
        );
        encoded_bytes += origins.bytes() + values.bytes() + sessions.bytes();
        Ok(Self {
            tenant: tenant.clone(),
            marked: Vec::new(),
            min_start_ns: rows.iter().map(|r| r.start_ns).min().unwrap_or(0),
            max_start_ns: rows.iter().map(|r| r.start_ns).max().unwrap_or(0),
            trace_ids: ids.concat(),
            attr_filter: filter.encode(),
            values,
            sessions,
            services,
            operations,
            models,
            rows,
            origins: origins.encoded,
            block: block.blob,
            encoded_bytes,
            graph: None,
            rollups: threadline_analysis::BatchRollups::of_observed(spans, observed),
            hops: Default::default(),
            texts,
            inserted: None,
        })
    }

    /// Lineage graph changes to commit in the same transaction as the spans.
    pub(crate) fn attach_graph(&mut self, update: threadline_model::GraphUpdate) {
        let graph = crate::sqlite::graph::PreparedGraph::new(update);
        if !graph.is_empty() {
            self.encoded_bytes += graph.bytes();
            self.graph = Some(graph);
        }
    }
}

/// A batch's strings, each allocated once and shared by the rows that hold it.
#[derive(Default)]
struct Interned<'a>(foldhash::HashMap<&'a str, Arc<str>>);

impl<'a> Interned<'a> {
    fn get(&mut self, value: &'a str) -> Arc<str> {
        Arc::clone(self.0.entry(value).or_insert_with(|| Arc::from(value)))
    }
}

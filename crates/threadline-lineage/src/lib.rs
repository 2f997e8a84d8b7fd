//! The lineage graph's inputs and outputs, independent of storage: OpenLineage events
//! turned into typed graph updates (with spec validation and facet checks). The
//! store applies the updates; the server wires both to HTTP.

mod facets;
pub mod openlineage;

pub use openlineage::{event_to_update, parse_event, EventKind, OpenLineageError, ParsedEvent};

//! The lineage graph's inputs and outputs, independent of storage: OpenLineage events,
//! asset manifests and span bindings turned into typed graph updates (with validation). The store
//! applies the updates; the server wires both to HTTP.

mod bindings;
mod facets;
pub mod impact;
pub mod marquez;
pub mod openlineage;
pub mod projection;
pub mod prov;
pub mod registry;
pub mod rules;
pub mod validity;

pub use bindings::span_bindings;
pub use openlineage::{event_to_update, parse_event, EventKind, OpenLineageError, ParsedEvent};
pub use registry::{manifest_to_update, parse_manifest, Manifest, ManifestError};

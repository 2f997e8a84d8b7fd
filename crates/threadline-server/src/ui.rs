//! The web UI: the files under `ui/` compiled into the binary (see `build.rs`), served
//! under `/ui/` with their content types, ETags, cache headers and (in release builds)
//! brotli or gzip as the browser accepts, by memory-serve. The page paths below are a
//! public contract — people paste them into tickets — and each answers with the
//! single-page app, which renders the page its URL names.

use axum::body::Body;
use axum::extract::Request;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use memory_serve::CacheControl;
use tower::ServiceExt;

/// The UI's deep links.
pub(crate) const PAGES: [&str; 12] = [
    "/",
    "/traces",
    "/traces/{trace_id}",
    "/sessions",
    "/sessions/{session_id}",
    "/service-map",
    "/lineage",
    "/lineage/{*node_id}",
    "/dashboard",
    "/incidents",
    "/incidents/{incident_id}",
    "/impact/{*node_id}",
];

pub(crate) fn router() -> Router {
    // Revalidated on every load (a 304 through the ETag when unchanged), so a new
    // binary's UI is seen at once.
    let assets: Router = memory_serve::load!()
        .index_file(None)
        .html_cache_control(CacheControl::NoCache)
        .cache_control(CacheControl::NoCache)
        .into_router();
    let mut pages = Router::new();
    for path in PAGES {
        let assets = assets.clone();
        pages = pages.route(
            path,
            get(move |request: Request| index_page(assets, request)),
        );
    }
    pages.nest_service("/ui", assets)
}

/// `index.html`, served through the asset router so it gets the same headers.
async fn index_page(assets: Router, request: Request) -> Response {
    let (mut parts, _) = request.into_parts();
    parts.uri = Uri::from_static("/index.html");
    match assets
        .oneshot(Request::from_parts(parts, Body::empty()))
        .await
    {
        Ok(response) => response,
        Err(never) => match never {},
    }
    .into_response()
}

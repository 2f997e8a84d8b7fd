//! What every handler shares (`AppState`, built once from the configuration and a
//! store) and the `Tenant` extractor that decides whose data a request reads.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use threadline_analysis::{FaultRules, PriceTable};
use threadline_diagnosis::IncidentWatcher;
use threadline_lineage::impact::ImpactPolicy;
use threadline_model::TenantId;
use threadline_store::Store;

use crate::auth::{authorization, Authenticator, Caller};
use crate::body_budget::BodyBudget;
use crate::config::ServerConfig;
use crate::cpu_pool::CpuPool;
use crate::error::ApiError;
use crate::guard::Origins;
use crate::misdirected::OtlpPorts;
use crate::otlp_api::ingest::IngestContext;
use crate::telemetry::{IngestStats, LlmMetrics};

/// The server's shared state: the store, keys, the ingest pipeline's handle, the
/// incident watcher and the configured tables. Cheap to clone (handles and `Arc`s).
#[derive(Clone)]
pub struct AppState {
    pub(crate) store: Store,
    pub(crate) auth: Arc<Authenticator>,
    /// The ingest pipeline (both OTLP transports and the JSON lineage endpoint's
    /// parsing pool).
    pub(crate) ingest: IngestContext,
    pub(crate) watcher: Arc<IncidentWatcher>,
    pub(crate) prices: Arc<PriceTable>,
    pub(crate) impact_policy: Arc<ImpactPolicy>,
    pub(crate) rca_rules: Arc<FaultRules>,
    /// Where OTLP is received, for what is sent to the wrong port.
    pub(crate) otlp_ports: OtlpPorts,
    /// Bounds request bodies being read, across both HTTP ports and gRPC.
    pub(crate) budget: BodyBudget,
    pub(crate) origins: Arc<Origins>,
    pub(crate) max_body_bytes: usize,
}

impl AppState {
    /// Everything the server needs from `config` around `store`. The configured
    /// addresses are taken as where the server listens (`serve` passes the bound ones):
    /// they name the OTLP ports in hints and alert links. Starts the ingest worker
    /// threads and, when configured, the alert sink.
    pub fn new(config: &ServerConfig, store: Store) -> std::io::Result<Self> {
        let auth = Arc::new(Authenticator::new(&config.tenants, &config.operator_keys.0));
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let ingest = IngestContext {
            store: store.clone(),
            stats: Arc::new(IngestStats::default()),
            auth: Arc::clone(&auth),
            cpu_pool: Arc::new(CpuPool::start(cores + 1)?),
            llm_metrics: Arc::new(LlmMetrics::default()),
            max_future_skew: config.limits.max_future_skew,
            max_span_age: config.limits.max_span_age,
        };
        let alert_sink = config.alerts.clone().map(|alerts| {
            let base = alerts
                .base_url
                .clone()
                .unwrap_or_else(|| format!("http://{}", config.http_addr));
            crate::alerts::AlertSink::start(
                alerts,
                base.trim_end_matches('/').to_owned(),
                config.detector.clone(),
            )
        });
        let rca_rules = Arc::new(config.rca_rules.clone());
        let slo_rules = alert_sink
            .as_ref()
            .map(|sink| sink.rules.clone())
            .unwrap_or_default();
        let watcher = Arc::new(IncidentWatcher::new(
            store.clone(),
            config.detector.clone(),
            Arc::clone(&rca_rules),
            slo_rules,
            alert_sink.map(|sink| sink as Arc<dyn threadline_diagnosis::IncidentListener>),
        ));
        Ok(Self {
            store,
            auth,
            ingest,
            watcher,
            prices: Arc::new(config.prices.clone()),
            impact_policy: Arc::new(config.impact_policy.clone()),
            rca_rules,
            otlp_ports: OtlpPorts {
                http: config.otlp_http_addr.port(),
                grpc: config.otlp_grpc_addr.port(),
            },
            budget: BodyBudget::new(
                config.limits.max_inflight_body_bytes,
                config.max_body_bytes,
                config.limits.body_read_timeout,
            ),
            origins: Arc::new(Origins {
                check_hosts: !config.auth_required(),
                hosts: config.allowed_hosts.clone(),
                origins: config.allowed_origins.clone(),
            }),
            max_body_bytes: config.max_body_bytes,
        })
    }

    pub(crate) fn stats(&self) -> &IngestStats {
        &self.ingest.stats
    }

    pub(crate) fn llm_metrics(&self) -> &LlmMetrics {
        &self.ingest.llm_metrics
    }

    /// The incident watcher, for the server's background pass.
    pub fn watcher(&self) -> &Arc<IncidentWatcher> {
        &self.watcher
    }
}

/// The tenant whose data a request may read and write, from its API key (the
/// default tenant on a server without keys). Rejected with 401 and a message naming
/// what was wrong with the key; an operator key is refused here (it reads no
/// tenant's data).
pub(crate) struct Tenant(pub(crate) TenantId);

impl FromRequestParts<AppState> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Ok(Tenant(
            state.auth.authenticate(authorization(&parts.headers))?,
        ))
    }
}

/// Who calls: a tenant, the operator or nobody (for endpoints that answer each
/// differently: health, `/metrics`).
pub(crate) struct CallerOf(pub(crate) Caller);

impl FromRequestParts<AppState> for CallerOf {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Ok(CallerOf(state.auth.caller(authorization(&parts.headers))?))
    }
}

//! Server configuration: a TOML file, then command-line overrides, then `validate()`,
//! which reports every problem at once.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use threadline_model::TenantId;

mod limits;
mod store;

pub use limits::Limits;
pub use store::{StoreLocation, CLICKHOUSE_PASSWORD_ENV, CLICKHOUSE_USER_ENV};

/// Everything `threadline serve` needs, after the file and flags are merged.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub otlp_http_addr: SocketAddr,
    pub otlp_grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub data_dir: PathBuf,
    /// The embedded store under `data_dir`, or a ClickHouse database.
    pub store: StoreLocation,
    pub max_body_bytes: usize,
    /// Export requests waiting for the store writer before new ones get 429.
    pub max_queued_batches: usize,
    pub tenants: Vec<TenantKeys>,
    /// Keys that read server-wide figures (`[operator] api_keys`), never a tenant's data.
    pub operator_keys: OperatorKeys,
    pub allow_unauthenticated: bool,
    /// Host names the HTTP ports answer to besides IP addresses and localhost
    /// (`[server] allowed_hosts`; `"*"` for any), lower case.
    pub allowed_hosts: Vec<String>,
    /// Origins besides the server's own whose pages may send state-changing requests
    /// (`[server] allowed_origins`), lower case.
    pub allowed_origins: Vec<String>,
    /// Rules for impact plans (`[server] impact_policy = "FILE"`; the shipped default
    /// otherwise).
    pub impact_policy: threadline_lineage::impact::ImpactPolicy,
    /// Anomaly detection settings (`[detector]`: sensitivity, window, min_count, …).
    pub detector: threadline_analysis::DetectorConfig,
    /// Fault patterns for root-cause ranking (`[server] rca_rules = "FILE"`; the
    /// shipped default otherwise).
    pub rca_rules: threadline_analysis::FaultRules,
    /// Where incidents and SLO breaches are sent (`[alerts]`); none when absent.
    pub alerts: Option<AlertsConfig>,
    /// What counts as drift between dataset versions (`[drift]`).
    pub drift: threadline_analysis::DriftConfig,
    /// USD per million tokens by model glob (`[[prices]]` first, then the defaults).
    pub prices: threadline_analysis::PriceTable,
    /// Timeouts, the in-flight body budget and the accepted record times (`[limits]`).
    pub limits: Limits,
}

/// `[alerts]`: a webhook for incidents and SLO breaches.
#[derive(Clone, Debug)]
pub struct AlertsConfig {
    pub webhook: String,
    pub format: AlertFormat,
    /// Delivery attempts per alert (backoff 0.5 s, 1 s, 2 s … between them).
    pub max_attempts: u32,
    /// Base of the links in alerts [default: the JSON API's listen address].
    pub base_url: Option<String>,
    pub slo: Vec<threadline_analysis::SloRule>,
}

/// The body an alert webhook receives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertFormat {
    /// `{"kind": "incident" | "slo", "status", …}`.
    #[default]
    Threadline,
    /// A list of alerts as Alertmanager's `POST /api/v2/alerts` takes.
    Alertmanager,
}

/// One tenant and the API keys that act for it.
#[derive(Clone)]
pub struct TenantKeys {
    pub tenant: TenantId,
    pub api_keys: Vec<String>,
}

/// The operator's API keys.
#[derive(Clone, Default)]
pub struct OperatorKeys(pub Vec<String>);

impl std::fmt::Debug for OperatorKeys {
    // API keys never reach a log line, not even through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{} redacted]", self.0.len())
    }
}

impl std::fmt::Debug for TenantKeys {
    // API keys never reach a log line, not even through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantKeys")
            .field("tenant", &self.tenant)
            .field(
                "api_keys",
                &format_args!("[{} redacted]", self.api_keys.len()),
            )
            .finish()
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            otlp_http_addr: SocketAddr::from(([127, 0, 0, 1], 4318)),
            otlp_grpc_addr: SocketAddr::from(([127, 0, 0, 1], 4317)),
            http_addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("./threadline-data"),
            store: StoreLocation::Embedded,
            max_body_bytes: 64 * 1024 * 1024,
            max_queued_batches: 1024,
            tenants: Vec::new(),
            operator_keys: OperatorKeys::default(),
            allow_unauthenticated: false,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            impact_policy: threadline_lineage::impact::ImpactPolicy::default_policy(),
            detector: threadline_analysis::DetectorConfig::default(),
            rca_rules: threadline_analysis::FaultRules::default_rules(),
            alerts: None,
            drift: threadline_analysis::DriftConfig::default(),
            prices: threadline_analysis::PriceTable::default(),
            limits: Limits::default(),
        }
    }
}

/// The config file as written by users.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    server: FileServer,
    #[serde(default)]
    tenants: Vec<FileTenant>,
    #[serde(default)]
    operator: FileOperator,
    detector: Option<threadline_analysis::DetectorConfig>,
    alerts: Option<FileAlerts>,
    drift: Option<threadline_analysis::DriftConfig>,
    #[serde(default)]
    prices: Vec<threadline_analysis::ModelPrice>,
    #[serde(default)]
    limits: limits::FileLimits,
    #[serde(default)]
    clickhouse: store::FileClickHouse,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAlerts {
    webhook: String,
    #[serde(default)]
    format: AlertFormat,
    max_attempts: Option<u32>,
    base_url: Option<String>,
    #[serde(default)]
    slo: Vec<FileSlo>,
}

/// One `[[alerts.slo]]`: a metric over a window on the requests the selector fields
/// pick, against a threshold.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSlo {
    name: String,
    metric: String,
    threshold: f64,
    window: String,
    tenant: Option<String>,
    min_requests: Option<u64>,
    service: Option<String>,
    route: Option<String>,
    model: Option<String>,
    adapter: Option<String>,
    instance: Option<String>,
    image: Option<String>,
    prompt_version: Option<String>,
    ab_group: Option<String>,
    gray_tag: Option<String>,
    provider: Option<String>,
    upstream_service: Option<String>,
}

impl FileSlo {
    fn rule(self, problems: &mut Vec<String>) -> Option<threadline_analysis::SloRule> {
        use threadline_analysis::{Dimension, Metric};
        let what = format!("alerts.slo {:?}", self.name);
        let metric = Metric::named(&self.metric)
            .map_err(|e| problems.push(format!("{what}: {e}")))
            .ok();
        let window = match humantime::parse_duration(&self.window) {
            Ok(d) if d.as_secs() >= 60 && d.as_secs() % 60 == 0 => {
                Some((d.as_secs() / 60) as usize)
            }
            _ => {
                problems.push(format!(
                    "{what}: window {:?} must be a whole number of minutes, like \"5m\"",
                    self.window
                ));
                None
            }
        };
        if !self.threshold.is_finite() {
            problems.push(format!("{what}: threshold must be a number"));
        }
        let selector: Vec<(Dimension, String)> = [
            (Dimension::Service, self.service),
            (Dimension::Route, self.route),
            (Dimension::Model, self.model),
            (Dimension::Adapter, self.adapter),
            (Dimension::Instance, self.instance),
            (Dimension::Image, self.image),
            (Dimension::PromptVersion, self.prompt_version),
            (Dimension::AbGroup, self.ab_group),
            (Dimension::GrayTag, self.gray_tag),
            (Dimension::Provider, self.provider),
            (Dimension::UpstreamService, self.upstream_service),
        ]
        .into_iter()
        .filter_map(|(d, v)| v.map(|v| (d, v)))
        .collect();
        Some(threadline_analysis::SloRule {
            name: self.name,
            tenant: self.tenant,
            selector,
            metric: metric?,
            threshold: self.threshold,
            window_minutes: window?,
            min_requests: self.min_requests.unwrap_or(20),
        })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileServer {
    otlp_http: Option<String>,
    otlp_grpc: Option<String>,
    http: Option<String>,
    data_dir: Option<PathBuf>,
    /// `clickhouse://HOST:PORT/DATABASE`, or absent for the embedded store.
    store: Option<String>,
    max_body_bytes: Option<usize>,
    max_queued_batches: Option<usize>,
    allow_unauthenticated: Option<bool>,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    #[serde(default)]
    allowed_origins: Vec<String>,
    impact_policy: Option<PathBuf>,
    rca_rules: Option<PathBuf>,
}

/// `[operator]`: keys for server-wide figures.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileOperator {
    #[serde(default)]
    api_keys: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTenant {
    id: String,
    api_keys: Vec<String>,
}

/// Values given on the command line; each wins over the file.
#[derive(Clone, Debug, Default)]
pub struct ConfigOverrides {
    pub otlp_http: Option<String>,
    pub otlp_grpc: Option<String>,
    pub http: Option<String>,
    pub data_dir: Option<PathBuf>,
    /// `--store`: wins over `[server] store`.
    pub store: Option<String>,
    pub allow_unauthenticated: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is invalid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid configuration:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
}

impl ServerConfig {
    /// Reads the optional file, applies the overrides, validates the result.
    pub fn load(file: Option<&Path>, overrides: &ConfigOverrides) -> Result<Self, ConfigError> {
        let parsed = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                toml::from_str::<FileConfig>(&text).map_err(|e| {
                    // The message and line only: toml's full rendering quotes the
                    // offending line, which may hold an API key.
                    let line = e
                        .span()
                        .map(|span| text[..span.start.min(text.len())].lines().count().max(1));
                    ConfigError::Parse {
                        path: path.to_owned(),
                        message: match line {
                            Some(n) => format!("line {n}: {}", e.message()),
                            None => e.message().to_owned(),
                        },
                    }
                })?
            }
            None => FileConfig::default(),
        };
        let defaults = ServerConfig::default();
        let mut problems = Vec::new();
        let mut addr =
            |flag: &Option<String>, file: &Option<String>, default: SocketAddr, what: &str| {
                match flag.as_ref().or(file.as_ref()) {
                    Some(text) => text.parse::<SocketAddr>().unwrap_or_else(|_| {
                        problems.push(format!(
                            "{what} address {text:?} is not HOST:PORT (e.g. 127.0.0.1:4318)"
                        ));
                        default
                    }),
                    None => default,
                }
            };
        let otlp_http_addr = addr(
            &overrides.otlp_http,
            &parsed.server.otlp_http,
            defaults.otlp_http_addr,
            "otlp_http",
        );
        let otlp_grpc_addr = addr(
            &overrides.otlp_grpc,
            &parsed.server.otlp_grpc,
            defaults.otlp_grpc_addr,
            "otlp_grpc",
        );
        let http_addr = addr(
            &overrides.http,
            &parsed.server.http,
            defaults.http_addr,
            "http",
        );
        let mut tenants = Vec::new();
        let mut seen_keys = std::collections::HashSet::new();
        // Every key, a tenant's or the operator's, is long enough and used once; `whose`
        // names it without quoting it.
        let mut check_keys = |whose: &str, keys: &[String], problems: &mut Vec<String>| {
            for key in keys {
                if key.len() < 16 {
                    problems.push(format!("{whose} is shorter than 16 characters"));
                }
                if !seen_keys.insert(key.clone()) {
                    problems.push(format!("{whose} is also used by another entry"));
                }
            }
        };
        for t in parsed.tenants {
            match TenantId::new(&t.id) {
                Ok(tenant) => {
                    if t.api_keys.is_empty() {
                        problems.push(format!("tenant {:?} has no api_keys", t.id));
                    }
                    let whose = format!("an API key of tenant {:?}", t.id);
                    check_keys(&whose, &t.api_keys, &mut problems);
                    tenants.push(TenantKeys {
                        tenant,
                        api_keys: t.api_keys,
                    });
                }
                Err(e) => problems.push(e.to_string()),
            }
        }
        check_keys(
            "an operator API key",
            &parsed.operator.api_keys,
            &mut problems,
        );
        let impact_policy = match &parsed.server.impact_policy {
            None => defaults.impact_policy.clone(),
            Some(path) => match std::fs::read_to_string(path) {
                Ok(text) => {
                    threadline_lineage::impact::ImpactPolicy::parse(&text).unwrap_or_else(|e| {
                        problems.push(format!("{}: {e}", path.display()));
                        defaults.impact_policy.clone()
                    })
                }
                Err(e) => {
                    problems.push(format!("cannot read impact_policy {}: {e}", path.display()));
                    defaults.impact_policy.clone()
                }
            },
        };
        let rca_rules = match &parsed.server.rca_rules {
            None => defaults.rca_rules.clone(),
            Some(path) => match std::fs::read_to_string(path) {
                Ok(text) => threadline_analysis::FaultRules::parse(&text).unwrap_or_else(|e| {
                    problems.push(format!("{}: {e}", path.display()));
                    defaults.rca_rules.clone()
                }),
                Err(e) => {
                    problems.push(format!("cannot read rca_rules {}: {e}", path.display()));
                    defaults.rca_rules.clone()
                }
            },
        };
        let alerts = parsed.alerts.map(|a| {
            if !(a.webhook.starts_with("http://") || a.webhook.starts_with("https://")) {
                problems.push(format!(
                    "alerts.webhook {:?} is not an http(s) URL",
                    a.webhook
                ));
            }
            let max_attempts = a.max_attempts.unwrap_or(5);
            if max_attempts == 0 {
                problems.push("alerts.max_attempts must be at least 1".to_owned());
            }
            AlertsConfig {
                webhook: a.webhook,
                format: a.format,
                max_attempts,
                base_url: a.base_url,
                slo: a
                    .slo
                    .into_iter()
                    .filter_map(|s| s.rule(&mut problems))
                    .collect(),
            }
        });
        let drift = parsed.drift.unwrap_or_default();
        if !(drift.count_ratio > 1.0
            && drift.null_rate_points > 0.0
            && drift.entropy_drop_bits > 0.0)
        {
            problems.push(format!(
                "drift: count_ratio ({}) must be above 1, null_rate_points ({}) and entropy_drop_bits ({}) above 0",
                drift.count_ratio, drift.null_rate_points, drift.entropy_drop_bits
            ));
        }
        let detector = parsed.detector.unwrap_or_default();
        problems.extend(detector.problems("detector."));
        if let Err(e) = threadline_analysis::PriceTable::validate(&parsed.prices) {
            problems.push(format!("prices: {e}"));
        }
        let limits = parsed.limits.resolve(&mut problems);
        let store = store::resolve(
            overrides
                .store
                .as_deref()
                .or(parsed.server.store.as_deref()),
            parsed.clickhouse,
            |name| std::env::var(name).ok().filter(|v| !v.is_empty()),
            &mut problems,
        );
        let config = ServerConfig {
            store,
            limits,
            prices: threadline_analysis::PriceTable::with_overrides(parsed.prices),
            drift,
            alerts,
            detector,
            rca_rules,
            impact_policy,
            otlp_http_addr,
            otlp_grpc_addr,
            http_addr,
            data_dir: overrides
                .data_dir
                .clone()
                .or(parsed.server.data_dir)
                .unwrap_or(defaults.data_dir),
            max_body_bytes: parsed
                .server
                .max_body_bytes
                .unwrap_or(defaults.max_body_bytes),
            max_queued_batches: parsed
                .server
                .max_queued_batches
                .unwrap_or(defaults.max_queued_batches),
            tenants,
            operator_keys: OperatorKeys(parsed.operator.api_keys),
            allow_unauthenticated: overrides.allow_unauthenticated
                || parsed.server.allow_unauthenticated.unwrap_or(false),
            allowed_hosts: parsed
                .server
                .allowed_hosts
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .collect(),
            allowed_origins: parsed
                .server
                .allowed_origins
                .iter()
                .map(|o| o.trim().trim_end_matches('/').to_ascii_lowercase())
                .collect(),
        };
        problems.extend(config.problems());
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }

    /// Checks that hold whatever the source of the values.
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.max_body_bytes == 0 {
            problems.push("max_body_bytes must be greater than 0".to_owned());
        }
        if self.limits.max_inflight_body_bytes < self.max_body_bytes {
            problems.push(format!(
                "limits.max_inflight_body_bytes ({}) must be at least max_body_bytes ({}): a body of the largest size could never be taken",
                self.limits.max_inflight_body_bytes, self.max_body_bytes
            ));
        }
        for origin in &self.allowed_origins {
            if !(origin.starts_with("http://") || origin.starts_with("https://")) {
                problems.push(format!(
                    "allowed_origins entry {origin:?} is not an origin like https://grafana.example.com"
                ));
            }
        }
        if self.max_queued_batches == 0 {
            problems.push("max_queued_batches must be greater than 0".to_owned());
        }
        if self.tenants.is_empty() && !self.allow_unauthenticated {
            for (what, addr) in [
                ("otlp_http", self.otlp_http_addr),
                ("otlp_grpc", self.otlp_grpc_addr),
                ("http", self.http_addr),
            ] {
                if !addr.ip().is_loopback() {
                    problems.push(format!(
                        "{what} would listen on non-loopback {addr} without API keys: configure [[tenants]] with api_keys, or pass --allow-unauthenticated"
                    ));
                }
            }
        }
        problems
    }

    /// Whether requests must carry an API key.
    pub fn auth_required(&self) -> bool {
        !self.tenants.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(toml_text: &str, overrides: ConfigOverrides) -> Result<ServerConfig, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("threadline.toml");
        std::fs::write(&path, toml_text).unwrap();
        ServerConfig::load(Some(&path), &overrides)
    }

    #[test]
    fn prices_override_the_defaults_and_bad_ones_are_named() {
        let cfg = load(
            "[[prices]]\nmodel = \"meta-llama/*\"\ninput_per_million = 0.2\noutput_per_million = 0.4\n",
            ConfigOverrides::default(),
        )
        .unwrap();
        assert!((cfg.prices.cost_usd("meta-llama/Llama-3", 1_000_000, 0) - 0.2).abs() < 1e-12);
        assert!(cfg.prices.price_of("gpt-4o").is_some(), "defaults stay");
        let err = load(
            "[[prices]]\nmodel = \"x\"\ninput_per_million = -1\noutput_per_million = 0\n",
            ConfigOverrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("input_per_million"), "{err}");
    }

    #[test]
    fn flags_win_over_file() {
        let cfg = load(
            "[server]\nhttp = \"127.0.0.1:9000\"\notlp_http = \"127.0.0.1:9001\"\n",
            ConfigOverrides {
                http: Some("127.0.0.1:0".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(cfg.http_addr.port(), 0);
        assert_eq!(cfg.otlp_http_addr.port(), 9001);
    }

    #[test]
    fn non_loopback_without_keys_is_refused_unless_allowed() {
        let err = load(
            "[server]\nhttp = \"0.0.0.0:8080\"\n",
            ConfigOverrides::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("--allow-unauthenticated"), "{err}");
        let ok = load(
            "[server]\nhttp = \"0.0.0.0:8080\"\n",
            ConfigOverrides {
                allow_unauthenticated: true,
                ..Default::default()
            },
        );
        assert!(ok.is_ok());
        let with_keys = load(
            "[server]\nhttp = \"0.0.0.0:8080\"\n[[tenants]]\nid = \"acme\"\napi_keys = [\"0123456789abcdef-acme\"]\n",
            ConfigOverrides::default(),
        );
        assert!(with_keys.is_ok());
    }

    #[test]
    fn all_problems_are_reported_together_and_keys_are_not_printed() {
        let err = load(
            "[server]\nhttp = \"nope\"\n[[tenants]]\nid = \"bad id\"\napi_keys = [\"k\"]\n[[tenants]]\nid = \"ok\"\napi_keys = [\"short-secret\"]\n",
            ConfigOverrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("\"nope\""), "{err}");
        assert!(err.contains("bad id"), "{err}");
        assert!(err.contains("shorter than 16"), "{err}");
        assert!(!err.contains("short-secret"), "{err}");
        assert!(load("[server]\nbogus = 1\n", ConfigOverrides::default()).is_err());
        let err = load(
            "[[tenants]]\nid = \"acme\"\napi_keys = [\"secret-key-0123456789\", 7]\n",
            ConfigOverrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("line 3"), "{err}");
        assert!(!err.contains("secret-key-0123456789"), "{err}");
    }
}

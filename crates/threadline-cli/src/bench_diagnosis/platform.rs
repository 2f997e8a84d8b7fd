//! The platform a scenario runs — routes, their backends (a fleet of inference
//! instances or hosted providers), the steps around the model call — and the changes
//! made to it over the simulated hours: one injected fault, decoy changes near its
//! onset, harmless changes on healthy routes. Everything is drawn from the scenario's
//! random generator; nothing about the diagnosis is known here.

/// Simulated minutes per scenario; the fault's onset falls in `ONSET`.
pub(crate) const MINUTES: i64 = 120;
pub(crate) const ONSET: std::ops::RangeInclusive<i64> = 75..=100;

/// The kinds of fault injected, one per scenario, in turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, serde::Serialize)]
#[value(rename_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub(crate) enum FaultKind {
    /// A new adapter version hot-swapped onto some of a route's instances slows them.
    AdapterHotSwap,
    /// A new adapter version on every instance of a route slows it or fails requests.
    AdapterSwap,
    /// A new inference image on every instance slows the route.
    ImageSwap,
    /// A new base model on every instance slows the route or fails requests.
    ModelSwap,
    /// A prompt template version overflows the context window: refusals.
    PromptOverflow,
    /// The KV-cache hit ratio collapses on one instance, which slows.
    KvCollapse,
    /// A new image rolled out to part of the fleet slows those instances.
    ImagePartial,
    /// The document search before the model call slows.
    RetrieverSlow,
    /// The tool called after the model call slows.
    ToolSlow,
    /// The user-profile service the gateway calls first slows.
    UpstreamSlow,
    /// One of a route's two hosted providers rate-limits part of its calls.
    ProviderRateLimit,
    /// Arm B of an A/B test regresses.
    AbArm,
    /// A gray (canary) release tag regresses its share of the traffic.
    GrayTag,
    /// A dataset version drifts, an adapter is retrained on it and deployed: its
    /// answers fail output validation.
    DatasetDrift,
    /// A new image moves time before the first token up without changing the total.
    TtftRegression,
    /// One instance fails a share of its requests.
    InstanceErrors,
    /// The network into `crm-api`, which the tool calls, slows: the added time is in
    /// `tools-api`'s client span around the call, never in `crm-api`'s own span.
    DependencyNetwork,
}

impl FaultKind {
    pub(crate) const ALL: [FaultKind; 17] = [
        FaultKind::AdapterHotSwap,
        FaultKind::AdapterSwap,
        FaultKind::ImageSwap,
        FaultKind::ModelSwap,
        FaultKind::PromptOverflow,
        FaultKind::KvCollapse,
        FaultKind::ImagePartial,
        FaultKind::RetrieverSlow,
        FaultKind::ToolSlow,
        FaultKind::UpstreamSlow,
        FaultKind::ProviderRateLimit,
        FaultKind::AbArm,
        FaultKind::GrayTag,
        FaultKind::DatasetDrift,
        FaultKind::TtftRegression,
        FaultKind::InstanceErrors,
        FaultKind::DependencyNetwork,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FaultKind::AdapterHotSwap => "adapter_hot_swap",
            FaultKind::AdapterSwap => "adapter_swap",
            FaultKind::ImageSwap => "image_swap",
            FaultKind::ModelSwap => "model_swap",
            FaultKind::PromptOverflow => "prompt_overflow",
            FaultKind::KvCollapse => "kv_collapse",
            FaultKind::ImagePartial => "image_partial",
            FaultKind::RetrieverSlow => "retriever_slow",
            FaultKind::ToolSlow => "tool_slow",
            FaultKind::UpstreamSlow => "upstream_slow",
            FaultKind::ProviderRateLimit => "provider_rate_limit",
            FaultKind::AbArm => "ab_arm",
            FaultKind::GrayTag => "gray_tag",
            FaultKind::DatasetDrift => "dataset_drift",
            FaultKind::TtftRegression => "ttft_regression",
            FaultKind::InstanceErrors => "instance_errors",
            FaultKind::DependencyNetwork => "dependency_network",
        }
    }
}

/// The shape a fault of a kind takes in a scenario: the kinds take turns over the
/// scenarios, and each kind's variants over its turns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Variant {
    /// The fault alone among harmless changes.
    Plain,
    /// A value of the faulty route was worse all along — an instance that always
    /// serves the long prompts, a provider that always errs a little — and stays so:
    /// a concentration of bad requests that did not change at the onset.
    Skewed,
    /// The faulty value appears only with the fault on part of the traffic: a new A/B
    /// arm, a canary pinned to one instance, a prompt version or model tried on some
    /// of the requests.
    Appearing,
    /// The faulty value was tried on part of the traffic (one instance, 5–15% of the
    /// requests) for 20–40 minutes, as bad there as it will be, then takes over all
    /// of it at the onset.
    TakingOver,
    /// The faulty route serves 5–20 requests a minute.
    Quiet,
    /// The faulty route serves 150–500 requests a minute.
    Busy,
    /// The fault is a pair of values: a new adapter on every instance is bad only on
    /// those a new image reached 8–25 minutes before (harmless until then).
    Paired,
}

impl Variant {
    pub(crate) const ALL: [Variant; 7] = [
        Variant::Plain,
        Variant::Skewed,
        Variant::Appearing,
        Variant::TakingOver,
        Variant::Quiet,
        Variant::Busy,
        Variant::Paired,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::Skewed => "skewed",
            Variant::Appearing => "appearing",
            Variant::TakingOver => "taking_over",
            Variant::Quiet => "quiet",
            Variant::Busy => "busy",
            Variant::Paired => "paired",
        }
    }

    /// The variants a fault of `kind` comes in.
    pub(crate) fn of_kind(kind: FaultKind) -> &'static [Variant] {
        use Variant::*;
        match kind {
            FaultKind::PromptOverflow | FaultKind::ModelSwap => {
                &[Plain, Appearing, TakingOver, Skewed, Quiet, Busy]
            }
            FaultKind::AdapterSwap => &[Plain, TakingOver, Skewed, Quiet, Busy, Paired],
            FaultKind::ImageSwap => &[Plain, TakingOver, Skewed, Quiet, Busy],
            FaultKind::AbArm | FaultKind::GrayTag => &[Plain, Appearing, Skewed, Quiet, Busy],
            _ => &[Plain, Skewed, Quiet, Busy],
        }
    }

    /// The variant of scenario `k`, whose kind is `kind`: the kinds take turns (17 to
    /// a round), each kind's variants over its rounds.
    pub(crate) fn of_scenario(kind: FaultKind, k: usize, kinds: usize) -> Variant {
        let all = Variant::of_kind(kind);
        all[(k / kinds.max(1)) % all.len()]
    }
}

/// A step of a request besides the model call: a plain span of its own service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Step {
    /// `get_profile` on `user-profile`, before everything else.
    Profile,
    /// `search_docs` on `docs-index`, before the model call.
    Retrieval,
    /// `lookup_account` on `tools-api`, after the model call; it calls `crm-api`
    /// (`CRM`) through a client span of its own.
    Tool,
}

impl Step {
    pub(crate) const ALL: [Step; 3] = [Step::Profile, Step::Retrieval, Step::Tool];

    pub(crate) fn service(self) -> &'static str {
        match self {
            Step::Profile => "user-profile",
            Step::Retrieval => "docs-index",
            Step::Tool => "tools-api",
        }
    }

    pub(crate) fn span(self) -> &'static str {
        match self {
            Step::Profile => "get_profile",
            Step::Retrieval => "search_docs",
            Step::Tool => "lookup_account",
        }
    }

    /// Typical duration, milliseconds.
    pub(crate) fn typical_ms(self) -> f64 {
        match self {
            Step::Profile => 25.0,
            Step::Retrieval => 60.0,
            Step::Tool => 110.0,
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// The service the tool calls, its span, the tool's client span, and typical times of
/// the call's network (both ways) and of `crm-api`'s own work, milliseconds.
pub(crate) const CRM: &str = "crm-api";
pub(crate) const CRM_SPAN: &str = "GET /accounts/{id}";
pub(crate) const CRM_CLIENT_SPAN: &str = "GET /accounts";
pub(crate) const CRM_NETWORK_MS: f64 = 3.0;
pub(crate) const CRM_MS: f64 = 35.0;

/// A LoRA adapter and the dataset its training runs read.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Adapter {
    pub(crate) name: String,
    pub(crate) version: u32,
    pub(crate) dataset: String,
}

impl Adapter {
    pub(crate) fn id(&self, version: u32) -> String {
        format!("{}@{version}", self.name)
    }
}

/// Inference instances serving one base model (and maybe an adapter) from an image.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Fleet {
    pub(crate) instances: Vec<String>,
    pub(crate) model: String,
    pub(crate) adapter: Option<Adapter>,
    pub(crate) image: String,
    pub(crate) kv: f64,
}

/// A hosted model API and its share of a route's calls.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Provider {
    pub(crate) name: &'static str,
    pub(crate) model: &'static str,
    pub(crate) share: f64,
}

#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Backend {
    Fleet(Fleet),
    Providers(Vec<Provider>),
}

#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Route {
    pub(crate) path: String,
    /// `api.route` (the platform's) or `http.route` (OpenTelemetry's HTTP convention).
    pub(crate) route_key: &'static str,
    /// Mean requests per minute.
    pub(crate) rate: f64,
    /// Typical model call, milliseconds.
    pub(crate) call_ms: f64,
    /// Share of a call's time before its first token.
    pub(crate) ttft_share: f64,
    pub(crate) backend: Backend,
    pub(crate) prompt_template: String,
    pub(crate) prompt_version: u32,
    pub(crate) steps: Vec<Step>,
    /// Minutes with a short burst of errors (noise, never two in a row).
    pub(crate) burst_minutes: Vec<i64>,
    /// The convention its model calls are described in.
    pub(crate) convention: Convention,
}

/// The semantic convention of a route's model call spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Convention {
    /// OpenTelemetry GenAI: `gen_ai.request.model`, `gen_ai.usage.*`, the server's
    /// time to first token.
    GenAi,
    /// OpenInference only: `openinference.span.kind=LLM`, `llm.model_name`,
    /// `llm.token_count.*`, `llm.prompt_template.version`, `llm.provider`; no time to
    /// first token.
    OpenInference,
}

impl Route {
    pub(crate) fn fleet(&self) -> Option<&Fleet> {
        match &self.backend {
            Backend::Fleet(f) => Some(f),
            Backend::Providers(_) => None,
        }
    }

    pub(crate) fn instance_count(&self) -> usize {
        self.fleet().map_or(0, |f| f.instances.len())
    }
}

/// Which of a route's requests a change applies to.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Scope {
    All,
    /// Requests served by these instances (indexes into the fleet).
    Instances(Vec<usize>),
    AbGroup(&'static str),
    /// From the change on, this share of the requests is in a new A/B arm.
    NewArm(&'static str, f64),
    /// This share of the requests, drawn per request (a prompt version or model tried
    /// on part of the traffic).
    Share(f64),
    /// From the change on, this share of the requests is tagged `canary`.
    Canary(f64),
    /// Calls to this provider (index into the route's providers).
    Provider(usize),
}

impl Scope {
    /// Whether a change of this scope applies to a request of `who`.
    pub(crate) fn applies(&self, who: Who) -> bool {
        match self {
            Scope::All => true,
            Scope::Instances(set) => set.contains(&who.instance),
            Scope::AbGroup(arm) | Scope::NewArm(arm, _) => who.arm == *arm,
            Scope::Share(share) => who.u < *share,
            Scope::Canary(_) => who.canary,
            Scope::Provider(p) => *p == who.provider,
        }
    }
}

/// What a change visibly sets.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Setting {
    Adapter(u32),
    Image(String),
    Model(String),
    Prompt(u32),
}

/// How a request is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Refusal {
    /// `llm.rejection.reason = context_overflow`.
    ContextOverflow,
    /// A 429 from a provider: `error.type = RateLimitError`.
    RateLimit,
}

/// What a change does to the requests it applies to (`Effect::NONE`: harmless).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub(crate) struct Effect {
    /// Model call duration factor.
    pub(crate) latency: f64,
    /// Share of the call before its first token, if it changes.
    pub(crate) ttft_share: Option<f64>,
    /// Share of requests failing (output validation, server errors).
    pub(crate) errors: f64,
    pub(crate) refusal: Option<(Refusal, f64)>,
    /// KV-cache hit ratio, if it changes.
    pub(crate) kv: Option<f64>,
    /// A step's duration factor (its own work).
    pub(crate) step: Option<(Step, f64)>,
    /// The factor of the network time of the tool's call into `crm-api`.
    pub(crate) network: f64,
}

impl Effect {
    pub(crate) const NONE: Effect = Effect {
        latency: 1.0,
        ttft_share: None,
        errors: 0.0,
        refusal: None,
        kv: None,
        step: None,
        network: 1.0,
    };
}

#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Change {
    /// Scenario minute it takes effect.
    pub(crate) at: i64,
    pub(crate) route: usize,
    pub(crate) scope: Scope,
    pub(crate) set: Option<Setting>,
    pub(crate) effect: Effect,
}

/// A fine-tune run producing one adapter version.
#[derive(Clone, Debug)]
pub(crate) struct TrainingRun {
    pub(crate) adapter: Adapter,
    pub(crate) version: u32,
    pub(crate) dataset_version: u32,
    /// The dataset version lost part of a column and gained another.
    pub(crate) drifted: bool,
    pub(crate) start: i64,
    pub(crate) end: i64,
}

/// The injected fault and what diagnosis should name.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Fault {
    pub(crate) kind: FaultKind,
    pub(crate) route: usize,
    pub(crate) onset: i64,
    pub(crate) variant: Variant,
    /// The minute the faulty change first served requests: the onset, or when it was
    /// tried on part of the traffic before taking over (an incident from then on is
    /// the fault's).
    pub(crate) first_onset: i64,
    /// The RCA subject of the true cause.
    pub(crate) cause: String,
    /// The same cause named as the attribute value it set (`prompt_version=v7`), when
    /// it is one: a change tried long before the onset is no change near it.
    pub(crate) cause_value: Option<String>,
}

#[derive(Clone, Debug)]
pub(crate) struct Scenario {
    pub(crate) routes: Vec<Route>,
    /// Sorted by minute.
    pub(crate) changes: Vec<Change>,
    pub(crate) runs: Vec<TrainingRun>,
    /// Models that appear only through a change (a model swap's new model).
    pub(crate) extra_models: Vec<String>,
    /// The instance every canary request of the faulty route goes to, if the canary
    /// is pinned to one.
    pub(crate) canary_instance: Option<usize>,
    pub(crate) fault: Fault,
}

/// What one request sees: its route's settings and the effects of every change that
/// applies to it, at minute `t`.
#[derive(Clone, Debug)]
pub(crate) struct RequestState {
    pub(crate) model: String,
    pub(crate) adapter: Option<String>,
    pub(crate) image: Option<String>,
    pub(crate) prompt_version: u32,
    pub(crate) kv: Option<f64>,
    pub(crate) latency: f64,
    pub(crate) ttft_share: f64,
    pub(crate) errors: f64,
    pub(crate) refusal: Option<(Refusal, f64)>,
    pub(crate) step_factor: [f64; 3],
    /// The factor of the network time into `crm-api`.
    pub(crate) network: f64,
}

/// Who a request is: which instance or provider serves it, its A/B arm, whether it is
/// in the canary, and a uniform draw of its own for changes on a share of requests.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Who {
    pub(crate) instance: usize,
    pub(crate) provider: usize,
    pub(crate) arm: &'static str,
    pub(crate) canary: bool,
    pub(crate) u: f64,
}

impl Scenario {
    /// The canary's share of route `r` at minute `t` (0 before any canary).
    pub(crate) fn canary_share(&self, r: usize, t: i64) -> f64 {
        self.changes
            .iter()
            .filter(|c| c.route == r && c.at <= t)
            .filter_map(|c| match c.scope {
                Scope::Canary(share) => Some(share),
                _ => None,
            })
            .next_back()
            .unwrap_or(0.0)
    }

    /// The change that injects the fault: the one on the faulty route at its onset
    /// that does something (a taking-over fault's trial before it is another).
    pub(crate) fn fault_change(&self) -> Option<&Change> {
        let f = &self.fault;
        self.changes
            .iter()
            .find(|c| c.route == f.route && c.at == f.onset && c.effect != Effect::NONE)
    }

    /// A new A/B arm of route `r` at minute `t` and its share, if one has begun.
    pub(crate) fn new_arm(&self, r: usize, t: i64) -> Option<(&'static str, f64)> {
        self.changes
            .iter()
            .filter(|c| c.route == r && c.at <= t)
            .find_map(|c| match c.scope {
                Scope::NewArm(arm, share) => Some((arm, share)),
                _ => None,
            })
    }

    pub(crate) fn state(&self, r: usize, t: i64, who: Who) -> RequestState {
        let route = &self.routes[r];
        let mut state = match &route.backend {
            Backend::Fleet(f) => RequestState {
                model: f.model.clone(),
                adapter: f.adapter.as_ref().map(|a| a.id(a.version)),
                image: Some(f.image.clone()),
                prompt_version: route.prompt_version,
                kv: Some(f.kv),
                latency: 1.0,
                ttft_share: route.ttft_share,
                errors: 0.0,
                refusal: None,
                step_factor: [1.0; 3],
                network: 1.0,
            },
            Backend::Providers(p) => RequestState {
                model: p[who.provider].model.to_owned(),
                adapter: None,
                image: None,
                prompt_version: route.prompt_version,
                kv: None,
                latency: 1.0,
                ttft_share: route.ttft_share,
                errors: 0.0,
                refusal: None,
                step_factor: [1.0; 3],
                network: 1.0,
            },
        };
        for c in self.changes.iter().filter(|c| c.route == r && c.at <= t) {
            if !c.scope.applies(who) {
                continue;
            }
            match &c.set {
                Some(Setting::Adapter(v)) => {
                    let adapter = route.fleet().and_then(|f| f.adapter.as_ref());
                    state.adapter = adapter.map(|a| a.id(*v));
                }
                Some(Setting::Image(image)) => state.image = Some(image.clone()),
                Some(Setting::Model(model)) => state.model = model.clone(),
                Some(Setting::Prompt(v)) => state.prompt_version = *v,
                None => {}
            }
            let e = &c.effect;
            state.latency *= e.latency;
            state.errors += e.errors;
            if let Some(share) = e.ttft_share {
                state.ttft_share = share;
            }
            if e.refusal.is_some() {
                state.refusal = e.refusal;
            }
            if let Some(kv) = e.kv {
                state.kv = Some(kv);
            }
            if let Some((step, factor)) = e.step {
                state.step_factor[step.index()] *= factor;
            }
            state.network *= e.network;
        }
        state
    }
}

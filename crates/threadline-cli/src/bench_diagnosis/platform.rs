//! The platform a scenario runs — routes, their backends (a fleet of inference
//! instances or hosted providers), the steps around the model call — and the changes
//! made to it over the simulated hours: one injected fault, decoy changes near its
//! onset, harmless changes on healthy routes. Everything is drawn from the scenario's
//! random generator; nothing about the diagnosis is known here.

use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::Rng;

/// Simulated minutes per scenario; the fault's onset falls in `ONSET`.
pub(crate) const MINUTES: i64 = 120;
const ONSET: std::ops::RangeInclusive<i64> = 75..=100;

/// The kinds of fault injected, one per scenario, in turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
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
}

impl FaultKind {
    pub(crate) const ALL: [FaultKind; 16] = [
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
        }
    }
}

/// A step of a request besides the model call: a plain span of its own service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// `get_profile` on `user-profile`, before everything else.
    Profile,
    /// `search_docs` on `docs-index`, before the model call.
    Retrieval,
    /// `lookup_account` on `tools-api`, after the model call.
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

    fn index(self) -> usize {
        self as usize
    }
}

/// A LoRA adapter and the dataset its training runs read.
#[derive(Clone, Debug)]
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
#[derive(Clone, Debug)]
pub(crate) struct Fleet {
    pub(crate) instances: Vec<String>,
    pub(crate) model: String,
    pub(crate) adapter: Option<Adapter>,
    pub(crate) image: String,
    pub(crate) kv: f64,
}

/// A hosted model API and its share of a route's calls.
#[derive(Clone, Debug)]
pub(crate) struct Provider {
    pub(crate) name: &'static str,
    pub(crate) model: &'static str,
    pub(crate) share: f64,
}

#[derive(Clone, Debug)]
pub(crate) enum Backend {
    Fleet(Fleet),
    Providers(Vec<Provider>),
}

#[derive(Clone, Debug)]
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
}

impl Route {
    fn fleet(&self) -> Option<&Fleet> {
        match &self.backend {
            Backend::Fleet(f) => Some(f),
            Backend::Providers(_) => None,
        }
    }

    fn instance_count(&self) -> usize {
        self.fleet().map_or(0, |f| f.instances.len())
    }
}

/// Which of a route's requests a change applies to.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Scope {
    All,
    /// Requests served by these instances (indexes into the fleet).
    Instances(Vec<usize>),
    AbGroup(&'static str),
    /// From the change on, this share of the requests is tagged `canary`.
    Canary(f64),
    /// Calls to this provider (index into the route's providers).
    Provider(usize),
}

/// What a change visibly sets.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Setting {
    Adapter(u32),
    Image(String),
    Model(String),
    Prompt(u32),
}

/// How a request is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `llm.rejection.reason = context_overflow`.
    ContextOverflow,
    /// A 429 from a provider: `error.type = RateLimitError`.
    RateLimit,
}

/// What a change does to the requests it applies to (`Effect::NONE`: harmless).
#[derive(Clone, Copy, Debug, PartialEq)]
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
    /// A step's duration factor.
    pub(crate) step: Option<(Step, f64)>,
}

impl Effect {
    pub(crate) const NONE: Effect = Effect {
        latency: 1.0,
        ttft_share: None,
        errors: 0.0,
        refusal: None,
        kv: None,
        step: None,
    };
}

#[derive(Clone, Debug)]
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
#[derive(Clone, Debug)]
pub(crate) struct Fault {
    pub(crate) kind: FaultKind,
    pub(crate) route: usize,
    pub(crate) onset: i64,
    /// The RCA subject of the true cause.
    pub(crate) cause: String,
}

#[derive(Clone, Debug)]
pub(crate) struct Scenario {
    pub(crate) routes: Vec<Route>,
    /// Sorted by minute.
    pub(crate) changes: Vec<Change>,
    pub(crate) runs: Vec<TrainingRun>,
    /// Models that appear only through a change (a model swap's new model).
    pub(crate) extra_models: Vec<String>,
    pub(crate) fault: Fault,
}

const ROUTE_PATHS: [&str; 7] = [
    "/v1/chat",
    "/v1/support",
    "/v1/summarize",
    "/v1/search",
    "/v1/agent",
    "/v1/extract",
    "/v1/translate",
];
const MODELS: [&str; 4] = [
    "meta-llama/Meta-Llama-3-8B-Instruct",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "Qwen/Qwen2.5-7B-Instruct",
    "google/gemma-2-9b-it",
];
const PROVIDERS: [(&str, &str); 3] = [
    ("openai", "gpt-4o-mini"),
    ("azure.ai.openai", "gpt-4o-mini"),
    ("anthropic", "claude-3-5-haiku"),
];

fn uniform(rng: &mut StdRng, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * rng.random::<f64>()
}

/// Draws a platform, its noise, a fault of `kind`, decoys and harmless changes.
pub(crate) fn generate(rng: &mut StdRng, kind: FaultKind) -> Scenario {
    let mut paths = ROUTE_PATHS.to_vec();
    paths.shuffle(rng);
    let n_routes = rng.random_range(3..=4);
    let mut next_instance = 1;
    let mut routes: Vec<Route> = paths[..n_routes]
        .iter()
        .map(|path| {
            let slug = path.trim_start_matches("/v1/");
            let backend = if rng.random_bool(0.8) {
                let n = rng.random_range(2..=4);
                let instances = (0..n)
                    .map(|k| format!("i-{}", next_instance + k))
                    .collect();
                next_instance += n;
                Backend::Fleet(Fleet {
                    instances,
                    model: MODELS.choose(rng).copied().unwrap_or(MODELS[0]).to_owned(),
                    adapter: rng.random_bool(0.7).then(|| Adapter {
                        name: format!("{slug}-lora"),
                        version: rng.random_range(2..=9),
                        dataset: format!("{slug}-examples"),
                    }),
                    image: format!("ghcr.io/acme/vllm:0.6.{}", rng.random_range(0..4)),
                    kv: uniform(rng, 0.72, 0.9),
                })
            } else {
                providers(rng)
            };
            let mut steps = Vec::new();
            for step in Step::ALL {
                if rng.random_bool(0.35) {
                    steps.push(step);
                }
            }
            let mut burst_minutes = Vec::new();
            let mut m = 0;
            while m < MINUTES {
                if rng.random_bool(0.012) {
                    burst_minutes.push(m);
                    m += 3;
                } else {
                    m += 1;
                }
            }
            Route {
                path: (*path).to_owned(),
                route_key: if rng.random_bool(0.5) {
                    "api.route"
                } else {
                    "http.route"
                },
                rate: uniform(rng, 30.0, 60.0),
                call_ms: uniform(rng, 500.0, 1600.0),
                ttft_share: uniform(rng, 0.12, 0.25),
                backend,
                prompt_template: format!("{slug}-system"),
                prompt_version: rng.random_range(1..=6),
                steps,
                burst_minutes,
            }
        })
        .collect();
    let faulty = rng.random_range(0..routes.len());
    prepare(&mut routes[faulty], kind, rng, &mut next_instance);
    let onset = rng.random_range(ONSET);
    let mut scenario = Scenario {
        runs: Vec::new(),
        extra_models: Vec::new(),
        changes: Vec::new(),
        fault: Fault {
            kind,
            route: faulty,
            onset,
            cause: String::new(),
        },
        routes,
    };
    for r in 0..scenario.routes.len() {
        if let Some(adapter) = scenario.routes[r].fleet().and_then(|f| f.adapter.clone()) {
            let end = -rng.random_range(120..600);
            scenario.runs.push(TrainingRun {
                version: adapter.version,
                adapter,
                dataset_version: 1,
                drifted: false,
                start: end - rng.random_range(30..120),
                end,
            });
        }
    }
    let mut versions = Versions::of(&scenario.routes);
    // Decoys: harmless changes near the onset, on the faulty route (a few minutes
    // before, so the data can tell them apart) or elsewhere (any minute around it).
    for _ in 0..rng.random_range(1..=3) {
        let (route, at) = if rng.random_bool(0.5) {
            (faulty, onset - rng.random_range(2..=6))
        } else {
            let r = rng.random_range(0..scenario.routes.len());
            let at = if r == faulty {
                onset - rng.random_range(2..=6)
            } else {
                onset + rng.random_range(-5..=1)
            };
            (r, at)
        };
        harmless(&mut scenario, &mut versions, rng, route, at);
    }
    // Harmless changes on the healthy routes, any time.
    for r in 0..scenario.routes.len() {
        if r != faulty {
            for _ in 0..rng.random_range(1..=2) {
                let at = rng.random_range(10..MINUTES - 5);
                harmless(&mut scenario, &mut versions, rng, r, at);
            }
        }
    }
    inject(&mut scenario, &mut versions, rng);
    scenario.changes.sort_by_key(|c| c.at);
    scenario
}

fn providers(rng: &mut StdRng) -> Backend {
    let mut pool = PROVIDERS.to_vec();
    pool.shuffle(rng);
    let share = uniform(rng, 0.4, 0.7);
    Backend::Providers(vec![
        Provider {
            name: pool[0].0,
            model: pool[0].1,
            share,
        },
        Provider {
            name: pool[1].0,
            model: pool[1].1,
            share: 1.0 - share,
        },
    ])
}

/// Makes the faulty route one the fault can happen on.
fn prepare(route: &mut Route, kind: FaultKind, rng: &mut StdRng, next_instance: &mut usize) {
    use FaultKind::*;
    if kind == ProviderRateLimit {
        if !matches!(route.backend, Backend::Providers(_)) {
            route.backend = providers(rng);
        }
        return;
    }
    let needs_fleet = !matches!(kind, RetrieverSlow | ToolSlow | UpstreamSlow | AbArm | GrayTag);
    if needs_fleet && route.fleet().is_none() {
        let n = rng.random_range(2..=4);
        route.backend = Backend::Fleet(Fleet {
            instances: (0..n).map(|k| format!("i-{}", *next_instance + k)).collect(),
            model: MODELS[0].to_owned(),
            adapter: None,
            image: "ghcr.io/acme/vllm:0.6.1".to_owned(),
            kv: uniform(rng, 0.72, 0.9),
        });
        *next_instance += n;
    }
    let slug = route.path.trim_start_matches("/v1/").to_owned();
    if let Backend::Fleet(fleet) = &mut route.backend {
        match kind {
            AdapterHotSwap | AdapterSwap | DatasetDrift if fleet.adapter.is_none() => {
                fleet.adapter = Some(Adapter {
                    name: format!("{slug}-lora"),
                    version: rng.random_range(2..=9),
                    dataset: format!("{slug}-examples"),
                });
            }
            ModelSwap => fleet.adapter = None,
            _ => {}
        }
        let partial = matches!(
            kind,
            AdapterHotSwap | KvCollapse | ImagePartial | InstanceErrors
        );
        if partial && fleet.instances.len() < 2 {
            fleet.instances.push(format!("i-{}", *next_instance));
            *next_instance += 1;
        }
    }
    let step = match kind {
        RetrieverSlow => Some(Step::Retrieval),
        ToolSlow => Some(Step::Tool),
        UpstreamSlow => Some(Step::Profile),
        _ => None,
    };
    if let Some(step) = step.filter(|s| !route.steps.contains(s)) {
        route.steps.push(step);
        route.steps.sort_by_key(|s| s.index());
    }
}

/// The next unused version of each route's adapter, image and prompt.
struct Versions {
    adapter: Vec<u32>,
    image: Vec<u32>,
    prompt: Vec<u32>,
}

impl Versions {
    fn of(routes: &[Route]) -> Self {
        Self {
            adapter: routes
                .iter()
                .map(|r| r.fleet().and_then(|f| f.adapter.as_ref()).map_or(1, |a| a.version + 1))
                .collect(),
            image: routes.iter().map(|_| 0).collect(),
            prompt: routes.iter().map(|r| r.prompt_version + 1).collect(),
        }
    }

    fn take(slot: &mut u32) -> u32 {
        *slot += 1;
        *slot - 1
    }

    /// A new image for route `r`: the next minor of its current one.
    fn image(&mut self, routes: &[Route], r: usize) -> String {
        let base = routes[r].fleet().map_or("ghcr.io/acme/vllm:0.6.0", |f| &f.image);
        let n = Self::take(&mut self.image[r]);
        format!("{base}.{}", n + 1)
    }
}

/// Subset of `n` instances: 1 up to half of them (at least one left out).
fn some_instances(rng: &mut StdRng, n: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (0..n).collect();
    all.shuffle(rng);
    let k = rng.random_range(1..=(n / 2).max(1));
    let mut some = all[..k].to_vec();
    some.sort_unstable();
    some
}

/// A new adapter version trained on the route's dataset (drifted or not), its run
/// completed `ago` minutes before `at`.
fn new_adapter(
    scenario: &mut Scenario,
    versions: &mut Versions,
    rng: &mut StdRng,
    r: usize,
    at: i64,
    drifted: bool,
) -> Option<(u32, Adapter)> {
    let adapter = scenario.routes[r].fleet()?.adapter.clone()?;
    let version = Versions::take(&mut versions.adapter[r]);
    let end = at - if drifted {
        rng.random_range(8..=20)
    } else {
        rng.random_range(15..=90)
    };
    scenario.runs.push(TrainingRun {
        adapter: adapter.clone(),
        version,
        dataset_version: if drifted { 2 } else { 1 },
        drifted,
        start: end - rng.random_range(20..=60),
        end,
    });
    Some((version, adapter))
}

/// A change that does nothing to the requests: a prompt bump, an image rolled out to
/// some or all instances, a new adapter version.
fn harmless(
    scenario: &mut Scenario,
    versions: &mut Versions,
    rng: &mut StdRng,
    r: usize,
    at: i64,
) {
    let n = scenario.routes[r].instance_count();
    let has_adapter = scenario.routes[r]
        .fleet()
        .is_some_and(|f| f.adapter.is_some());
    let choice = rng.random_range(0..3);
    let (scope, set) = match choice {
        1 if n > 0 => {
            let scope = if rng.random_bool(0.5) {
                Scope::All
            } else {
                Scope::Instances(some_instances(rng, n))
            };
            (scope, Setting::Image(versions.image(&scenario.routes, r)))
        }
        2 if has_adapter => match new_adapter(scenario, versions, rng, r, at, false) {
            Some((v, _)) => (Scope::All, Setting::Adapter(v)),
            None => return,
        },
        _ => (
            Scope::All,
            Setting::Prompt(Versions::take(&mut versions.prompt[r])),
        ),
    };
    scenario.changes.push(Change {
        at,
        route: r,
        scope,
        set: Some(set),
        effect: Effect::NONE,
    });
}

/// The fault, its change and its true cause.
fn inject(scenario: &mut Scenario, versions: &mut Versions, rng: &mut StdRng) {
    use FaultKind::*;
    let (r, at, kind) = (scenario.fault.route, scenario.fault.onset, scenario.fault.kind);
    let n = scenario.routes[r].instance_count();
    let slower = |rng: &mut StdRng, lo: f64, hi: f64| Effect {
        latency: uniform(rng, lo, hi),
        ..Effect::NONE
    };
    let failing = |rng: &mut StdRng, lo: f64, hi: f64| Effect {
        errors: uniform(rng, lo, hi),
        ..Effect::NONE
    };
    let slower_or_failing = |rng: &mut StdRng| {
        if rng.random_bool(0.5) {
            slower(rng, 1.6, 2.6)
        } else {
            failing(rng, 0.08, 0.25)
        }
    };
    let route = scenario.routes[r].clone();
    let (scope, set, effect, cause) = match kind {
        AdapterHotSwap | AdapterSwap | DatasetDrift => {
            let drifted = kind == DatasetDrift;
            let Some((v, adapter)) = new_adapter(scenario, versions, rng, r, at, drifted) else {
                unreachable!("prepare gives the route an adapter");
            };
            let (scope, effect) = match kind {
                AdapterHotSwap => (Scope::Instances(some_instances(rng, n)), slower(rng, 1.8, 3.0)),
                AdapterSwap => (Scope::All, slower_or_failing(rng)),
                _ => (Scope::All, failing(rng, 0.08, 0.2)),
            };
            let cause = if drifted {
                format!("dataset_version:warehouse:{}@v2", adapter.dataset)
            } else {
                format!("adapter:{}", adapter.id(v))
            };
            (scope, Some(Setting::Adapter(v)), effect, cause)
        }
        ImageSwap | ImagePartial | TtftRegression => {
            let image = versions.image(&scenario.routes, r);
            let (scope, effect) = match kind {
                ImageSwap => (Scope::All, slower(rng, 1.5, 2.5)),
                ImagePartial => (Scope::Instances(some_instances(rng, n)), slower(rng, 1.8, 3.0)),
                _ => (
                    Scope::All,
                    Effect {
                        ttft_share: Some(uniform(rng, 0.5, 0.75)),
                        ..Effect::NONE
                    },
                ),
            };
            let cause = format!("image:{image}");
            (scope, Some(Setting::Image(image)), effect, cause)
        }
        ModelSwap => {
            let current = route.fleet().map(|f| f.model.clone()).unwrap_or_default();
            let model = MODELS
                .iter()
                .copied()
                .filter(|m| *m != current)
                .collect::<Vec<_>>()
                .choose(rng)
                .copied()
                .unwrap_or(MODELS[1])
                .to_owned();
            scenario.extra_models.push(model.clone());
            let cause = format!("model:{model}");
            (Scope::All, Some(Setting::Model(model)), slower_or_failing(rng), cause)
        }
        PromptOverflow => {
            let v = Versions::take(&mut versions.prompt[r]);
            let effect = Effect {
                refusal: Some((Refusal::ContextOverflow, uniform(rng, 0.08, 0.25))),
                ..Effect::NONE
            };
            let cause = format!("prompt:{}@v{v}", route.prompt_template);
            (Scope::All, Some(Setting::Prompt(v)), effect, cause)
        }
        KvCollapse | InstanceErrors => {
            let i = rng.random_range(0..n);
            let effect = if kind == KvCollapse {
                Effect {
                    kv: Some(uniform(rng, 0.05, 0.3)),
                    latency: uniform(rng, 1.8, 2.6),
                    ..Effect::NONE
                }
            } else {
                failing(rng, 0.2, 0.45)
            };
            let name = route.fleet().map(|f| f.instances[i].clone()).unwrap_or_default();
            (Scope::Instances(vec![i]), None, effect, format!("instance={name}"))
        }
        RetrieverSlow | ToolSlow | UpstreamSlow => {
            let (step, factor) = match kind {
                RetrieverSlow => (Step::Retrieval, uniform(rng, 6.0, 12.0)),
                ToolSlow => (Step::Tool, uniform(rng, 4.0, 8.0)),
                _ => (Step::Profile, uniform(rng, 15.0, 40.0)),
            };
            let effect = Effect {
                step: Some((step, factor)),
                ..Effect::NONE
            };
            let cause = format!("service={} span={}", step.service(), step.span());
            (Scope::All, None, effect, cause)
        }
        ProviderRateLimit => {
            let Backend::Providers(providers) = &route.backend else {
                unreachable!("prepare gives the route providers");
            };
            let p = rng.random_range(0..providers.len());
            let effect = Effect {
                refusal: Some((Refusal::RateLimit, uniform(rng, 0.2, 0.5))),
                ..Effect::NONE
            };
            let cause = format!("provider={}", providers[p].name);
            (Scope::Provider(p), None, effect, cause)
        }
        AbArm => (
            Scope::AbGroup("B"),
            None,
            slower(rng, 1.6, 2.5),
            "ab_group=B".to_owned(),
        ),
        GrayTag => (
            Scope::Canary(uniform(rng, 0.1, 0.3)),
            None,
            if rng.random_bool(0.5) {
                slower(rng, 2.0, 3.0)
            } else {
                failing(rng, 0.15, 0.35)
            },
            "gray_tag=canary".to_owned(),
        ),
    };
    scenario.fault.cause = cause;
    scenario.changes.push(Change {
        at,
        route: r,
        scope,
        set,
        effect,
    });
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
}

/// Who a request is: which instance or provider serves it, its A/B arm, whether it is
/// in the canary.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Who {
    pub(crate) instance: usize,
    pub(crate) provider: usize,
    pub(crate) ab_b: bool,
    pub(crate) canary: bool,
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
            .last()
            .unwrap_or(0.0)
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
            },
        };
        for c in self.changes.iter().filter(|c| c.route == r && c.at <= t) {
            let applies = match &c.scope {
                Scope::All => true,
                Scope::Instances(set) => set.contains(&who.instance),
                Scope::AbGroup(_) => who.ab_b,
                Scope::Canary(_) => who.canary,
                Scope::Provider(p) => *p == who.provider,
            };
            if !applies {
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
        }
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn every_kind_makes_a_fault_with_a_cause_on_a_route_that_can_have_it() {
        for seed in 0..40 {
            for kind in FaultKind::ALL {
                let mut rng = StdRng::seed_from_u64(seed);
                let s = generate(&mut rng, kind);
                let f = &s.fault;
                assert!(!f.cause.is_empty(), "{kind:?}");
                assert!(ONSET.contains(&f.onset));
                let change = s
                    .changes
                    .iter()
                    .find(|c| c.route == f.route && c.at == f.onset && c.effect != Effect::NONE)
                    .unwrap_or_else(|| panic!("{kind:?}: no faulty change"));
                if let Scope::Instances(set) = &change.scope {
                    let n = s.routes[f.route].instance_count();
                    assert!(!set.is_empty() && set.iter().all(|i| *i < n), "{kind:?}");
                    if kind != FaultKind::AdapterSwap {
                        assert!(set.len() < n, "{kind:?}: a partial fault covers a subset");
                    }
                }
                // Every change but the fault is harmless; decoys on the faulty route
                // come before the onset.
                for c in &s.changes {
                    if c.effect == Effect::NONE && c.route == f.route {
                        assert!((f.onset - 6..=f.onset - 2).contains(&c.at), "{kind:?}: {c:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn kind_names_are_the_command_line_names() {
        use clap::ValueEnum;
        for kind in FaultKind::ALL {
            let value = kind.to_possible_value().expect("every kind is a value");
            assert_eq!(value.get_name(), kind.as_str());
        }
    }

    #[test]
    fn a_request_sees_the_changes_that_apply_to_it() {
        let mut rng = StdRng::seed_from_u64(3);
        let s = generate(&mut rng, FaultKind::InstanceErrors);
        let f = &s.fault;
        let Some(Change {
            scope: Scope::Instances(set),
            ..
        }) = s.changes.iter().find(|c| c.at == f.onset && c.route == f.route && c.effect != Effect::NONE)
        else {
            panic!("instance fault");
        };
        let hit = Who {
            instance: set[0],
            provider: 0,
            ab_b: false,
            canary: false,
        };
        let spared = Who {
            instance: (0..s.routes[f.route].instance_count())
                .find(|i| !set.contains(i))
                .unwrap(),
            ..hit
        };
        assert_eq!(s.state(f.route, f.onset - 1, hit).errors, 0.0);
        assert!(s.state(f.route, f.onset, hit).errors >= 0.2);
        assert_eq!(s.state(f.route, f.onset, spared).errors, 0.0);
    }
}

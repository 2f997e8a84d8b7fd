//! Drawing a scenario: the platform (routes, fleets or providers, steps, adapters,
//! prompt versions, error bursts), decoy changes near the fault's onset, harmless
//! changes on healthy routes, and the fault itself with its true cause.

use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::Rng;

use super::platform::*;

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

/// Draws a platform, its noise, a fault of `kind` in `variant`, decoys and harmless
/// changes.
pub(crate) fn generate(rng: &mut StdRng, kind: FaultKind, variant: Variant) -> Scenario {
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
                let instances = (0..n).map(|k| format!("i-{}", next_instance + k)).collect();
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
                convention: if rng.random_bool(0.3) {
                    Convention::OpenInference
                } else {
                    Convention::GenAi
                },
            }
        })
        .collect();
    let faulty = rng.random_range(0..routes.len());
    prepare(&mut routes[faulty], kind, variant, rng, &mut next_instance);
    let onset = rng.random_range(ONSET);
    let mut scenario = Scenario {
        runs: Vec::new(),
        extra_models: Vec::new(),
        changes: Vec::new(),
        canary_instance: None,
        fault: Fault {
            kind,
            variant,
            route: faulty,
            onset,
            first_onset: onset,
            cause: String::new(),
            cause_value: None,
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
    if variant == Variant::Skewed {
        skew(&mut scenario, rng);
    }
    scenario.changes.sort_by_key(|c| c.at);
    scenario
}

/// A value of the faulty route worse from the first minute on and all along — an
/// instance that serves the long prompts (slower, a few more errors), a provider that
/// errs a little more — chosen apart from what the fault hits: the bad requests were
/// concentrated on it before the onset as after.
fn skew(scenario: &mut Scenario, rng: &mut StdRng) {
    let r = scenario.fault.route;
    let hit = scenario.fault_change().map(|c| c.scope.clone());
    let scope = match &scenario.routes[r].backend {
        Backend::Fleet(f) => {
            let spared: Vec<usize> = (0..f.instances.len())
                .filter(|i| !matches!(&hit, Some(Scope::Instances(set)) if set.contains(i)))
                .filter(|i| scenario.canary_instance != Some(*i))
                .collect();
            match spared.choose(rng) {
                Some(i) => Scope::Instances(vec![*i]),
                None => return,
            }
        }
        Backend::Providers(p) => {
            let spared: Vec<usize> = (0..p.len())
                .filter(|i| hit != Some(Scope::Provider(*i)))
                .collect();
            match spared.choose(rng) {
                Some(i) => Scope::Provider(*i),
                None => return,
            }
        }
    };
    scenario.changes.push(Change {
        at: 0,
        route: r,
        scope,
        set: None,
        effect: Effect {
            latency: uniform(rng, 1.4, 1.9),
            errors: uniform(rng, 0.01, 0.03),
            ..Effect::NONE
        },
    });
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

/// Makes the faulty route one the fault can happen on, at the variant's traffic.
fn prepare(
    route: &mut Route,
    kind: FaultKind,
    variant: Variant,
    rng: &mut StdRng,
    next_instance: &mut usize,
) {
    use FaultKind::*;
    match variant {
        Variant::Quiet => route.rate = uniform(rng, 5.0, 20.0),
        Variant::Busy => route.rate = uniform(rng, 150.0, 500.0),
        _ => {}
    }
    // OpenInference has no time to first token: such a fault would not be observable.
    if kind == TtftRegression {
        route.convention = Convention::GenAi;
    }
    if kind == ProviderRateLimit {
        if !matches!(route.backend, Backend::Providers(_)) {
            route.backend = providers(rng);
        }
        return;
    }
    // A canary pinned to one instance needs a fleet.
    let needs_fleet = !matches!(
        kind,
        RetrieverSlow | ToolSlow | UpstreamSlow | DependencyNetwork | AbArm | GrayTag
    ) || (kind == GrayTag && variant == Variant::Appearing);
    if needs_fleet && route.fleet().is_none() {
        let n = rng.random_range(2..=4);
        route.backend = Backend::Fleet(Fleet {
            instances: (0..n)
                .map(|k| format!("i-{}", *next_instance + k))
                .collect(),
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
        ) || matches!(
            variant,
            Variant::Skewed | Variant::Appearing | Variant::TakingOver
        );
        if partial && fleet.instances.len() < 2 {
            fleet.instances.push(format!("i-{}", *next_instance));
            *next_instance += 1;
        }
    }
    let step = match kind {
        RetrieverSlow => Some(Step::Retrieval),
        ToolSlow | DependencyNetwork => Some(Step::Tool),
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
                .map(|r| {
                    r.fleet()
                        .and_then(|f| f.adapter.as_ref())
                        .map_or(1, |a| a.version + 1)
                })
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
        let base = routes[r]
            .fleet()
            .map_or("ghcr.io/acme/vllm:0.6.0", |f| &f.image);
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
    let end = at
        - if drifted {
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
fn harmless(scenario: &mut Scenario, versions: &mut Versions, rng: &mut StdRng, r: usize, at: i64) {
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
    let (r, at, kind) = (
        scenario.fault.route,
        scenario.fault.onset,
        scenario.fault.kind,
    );
    let appearing = scenario.fault.variant == Variant::Appearing;
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
                AdapterHotSwap => (
                    Scope::Instances(some_instances(rng, n)),
                    slower(rng, 1.8, 3.0),
                ),
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
                ImagePartial => (
                    Scope::Instances(some_instances(rng, n)),
                    slower(rng, 1.8, 3.0),
                ),
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
            (
                if appearing {
                    Scope::Instances(some_instances(rng, n))
                } else {
                    Scope::All
                },
                Some(Setting::Model(model)),
                slower_or_failing(rng),
                cause,
            )
        }
        PromptOverflow => {
            let v = Versions::take(&mut versions.prompt[r]);
            let effect = Effect {
                refusal: Some((Refusal::ContextOverflow, uniform(rng, 0.08, 0.25))),
                ..Effect::NONE
            };
            let cause = format!("prompt:{}@v{v}", route.prompt_template);
            let scope = if appearing {
                Scope::Share(uniform(rng, 0.2, 0.5))
            } else {
                Scope::All
            };
            (scope, Some(Setting::Prompt(v)), effect, cause)
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
            let name = route
                .fleet()
                .map(|f| f.instances[i].clone())
                .unwrap_or_default();
            (
                Scope::Instances(vec![i]),
                None,
                effect,
                format!("instance={name}"),
            )
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
        DependencyNetwork => {
            // 360–750 ms more on the way to crm-api and back (as much as a slower
            // tool adds).
            let effect = Effect {
                network: uniform(rng, 120.0, 250.0),
                ..Effect::NONE
            };
            (Scope::All, None, effect, format!("service={CRM}"))
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
        AbArm if appearing => (
            Scope::NewArm("C", uniform(rng, 0.2, 0.5)),
            None,
            slower(rng, 1.6, 2.5),
            "ab_group=C".to_owned(),
        ),
        AbArm => (
            Scope::AbGroup("B"),
            None,
            slower(rng, 1.6, 2.5),
            "ab_group=B".to_owned(),
        ),
        GrayTag => (
            {
                if appearing && n > 0 {
                    scenario.canary_instance = Some(rng.random_range(0..n));
                }
                Scope::Canary(uniform(rng, 0.1, 0.3))
            },
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
    scenario.fault.cause_value = match &set {
        Some(Setting::Adapter(v)) => route
            .fleet()
            .and_then(|f| f.adapter.as_ref())
            .map(|a| format!("adapter={}", a.id(*v))),
        Some(Setting::Image(image)) => Some(format!("image={image}")),
        Some(Setting::Prompt(v)) => Some(format!("prompt_version=v{v}")),
        Some(Setting::Model(_)) | None => None,
    };
    // Taking over: the same change tried first on part of the traffic.
    if scenario.fault.variant == Variant::TakingOver && scope == Scope::All {
        let tried = match kind {
            AdapterSwap | ImageSwap | ModelSwap if n > 1 => {
                Scope::Instances(vec![rng.random_range(0..n)])
            }
            _ => Scope::Share(uniform(rng, 0.05, 0.15)),
        };
        let tried_at = at - rng.random_range(20..=40);
        scenario.fault.first_onset = tried_at;
        scenario.changes.push(Change {
            at: tried_at,
            route: r,
            scope: tried,
            set: set.clone(),
            effect,
        });
    }
    // Paired: the adapter goes everywhere harmlessly, and is bad only where a new
    // image runs, which reached some instances minutes before without harm.
    if scenario.fault.variant == Variant::Paired && scope == Scope::All && n > 1 {
        let on = Scope::Instances(some_instances(rng, n));
        let image = versions.image(&scenario.routes, r);
        // No decoy re-images the route since: the instances keep the image the
        // adapter is bad on.
        scenario
            .changes
            .retain(|c| c.route != r || !matches!(c.set, Some(Setting::Image(_))));
        scenario.changes.push(Change {
            at: at - rng.random_range(8..=25),
            route: r,
            scope: on.clone(),
            set: Some(Setting::Image(image)),
            effect: Effect::NONE,
        });
        scenario.changes.push(Change {
            at,
            route: r,
            scope,
            set,
            effect: Effect::NONE,
        });
        scenario.changes.push(Change {
            at,
            route: r,
            scope: on,
            set: None,
            effect,
        });
        return;
    }
    scenario.changes.push(Change {
        at,
        route: r,
        scope,
        set,
        effect,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_diagnosis::platform::ONSET;
    use rand::SeedableRng;

    #[test]
    fn every_kind_makes_a_fault_with_a_cause_on_a_route_that_can_have_it() {
        for seed in 0..40 {
            for (kind, variant) in FaultKind::ALL
                .into_iter()
                .flat_map(|k| Variant::of_kind(k).iter().map(move |v| (k, *v)))
            {
                let mut rng = StdRng::seed_from_u64(seed);
                let s = generate(&mut rng, kind, variant);
                let f = &s.fault;
                assert!(!f.cause.is_empty(), "{kind:?}");
                assert!(ONSET.contains(&f.onset));
                let change = s
                    .fault_change()
                    .unwrap_or_else(|| panic!("{kind:?}: no faulty change"));
                if let Scope::Instances(set) = &change.scope {
                    let n = s.routes[f.route].instance_count();
                    assert!(!set.is_empty() && set.iter().all(|i| *i < n), "{kind:?}");
                    if kind != FaultKind::AdapterSwap {
                        assert!(set.len() < n, "{kind:?}: a partial fault covers a subset");
                    }
                }
                // Every change but the fault is harmless; decoys on the faulty route
                // come before the onset (a paired fault's image, 8–25 minutes before,
                // and its adapter, at the onset, are harmless alone).
                for c in &s.changes {
                    if c.effect == Effect::NONE && c.route == f.route {
                        let paired = variant == Variant::Paired
                            && (c.at == f.onset || (f.onset - 25..=f.onset - 8).contains(&c.at));
                        assert!(
                            paired || (f.onset - 6..=f.onset - 2).contains(&c.at),
                            "{kind:?}: {c:?}"
                        );
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
        let s = generate(&mut rng, FaultKind::InstanceErrors, Variant::Plain);
        let f = &s.fault;
        let Some(Change {
            scope: Scope::Instances(set),
            ..
        }) = s.fault_change()
        else {
            panic!("instance fault");
        };
        let hit = Who {
            instance: set[0],
            provider: 0,
            arm: "A",
            canary: false,
            u: 0.5,
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

    #[test]
    fn a_paired_fault_is_bad_only_where_both_values_are() {
        for seed in 0..20 {
            let mut rng = StdRng::seed_from_u64(seed);
            let s = generate(&mut rng, FaultKind::AdapterSwap, Variant::Paired);
            let f = &s.fault;
            let on = |c: &Change| c.route == f.route;
            // The adapter everywhere at the onset, harmless by itself.
            let adapter = s
                .changes
                .iter()
                .find(|c| on(c) && matches!(c.set, Some(Setting::Adapter(_))) && c.at == f.onset)
                .expect("the adapter change");
            assert_eq!(
                (&adapter.scope, adapter.effect),
                (&Scope::All, Effect::NONE)
            );
            // The image before it on some instances, and the effect on those alone.
            let image = s
                .changes
                .iter()
                .find(|c| on(c) && matches!(c.set, Some(Setting::Image(_))))
                .expect("the image change");
            assert!(image.at < f.onset && image.effect == Effect::NONE);
            let effect = s.fault_change().expect("the effect");
            assert_eq!((&effect.scope, &effect.set), (&image.scope, &None));
            // No other image change on the route: the pair stays a pair.
            let images = s
                .changes
                .iter()
                .filter(|c| on(c) && matches!(c.set, Some(Setting::Image(_))));
            assert_eq!(images.count(), 1);
            assert!(f.cause.starts_with("adapter:"), "{}", f.cause);
        }
    }
}

//! `threadline bench diagnosis`: the fault simulator. Each scenario draws a platform
//! (routes on fleets of inference instances or on hosted providers, steps around the
//! model call, adapters trained on datasets, prompt templates, A/B arms, a canary
//! tag), two hours of traffic with realistic noise (daily rate cycle, lognormal
//! latency, bursts of errors), one injected fault of a given kind with random onset,
//! magnitude and share of the traffic, decoy changes near the onset and harmless
//! changes on healthy routes. It sends everything to a real server of its own (OTLP
//! over HTTP, OpenLineage events, the registry manifest), then scores what the server
//! found: an incident on the faulty route, none on the healthy ones, the detection
//! delay, and the rank of the injected cause in the RCA.
//!
//! Scenario `k` of seed `s` is the same on every run, whatever else runs; the fault
//! kinds take turns, so any `--scenarios` multiple of 16 covers them evenly.

mod faults;
mod oracle;
mod platform;
mod score;
mod traffic;

use std::time::Instant;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::{json, Value};

use crate::client::ApiClient;
use platform::{FaultKind, Variant};
use score::Outcome;
use threadline_analysis::DetectorConfig;

#[derive(Args)]
pub(crate) struct DiagnosisBenchArgs {
    /// Seeds of the generated scenarios, comma-separated (tune on one, report others).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    seed: Vec<u64>,
    /// Scenarios to generate and score per seed; the fault kinds take turns.
    #[arg(long, default_value_t = 32)]
    scenarios: usize,
    /// Only these fault kinds (comma-separated) [default: all 17].
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<FaultKind>,
    /// Run only scenario N of the (first) seed and print it: its platform, changes, every
    /// incident with its first candidates, and the faulty route's minutes around the onset.
    #[arg(long, value_name = "N")]
    only: Option<usize>,
    /// Print the figures as a Markdown table (for BENCHMARKS.md) instead of JSON.
    #[arg(long)]
    markdown: bool,
    /// The detector's sensitivity, robust standard deviations (the server's
    /// `[detector] sensitivity`) [default: the server's default]: measures what a
    /// stricter or looser detector trades between false incidents and prompt detection.
    #[arg(long, value_name = "SIGMAS")]
    sensitivity: Option<f64>,
}

/// One scenario against a fresh server.
async fn run_one(
    seed: u64,
    k: usize,
    kind: FaultKind,
    variant: Variant,
    detail: bool,
    detector: &DetectorConfig,
) -> anyhow::Result<(Outcome, usize, Option<Value>)> {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(k as u64));
    let scenario = faults::generate(&mut rng, kind, variant);
    let temp = tempfile::tempdir().context("cannot create a temporary directory")?;
    let overrides = crate::local_server::LocalServer::loopback(temp.path().join("data"));
    let mut config = threadline_server::ServerConfig::load(None, &overrides)?;
    config.detector = detector.clone();
    let server = crate::local_server::LocalServer::start(config).await?;
    let api = ApiClient::local(&format!("http://{}", server.addrs.http))?;
    // The last simulated minute ends now.
    let s0 = crate::synth::now_minute() - platform::MINUTES;
    api.send_json(
        reqwest::Method::PUT,
        "/api/v1/assets",
        &traffic::manifest(&scenario),
    )
    .await?;
    for event in traffic::lineage_events(&scenario, s0) {
        api.send_json(reqwest::Method::POST, "/api/v1/lineage", &event)
            .await?;
    }
    let (batches, served) = traffic::traffic(&mut rng, &scenario, s0);
    let prompt_chance = oracle::prompt_chance(&scenario, &served);
    let lone_minute_alarms = oracle::lone_minute_alarms(&scenario, &served, detector.alpha());
    let spans = batches.iter().map(crate::synth::span_count).sum();
    crate::synth::upload_traces(
        &server.addrs.otlp_http.to_string(),
        batches,
        &ProgressBar::hidden(),
    )
    .await?;
    let mut outcome = score::score(&api, k, &scenario, s0).await?;
    outcome.prompt_chance = prompt_chance;
    outcome.lone_minute_alarms = lone_minute_alarms;
    let details = if detail {
        Some(score::details(&api, &scenario, s0).await?)
    } else {
        None
    };
    server.stop().await?;
    Ok((outcome, spans, details))
}

/// Totals over some outcomes, of a detector whose tests call an ordinary minute out
/// with chance `alpha`.
fn totals(outcomes: &[&Outcome], alpha: f64) -> Value {
    let n = outcomes.len();
    let count = |f: &dyn Fn(&Outcome) -> bool| outcomes.iter().filter(|o| f(o)).count();
    let delays: Vec<i64> = outcomes
        .iter()
        .filter_map(|o| o.detection_delay_minutes)
        .collect();
    let mut rca: Vec<f64> = outcomes.iter().filter_map(|o| o.rca_ms).collect();
    rca.sort_by(f64::total_cmp);
    let pct = |k: usize| {
        if n == 0 {
            0.0
        } else {
            (1000.0 * k as f64 / n as f64).round() / 10.0
        }
    };
    // Detections later than the target (or none); of those of faults that fail
    // requests (`oracle`), those no test at the detector's α could have made in time,
    // those only one that alarms on a single minute could have, and those a test
    // that needs both minutes out could have.
    let late = |o: &Outcome| {
        o.detection_delay_minutes
            .is_none_or(|d| d > oracle::WITHIN_MINUTES)
    };
    let out_of_reach = count(&|o| late(o) && o.prompt_chance.is_some_and(|p| p.any >= alpha));
    let one_minute = count(&|o| {
        late(o)
            && o.prompt_chance
                .is_some_and(|p| p.any < alpha && p.each_minute >= alpha)
    });
    // The same over every fault that fails requests, late or not: how many prompt
    // detections any detector at this α could make.
    let beyond = |o: &Outcome, f: fn(&oracle::PromptChance) -> f64| {
        o.prompt_chance.is_some_and(|p| f(&p) >= alpha)
    };
    let top1 = count(&|o| o.rank == Some(1));
    let top3 = count(&|o| o.rank.is_some_and(|r| r <= 3));
    let found = count(&|o| o.found);
    json!({
        "scenarios": n,
        "faulty_route_found": found,
        "top1": top1,
        "top3": top3,
        "top1_pct": pct(top1),
        "top3_pct": pct(top3),
        "false_incidents": outcomes.iter().map(|o| o.false_incidents).sum::<usize>(),
        "early_incidents": outcomes.iter().map(|o| o.early_incidents).sum::<usize>(),
        "other_incidents": outcomes.iter().map(|o| o.other_incidents).sum::<usize>(),
        "detection_delay_minutes_max": delays.iter().max(),
        "detection_delay_minutes_mean": (!delays.is_empty())
            .then(|| (10.0 * delays.iter().sum::<i64>() as f64 / delays.len() as f64).round() / 10.0),
        "detected_within_2_minutes": delays.iter().filter(|d| **d <= oracle::WITHIN_MINUTES).count(),
        "late": count(&late),
        "late_out_of_reach": out_of_reach,
        "late_from_one_minute": one_minute,
        "lone_minute_alarms_on_healthy_routes": outcomes.iter().map(|o| o.lone_minute_alarms).sum::<usize>(),
        "late_within_reach": count(&|o| late(o) && o.prompt_chance.is_some_and(|p| p.each_minute < alpha)),
        "error_faults": count(&|o| o.prompt_chance.is_some()),
        "error_faults_out_of_reach": count(&|o| beyond(o, |p| p.any)),
        "error_faults_out_of_two_minute_reach": count(&|o| beyond(o, |p| p.each_minute)),
        "rca_ms_p50": rca.get(rca.len() / 2).map(|v| v.round()),
        "rca_ms_max": rca.last().map(|v| v.round()),
    })
}

fn markdown(report: &Value) -> String {
    let mut out = String::from(
        "| fault kind | scenarios | route found | top-1 | top-3 | false incidents | delay mean / max (min) | later than 2 min (out of any test's reach / of one that needs two minutes) | RCA p50 (ms) |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let row = |name: &str, t: &Value| {
        format!(
            "| {name} | {} | {} | {} ({}%) | {} ({}%) | {} | {} / {} | {} ({} / {}) | {} |\n",
            t["scenarios"],
            t["faulty_route_found"],
            t["top1"],
            t["top1_pct"],
            t["top3"],
            t["top3_pct"],
            t["false_incidents"],
            t["detection_delay_minutes_mean"],
            t["detection_delay_minutes_max"],
            t["late"],
            t["late_out_of_reach"],
            t["late_from_one_minute"],
            t["rca_ms_p50"],
        )
    };
    for (kind, t) in report["by_kind"].as_object().into_iter().flatten() {
        out.push_str(&row(kind, t));
    }
    for (variant, t) in report["by_variant"].as_object().into_iter().flatten() {
        out.push_str(&row(&format!("*{variant}*"), t));
    }
    out.push_str(&row("**all**", &report["totals"]));
    out
}

pub(crate) async fn run(args: DiagnosisBenchArgs) -> anyhow::Result<String> {
    let kinds = if args.kinds.is_empty() {
        FaultKind::ALL.to_vec()
    } else {
        args.kinds.clone()
    };
    let mut detector = DetectorConfig::default();
    if let Some(sensitivity) = args.sensitivity {
        detector.sensitivity = sensitivity;
        let problems = detector.problems("--");
        anyhow::ensure!(problems.is_empty(), "{}", problems.join("; "));
    }
    let alpha = detector.alpha();
    if let Some(k) = args.only {
        let kind = kinds[k % kinds.len()];
        let variant = Variant::of_scenario(kind, k, kinds.len());
        let seed = args.seed.first().copied().unwrap_or(1);
        let (outcome, _, details) = run_one(seed, k, kind, variant, true, &detector).await?;
        let mut out = details.unwrap_or_default();
        out["outcome"] = serde_json::to_value(&outcome)?;
        return Ok(serde_json::to_string_pretty(&out)?);
    }
    let bar = ProgressBar::new((args.scenarios * args.seed.len()) as u64);
    bar.set_style(
        ProgressStyle::with_template("scenarios {wide_bar} {pos}/{len} ({eta} left) {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let mut outcomes = Vec::new();
    let mut spans = 0;
    for &seed in &args.seed {
        for k in 0..args.scenarios {
            let kind = kinds[k % kinds.len()];
            let variant = Variant::of_scenario(kind, k, kinds.len());
            bar.set_message(format!(
                "seed {seed}: {} {}",
                kind.as_str(),
                variant.as_str()
            ));
            let (mut outcome, n, _) = run_one(seed, k, kind, variant, false, &detector)
                .await
                .with_context(|| {
                    format!(
                        "seed {seed}, scenario {k} ({} {})",
                        kind.as_str(),
                        variant.as_str()
                    )
                })?;
            outcome.seed = seed;
            spans += n;
            outcomes.push(outcome);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    // Totals per name a group of outcomes has, in the names' order.
    let grouped = |names: &mut dyn Iterator<Item = &'static str>,
                   name_of: fn(&Outcome) -> &'static str| {
        let mut out = serde_json::Map::new();
        for name in names {
            let of: Vec<&Outcome> = outcomes.iter().filter(|o| name_of(o) == name).collect();
            if !of.is_empty() {
                out.insert(name.to_owned(), totals(&of, alpha));
            }
        }
        out
    };
    let by_kind = grouped(&mut kinds.iter().map(|k| k.as_str()), |o| o.kind);
    let by_variant = grouped(&mut Variant::ALL.iter().map(|v| v.as_str()), |o| o.variant);
    let misses: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| {
            o.rank != Some(1)
                || o.false_incidents > 0
                || o.early_incidents > 0
                || o.detection_delay_minutes.is_some_and(|d| d > 2)
        })
        .collect();
    let report = json!({
        "seeds": args.seed,
        "sensitivity": detector.sensitivity,
        "alpha": alpha,
        "spans": spans,
        "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        "totals": totals(&outcomes.iter().collect::<Vec<_>>(), alpha),
        "by_kind": by_kind,
        "by_variant": by_variant,
        "misses": misses,
    });
    Ok(if args.markdown {
        markdown(&report)
    } else {
        serde_json::to_string_pretty(&report)?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(kind: &'static str, rank: Option<usize>, delay: Option<i64>) -> Outcome {
        Outcome {
            seed: 1,
            scenario: 0,
            kind,
            variant: "plain",
            route: "/v1/chat".into(),
            cause: "adapter:a@2".into(),
            found: delay.is_some(),
            metric: Some("p99_latency".into()),
            detection_delay_minutes: delay,
            rank,
            top: Vec::new(),
            false_incidents: usize::from(rank.is_none()),
            early_incidents: 0,
            other_incidents: 0,
            rca_ms: delay.map(|d| d as f64 * 10.0),
            prompt_chance: None,
            lone_minute_alarms: 0,
        }
    }

    #[test]
    fn totals_count_ranks_delays_and_false_incidents() {
        let mut all = [
            outcome("a", Some(1), Some(1)),
            outcome("a", Some(3), Some(2)),
            outcome("b", None, None),
            outcome("b", Some(2), Some(4)),
        ];
        // Missed, its errors no test could tell from chance; late, they were plain.
        let chance = |any, each_minute| Some(oracle::PromptChance { any, each_minute });
        all[2].prompt_chance = chance(0.02, 0.02);
        all[3].prompt_chance = chance(1e-9, 1e-8);
        let alpha = DetectorConfig::default().alpha();
        let t = totals(&all.iter().collect::<Vec<_>>(), alpha);
        assert_eq!(t["scenarios"], 4);
        assert_eq!(t["faulty_route_found"], 3);
        assert_eq!((t["top1"].as_u64(), t["top3"].as_u64()), (Some(1), Some(3)));
        assert_eq!(t["top3_pct"], 75.0);
        assert_eq!(t["false_incidents"], 1);
        assert_eq!(t["detection_delay_minutes_max"], 4);
        assert_eq!(t["detected_within_2_minutes"], 2);
        let late = [
            "late_out_of_reach",
            "late_from_one_minute",
            "late_within_reach",
        ]
        .map(|k| t[k].as_u64().unwrap_or(9));
        assert_eq!(late, [1, 0, 1]);
        // Over every fault that fails requests, late or not; a looser test reaches more.
        let reach = |t: &Value| {
            [
                "error_faults",
                "error_faults_out_of_reach",
                "error_faults_out_of_two_minute_reach",
            ]
            .map(|k| t[k].as_u64().unwrap_or(9))
        };
        all[0].prompt_chance = chance(1e-6, 1e-3);
        let t = totals(&all.iter().collect::<Vec<_>>(), alpha);
        assert_eq!(reach(&t), [3, 1, 2]);
        assert_eq!(
            reach(&totals(&all.iter().collect::<Vec<_>>(), 0.05)),
            [3, 0, 0]
        );
        let report = json!({"by_kind": {"a": totals(&all[..2].iter().collect::<Vec<_>>(), alpha)}, "totals": t});
        let table = markdown(&report);
        assert!(
            table
                .lines()
                .nth(2)
                .unwrap()
                .starts_with("| a | 2 | 2 | 1 (50.0%) | 2 (100.0%) | 0 |"),
            "{table}"
        );
        assert!(
            table.lines().last().unwrap().starts_with("| **all** | 4 |"),
            "{table}"
        );
    }
}

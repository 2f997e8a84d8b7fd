//! `threadline bench rca-public`: labelled incidents nobody here generated, replayed
//! through a server of their own as OTLP, and the root cause the server ranks first
//! scored against the label. Any directory of the format runs unchanged — the
//! development cases and the held-out ones alike.
//!
//! - `--format rs`: RobustSpot's real incidents (`robustspot`).
//! - `--format nezha`: Nezha's injected faults in Train-Ticket and Online Boutique
//!   (`nezha`), spans and logs.

mod nezha;
mod nezha_otlp;
mod nezha_score;
mod robustspot;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::Serialize;
use serde_json::{json, Value};

use crate::client::ApiClient;
use crate::local_server::LocalServer;
use robustspot::Element;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum PublicFormat {
    /// RobustSpot's incidents: `anomaly.yaml` and one `<data>.csv` per case.
    Rs,
    /// Nezha's fault days: `trace/HH_MM_trace.csv`, `log/HH_MM_log.csv` and a
    /// `<day>-fault_list.json` (or TraStrainer's `label.json`).
    Nezha,
}

#[derive(Args)]
pub(crate) struct PublicBenchArgs {
    /// The format of the directory.
    #[arg(long, value_enum)]
    format: PublicFormat,
    /// The directory of cases.
    #[arg(long)]
    path: PathBuf,
    /// Requests a minute of a case is replayed with at most: a bigger case's viewers
    /// are sampled, one in `peak / this`.
    #[arg(long, default_value_t = 3_000)]
    max_per_minute: u64,
    /// Only the case of this name (RS), or the faults whose name contains this
    /// (Nezha: `HH:MM:SS service kind`).
    #[arg(long)]
    only: Option<String>,
    /// Print the figures as a Markdown table (for BENCHMARKS.md) instead of JSON.
    #[arg(long)]
    markdown: bool,
}

/// How one case fared.
#[derive(Clone, Debug, Serialize)]
struct Outcome {
    case: String,
    cause: Vec<Element>,
    /// The elements each of the first candidates names, best first (none: no
    /// attribute value; two: either of two values).
    top: Vec<Vec<Element>>,
    /// What the first candidates' evidence says, best first.
    explanations: Vec<String>,
    /// The first candidate's elements are the label's.
    exact: bool,
    /// One of the first three candidates names an element of the label.
    within_3: bool,
    /// F1 of the first candidate's elements against the label's.
    f1: f64,
    requests: u64,
    sampled_one_in: f64,
    rca_ms: f64,
}

fn score(cause: &[Element], top: &[Vec<Element>]) -> (bool, bool, f64) {
    let first: std::collections::BTreeSet<&Element> = top.first().into_iter().flatten().collect();
    let exact = !first.is_empty() && first == cause.iter().collect();
    let within_3 = top.iter().take(3).flatten().any(|e| cause.contains(e));
    let hits = first.iter().filter(|e| cause.contains(e)).count();
    let f1 = if hits > 0 {
        2.0 * hits as f64 / (first.len() + cause.len()) as f64
    } else {
        0.0
    };
    (exact, within_3, f1)
}

/// A server of its own on a temporary directory, and a client of its API.
async fn case_server() -> anyhow::Result<(tempfile::TempDir, LocalServer, ApiClient)> {
    let temp = tempfile::tempdir().context("cannot create a temporary directory")?;
    let config = threadline_server::ServerConfig::load(
        None,
        &LocalServer::loopback(temp.path().join("data")),
    )?;
    let server = LocalServer::start(config).await?;
    let api = ApiClient::local(&format!("http://{}", server.addrs.http))?;
    Ok((temp, server, api))
}

/// Replays one RS case through a server of its own and reads the RCA at its minute.
async fn run_rs_case(case: &robustspot::Case, max_per_minute: u64) -> anyhow::Result<Outcome> {
    let leaves = robustspot::leaves(&case.file)?;
    let (Some(first), Some(last)) = (
        leaves.iter().map(|l| l.minute).min(),
        leaves.iter().map(|l| l.minute).max(),
    ) else {
        anyhow::bail!("{}: no leaves", case.file.display());
    };
    let mut per_minute = std::collections::BTreeMap::<i64, u64>::new();
    for l in &leaves {
        *per_minute.entry(l.minute).or_default() += l.count;
    }
    let peak = per_minute.values().copied().max().unwrap_or(0);
    let keep_one_in = (peak as f64 / max_per_minute.max(1) as f64).max(1.0);
    let (_temp, server, api) = case_server().await?;
    // The case's last minute is the last one closed now.
    let shift = crate::synth::now_minute() - 1 - last;
    let mut rng = StdRng::seed_from_u64(case.at as u64);
    let (batches, requests) = robustspot::replay(&mut rng, &leaves, shift, keep_one_in);
    crate::synth::upload_traces(
        &server.addrs.otlp_http.to_string(),
        batches,
        &ProgressBar::hidden(),
    )
    .await?;
    let at_minute = (case.at / 60).clamp(first, last) + shift;
    let at = crate::synth::rfc3339(at_minute);
    let started = std::time::Instant::now();
    let rca = api
        .get(
            "/api/v1/rca",
            &[
                ("service".into(), robustspot::SERVICE.into()),
                ("route".into(), robustspot::ROUTE.into()),
                ("metric".into(), "error_rate".into()),
                ("at".into(), at),
            ],
        )
        .await?;
    let rca_ms = started.elapsed().as_secs_f64() * 1e3;
    server.stop().await?;
    let top: Vec<Vec<Element>> = rca["candidates"]
        .as_array()
        .into_iter()
        .flatten()
        .take(5)
        .map(|c| {
            c["subject"]
                .as_str()
                .and_then(robustspot::elements_of)
                .or_else(|| {
                    c["evidence"]["attribute"]
                        .as_str()
                        .and_then(robustspot::elements_of)
                })
                .unwrap_or_default()
        })
        .collect();
    let explanations = rca["candidates"]
        .as_array()
        .into_iter()
        .flatten()
        .take(3)
        .map(|c| c["explanation"].as_str().unwrap_or_default().to_owned())
        .collect();
    let (exact, within_3, f1) = score(&case.cause, &top);
    Ok(Outcome {
        case: case.name.clone(),
        cause: case.cause.clone(),
        top,
        explanations,
        exact,
        within_3,
        f1,
        requests,
        sampled_one_in: (keep_one_in * 10.0).round() / 10.0,
        rca_ms,
    })
}

fn totals(outcomes: &[Outcome]) -> Value {
    let n = outcomes.len();
    let pct = |k: usize| percent(k, n);
    let exact = outcomes.iter().filter(|o| o.exact).count();
    let within_3 = outcomes.iter().filter(|o| o.within_3).count();
    let f1 = outcomes.iter().map(|o| o.f1).sum::<f64>() / n.max(1) as f64;
    json!({
        "cases": n,
        "top1_exact": exact,
        "top1_exact_pct": pct(exact),
        "top3_element": within_3,
        "top3_element_pct": pct(within_3),
        "element_f1": (f1 * 1000.0).round() / 1000.0,
        "rca_ms_p50": median_ms(outcomes.iter().map(|o| o.rca_ms)),
        "requests": outcomes.iter().map(|o| o.requests).sum::<u64>(),
    })
}

/// `k` of `n` in percent, to a tenth (0 of none).
fn percent(k: usize, n: usize) -> f64 {
    if n == 0 {
        0.0
    } else {
        (1000.0 * k as f64 / n as f64).round() / 10.0
    }
}

/// The median (the upper one of an even count) of RCA times, whole milliseconds.
fn median_ms(times: impl Iterator<Item = f64>) -> Option<f64> {
    let mut times: Vec<f64> = times.collect();
    times.sort_by(f64::total_cmp);
    times.get(times.len() / 2).map(|v| v.round())
}

fn progress(len: usize) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template("cases {wide_bar} {pos}/{len} ({eta} left) {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

pub(crate) async fn run(args: PublicBenchArgs) -> anyhow::Result<String> {
    match args.format {
        PublicFormat::Rs => run_rs(args).await,
        PublicFormat::Nezha => {
            nezha_score::run(&args.path, args.only.as_deref(), args.markdown).await
        }
    }
}

async fn run_rs(args: PublicBenchArgs) -> anyhow::Result<String> {
    let mut cases = robustspot::cases(&args.path)?;
    if let Some(only) = &args.only {
        cases.retain(|c| &c.name == only);
        anyhow::ensure!(
            !cases.is_empty(),
            "no case {only:?} in {}",
            args.path.display()
        );
    }
    let bar = progress(cases.len());
    let mut outcomes = Vec::new();
    for case in &cases {
        bar.set_message(case.name.clone());
        outcomes.push(
            run_rs_case(case, args.max_per_minute)
                .await
                .with_context(|| format!("case {}", case.name))?,
        );
        bar.inc(1);
    }
    bar.finish_and_clear();
    let t = totals(&outcomes);
    Ok(if args.markdown {
        format!(
            "| format | cases | top-1 exact set | top-3 (an element) | element F1 | RCA p50 (ms) |\n|---|---|---|---|---|---|\n| rs | {} | {} ({}%) | {} ({}%) | {} | {} |\n",
            t["cases"],
            t["top1_exact"],
            t["top1_exact_pct"],
            t["top3_element"],
            t["top3_element_pct"],
            t["element_f1"],
            t["rca_ms_p50"],
        )
    } else {
        serde_json::to_string_pretty(&json!({"totals": t, "cases": outcomes}))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn element(pairs: &[(&str, &str)]) -> Element {
        pairs
            .iter()
            .map(|(a, v)| ((*a).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_first_candidate_is_scored_against_the_label() {
        let cdn7 = element(&[("cdn", "7")]);
        let pair = element(&[("bitrate", "2000"), ("p2p", "1")]);
        assert_eq!(
            score(std::slice::from_ref(&cdn7), &[vec![cdn7.clone()]]),
            (true, true, 1.0)
        );
        // Right element of a two-element label: no exact set, F1 2/3.
        let (exact, within, f1) = score(&[cdn7.clone(), pair.clone()], &[vec![pair.clone()]]);
        assert!(!exact && within && (f1 - 2.0 / 3.0).abs() < 1e-9);
        // Both elements, as either of two values, in either order: the set.
        assert_eq!(
            score(
                &[cdn7.clone(), pair.clone()],
                &[vec![pair.clone(), cdn7.clone()]]
            ),
            (true, true, 1.0)
        );
        // Second place: within three, not first.
        assert_eq!(
            score(std::slice::from_ref(&pair), &[vec![], vec![pair.clone()]]),
            (false, true, 0.0)
        );
        assert_eq!(score(&[pair], &[vec![cdn7]]), (false, false, 0.0));
    }
}

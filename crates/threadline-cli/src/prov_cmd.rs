//! `threadline export prov` (the server's lineage as PROV-O, Turtle or JSON-LD) and
//! `threadline validate-prov FILE` (shape and PROV-CONSTRAINTS ordering checks, local).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use threadline_lineage::prov;

use crate::client::ApiClient;
use crate::ClientArgs;

#[derive(Subcommand)]
pub(crate) enum ExportWhat {
    /// The lineage graph as W3C PROV-O.
    Prov(ExportProvArgs),
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum ProvFormatArg {
    Turtle,
    Jsonld,
}

#[derive(Args)]
pub(crate) struct ExportProvArgs {
    /// Export the subgraph around this node (`kind:key`, a bare name, or
    /// `request:TRACE_ID` for one request and its chain); the whole graph if absent.
    #[arg(long)]
    root: Option<String>,
    /// Hops around --root.
    #[arg(long, default_value_t = 3)]
    depth: usize,
    /// turtle or jsonld.
    #[arg(long, value_enum, default_value = "turtle")]
    format: ProvFormatArg,
    /// Write to this file instead of stdout.
    #[arg(long, short)]
    output: Option<PathBuf>,
    #[command(flatten)]
    client: ClientArgs,
}

pub(crate) async fn export(what: ExportWhat) -> anyhow::Result<()> {
    let ExportWhat::Prov(args) = what;
    let mut query = vec![(
        "format".to_owned(),
        match args.format {
            ProvFormatArg::Turtle => "turtle",
            ProvFormatArg::Jsonld => "jsonld",
        }
        .to_owned(),
    )];
    if let Some(root) = &args.root {
        query.push(("root".to_owned(), root.clone()));
        query.push(("depth".to_owned(), args.depth.to_string()));
    }
    let api = ApiClient::new(&args.client)?;
    let body = api.get_bytes("/api/v1/prov", &query).await?;
    match &args.output {
        Some(path) => std::fs::write(path, &body)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => crate::out::write_bytes(&body),
    }
    Ok(())
}

#[derive(Args)]
pub(crate) struct ValidateProvArgs {
    /// A PROV-O document: Turtle, or JSON-LD.
    file: PathBuf,
}

/// Exit status: success when valid; an error listing every violation otherwise.
pub(crate) fn validate(args: ValidateProvArgs) -> anyhow::Result<()> {
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    match prov::validate(&bytes).with_context(|| format!("{}", args.file.display()))? {
        Ok(summary) => {
            crate::out::outln!(
                "valid: {} activities, {} entities, {} agents ({} triples)",
                summary.activities,
                summary.entities,
                summary.agents,
                summary.triples
            );
            Ok(())
        }
        Err(violations) => {
            for v in &violations {
                crate::out::outln!("{}: {} [{}]", v.rule, v.message, v.iris.join(", "));
            }
            anyhow::bail!(
                "{} violates PROV: {} problem(s)",
                args.file.display(),
                violations.len()
            )
        }
    }
}

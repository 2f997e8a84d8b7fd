//! What LLM calls cost: a price table of model globs → USD per million input and
//! output tokens. The defaults cover common hosted models (list prices, standard tier);
//! a configured table is consulted first, so it overrides any default. A model no entry
//! matches — a self-hosted one, typically — costs 0 unless the table prices it.
//!
//! Cost is computed when read, from the tokens stored per span and per rollup series
//! (whose key names the model), so a changed table re-prices history too.

use serde::Deserialize;

/// One row of the table.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// A glob over the model name: `*` any run of characters, `?` one; matched without
    /// regard to case, against the whole name and against the part after its last `/`
    /// (`openai/gpt-4o` matches `gpt-4o*`).
    pub model: String,
    /// USD per million input (prompt) tokens.
    pub input_per_million: f64,
    /// USD per million output (completion) tokens.
    pub output_per_million: f64,
}

/// The price table; the first matching entry wins.
#[derive(Clone, Debug, PartialEq)]
pub struct PriceTable {
    entries: Vec<ModelPrice>,
}

/// (glob, input, output) USD per million tokens; more specific globs first.
const DEFAULT_PRICES: &[(&str, f64, f64)] = &[
    ("gpt-4o-mini*", 0.15, 0.60),
    ("gpt-4o*", 2.50, 10.00),
    ("gpt-4.1-nano*", 0.10, 0.40),
    ("gpt-4.1-mini*", 0.40, 1.60),
    ("gpt-4.1*", 2.00, 8.00),
    ("gpt-4-turbo*", 10.00, 30.00),
    ("gpt-4*", 30.00, 60.00),
    ("gpt-3.5-turbo*", 0.50, 1.50),
    ("o1-mini*", 1.10, 4.40),
    ("o1*", 15.00, 60.00),
    ("o3-mini*", 1.10, 4.40),
    ("o3*", 2.00, 8.00),
    ("o4-mini*", 1.10, 4.40),
    ("text-embedding-3-small*", 0.02, 0.0),
    ("text-embedding-3-large*", 0.13, 0.0),
    ("text-embedding-ada-002*", 0.10, 0.0),
    ("claude-3-5-haiku*", 0.80, 4.00),
    ("claude-3-haiku*", 0.25, 1.25),
    ("claude-haiku-4*", 1.00, 5.00),
    ("claude-3-opus*", 15.00, 75.00),
    ("claude-opus-4*", 15.00, 75.00),
    ("claude-3-5-sonnet*", 3.00, 15.00),
    ("claude-3-7-sonnet*", 3.00, 15.00),
    ("claude-sonnet-4*", 3.00, 15.00),
    ("gemini-1.5-flash*", 0.075, 0.30),
    ("gemini-1.5-pro*", 1.25, 5.00),
    ("gemini-2.0-flash*", 0.10, 0.40),
    ("gemini-2.5-flash*", 0.30, 2.50),
    ("gemini-2.5-pro*", 1.25, 10.00),
    ("mistral-large*", 2.00, 6.00),
    ("mistral-small*", 0.20, 0.60),
    ("command-r-plus*", 2.50, 10.00),
    ("command-r*", 0.15, 0.60),
];

impl Default for PriceTable {
    fn default() -> Self {
        Self::with_overrides(Vec::new())
    }
}

impl PriceTable {
    /// The default table with `overrides` consulted first.
    pub fn with_overrides(overrides: Vec<ModelPrice>) -> Self {
        let defaults = DEFAULT_PRICES
            .iter()
            .map(|&(model, input, output)| ModelPrice {
                model: model.to_owned(),
                input_per_million: input,
                output_per_million: output,
            });
        Self {
            entries: overrides.into_iter().chain(defaults).collect(),
        }
    }

    /// The entry that prices `model`, if any.
    pub fn price_of(&self, model: &str) -> Option<&ModelPrice> {
        let model = model.to_ascii_lowercase();
        let short = model.rsplit('/').next().unwrap_or(&model);
        self.entries.iter().find(|e| {
            let glob = e.model.to_ascii_lowercase();
            glob_matches(&glob, &model) || glob_matches(&glob, short)
        })
    }

    /// USD for `input` and `output` tokens of `model` (0 for an unpriced model).
    pub fn cost_usd(&self, model: &str, input_tokens: i64, output_tokens: i64) -> f64 {
        self.price_of(model).map_or(0.0, |p| {
            // `+ 0.0` turns a -0.0 (a price written as -0.0) into 0.0.
            (input_tokens.max(0) as f64 * p.input_per_million
                + output_tokens.max(0) as f64 * p.output_per_million)
                / 1e6
                + 0.0
        })
    }

    /// The total of several costs: 0.0 for none (`Iterator::sum` of no `f64` is -0.0,
    /// which JSON shows as `-0.0`).
    pub fn total_usd(costs: impl IntoIterator<Item = f64>) -> f64 {
        costs.into_iter().fold(0.0, |total, c| total + c)
    }

    /// Checks every entry (for config loading): prices finite and not negative.
    pub fn validate(entries: &[ModelPrice]) -> Result<(), String> {
        for e in entries {
            for (what, v) in [
                ("input_per_million", e.input_per_million),
                ("output_per_million", e.output_per_million),
            ] {
                if !v.is_finite() || v < 0.0 {
                    return Err(format!(
                        "price for model {:?}: {what} {v} is not a non-negative number",
                        e.model
                    ));
                }
            }
            if e.model.is_empty() {
                return Err("a price entry has an empty model glob".to_owned());
            }
        }
        Ok(())
    }
}

/// `*` and `?` glob over bytes (model names are ASCII in practice; other bytes match
/// themselves).
fn glob_matches(glob: &str, text: &str) -> bool {
    let (g, t) = (glob.as_bytes(), text.as_bytes());
    let (mut gi, mut ti) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while ti < t.len() {
        match g.get(gi) {
            Some(b'*') => {
                backtrack = Some((gi, ti));
                gi += 1;
            }
            Some(&c) if c == b'?' || c == t[ti] => {
                gi += 1;
                ti += 1;
            }
            _ => match backtrack {
                Some((bg, bt)) => {
                    gi = bg + 1;
                    ti = bt + 1;
                    backtrack = Some((bg, bt + 1));
                }
                None => return false,
            },
        }
    }
    g[gi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    /// No cost is ever -0.0: not a total of nothing, not a price written as -0.0.
    #[test]
    fn costs_are_never_negative_zero() {
        let none = super::PriceTable::total_usd(std::iter::empty());
        assert!(none == 0.0 && none.is_sign_positive());
        let table = super::PriceTable::with_overrides(vec![super::ModelPrice {
            model: "free/*".into(),
            input_per_million: -0.0,
            output_per_million: -0.0,
        }]);
        let c = table.cost_usd("free/m", 1000, 1000);
        assert!(c == 0.0 && c.is_sign_positive());
        assert_eq!(serde_json::json!(none).to_string(), "0.0");
    }

    use super::*;

    #[test]
    fn globs_match_like_shells() {
        assert!(glob_matches("gpt-4o*", "gpt-4o-2024-08-06"));
        assert!(glob_matches("*llama*", "meta-llama/llama-3"));
        assert!(glob_matches("a?c", "abc"));
        assert!(!glob_matches("a?c", "ac"));
        assert!(!glob_matches("gpt-4o", "gpt-4o-mini"));
        assert!(glob_matches("*", ""));
    }

    #[test]
    fn specific_defaults_win_and_overrides_come_first() {
        let table = PriceTable::default();
        assert_eq!(
            table.price_of("gpt-4o-mini").unwrap().input_per_million,
            0.15
        );
        assert_eq!(
            table
                .price_of("GPT-4o-2024-08-06")
                .unwrap()
                .input_per_million,
            2.5
        );
        assert_eq!(
            table.price_of("openai/gpt-4o").unwrap().output_per_million,
            10.0
        );
        // 1,000 input and 500 output tokens of gpt-4o: 0.0025 + 0.005 USD.
        assert!((table.cost_usd("gpt-4o", 1000, 500) - 0.0075).abs() < 1e-12);
        assert_eq!(
            table.cost_usd("meta-llama/Meta-Llama-3-8B-Instruct", 1000, 500),
            0.0
        );
        let priced = PriceTable::with_overrides(vec![ModelPrice {
            model: "meta-llama/*".into(),
            input_per_million: 0.05,
            output_per_million: 0.10,
        }]);
        assert!(
            (priced.cost_usd("meta-llama/Meta-Llama-3-8B-Instruct", 1_000_000, 1_000_000) - 0.15)
                .abs()
                < 1e-12
        );
        assert!(PriceTable::validate(&[ModelPrice {
            model: "x".into(),
            input_per_million: -1.0,
            output_per_million: 0.0
        }])
        .unwrap_err()
        .contains("input_per_million"));
    }
}

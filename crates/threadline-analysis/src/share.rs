//! What a baseline says about a share of bad requests (errors, rejections) and how
//! surprising new bad requests are under it.
//!
//! A route's error share is estimated from a few dozen minutes that may hold no error
//! at all: 0 errors in 1 000 requests is what a 0.3% route shows one time in twenty.
//! Taken at face value (or floored at half a request), such a baseline makes two
//! ordinary errors in a minute look like a fault. So the rate is a belief, not a
//! number: a Gamma distribution over the per-request rate, updated by the baseline's
//! bad requests and requests, and new requests are judged by the negative binomial
//! predictive that follows — wide while the baseline is short or clean, Poisson once
//! it is long.
//!
//! The belief starts from what the tenant's other scopes show (empirical Bayes): their
//! pooled share, weighted by how alike their shares are. Scopes of one platform that
//! agree lend a new or quiet scope their rate; scopes that differ lend little. The
//! prior never weighs more than one typical scope's history, and never less than
//! Jeffreys' half a bad request.

use crate::tails::negative_binomial_tail;

/// A Gamma(shape, exposure) belief about the share of bad requests: `shape` bad
/// requests seen over `exposure` requests, the prior's included.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ShareBelief {
    shape: f64,
    exposure: f64,
}

impl Default for ShareBelief {
    fn default() -> Self {
        Self::UNINFORMED
    }
}

impl ShareBelief {
    /// Jeffreys' prior: half a bad request over no requests.
    pub(crate) const UNINFORMED: Self = Self {
        shape: 0.5,
        exposure: 0.0,
    };

    /// The belief after `bad` of `requests` more requests went bad.
    pub(crate) fn observe(self, bad: f64, requests: f64) -> Self {
        Self {
            shape: self.shape + bad.max(0.0),
            exposure: self.exposure + requests.max(0.0),
        }
    }

    /// The expected share (at least half a request's worth of one request).
    pub(crate) fn share(&self) -> f64 {
        self.shape / self.exposure.max(1.0)
    }

    /// Requests the belief rests on, the prior's included.
    #[cfg(test)]
    pub(crate) fn exposure(&self) -> f64 {
        self.exposure
    }

    /// P(at least `bad` of `requests` new requests go bad) under the belief.
    pub(crate) fn surprise(&self, bad: u64, requests: u64) -> f64 {
        let n = requests as f64;
        negative_binomial_tail(bad, self.shape, n / (self.exposure + n))
    }
}

/// Bad requests and requests of a tenant's scopes, for the prior each of them starts
/// from.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct PeerShares {
    scopes: u32,
    bad: f64,
    requests: f64,
    /// Σ requests², Σ bad² / requests: for the spread of the scopes' shares.
    requests_sq: f64,
    bad_sq_per_request: f64,
}

impl PeerShares {
    pub(crate) fn add(&mut self, bad: f64, requests: f64) {
        if requests <= 0.0 {
            return;
        }
        self.scopes += 1;
        self.bad += bad;
        self.requests += requests;
        self.requests_sq += requests * requests;
        self.bad_sq_per_request += bad * bad / requests;
    }

    /// The prior a scope of this tenant starts from: Gamma with the pooled share as
    /// mean and the spread of the scopes' true shares as variance (moment estimate:
    /// Σ nᵢ (pᵢ − p)² exceeds its Poisson expectation (k − 1) p by τ² (N − Σ nᵢ² / N)).
    /// Its weight is p / τ² requests, at most one typical scope's; with fewer than two
    /// scopes, Jeffreys'.
    pub(crate) fn prior(&self) -> ShareBelief {
        if self.scopes < 2 {
            return ShareBelief::UNINFORMED;
        }
        let k = f64::from(self.scopes);
        let n = self.requests;
        let p = (self.bad.max(0.5)) / n;
        let q = self.bad_sq_per_request - 2.0 * p * self.bad + p * p * n;
        let spread = ((q - (k - 1.0) * p) / (n - self.requests_sq / n)).max(0.0);
        // No spread (p / 0 = ∞): the scopes agree; the cap holds.
        let weight = (p / spread).min(n / k);
        ShareBelief {
            shape: (p * weight).max(0.5),
            exposure: weight,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_clean_baseline_leaves_two_errors_in_a_minute_plausible() {
        // 0 of 968 requests, as a 0.3% route shows 5% of the time; then 2 of 69.
        let alone = ShareBelief::UNINFORMED.observe(0.0, 968.0);
        assert!((alone.share() - 0.5 / 968.0).abs() < 1e-12);
        let mut peers = PeerShares::default();
        for (bad, n) in [(0.0, 968.0), (3.0, 1010.0), (4.0, 1100.0), (2.0, 950.0)] {
            peers.add(bad, n);
        }
        let pooled = peers.prior().observe(0.0, 968.0);
        assert!(pooled.share() > 0.001, "{pooled:?}");
        // Poisson at the point estimate calls 2 of 69 a 1-in-1600 event; the belief
        // with its peers' rate, a 1-in-250 one.
        let poisson = crate::tails::poisson_tail(2, alone.share() * 69.0);
        assert!(poisson < 1e-3);
        assert!(pooled.surprise(2, 69) > 3e-3, "{}", pooled.surprise(2, 69));
        // A fault is still a fault: 20 of 140.
        assert!(pooled.surprise(20, 140) < 1e-12);
    }

    #[test]
    fn a_long_baseline_outweighs_its_prior() {
        let mut peers = PeerShares::default();
        for (bad, n) in [(6.0, 3000.0), (9.0, 3100.0), (300.0, 2900.0)] {
            peers.add(bad, n);
        }
        // Scopes that differ (0.2% vs 10%) lend little: the 10% scope keeps its rate.
        let prior = peers.prior();
        assert!(prior.exposure() < 100.0, "{prior:?}");
        let own = prior.observe(300.0, 2900.0);
        assert!((own.share() - 0.1).abs() < 0.01, "{own:?}");
        // And a scope's own long history dominates an agreeing prior.
        let mut alike = PeerShares::default();
        for (bad, n) in [(6.0, 3000.0), (9.0, 3100.0), (7.0, 2900.0)] {
            alike.add(bad, n);
        }
        let belief = alike.prior().observe(9.0, 3100.0);
        assert!(alike.prior().exposure() <= 3000.0 + 1e-9);
        assert!(
            (belief.share() - 16.0 / 6100.0).abs() < 0.0015,
            "{belief:?}"
        );
    }

    #[test]
    fn one_scope_or_none_has_jeffreys_prior() {
        assert_eq!(PeerShares::default().prior(), ShareBelief::UNINFORMED);
        let mut one = PeerShares::default();
        one.add(3.0, 1000.0);
        assert_eq!(one.prior(), ShareBelief::UNINFORMED);
        // Clean peers still lend at least half a bad request.
        let mut clean = PeerShares::default();
        clean.add(0.0, 1000.0);
        clean.add(0.0, 1000.0);
        let prior = clean.prior();
        assert!(prior.share() >= 0.5 / 1000.0 - 1e-12, "{prior:?}");
    }
}

//! Tail probabilities the detectors test against: the normal distribution's upper
//! tail (what `sensitivity` standard deviations mean) and the Poisson upper tail (how
//! surprising `k` bad requests are when `λ` were expected).

/// P(Z ≥ z) for a standard normal Z (Abramowitz & Stegun 7.1.26, error < 1.5e-7).
pub(crate) fn normal_tail(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-x * x).exp();
    if z >= 0.0 {
        0.5 * erfc
    } else {
        1.0 - 0.5 * erfc
    }
}

/// The quantile of Student's t with `nu` degrees of freedom at the upper tail where
/// the normal quantile is `z` (Cornish–Fisher, within 5% for ν ≥ 9 at z = 4, exact
/// as ν grows): how far out a value must be for the same tail when the spread it is
/// measured in was itself estimated from ν + 1 values.
pub(crate) fn student_quantile(z: f64, nu: f64) -> f64 {
    let nu = nu.max(1.0);
    let (z3, z5) = (z.powi(3), z.powi(5));
    z + (z3 + z) / (4.0 * nu) + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * nu * nu)
}

/// ln k! (exact sum up to 30, Stirling's series beyond).
fn ln_factorial(k: u64) -> f64 {
    if k <= 30 {
        (2..=k).map(|i| (i as f64).ln()).sum()
    } else {
        let k = k as f64;
        k * k.ln() - k + 0.5 * (std::f64::consts::TAU * k).ln() + 1.0 / (12.0 * k)
    }
}

/// P(X ≥ k) for X ~ Poisson(λ), summed from the k-th term up while the terms matter.
pub(crate) fn poisson_tail(k: u64, lambda: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if lambda <= 0.0 {
        return 0.0;
    }
    if (k as f64) <= lambda {
        // At or below the mean: not in the upper tail; the exact value is not needed.
        return 1.0;
    }
    let mut term = (-lambda + k as f64 * lambda.ln() - ln_factorial(k)).exp();
    let mut sum = 0.0;
    let mut i = k;
    while term > sum * 1e-12 && i < k + 10_000 {
        sum += term;
        i += 1;
        term *= lambda / i as f64;
    }
    sum.min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn student_quantiles_near_the_exact_ones() {
        // Exact t quantiles at the normal tail of z = 4 (numerical integration).
        for (nu, exact) in [(9.0, 6.999), (19.0, 5.102), (29.0, 4.670), (59.0, 4.307)] {
            let got = student_quantile(4.0, nu);
            assert!(
                (got - exact).abs() / exact < 0.05,
                "ν {nu}: {got} vs {exact}"
            );
        }
        assert!((student_quantile(4.0, 1e6) - 4.0).abs() < 1e-3);
    }

    #[test]
    fn tails_match_known_values() {
        assert!((normal_tail(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_tail(4.0) - 3.167e-5).abs() < 1e-7);
        assert!((normal_tail(-1.0) - 0.841_345).abs() < 1e-6);
        // λ = 0.5: P(X ≥ 2) = 1 − e^−0.5 (1 + 0.5).
        let exact = 1.0 - (-0.5f64).exp() * 1.5;
        assert!((poisson_tail(2, 0.5) - exact).abs() < 1e-12);
        assert_eq!(poisson_tail(0, 3.0), 1.0);
        assert_eq!(poisson_tail(2, 3.0), 1.0);
        assert_eq!(poisson_tail(1, 0.0), 0.0);
        // Far out and large: finite, tiny, ordered.
        let (a, b) = (poisson_tail(60, 20.0), poisson_tail(80, 20.0));
        assert!(a > b && b > 0.0 && a < 1e-9, "{a} {b}");
    }
}

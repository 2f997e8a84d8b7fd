//! Tail probabilities the detectors test against: the normal distribution's upper
//! tail (what `sensitivity` standard deviations mean), the negative binomial one
//! (how surprising `k` bad requests are when their rate is only known from a
//! baseline; Poisson's, in tests, is its limit) and the binomial one (how likely a
//! minute's quantile of `n` requests reaches a value by chance).

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

/// ln Γ(x) for x > 0 (Lanczos, g = 7, nine terms: relative error below 1e-13).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x) Γ(1 − x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + G + 0.5;
    let sum = C[1..]
        .iter()
        .enumerate()
        .fold(C[0], |acc, (i, c)| acc + c / (x + i as f64 + 1.0));
    0.5 * std::f64::consts::TAU.ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// P(X ≥ k) for X negative binomial with shape `r` and success probability `q`
/// (P(X = j) = Γ(r + j) / (Γ(r) j!) (1 − q)^r q^j): the count of bad requests among
/// new ones when their rate is Gamma(r, ·) distributed, summed from the k-th term up
/// while the terms matter.
pub(crate) fn negative_binomial_tail(k: u64, r: f64, q: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if q <= 0.0 || r <= 0.0 {
        return 0.0;
    }
    if q >= 1.0 || (k as f64) <= r * q / (1.0 - q) {
        // At or below the mean: not in the upper tail; the exact value is not needed.
        return 1.0;
    }
    let kf = k as f64;
    let mut term =
        (ln_gamma(r + kf) - ln_gamma(r) - ln_gamma(kf + 1.0) + r * (1.0 - q).ln() + kf * q.ln())
            .exp();
    let mut sum = 0.0;
    let mut j = kf;
    while term > sum * 1e-12 && j < kf + 100_000.0 {
        sum += term;
        term *= (r + j) / (j + 1.0) * q;
        j += 1.0;
    }
    sum.min(1.0)
}

/// P(X ≥ m) for X ~ Binomial(n, s): how likely `m` or more of `n` requests fall in a
/// part of the distribution that holds a share `s` of them, summed from the m-th term
/// up while the terms matter.
pub fn binomial_tail(m: u64, n: u64, s: f64) -> f64 {
    if m == 0 {
        return 1.0;
    }
    if m > n || s <= 0.0 {
        return 0.0;
    }
    if s >= 1.0 || (m as f64) <= n as f64 * s {
        // At or below the mean: not in the upper tail; the exact value is not needed.
        return 1.0;
    }
    let (nf, mf) = (n as f64, m as f64);
    let mut term = (ln_gamma(nf + 1.0) - ln_gamma(mf + 1.0) - ln_gamma(nf - mf + 1.0)
        + mf * s.ln()
        + (nf - mf) * (-s).ln_1p())
    .exp();
    let odds = s / (1.0 - s);
    let mut sum = 0.0;
    let mut j = m;
    while j <= n && term > sum * 1e-12 {
        sum += term;
        term *= (n - j) as f64 / (j + 1) as f64 * odds;
        j += 1;
    }
    sum.min(1.0)
}

/// ln k! (exact sum up to 30, Stirling's series beyond).
#[cfg(test)]
fn ln_factorial(k: u64) -> f64 {
    if k <= 30 {
        (2..=k).map(|i| (i as f64).ln()).sum()
    } else {
        let k = k as f64;
        k * k.ln() - k + 0.5 * (std::f64::consts::TAU * k).ln() + 1.0 / (12.0 * k)
    }
}

/// P(X ≥ k) for X ~ Poisson(λ), summed from the k-th term up while the terms matter:
/// what the negative binomial tail tends to as its rate becomes known.
#[cfg(test)]
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
    fn ln_gamma_matches_factorials_and_half_integers() {
        for k in [1u64, 2, 5, 17, 30, 31, 100, 5000] {
            let want = ln_factorial(k - 1);
            let got = ln_gamma(k as f64);
            assert!(
                (got - want).abs() <= 1e-9 * want.abs().max(1.0),
                "{k}: {got} vs {want}"
            );
        }
        // Γ(1/2) = √π.
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-12);
        assert!((ln_gamma(0.1) - 2.252_712_651_734_206).abs() < 1e-10);
    }

    #[test]
    fn negative_binomial_tails_match_sums_and_approach_poisson() {
        // r = 2, q = 0.1: P(X ≥ 2) = 1 − 0.9² (1 + 2 · 0.1).
        let exact = 1.0 - 0.81 * 1.2;
        assert!((negative_binomial_tail(2, 2.0, 0.1) - exact).abs() < 1e-12);
        assert_eq!(negative_binomial_tail(0, 2.0, 0.1), 1.0);
        assert_eq!(negative_binomial_tail(1, 0.0, 0.1), 0.0);
        // A rate known from a vast baseline: the Poisson tail at the same mean.
        let (r, n) = (30_000.0, 1e7);
        let q = 50.0 / (n + 50.0);
        let (nb, poisson) = (
            negative_binomial_tail(4, r, q),
            poisson_tail(4, r * q / (1.0 - q)),
        );
        assert!((nb - poisson).abs() / poisson < 1e-3, "{nb} vs {poisson}");
        // A rate known from little: a heavier tail than Poisson at the same mean.
        let q = 50.0 / (1000.0 + 50.0);
        assert!(negative_binomial_tail(4, 1.0, q) > 10.0 * poisson_tail(4, q / (1.0 - q)));
    }

    #[test]
    fn binomial_tails_match_sums() {
        // n = 5, s = 0.1: P(X ≥ 2) = 1 − 0.9⁵ − 5 · 0.1 · 0.9⁴.
        let exact = 1.0 - 0.9f64.powi(5) - 0.5 * 0.9f64.powi(4);
        assert!((binomial_tail(2, 5, 0.1) - exact).abs() < 1e-12);
        // The top of 40: P(X ≥ 40) = s⁴⁰; two of 40 far out: ≈ C(40, 2) s².
        assert!((binomial_tail(40, 40, 0.5) - 0.5f64.powi(40)).abs() < 1e-20);
        let s = 1e-5;
        let two = binomial_tail(2, 40, s);
        assert!((two - 780.0 * s * s).abs() / two < 1e-3, "{two}");
        assert_eq!(binomial_tail(0, 40, 0.1), 1.0);
        assert_eq!(binomial_tail(41, 40, 0.1), 0.0);
        assert_eq!(binomial_tail(2, 40, 0.0), 0.0);
        assert_eq!(binomial_tail(2, 40, 0.5), 1.0);
        // P(X ≥ 1) = 1 − qⁿ; P(X ≥ 3) of 5 at ½ = (10 + 5 + 1) / 32; 8 of 50 at
        // 0.3%: 3.149e-12 summed exactly.
        let one = binomial_tail(1, 40, 0.003);
        assert!((one - (1.0 - 0.997f64.powi(40))).abs() < 1e-12, "{one}");
        assert!((binomial_tail(3, 5, 0.5) - 0.5).abs() < 1e-12);
        let rare = binomial_tail(8, 50, 0.003);
        assert!((rare / 3.149e-12 - 1.0).abs() < 1e-3, "{rare}");
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

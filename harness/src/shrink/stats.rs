//! The confidence a K-of-N rule gives: a candidate that reproduces with
//! probability `p` on a fresh seed is kept with probability P[Bin(N, p) ≥ K].

/// P[Bin(n, p) ≥ k]: the chance that a candidate whose true reproduction
/// probability is `p` fails in at least `k` of `n` independent runs.
pub fn p_keep(n: u32, k: u32, p: f64) -> f64 {
    (k..=n)
        .map(|i| binomial(n, i) * p.powi(i as i32) * (1.0 - p).powi((n - i) as i32))
        .sum::<f64>()
        .clamp(0.0, 1.0)
}

fn binomial(n: u32, k: u32) -> f64 {
    // Multiplicative form: exact enough in f64 for the run counts a shrink uses.
    (0..k).fold(1.0, |acc, i| acc * f64::from(n - i) / f64::from(i + 1))
}

/// One line for the terminal and the header: the rule, and how likely it keeps
/// a candidate that reproduces with each of a few probabilities.
pub fn summary(n: u32, k: u32) -> String {
    let ps = [0.95, 0.9, 0.8, 0.7, 0.5];
    let p: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
    let keep: Vec<String> = ps
        .iter()
        .map(|&p| format!("{:.0}%", 100.0 * p_keep(n, k, p)))
        .collect();
    format!(
        "kept when it fails the same way in ≥ {k} of {n} fresh-seed runs: one that \
         reproduces with p = {} is kept with probability {}",
        p.join(" / "),
        keep.join(" / ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 5e-4
    }

    #[test]
    fn the_defaults_keep_a_reliable_candidate_and_drop_a_coin_flip() {
        // N = 10, K = 8: the figures quoted in docs/guide.md.
        assert!(
            close(p_keep(10, 8, 0.95), 0.9885),
            "{}",
            p_keep(10, 8, 0.95)
        );
        assert!(close(p_keep(10, 8, 0.9), 0.9298), "{}", p_keep(10, 8, 0.9));
        assert!(close(p_keep(10, 8, 0.8), 0.6778), "{}", p_keep(10, 8, 0.8));
        assert!(close(p_keep(10, 8, 0.7), 0.3828), "{}", p_keep(10, 8, 0.7));
        assert!(close(p_keep(10, 8, 0.5), 0.0547), "{}", p_keep(10, 8, 0.5));
    }

    #[test]
    fn edges() {
        assert!(close(p_keep(3, 2, 1.0), 1.0));
        assert!(close(p_keep(3, 2, 0.0), 0.0));
        // 2 of 3 at p = 0.5: (3 + 1) / 8.
        assert!(close(p_keep(3, 2, 0.5), 0.5));
        assert!(close(p_keep(5, 0, 0.3), 1.0));
    }

    #[test]
    fn the_summary_names_the_rule() {
        let s = summary(10, 8);
        assert!(
            s.starts_with("kept when it fails the same way in ≥ 8 of 10"),
            "{s}"
        );
        assert!(s.ends_with("p = 0.95 / 0.9 / 0.8 / 0.7 / 0.5 is kept with probability 99% / 93% / 68% / 38% / 5%"), "{s}");
    }
}

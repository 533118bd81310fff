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

/// One line for the terminal and the docs: how likely the rule keeps a
/// candidate that reproduces with each of a few probabilities.
pub fn summary(n: u32, k: u32) -> String {
    let cells: Vec<String> = [0.95, 0.9, 0.8, 0.7, 0.5]
        .iter()
        .map(|&p| format!("p={p}: {:.0}%", 100.0 * p_keep(n, k, p)))
        .collect();
    format!(
        "kept when ≥ {k} of {n} fail; kept with probability {}",
        cells.join(", ")
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
        assert!(s.starts_with("kept when ≥ 8 of 10 fail"), "{s}");
        assert!(s.contains("p=0.9: 93%"), "{s}");
        assert!(s.contains("p=0.5: 5%"), "{s}");
    }
}

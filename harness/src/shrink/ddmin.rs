//! Delta debugging (Zeller and Hildebrandt's ddmin) over the scenario's fault
//! units: try chunks, then complements, at ever finer granularity, so that a
//! heap of faults of which one matters is cut in halves, not one at a time.

use std::collections::HashMap;

/// What one test of a subset said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Still fails the same way: keep the subset.
    Fails,
    /// Does not (or not reliably enough): keep looking.
    Passes,
    /// The budget ran out or the user interrupted: stop with what we have.
    Stop,
}

/// `items` in `n` chunks of sizes differing by at most one, order kept.
pub fn split(items: &[usize], n: usize) -> Vec<Vec<usize>> {
    let n = n.clamp(1, items.len().max(1));
    let (size, extra) = (items.len() / n, items.len() % n);
    let mut out = Vec::with_capacity(n);
    let mut start = 0;
    for i in 0..n {
        let len = size + usize::from(i < extra);
        out.push(items[start..start + len].to_vec());
        start += len;
    }
    out
}

/// The smallest subset of `items` found that `test` says still fails (1-minimal
/// unless stopped), and whether it was stopped. `items` itself is taken to fail;
/// the empty set is never tried (a failure with no fault at all is not this
/// tool's question).
pub fn ddmin(items: &[usize], mut test: impl FnMut(&[usize]) -> Verdict) -> (Vec<usize>, bool) {
    let mut cur = items.to_vec();
    let mut n = 2;
    // A subset is tried once: the runs are the cost, and a repeat would only
    // re-roll the dice on a decision already made.
    let mut tried: HashMap<Vec<usize>, Verdict> = HashMap::new();
    let mut run = |s: &[usize]| -> Verdict {
        if let Some(v) = tried.get(s) {
            return *v;
        }
        let v = test(s);
        if v != Verdict::Stop {
            tried.insert(s.to_vec(), v);
        }
        v
    };
    while cur.len() >= 2 {
        let chunks = split(&cur, n);
        let mut next = None;
        for c in &chunks {
            match run(c) {
                Verdict::Fails => {
                    next = Some((c.clone(), 2));
                    break;
                }
                Verdict::Stop => return (cur, true),
                Verdict::Passes => {}
            }
        }
        // With two chunks each complement is the other chunk, tried already.
        if next.is_none() && n > 2 {
            for c in &chunks {
                let rest: Vec<usize> = cur.iter().copied().filter(|x| !c.contains(x)).collect();
                match run(&rest) {
                    Verdict::Fails => {
                        next = Some((rest, (n - 1).max(2)));
                        break;
                    }
                    Verdict::Stop => return (cur, true),
                    Verdict::Passes => {}
                }
            }
        }
        match next {
            Some((c, m)) => {
                cur = c;
                n = m;
            }
            None if n >= cur.len() => break,
            None => n = (2 * n).min(cur.len()),
        }
    }
    (cur, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oracle<'a>(
        needed: &'static [usize],
        tests: &'a mut Vec<Vec<usize>>,
    ) -> impl FnMut(&[usize]) -> Verdict + 'a {
        move |s: &[usize]| {
            tests.push(s.to_vec());
            if needed.iter().all(|x| s.contains(x)) {
                Verdict::Fails
            } else {
                Verdict::Passes
            }
        }
    }

    #[test]
    fn split_keeps_order_and_balances() {
        let items: Vec<usize> = (0..7).collect();
        assert_eq!(
            split(&items, 3),
            vec![vec![0, 1, 2], vec![3, 4], vec![5, 6]]
        );
        assert_eq!(split(&items, 7).len(), 7);
        assert_eq!(split(&items, 20).len(), 7, "never an empty chunk");
        assert_eq!(split(&[4], 2), vec![vec![4]]);
    }

    #[test]
    fn one_fault_of_fourteen_is_found_in_halves_not_one_by_one() {
        let items: Vec<usize> = (0..14).collect();
        let mut tests = Vec::new();
        let (min, stopped) = ddmin(&items, oracle(&[9], &mut tests));
        assert_eq!(min, vec![9]);
        assert!(!stopped);
        // One at a time would take 13 tests at least; halving about 2·log2(14).
        assert!(tests.len() <= 8, "{} tests: {tests:?}", tests.len());
        assert!(tests.iter().all(|t| !t.is_empty()));
    }

    #[test]
    fn two_faults_that_only_fail_together_are_both_kept() {
        let items: Vec<usize> = (0..12).collect();
        let mut tests = Vec::new();
        let (min, _) = ddmin(&items, oracle(&[2, 10], &mut tests));
        assert_eq!(min, vec![2, 10]);
        let mut seen = tests.clone();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), tests.len(), "no subset tried twice");
    }

    #[test]
    fn stop_returns_the_best_so_far() {
        let items: Vec<usize> = (0..8).collect();
        let mut calls = 0;
        let (min, stopped) = ddmin(&items, |s| {
            calls += 1;
            match calls {
                1 => Verdict::Fails, // the first half still fails: kept
                _ => {
                    let _ = s;
                    Verdict::Stop
                }
            }
        });
        assert!(stopped);
        assert_eq!(min, vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_single_fault_is_not_tested_again() {
        let mut calls = 0;
        let (min, _) = ddmin(&[3], |_| {
            calls += 1;
            Verdict::Passes
        });
        assert_eq!((min, calls), (vec![3], 0));
    }
}

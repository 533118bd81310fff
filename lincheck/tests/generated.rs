//! Generated histories get the right verdict. Sizes of 100k and up are
//! `#[ignore]`d: run them with `cargo test --release -- --ignored`.

use lincheck::gen::{generate, GenConfig};
use lincheck::{check, Model, Validity};

fn run(model: Model, ops: usize, keys: usize, inject: bool, timeout_rate: f64, seed: u64) {
    run_clients(model, ops, keys, 16, inject, timeout_rate, seed);
}

/// Like `run`, with `clients` closed-loop clients. Returns the counterexample
/// and the injected read, if any.
fn run_clients(
    model: Model,
    ops: usize,
    keys: usize,
    clients: usize,
    inject: bool,
    timeout_rate: f64,
    seed: u64,
) -> Option<(lincheck::Counterexample, usize)> {
    let mut cfg = GenConfig::new(model, ops, clients, keys, seed);
    cfg.inject_violation = inject;
    cfg.timeout_rate = timeout_rate;
    cfg.unknown_rate = timeout_rate;
    let g = generate(&cfg);
    assert_eq!(g.ops.len(), ops);
    let res = check(&g.ops, model, None).expect("generated input is well-formed");
    let want = if g.injected.is_some() {
        Validity::NotLinearizable
    } else {
        Validity::Linearizable
    };
    assert_eq!(
        res.valid, want,
        "{model:?} ops={ops} keys={keys} clients={clients} inject={inject} timeouts={timeout_rate} seed={seed}"
    );
    if inject && ops >= 1000 {
        assert!(g.injected.is_some(), "injection should find a stale read");
    }
    if let (Some(i), Some(ce)) = (g.injected, &res.counterexample) {
        assert_eq!(ce.key, g.ops[i].key);
    }
    g.injected.zip(res.counterexample).map(|(i, ce)| (ce, i))
}

/// The shapes where the search alone explodes (issue 14): many clients on
/// one key, and many never-returned ops, each with a stale read. The
/// violation finder proves them; the counterexample's prefix still reaches
/// the violation, and its proof names the stale read.
fn wide_or_pending_shapes(ops: usize, seeds: std::ops::Range<u64>) {
    for model in [Model::Kv, Model::Fenced] {
        for seed in seeds.clone() {
            for (clients, rate) in [(64, 0.0), (16, 0.05)] {
                run_clients(model, ops, 1, clients, false, rate, seed);
                let (ce, stale) = run_clients(model, ops, 1, clients, true, rate, seed)
                    .expect("a violation with a counterexample");
                let proof = ce.proof.expect("proved by the violation finder");
                assert!(
                    proof.ops.iter().any(|v| v.index == stale),
                    "{model:?} clients={clients} timeouts={rate} seed={seed}: stale read {stale} not among {:?}",
                    proof.ops.iter().map(|v| v.index).collect::<Vec<_>>()
                );
                assert!(
                    ce.linearized.len() > ops / 8,
                    "prefix stops near the violation"
                );
            }
        }
    }
}

#[test]
fn many_clients_and_many_never_returned() {
    wide_or_pending_shapes(5_000, 1..3);
}

#[test]
#[ignore]
fn many_clients_and_many_never_returned_large() {
    wide_or_pending_shapes(100_000, 1..3);
    for model in [Model::Kv, Model::Fenced] {
        for inject in [false, true] {
            run_clients(model, 1_000_000, 1, 64, inject, 0.0, 9);
        }
    }
}

#[test]
fn small_and_medium_histories() {
    for model in [Model::Kv, Model::Fenced] {
        for &ops in &[10, 100, 1000, 10_000] {
            for &keys in &[1, 10] {
                for inject in [false, true] {
                    for (seed, rate) in [(1, 0.0), (2, 0.01)] {
                        run(model, ops, keys, inject, rate, seed);
                    }
                }
            }
        }
    }
}

#[test]
fn generator_is_deterministic() {
    let cfg = GenConfig::new(Model::Fenced, 500, 16, 3, 9);
    assert_eq!(generate(&cfg).ops, generate(&cfg).ops);
}

#[test]
#[ignore]
fn large_histories() {
    for model in [Model::Kv, Model::Fenced] {
        for inject in [false, true] {
            run(model, 100_000, 1, inject, 0.0, 5);
            run(model, 1_000_000, 1000, inject, 0.0, 6);
            run(model, 1_000_000, 10, inject, 0.0, 7);
            run(model, 1_000_000, 10, inject, 0.01, 8);
        }
    }
}

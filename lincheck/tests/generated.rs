//! Generated histories get the right verdict. Sizes of 100k and up are
//! `#[ignore]`d: run them with `cargo test --release -- --ignored`.

use lincheck::gen::{generate, GenConfig};
use lincheck::{check, Model, Validity};

fn run(model: Model, ops: usize, keys: usize, inject: bool, timeout_rate: f64, seed: u64) {
    let mut cfg = GenConfig::new(model, ops, 16, keys, seed);
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
        "{model:?} ops={ops} keys={keys} inject={inject} timeouts={timeout_rate} seed={seed}"
    );
    if inject && ops >= 1000 {
        assert!(g.injected.is_some(), "injection should find a stale read");
    }
    if let (Some(i), Some(ce)) = (g.injected, &res.counterexample) {
        assert_eq!(ce.key, g.ops[i].key);
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

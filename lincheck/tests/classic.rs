//! Hand-written classic cases.

use lincheck::{
    check, check_with_options, CheckOptions, FencedModel, KvModel, Model, Op, OpKind, Validity,
};
use serde_json::{json, Value};

fn op(call: u64, ret: Option<u64>, kind: OpKind, arg: Value, out: Value) -> Op {
    Op::new(0, call, ret, "k", kind, arg, out)
}
fn w(call: u64, ret: u64, v: Value) -> Op {
    op(call, Some(ret), OpKind::Write, v, Value::Null)
}
fn r(call: u64, ret: u64, v: Value) -> Op {
    op(call, Some(ret), OpKind::Read, Value::Null, v)
}
fn cas(call: u64, ret: u64, from: Value, to: Value, ok: bool) -> Op {
    op(call, Some(ret), OpKind::Cas, json!([from, to]), json!(ok))
}
fn fw(call: u64, ret: Option<u64>, v: Value, token: i64, ok: Value) -> Op {
    op(call, ret, OpKind::Write, json!([v, token]), ok)
}

/// The default check's verdict, which the search alone (no witness path)
/// must give too: every hand-written history is also a differential case.
fn verdict(model: Model, ops: &[Op]) -> Validity {
    let valid = match check(ops, model, None) {
        Ok(r) => r.valid,
        Err(e) => panic!("input error: {e}"),
    };
    let alone = CheckOptions {
        witnesses: false,
        ..CheckOptions::default()
    };
    let searched = match model {
        Model::Kv => check_with_options(ops, &KvModel, &alone),
        Model::Fenced => check_with_options(ops, &FencedModel, &alone),
    }
    .map(|r| r.valid);
    assert_eq!(
        searched.ok(),
        Some(valid),
        "witness path and search alone disagree"
    );
    valid
}

#[test]
fn empty_history_is_linearizable() {
    assert_eq!(verdict(Model::Kv, &[]), Validity::Linearizable);
}

#[test]
fn stale_read() {
    let ops = [w(0, 10, json!(1)), w(20, 30, json!(2)), r(40, 50, json!(1))];
    let res = check(&ops, Model::Kv, None).expect("valid input");
    assert_eq!(res.valid, Validity::NotLinearizable);
    let ce = res.counterexample.clone().expect("counterexample");
    assert_eq!(ce.key, "k");
    // The search stops before the overwrite that dooms the read.
    assert_eq!(ce.state, json!(1));
    assert_eq!(ce.linearized.len(), 1);
    assert_eq!(ce.linearized[0].state_after, Some(json!(1)));
    assert!(ce.unplaceable.iter().any(|v| v.index == 2), "{ce:?}");
    let text = serde_json::to_value(&res).expect("serialises");
    assert_eq!(text["valid"], json!(false));
}

#[test]
fn lost_write() {
    let ops = [w(0, 10, json!(1)), r(20, 30, Value::Null)];
    assert_eq!(verdict(Model::Kv, &ops), Validity::NotLinearizable);
}

#[test]
fn concurrent_write_and_read_in_both_orders() {
    let before = [w(0, 10, json!(1)), r(5, 15, Value::Null)];
    let after = [w(0, 10, json!(1)), r(5, 15, json!(1))];
    assert_eq!(verdict(Model::Kv, &before), Validity::Linearizable);
    assert_eq!(verdict(Model::Kv, &after), Validity::Linearizable);
    // Once the write has returned, a later read must see it.
    let late = [
        w(0, 10, json!(1)),
        r(5, 15, json!(1)),
        r(20, 30, Value::Null),
    ];
    assert_eq!(verdict(Model::Kv, &late), Validity::NotLinearizable);
}

#[test]
fn touching_intervals_count_as_concurrent() {
    let ops = [w(0, 10, json!(1)), r(10, 20, Value::Null)];
    assert_eq!(verdict(Model::Kv, &ops), Validity::Linearizable);
}

#[test]
fn cas_chains() {
    let ok = [
        w(0, 10, json!(0)),
        cas(20, 30, json!(0), json!(1), true),
        cas(40, 50, json!(1), json!(2), true),
        cas(60, 70, json!(1), json!(3), false),
        r(80, 90, json!(2)),
    ];
    assert_eq!(verdict(Model::Kv, &ok), Validity::Linearizable);
    // Two concurrent cas from the same value cannot both succeed.
    let both = [
        w(0, 10, json!(0)),
        cas(20, 30, json!(0), json!(1), true),
        cas(20, 30, json!(0), json!(2), true),
    ];
    assert_eq!(verdict(Model::Kv, &both), Validity::NotLinearizable);
    // ...but one may fail, in either order.
    let one = [
        w(0, 10, json!(0)),
        cas(20, 30, json!(0), json!(1), false),
        cas(20, 30, json!(0), json!(2), true),
        r(40, 50, json!(2)),
    ];
    assert_eq!(verdict(Model::Kv, &one), Validity::Linearizable);
    // A failed cas on the value that is certainly there is a violation.
    let bad = [w(0, 10, json!(5)), cas(20, 30, json!(5), json!(6), false)];
    assert_eq!(verdict(Model::Kv, &bad), Validity::NotLinearizable);
}

#[test]
fn pending_write_that_must_have_happened() {
    let ops = [
        op(0, None, OpKind::Write, json!(7), Value::Null),
        r(10, 20, json!(7)),
    ];
    assert_eq!(verdict(Model::Kv, &ops), Validity::Linearizable);
}

#[test]
fn pending_write_that_must_not_have_happened_yet() {
    let ops = [
        w(0, 10, json!(1)),
        op(15, None, OpKind::Write, json!(2), Value::Null),
        r(20, 30, json!(1)),
        r(40, 50, json!(1)),
    ];
    assert_eq!(verdict(Model::Kv, &ops), Validity::Linearizable);
    // It cannot take effect before its call, though.
    let early = [
        r(0, 5, json!(2)),
        op(15, None, OpKind::Write, json!(2), Value::Null),
    ];
    assert_eq!(verdict(Model::Kv, &early), Validity::NotLinearizable);
}

#[test]
fn unknown_result_is_not_checked_but_has_effect() {
    let mut c = cas(0, 10, Value::Null, json!(1), false);
    c.unknown = true;
    let ops = [c, r(20, 30, json!(1))];
    assert_eq!(verdict(Model::Kv, &ops), Validity::Linearizable);
}

#[test]
fn keys_are_independent() {
    let mut a = w(0, 10, json!(1));
    a.key = "a".into();
    let mut b = r(20, 30, Value::Null);
    b.key = "b".into();
    let res = check(&[a, b], Model::Kv, None).expect("valid input");
    assert_eq!(res.valid, Validity::Linearizable);
    assert_eq!(res.partitions.len(), 2);
}

#[test]
fn fenced_stale_token_rejected() {
    let ok = [
        fw(0, Some(10), json!("a"), 1, json!(true)),
        fw(20, Some(30), json!("b"), 2, json!(true)),
        fw(40, Some(50), json!("c"), 1, json!(false)),
        r(60, 70, json!("b")),
        fw(80, Some(90), json!("d"), 2, json!(true)),
        r(100, 110, json!("d")),
    ];
    assert_eq!(verdict(Model::Fenced, &ok), Validity::Linearizable);
    let accepted_stale = [
        fw(0, Some(10), json!("a"), 2, json!(true)),
        fw(20, Some(30), json!("b"), 1, json!(true)),
    ];
    assert_eq!(
        verdict(Model::Fenced, &accepted_stale),
        Validity::NotLinearizable
    );
    let first_rejected = [fw(0, Some(10), json!("a"), 1, json!(false))];
    assert_eq!(
        verdict(Model::Fenced, &first_rejected),
        Validity::NotLinearizable
    );
}

#[test]
fn fenced_pending_write() {
    // A pending write with a high token cannot have landed before a later
    // accepted write with a lower token, but may land after it.
    let late = [
        fw(0, None, json!("p"), 5, Value::Null),
        fw(10, Some(20), json!("b"), 3, json!(true)),
        r(30, 40, json!("b")),
        r(50, 60, json!("p")),
    ];
    assert_eq!(verdict(Model::Fenced, &late), Validity::Linearizable);
    let seen_then_lower = [
        fw(0, None, json!("p"), 5, Value::Null),
        r(10, 20, json!("p")),
        fw(30, Some(40), json!("b"), 3, json!(true)),
    ];
    assert_eq!(
        verdict(Model::Fenced, &seen_then_lower),
        Validity::NotLinearizable
    );
}

#[test]
fn bad_op_shapes_are_input_errors() {
    let bad_cas = [op(0, Some(1), OpKind::Cas, json!(3), json!(true))];
    let e = check(&bad_cas, Model::Kv, None).expect_err("cas arg must be a pair");
    assert_eq!(e.index, 0);
    let unknown_op = [
        w(0, 1, json!(1)),
        op(
            0,
            Some(1),
            OpKind::Other("inc".into()),
            json!(1),
            Value::Null,
        ),
    ];
    let e = check(&unknown_op, Model::Kv, None).expect_err("no inc in kv");
    assert_eq!(e.index, 1);
    let bad_token = [fw(0, Some(1), json!(1), 0, json!(true))].map(|mut o| {
        o.arg = json!([1, "x"]);
        o
    });
    assert!(check(&bad_token, Model::Fenced, None).is_err());
    let cas_in_fenced = [cas(0, 1, json!(1), json!(2), true)];
    assert!(check(&cas_in_fenced, Model::Fenced, None).is_err());
}

#[test]
fn proved_violation_names_the_ops_of_its_proof() {
    // The write of 1, the write of 2 that completed in between, the stale read.
    let ops = [w(0, 10, json!(1)), w(20, 30, json!(2)), r(40, 50, json!(1))];
    let res = check(&ops, Model::Kv, None).expect("valid input");
    let proof = res
        .counterexample
        .and_then(|ce| ce.proof)
        .expect("proved from the values");
    let idx: Vec<usize> = proof.ops.iter().map(|v| v.index).collect();
    assert_eq!(idx, vec![0, 1, 2]);
    // Values written more than once prove nothing by themselves; the
    // search still finds the violation.
    let repeated = [
        w(0, 10, json!(1)),
        w(20, 30, json!(2)),
        w(20, 30, json!(1)),
        r(40, 50, json!(1)),
        r(60, 70, json!(2)),
    ];
    let res = check(&repeated, Model::Kv, None).expect("valid input");
    assert_eq!(res.valid, Validity::NotLinearizable);
    assert!(res.counterexample.and_then(|ce| ce.proof).is_none());
}

#[test]
fn failed_cas_inside_a_run_of_its_value_is_proved() {
    // 5 is read at 20-30 and again at 40-50, so it is held from the write's
    // return (10) to the last read's call (40); a cas expecting 5 that ran
    // entirely in between cannot have failed.
    let ops = [
        w(0, 10, json!(5)),
        cas(12, 18, json!(5), json!(6), false),
        r(20, 30, json!(5)),
        r(40, 50, json!(5)),
    ];
    let res = check(&ops, Model::Kv, None).expect("valid input");
    assert_eq!(res.valid, Validity::NotLinearizable);
    let proof = res
        .counterexample
        .and_then(|ce| ce.proof)
        .expect("proved from the values");
    assert!(proof.ops.iter().any(|v| v.index == 1), "{proof:?}");
    // Touching the run's ends, it may have gone before the write.
    let edge = [
        w(0, 10, json!(5)),
        cas(10, 18, json!(5), json!(6), false),
        r(20, 30, json!(5)),
        r(40, 50, json!(5)),
    ];
    assert_eq!(verdict(Model::Kv, &edge), Validity::Linearizable);
}

#[test]
fn the_log_order_decides_and_is_not_trusted() {
    use lincheck::{check_with_options, CheckOptions, DecidedBy, KvModel};
    let run = |ops: &[Op], log: &[Option<u64>]| {
        let opts = CheckOptions {
            log: Some(log),
            ..CheckOptions::default()
        };
        check_with_options(ops, &KvModel, &opts).expect("valid input")
    };
    // Two concurrent writes and a read of the first: only "2 then 1" fits.
    let ops = [w(0, 10, json!(1)), w(0, 10, json!(2)), r(20, 30, json!(1))];
    let res = run(&ops, &[Some(1), Some(0), Some(2)]);
    assert_eq!(res.valid, Validity::Linearizable);
    assert_eq!(res.partitions[0].decided_by, DecidedBy::Log);
    // A log in the other order does not verify; the values order it.
    let res = run(&ops, &[Some(0), Some(1), Some(2)]);
    assert_eq!(res.valid, Validity::Linearizable);
    assert_eq!(res.partitions[0].decided_by, DecidedBy::Witness);
    // No log makes a stale read valid.
    let stale = [w(0, 10, json!(1)), w(20, 30, json!(2)), r(40, 50, json!(1))];
    let res = run(&stale, &[Some(1), Some(0), Some(2)]);
    assert_eq!(res.valid, Validity::NotLinearizable);
    // A log of the wrong length is an input error.
    let opts = CheckOptions {
        log: Some(&[Some(0)]),
        ..CheckOptions::default()
    };
    assert!(check_with_options(&ops, &KvModel, &opts).is_err());
}

#[test]
fn a_history_the_witnesses_cannot_order_falls_back_and_says_why() {
    // Value 1 is written twice and read: the values cannot order it.
    let ops = [
        w(0, 10, json!(1)),
        w(20, 30, json!(2)),
        w(40, 50, json!(1)),
        r(60, 70, json!(1)),
    ];
    let res = check(&ops, Model::Kv, None).expect("valid input");
    assert_eq!(res.valid, Validity::Linearizable);
    let p = &res.partitions[0];
    assert_eq!(p.decided_by, lincheck::DecidedBy::Search);
    assert!(
        p.fallback
            .as_deref()
            .is_some_and(|f| f.contains("2 producers")),
        "{p:?}"
    );
}

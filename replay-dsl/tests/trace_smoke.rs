use replay_dsl::front::builder::trace;
use replay_dsl::front::tile::Tile;
use replay_dsl::ir::{CmpOp, Param};
use replay_dsl::prelude::*;
use replay_dsl::{DType, Elem};

#[test]
fn traces_vector_add_and_softmax() {
    let params = vec![
        Param {
            name: "x".into(),
            dtype: DType::Ptr(Elem::F32),
            divisibility: 16,
        },
        Param {
            name: "out".into(),
            dtype: DType::Ptr(Elem::F32),
            divisibility: 16,
        },
        Param {
            name: "n".into(),
            dtype: DType::Val(Elem::I32),
            divisibility: 1,
        },
    ];
    let k = trace("softmax", params, vec![("BLOCK".into(), 128)], 4, |a| {
        let x = Tile::<Ptr<f32>>::from_value(a[0]);
        let out = Tile::<Ptr<f32>>::from_value(a[1]);
        let n = Tile::<i32>::from_value(a[2]);
        let cols = arange(128);
        let mask = cols.compare(CmpOp::Lt, n);
        let row = program_id(0) * n;
        let v = load_or(x + row + cols, mask, f32::NEG_INFINITY);
        let e = exp(v - max(v, 0));
        let acc = for_range(range(0, n), zeros::<f32>([128]), |_i, acc| acc + e);
        store(out + row + cols, e / sum(e, 0) + acc, mask);
    })
    .unwrap();
    let text = k.to_string();
    println!("{text}");
    assert!(text.contains("reduce.max"));
    assert!(text.contains("for"));
}

#[test]
fn shape_mismatch_is_a_typed_error() {
    let err = trace("bad", vec![], vec![], 4, |_| {
        let a = arange(128);
        let b = arange(64);
        let _ = a + b;
    })
    .unwrap_err();
    assert_eq!(err.kernel, "bad");
    assert_eq!(err.op, "add");
    assert!(matches!(err.kind, replay_dsl::ErrorKind::Shape(_)), "{err}");
}

//! GatherND, ScatterND, ScatterElements and NonZero against direct definitions of the ONNX
//! ops: GatherND with batch dims and negative indices, and the scatters with each reduction,
//! their indices given at run time and known at import (an initializer);
//! and the shape arithmetic of empty known lists that exporters write (`Shape`, an empty
//! `Slice`, `ConstantOfShape` of `[0]`, `Concat`).

mod common;
use common::{
    FLOAT, INT64, Lcg, f32s, i64_init, i64s, int_attr, model, model_with, node, str_attr, strides,
    value,
};

/// GatherND by the definition: position `p` of the indices' leading dims reads the row at
/// `(p's batch coordinates, indices[p, :])`.
fn gather_nd_ref(xs: &[u64], x: &[f32], is: &[u64], i: &[i64], b: usize) -> Vec<f32> {
    let (q, k) = (is.len(), is[is.len() - 1] as usize);
    let positions = &is[..q - 1];
    let row: u64 = xs[b + k..].iter().product();
    let (xst, pst) = (strides(xs), strides(positions));
    let count: u64 = positions.iter().product();
    let mut out = vec![];
    for p in 0..count {
        let mut off = 0;
        for d in 0..b {
            off += (p / pst[d] % positions[d]) * xst[d];
        }
        for j in 0..k {
            let v = i[p as usize * k + j];
            let n = xs[b + j] as i64;
            off += (if v < 0 { v + n } else { v }) as u64 * xst[b + j];
        }
        out.extend((0..row).map(|r| x[(off + r) as usize]));
    }
    out
}

#[test]
fn gather_nd_matches_the_onnx_definition() {
    let mut r = Lcg(7);
    for case in 0..80 {
        let rank = 1 + r.below(4) as usize;
        let xs: Vec<u64> = (0..rank).map(|_| 1 + r.below(4)).collect();
        let b = if rank > 1 { r.below(2) as usize } else { 0 };
        let k = 1 + r.below((rank - b) as u64) as usize;
        let mut is: Vec<u64> = xs[..b].to_vec();
        is.extend((0..r.below(3)).map(|_| 1 + r.below(3)));
        is.push(k as u64);
        let n_x: u64 = xs.iter().product();
        let x: Vec<f32> = (0..n_x).map(|v| v as f32 + 0.25).collect();
        let per: u64 = is.iter().product::<u64>() / k as u64;
        let mut i = vec![];
        for _ in 0..per {
            for j in 0..k {
                let n = xs[b + j];
                i.push(r.below(2 * n) as i64 - n as i64);
            }
        }
        let want = gather_nd_ref(&xs, &x, &is, &i, b);
        let mut ys: Vec<u64> = is[..is.len() - 1].to_vec();
        ys.extend_from_slice(&xs[b + k..]);
        let attrs = vec![int_attr("batch_dims", b as i64)];
        let nodes = vec![node("GatherND", &["x", "i"], &["y"], attrs)];
        // The indices at run time, then known at import.
        let dynamic = model(
            nodes.clone(),
            vec![value("x", FLOAT, &xs), value("i", INT64, &is)],
            vec![value("y", FLOAT, &ys)],
        );
        let got = common::run(&dynamic, vec![f32s(&xs, x.clone()), i64s(&is, i.clone())])
            .unwrap_or_else(|e| panic!("case {case}: {xs:?} {is:?} b {b}: {e}"));
        let got: Vec<f32> = got.iter().map(|&v| v as f32).collect();
        assert_eq!(
            got, want,
            "case {case} (run-time indices): {xs:?} {is:?} b {b}"
        );
        let known = model_with(
            nodes,
            vec![i64_init("i", &is, i)],
            vec![value("x", FLOAT, &xs)],
            vec![value("y", FLOAT, &ys)],
        );
        let got = common::run(&known, vec![f32s(&xs, x)])
            .unwrap_or_else(|e| panic!("case {case}: {xs:?} {is:?} b {b}: {e}"));
        let got: Vec<f32> = got.iter().map(|&v| v as f32).collect();
        assert_eq!(
            got, want,
            "case {case} (known indices): {xs:?} {is:?} b {b}"
        );
    }
}

#[test]
fn gather_nd_rejects_an_index_outside_its_dim() {
    let m = model_with(
        vec![node("GatherND", &["x", "i"], &["y"], vec![])],
        vec![i64_init("i", &[1, 2], vec![0, 3])],
        vec![value("x", FLOAT, &[2, 3])],
        vec![value("y", FLOAT, &[1])],
    );
    let e = common::run(&m, vec![f32s(&[2, 3], vec![0.0; 6])]).expect_err("index 3 of 3");
    assert!(e.contains("out of range"), "{e}");
}

/// A scatter by the definition: update `u` goes to flat position `targets[u]` (rows of `row`).
fn scatter_ref(x: &[f32], upd: &[f32], targets: &[u64], row: u64, reduction: &str) -> Vec<f32> {
    let mut out = x.to_vec();
    for (u, &t) in targets.iter().enumerate() {
        for e in 0..row {
            let (o, v) = ((t * row + e) as usize, upd[u * row as usize + e as usize]);
            out[o] = match reduction {
                "add" => out[o] + v,
                "mul" => out[o] * v,
                "max" => out[o].max(v),
                "min" => out[o].min(v),
                _ => v,
            };
        }
    }
    out
}

/// A scatter node `op` (attributes `attrs`) of data `xs` by indices `is` (values `i`) with
/// updates `us`, run with the indices known at import (an initializer) and (`run_time`) given
/// at run time: the first result of each, as f32.
fn scatter_both(
    op: &str,
    attrs: Vec<irc_onnx::proto::AttributeProto>,
    (xs, x): (&[u64], &[f32]),
    (is, i): (&[u64], &[i64]),
    (us, upd): (&[u64], &[f32]),
    run_time: bool,
) -> Vec<Result<Vec<f32>, String>> {
    let nodes = vec![node(op, &["x", "i", "u"], &["y"], attrs)];
    let known = model_with(
        nodes.clone(),
        vec![i64_init("i", is, i.to_vec())],
        vec![value("x", FLOAT, xs), value("u", FLOAT, us)],
        vec![value("y", FLOAT, xs)],
    );
    let f32s_of = |r: Result<Vec<f64>, String>| r.map(|v| v.iter().map(|&v| v as f32).collect());
    let mut out = vec![f32s_of(common::run(
        &known,
        vec![f32s(xs, x.to_vec()), f32s(us, upd.to_vec())],
    ))];
    if run_time {
        let dynamic = model(
            nodes,
            vec![
                value("x", FLOAT, xs),
                value("i", INT64, is),
                value("u", FLOAT, us),
            ],
            vec![value("y", FLOAT, xs)],
        );
        let inputs = vec![
            f32s(xs, x.to_vec()),
            i64s(is, i.to_vec()),
            f32s(us, upd.to_vec()),
        ];
        out.push(f32s_of(common::run(&dynamic, inputs)));
    }
    out
}

#[test]
fn scatter_nd_matches_the_onnx_definition() {
    let mut r = Lcg(11);
    for case in 0..40 {
        let rank = 1 + r.below(3) as usize;
        let xs: Vec<u64> = (0..rank).map(|_| 2 + r.below(3)).collect();
        let k = 1 + r.below(rank as u64) as usize;
        // Distinct tuples: each position written once (duplicates are undefined in ONNX).
        let lead: u64 = xs[..k].iter().product();
        let count = 1 + r.below(lead);
        let mut rows: Vec<u64> = (0..lead).collect();
        for j in (1..rows.len()).rev() {
            rows.swap(j, r.below(j as u64 + 1) as usize);
        }
        rows.truncate(count as usize);
        let lst = strides(&xs[..k]);
        let mut i = vec![];
        for &t in &rows {
            for j in 0..k {
                let c = (t / lst[j] % xs[j]) as i64;
                i.push(if r.below(2) == 0 { c } else { c - xs[j] as i64 });
            }
        }
        let is = [count, k as u64];
        let mut us = vec![count];
        us.extend_from_slice(&xs[k..]);
        let row: u64 = xs[k..].iter().product();
        let n_x: u64 = xs.iter().product();
        let x: Vec<f32> = (0..n_x).map(|v| v as f32 * 0.5).collect();
        let upd: Vec<f32> = (0..count * row).map(|v| 100.0 - v as f32).collect();
        for reduction in ["none", "add", "mul", "max", "min"] {
            let want = scatter_ref(&x, &upd, &rows, row, reduction);
            let runs = scatter_both(
                "ScatterND",
                vec![str_attr("reduction", reduction)],
                (&xs, &x),
                (&is, &i),
                (&us, &upd),
                reduction != "mul",
            );
            for (k, got) in runs.into_iter().enumerate() {
                let got = got.unwrap_or_else(|e| panic!("case {case} {reduction} ({k}): {e}"));
                assert_eq!(got, want, "case {case} {reduction} ({k}): indices {i:?}");
            }
        }
    }
}

#[test]
fn scatter_elements_matches_the_onnx_definition() {
    let mut r = Lcg(3);
    for case in 0..40 {
        let rank = 1 + r.below(3) as usize;
        let xs: Vec<u64> = (0..rank).map(|_| 2 + r.below(3)).collect();
        let axis = r.below(rank as u64) as usize;
        // Each line along the axis gets a permutation's prefix: positions written once.
        let mut is = xs.clone();
        is[axis] = 1 + r.below(xs[axis]);
        let (xst, ist) = (strides(&xs), strides(&is));
        let n_i: u64 = is.iter().product();
        let mut i = vec![0i64; n_i as usize];
        let mut targets = vec![0u64; n_i as usize];
        let lines: u64 = n_i / is[axis];
        for line in 0..lines {
            let mut perm: Vec<u64> = (0..xs[axis]).collect();
            for j in (1..perm.len()).rev() {
                perm.swap(j, r.below(j as u64 + 1) as usize);
            }
            for a in 0..is[axis] {
                // The position of (line, a) in the indices: line enumerates the other dims.
                let (mut rem, mut p, mut base) = (line, 0, 0);
                for d in (0..rank).rev() {
                    let c = if d == axis {
                        a
                    } else {
                        let c = rem % is[d];
                        rem /= is[d];
                        c
                    };
                    p += c * ist[d];
                    if d != axis {
                        base += c * xst[d];
                    }
                }
                let v = perm[a as usize];
                i[p as usize] = if r.below(2) == 0 {
                    v as i64
                } else {
                    v as i64 - xs[axis] as i64
                };
                targets[p as usize] = base + v * xst[axis];
            }
        }
        let n_x: u64 = xs.iter().product();
        let x: Vec<f32> = (0..n_x).map(|v| v as f32 * 0.5).collect();
        let upd: Vec<f32> = (0..n_i).map(|v| -1.0 - v as f32).collect();
        for reduction in ["none", "add", "max"] {
            let want = scatter_ref(&x, &upd, &targets, 1, reduction);
            let attrs = vec![
                int_attr("axis", axis as i64),
                str_attr("reduction", reduction),
            ];
            let runs = scatter_both(
                "ScatterElements",
                attrs,
                (&xs, &x),
                (&is, &i),
                (&is, &upd),
                true,
            );
            for (k, got) in runs.into_iter().enumerate() {
                let got = got.unwrap_or_else(|e| panic!("case {case} {reduction} ({k}): {e}"));
                assert_eq!(
                    got, want,
                    "case {case} {reduction} ({k}): axis {axis}, indices {i:?}"
                );
            }
        }
    }
}

#[test]
fn a_product_scatter_needs_its_indices_at_import() {
    let m = model(
        vec![node(
            "ScatterND",
            &["x", "i", "u"],
            &["y"],
            vec![str_attr("reduction", "mul")],
        )],
        vec![
            value("x", FLOAT, &[4]),
            value("i", INT64, &[1, 1]),
            value("u", FLOAT, &[1]),
        ],
        vec![value("y", FLOAT, &[4])],
    );
    let e = common::run(
        &m,
        vec![
            f32s(&[4], vec![0.0; 4]),
            i64s(&[1, 1], vec![2]),
            f32s(&[1], vec![1.0]),
        ],
    )
    .expect_err("run-time scatter indices");
    assert!(e.contains("give the indices at import"), "{e}");
}

#[test]
fn non_zero_of_a_known_tensor_is_folded() {
    // NonZero of [[0, 2], [3, 0]] is [[0, 1], [1, 0]]; gathered rows of an iota read them back.
    let m = model_with(
        vec![
            node("NonZero", &["k"], &["nz"], vec![]),
            node("Cast", &["nz"], &["f"], vec![int_attr("to", FLOAT as i64)]),
            node("Add", &["f", "x"], &["y"], vec![]),
        ],
        vec![i64_init("k", &[2, 2], vec![0, 2, 3, 0])],
        vec![value("x", FLOAT, &[2, 2])],
        vec![value("y", FLOAT, &[2, 2])],
    );
    let got = common::run(&m, vec![f32s(&[2, 2], vec![0.5; 4])]).unwrap();
    assert_eq!(got, vec![0.5, 1.5, 1.5, 0.5]);
}

#[test]
fn empty_shape_lists_vanish_in_a_concat() {
    // A shape [2, 3] read with `Shape`, an empty slice of it and `ConstantOfShape([0])`
    // concatenated back: the exporters' way of writing the same shape, used by a Reshape.
    let m = model_with(
        vec![
            node("Shape", &["x"], &["s"], vec![]),
            node("Slice", &["s", "zero", "zero"], &["none"], vec![]),
            node(
                "ConstantOfShape",
                &["empty_shape"],
                &["pad"],
                vec![common::tensor_attr("value", i64_init("v", &[1], vec![7]))],
            ),
            node(
                "Concat",
                &["none", "s", "pad"],
                &["shape"],
                vec![int_attr("axis", 0)],
            ),
            node("Reshape", &["x", "shape"], &["y"], vec![]),
        ],
        vec![
            i64_init("zero", &[1], vec![0]),
            i64_init("empty_shape", &[1], vec![0]),
        ],
        vec![value("x", FLOAT, &[2, 3])],
        vec![value("y", FLOAT, &[2, 3])],
    );
    let x: Vec<f32> = (0..6).map(|v| v as f32).collect();
    let got = common::run(&m, vec![f32s(&[2, 3], x)]).unwrap();
    assert_eq!(got, (0..6).map(|v| v as f64).collect::<Vec<_>>());
}

#[test]
fn a_known_slice_keeps_large_integers_exact() {
    // 2^53 + 1 has no f64: sliced as a known list it must compare equal to itself.
    let big = (1i64 << 53) + 1;
    let m = model_with(
        vec![
            node("Slice", &["k", "zero", "one"], &["s"], vec![]),
            node("Equal", &["s", "want"], &["eq"], vec![]),
            node("Cast", &["eq"], &["f"], vec![int_attr("to", FLOAT as i64)]),
            node("Add", &["f", "x"], &["y"], vec![]),
        ],
        vec![
            i64_init("k", &[2], vec![big, 5]),
            i64_init("zero", &[1], vec![0]),
            i64_init("one", &[1], vec![1]),
            i64_init("want", &[1], vec![big]),
        ],
        vec![value("x", FLOAT, &[1])],
        vec![value("y", FLOAT, &[1])],
    );
    let got = common::run(&m, vec![f32s(&[1], vec![0.5])]).unwrap();
    assert_eq!(got, vec![1.5]);
}

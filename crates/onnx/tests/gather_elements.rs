//! `GatherElements` (a decomposition through a flat `gather`) against a direct definition of
//! the ONNX op on seeded random shapes, axes and indices (negative ones included), and an
//! index outside its axis as a run-time error of the interpreter, never a neighbouring read.

mod common;
use common::{FLOAT, INT64, Lcg, f32s, i64s, int_attr, model, node, strides, value};

fn run(xs: &[u64], x: Vec<f32>, is: &[u64], i: Vec<i64>, axis: i64) -> Result<Vec<f32>, String> {
    let m = model(
        vec![node(
            "GatherElements",
            &["x", "i"],
            &["y"],
            vec![int_attr("axis", axis)],
        )],
        vec![value("x", FLOAT, xs), value("i", INT64, is)],
        vec![value("y", FLOAT, is)],
    );
    let out = common::run(&m, vec![f32s(xs, x), i64s(is, i)])?;
    Ok(out.into_iter().map(|v| v as f32).collect())
}

/// The ONNX definition, element by element.
fn reference(xs: &[u64], x: &[f32], is: &[u64], i: &[i64], axis: usize) -> Vec<f32> {
    let (xst, ist) = (strides(xs), strides(is));
    (0..i.len())
        .map(|p| {
            let mut off = 0;
            for d in 0..is.len() {
                let c = (p as u64 / ist[d]) % is[d];
                let c = if d == axis {
                    let k = i[p];
                    (if k < 0 { k + xs[d] as i64 } else { k }) as u64
                } else {
                    c
                };
                off += c * xst[d];
            }
            x[off as usize]
        })
        .collect()
}

#[test]
fn matches_the_onnx_definition() {
    let mut r = Lcg(15);
    for _ in 0..60 {
        let rank = 1 + r.below(3) as usize;
        let xs: Vec<u64> = (0..rank).map(|_| 1 + r.below(5)).collect();
        let axis = r.below(rank as u64) as usize;
        let is: Vec<u64> = (0..rank)
            .map(|d| {
                if d == axis {
                    1 + r.below(6)
                } else {
                    1 + r.below(xs[d])
                }
            })
            .collect();
        let n_x: u64 = xs.iter().product();
        let n_i: u64 = is.iter().product();
        let x: Vec<f32> = (0..n_x).map(|k| k as f32 + 0.5).collect();
        let i: Vec<i64> = (0..n_i)
            .map(|_| r.below(2 * xs[axis]) as i64 - xs[axis] as i64)
            .collect();
        let want = reference(&xs, &x, &is, &i, axis);
        // The axis written negatively half of the time.
        let a = if r.below(2) == 0 {
            axis as i64
        } else {
            axis as i64 - rank as i64
        };
        let got = run(&xs, x, &is, i, a).unwrap_or_else(|e| panic!("{xs:?} {is:?} {a}: {e}"));
        assert_eq!(got, want, "data {xs:?}, indices {is:?}, axis {a}");
    }
}

#[test]
fn an_index_outside_its_axis_is_an_error() {
    // Row 3 of a 3x4 matrix does not exist; its flat offset (12..16) is past the data too,
    // but index 3 on axis 1 of a 4x3 matrix would land in the next row: both must fail.
    let x: Vec<f32> = (0..12).map(|k| k as f32).collect();
    for (xs, is, i, axis) in [
        ([3, 4], [1, 4], vec![0, 1, 3, 2], 0),
        ([4, 3], [1, 3], vec![0, 3, 1], 1),
        ([4, 3], [1, 3], vec![0, -4, 1], 1),
    ] {
        let e = run(&xs, x.clone(), &is, i.clone(), axis).expect_err("an out-of-range index");
        assert!(e.contains("out of range"), "{e}");
    }
    // The same shapes with every index in range run.
    assert_eq!(
        run(&[4, 3], x, &[1, 3], vec![0, 2, -1], 1).unwrap(),
        vec![0.0, 2.0, 2.0]
    );
}

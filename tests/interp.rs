//! The reference interpreter against values computed independently with numpy
//! (`scripts/make_fixtures.py` wrote `tests/fixtures/*`), plus hand-derived cases.

use half::f16;
use irc_interp::{Data, Tensor, run_graph};
use irc_ir::{DType, TensorType};
use std::path::Path;

/// Loads a fixture .npy as a tensor of type `ty`.
fn load(path: &Path, ty: &TensorType) -> Tensor {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = npyz::NpyFile::new(&bytes[..]).expect("valid npy");
    assert_eq!(npy.shape(), ty.shape.as_slice(), "{}", path.display());
    let data = match ty.dtype {
        DType::F16 => Data::F16(npy.into_vec::<f16>().unwrap()),
        DType::F32 => Data::F32(npy.into_vec::<f32>().unwrap()),
        DType::F64 => Data::F64(npy.into_vec::<f64>().unwrap()),
        DType::I32 => Data::I32(npy.into_vec::<i32>().unwrap()),
        DType::I64 => Data::I64(npy.into_vec::<i64>().unwrap()),
        DType::I1 => Data::I1(npy.into_vec::<bool>().unwrap()),
        DType::BF16 => unreachable!("fixtures hold no bf16"),
    };
    Tensor::new(ty.clone(), data).expect("shape and dtype match")
}

/// Largest elementwise difference allowed, relative to max(1, |expected|): results may differ
/// from numpy's by the last unit of the dtype (summation order, libm versus numpy).
fn tolerance(d: DType) -> f64 {
    match d {
        DType::F16 => 1e-3,
        DType::BF16 => 8e-3,
        DType::F32 => 2e-6,
        DType::F64 => 1e-12,
        _ => 0.0,
    }
}

#[track_caller]
fn assert_close(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.ty, want.ty, "{what}: type");
    let (g, w) = (got.data.to_f64(), want.data.to_f64());
    let tol = tolerance(got.ty.dtype);
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a - b).abs() <= tol * b.abs().max(1.0) || (a.is_nan() && b.is_nan());
        assert!(ok, "{what}: element {i}: got {a}, expected {b}");
    }
}

#[test]
fn fixtures_match_numpy() {
    let dir = irc_tests::root().join("tests/fixtures");
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixtures exist")
        .flatten()
        .map(|e| e.path())
        .collect();
    cases.sort();
    assert!(cases.len() >= 10, "fixtures missing");
    for case in cases {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        let src = std::fs::read_to_string(case.join("graph.ir")).unwrap();
        let module = irc_frontend::parse_module(&src).unwrap_or_else(|d| panic!("{name}: {d:?}"));
        let g = &module.graphs[0];
        let inputs: Vec<Tensor> = g
            .params
            .iter()
            .enumerate()
            .map(|(i, &p)| load(&case.join(format!("in{i}.npy")), g.ty(p)))
            .collect();
        let outputs = run_graph(g, inputs.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (i, out) in outputs.iter().enumerate() {
            let want = load(&case.join(format!("out{i}.npy")), &g.result_types[i]);
            assert_close(out, &want, &format!("{name} out{i}"));
        }
        // The decomposed graph computes the same function.
        let decomposed = irc_ir::decompose_graph(g).unwrap();
        for (i, (a, b)) in run_graph(&decomposed, inputs)
            .unwrap()
            .iter()
            .zip(&outputs)
            .enumerate()
        {
            assert_close(a, b, &format!("{name} decomposed out{i}"));
        }
    }
}

fn run1(src: &str, inputs: Vec<Data>) -> Data {
    let m = irc_frontend::parse_module(src).unwrap();
    let g = &m.graphs[0];
    let inputs = g
        .params
        .iter()
        .zip(inputs)
        .map(|(&p, d)| Tensor::new(g.ty(p).clone(), d).unwrap())
        .collect();
    run_graph(g, inputs).unwrap().remove(0).data
}

/// Check that 16-bit results are rounded at each op output, as PyTorch does: 2048 + 1 is not
/// representable in f16 and rounds to even (2048), so adding 1 twice stays at 2048.
#[test]
fn rounds_at_each_op() {
    let src = "graph @r(%x: tensor<1xf16>) -> tensor<1xf16> {\n  %c = constant {value = 1.0} : tensor<f16>\n  %a = add %x, %c\n  %b = add %a, %c\n  return %b\n}";
    assert_eq!(
        run1(src, vec![Data::F16(vec![f16::from_f32(2048.0)])]),
        Data::F16(vec![f16::from_f32(2048.0)])
    );
}

/// Check NaN propagation through max, relu and reductions, as torch.maximum and amax do.
#[test]
fn nan_propagates() {
    let src = "graph @n(%x: tensor<3xf32>) -> tensor<f32> {\n  %r = relu %x\n  %m = reduce_max %r\n  return %m\n}";
    let Data::F32(v) = run1(src, vec![Data::F32(vec![1.0, f32::NAN, 2.0])]) else {
        panic!()
    };
    assert!(v[0].is_nan());
}

/// Check f32 accumulation of 16-bit sums: 4096 ones sum exactly to 4096 in f32 and then round.
#[test]
fn sums_accumulate_in_f32() {
    let src =
        "graph @s(%x: tensor<4096xbf16>) -> tensor<bf16> {\n  %s = reduce_sum %x\n  return %s\n}";
    let ones = Data::from_f32(DType::BF16, vec![1.0; 4096]);
    assert_eq!(run1(src, vec![ones]).to_f64(), vec![4096.0]);
}

/// Check the one-producer-two-consumers case and graph results in return order.
#[test]
fn shared_values_and_result_order() {
    let src = "graph @s(%x: tensor<2xi64>) -> (tensor<2xi64>, tensor<2xi64>) {\n  %n = neg %x\n  %a = add %n, %n\n  %m = mul %n, %x\n  return %m, %a\n}";
    let m = irc_frontend::parse_module(src).unwrap();
    let out = run_graph(
        &m.graphs[0],
        vec![Tensor::new(TensorType::new([2], DType::I64), Data::I64(vec![3, -4])).unwrap()],
    )
    .unwrap();
    assert_eq!(out[0].data, Data::I64(vec![-9, -16]));
    assert_eq!(out[1].data, Data::I64(vec![-6, 8]));
}

/// A 256x256x256 f32 matmul against a naive triple loop in f64.
#[test]
fn matmul_matches_naive_loop() {
    let n = 256usize;
    let a: Vec<f32> = (0..n * n)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0)
        .collect();
    let b: Vec<f32> = (0..n * n)
        .map(|i| ((i * 5 % 11) as f32 - 5.0) / 4.0)
        .collect();
    let src = "graph @m(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>) -> tensor<256x256xf32> {\n  %c = matmul %a, %b\n  return %c\n}";
    let Data::F32(c) = run1(src, vec![Data::F32(a.clone()), Data::F32(b.clone())]) else {
        panic!()
    };
    for i in (0..n).step_by(17) {
        for j in (0..n).step_by(13) {
            let want: f64 = (0..n)
                .map(|k| f64::from(a[i * n + k]) * f64::from(b[k * n + j]))
                .sum();
            assert!((f64::from(c[i * n + j]) - want).abs() < 1e-3, "c[{i}][{j}]");
        }
    }
}

#[test]
fn every_small_example_runs() {
    for path in irc_tests::examples()
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("small"))
    {
        let src = std::fs::read_to_string(&path).unwrap();
        let m = irc_frontend::parse_module(&src).unwrap();
        let g = &m.graphs[0];
        let inputs = g
            .params
            .iter()
            .enumerate()
            .map(|(i, &p)| irc_interp::random_tensor(g.ty(p), 7, i as u64))
            .collect();
        let out = run_graph(g, inputs).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            out.iter()
                .all(|t| t.data.to_f64().iter().all(|x| x.is_finite())),
            "{}",
            path.display()
        );
    }
}

/// The check's tolerance follows the precision a result went through: an f32 result of a bf16
/// product is held to bf16's bar, one computed in f32 from bf16 inputs to f32's, an f64 cast of
/// an f32 product to f32's, an integer result exactly.
#[test]
fn result_tolerances_follow_the_values_computed_on_the_way() {
    let src = "graph @g(%a: tensor<4x8xbf16>, %b: tensor<8x4xbf16>, %x: tensor<4x8xf32>, %w: tensor<8x4xf32>) -> (tensor<4x4xf32>, tensor<4x8xf32>, tensor<4x4xf64>, tensor<4x4xi32>, tensor<4x4xbf16>) {\n  %m = matmul %a, %b\n  %f = cast %m {dtype = f32}\n  %c = cast %a {dtype = f32}\n  %y = add %c, %x\n  %p = matmul %x, %w\n  %d = cast %p {dtype = f64}\n  %i = cast %p {dtype = i32}\n  return %f, %y, %d, %i, %m\n}\n";
    let m = irc_frontend::parse_module(src).unwrap();
    assert_eq!(
        irc_interp::compare::result_tolerances(&m.graphs[0]),
        [1e-2, 1e-4, 1e-4, 0.0, 1e-2]
    );
}

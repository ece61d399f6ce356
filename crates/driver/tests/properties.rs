//! Properties of the whole pipeline on random graphs: every random graph that verifies (shapes
//! with 1s and primes, constant arrays holding NaN, ±inf and values beyond the dtype's range,
//! matmuls, reductions, views with negative axes) runs through `-O`, lowers to a kernel IR
//! module that verifies (through `irc_pipeline`, as `irc` does), emits CUDA that NVRTC compiles for sm_90a and sm_80 (when the CUDA wheels are found: see
//! `scripts/test.sh`), and, with the `mlir` feature, emits an MLIR module that verifies.
//!
//! The failures these properties found inside `crates/lower` (16-bit matmuls with N = 1 or
//! K = 1, a 7,000-deep chain) are fixed and kept as the regression tests at the end.

use proptest::prelude::*;
use std::fmt::Write as _;

/// Dims: 1s and primes (and a power of two), where tiling and vector paths have edge cases.
const DIMS: [u64; 7] = [1, 2, 3, 5, 7, 8, 13];
/// Constant values, the special ones included: a value out of f16's and f32's range must round
/// to ±inf as the spec says.
const VALUES: [&str; 10] = [
    "nan", "inf", "-inf", "1e300", "-1e300", "70000.0", "0.0", "-0.0", "1.5", "-2.25",
];
const DTYPES: [&str; 3] = ["f32", "f16", "f64"];
const UNARY: [&str; 8] = [
    "exp", "neg", "abs", "tanh", "relu", "sigmoid", "sqrt", "gelu",
];
const BINARY: [&str; 5] = ["add", "sub", "mul", "max", "div"];

/// One random step; each field is a random choice that [`build`] interprets.
#[derive(Clone, Debug)]
struct Step {
    kind: u8,
    a: usize,
    b: usize,
    pick: usize,
    dims: [usize; 3],
    values: Vec<usize>,
}

fn step() -> impl Strategy<Value = Step> {
    (
        0u8..8,
        any::<usize>(),
        any::<usize>(),
        any::<usize>(),
        [0usize..DIMS.len(), 0usize..DIMS.len(), 0usize..DIMS.len()],
        prop::collection::vec(0usize..VALUES.len(), 1..4),
    )
        .prop_map(|(kind, a, b, pick, dims, values)| Step {
            kind,
            a,
            b,
            pick,
            dims,
            values,
        })
}

struct Value {
    name: String,
    shape: Vec<u64>,
}

fn ty(shape: &[u64], dt: &str) -> String {
    if shape.is_empty() {
        format!("tensor<{dt}>")
    } else {
        let d: Vec<String> = shape.iter().map(u64::to_string).collect();
        format!("tensor<{}x{dt}>", d.join("x"))
    }
}

/// The graph text of `steps` over one dtype. Every statement is well typed by construction;
/// matmuls take any N and K, 1 included.
fn build(dt: &str, params: [usize; 3], steps: &[Step]) -> String {
    let (m, k) = (DIMS[params[0]], DIMS[params[1]]);
    let mut vals = vec![Value {
        name: "x".into(),
        shape: vec![m, k],
    }];
    let mut body = String::new();
    for (i, s) in steps.iter().enumerate() {
        let name = format!("v{i}");
        let x = &vals[s.a % vals.len()];
        let (line, shape) = match s.kind {
            0 | 1 => (
                format!("{} %{}", UNARY[s.pick % UNARY.len()], x.name),
                x.shape.clone(),
            ),
            2 => {
                // A binary op with an earlier value of the same shape, or a constant.
                let same: Vec<&Value> = vals.iter().filter(|v| v.shape == x.shape).collect();
                let y = same[s.b % same.len()];
                (
                    format!("{} %{}, %{}", BINARY[s.pick % BINARY.len()], x.name, y.name),
                    x.shape.clone(),
                )
            }
            3 => {
                // A constant array of x's shape (splat when it is large), then a binary op.
                let numel: u64 = x.shape.iter().product();
                let value = if numel <= 64 {
                    let v: Vec<&str> = (0..numel as usize)
                        .map(|j| VALUES[s.values[j % s.values.len()]])
                        .collect();
                    format!("[{}]", v.join(", "))
                } else {
                    VALUES[s.values[0]].to_string()
                };
                let _ = writeln!(
                    body,
                    "  %c{i} = constant {{value = {value}}} : {}",
                    ty(&x.shape, dt)
                );
                (
                    format!("{} %{}, %c{i}", BINARY[s.pick % BINARY.len()], x.name),
                    x.shape.clone(),
                )
            }
            4 if x.shape.len() == 2 => {
                let n = DIMS[s.dims[0]];
                let kk = x.shape[1];
                let _ = writeln!(
                    body,
                    "  %w{i} = constant {{value = {}}} : {}",
                    VALUES[s.values[0]],
                    ty(&[kk, n], dt)
                );
                (format!("matmul %{}, %w{i}", x.name), vec![x.shape[0], n])
            }
            5 if !x.shape.is_empty() => {
                let r = x.shape.len() as i64;
                let axis = (s.pick % x.shape.len()) as i64 - if s.b % 2 == 0 { r } else { 0 };
                let op = ["reduce_sum", "reduce_max", "reduce_mean"][s.b % 3];
                let mut shape = x.shape.clone();
                shape[axis.rem_euclid(r) as usize] = 1;
                (
                    format!("{op} %{} {{axes = [{axis}], keepdims = true}}", x.name),
                    shape,
                )
            }
            6 if x.shape.len() == 2 => {
                // A transpose, written with negative entries half of the time.
                let perm = if s.pick % 2 == 0 { "[1, 0]" } else { "[-1, 0]" };
                (
                    format!("transpose %{} {{perm = {perm}}}", x.name),
                    vec![x.shape[1], x.shape[0]],
                )
            }
            7 if !x.shape.is_empty() => (
                format!("softmax %{} {{axis = -1}}", x.name),
                x.shape.clone(),
            ),
            _ => (format!("neg %{}", x.name), x.shape.clone()),
        };
        let _ = writeln!(body, "  %{name} = {line}");
        vals.push(Value { name, shape });
    }
    let last = vals.last().expect("x at least");
    format!(
        "graph @p(%x: {}) -> {} {{\n{body}  return %{}\n}}\n",
        ty(&[m, k], dt),
        ty(&last.shape, dt),
        last.name
    )
}

/// The whole pipeline on one graph text: parse (it must verify), then, as written and after
/// `-O`, every stage of `irc_pipeline` to CUDA (to NVRTC's PTX when NVRTC is found) and, with the
/// `mlir` feature, to a verified MLIR module. Returns the first failure.
fn pipeline(text: &str) -> Result<(), String> {
    pipeline_with(text, true, &["sm_90a", "sm_80"])
}

/// The pipeline for each of `archs` (CUDA, through NVRTC when found) and, with `mlir`, the
/// MLIR backend for sm_80.
fn pipeline_with(text: &str, mlir: bool, archs: &[&str]) -> Result<(), String> {
    use irc_pipeline::{Pipeline, Stage};
    let module = irc_frontend::parse_module(text).map_err(|d| format!("does not parse: {d:?}"))?;
    let g = &module.graphs[0];
    for optimize in [false, true] {
        let label = if optimize { "-O" } else { "as written" };
        let until = if nvrtc_found() {
            Stage::Ptx
        } else {
            Stage::Cuda
        };
        let pipe = |arch: &str| Pipeline {
            passes: optimize.then(irc_passes::manager::PassManager::default_pipeline),
            arch: Some(arch.into()),
            ..Default::default()
        };
        // sm_90a, the CLI's default, has the Hopper templates (TMA, wgmma) besides sm_80's.
        for &arch in archs {
            pipe(arch)
                .compile(g, Default::default(), until)
                .map_err(|e| format!("{label}, {arch}: {e}"))?;
        }
        let p = pipe("sm_80");
        if mlir && cfg!(feature = "mlir") {
            p.compile(g, Default::default(), Stage::Mlir)
                .map_err(|e| format!("{label}: MLIR: {e}"))?;
        }
    }
    Ok(())
}

fn nvrtc_found() -> bool {
    static FOUND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        let ok = irc_runtime::nvrtc::ensure_nvrtc()
            .and_then(|_| irc_runtime::toolkit::find_cuda_include())
            .is_ok();
        if !ok {
            eprintln!("properties: no NVRTC toolchain found; CUDA is emitted but not compiled");
        }
        ok
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_compile_through_every_backend(
        dt in 0usize..DTYPES.len(),
        params in [0usize..DIMS.len(), 0usize..DIMS.len(), 0usize..DIMS.len()],
        steps in prop::collection::vec(step(), 1..12),
    ) {
        let text = build(DTYPES[dt], params, &steps);
        if let Err(e) = pipeline(&text) {
            panic!("{e}\n{text}");
        }
    }
}

/// Constant arrays holding NaN, ±inf and values beyond the dtype's range, in every float
/// dtype: the CUDA initialisers must be constant expressions NVRTC accepts.
#[test]
fn nonfinite_and_huge_constant_arrays() {
    for dt in DTYPES {
        let text = format!(
            "graph @c(%x: tensor<6x{dt}>) -> tensor<6x{dt}> {{\n  %c = constant {{value = [nan, inf, -inf, 1e300, -1e300, 70000.0]}} : tensor<6x{dt}>\n  %y = add %x, %c\n  return %y\n}}\n"
        );
        if let Err(e) = pipeline(&text) {
            panic!("{dt}: {e}\n{text}");
        }
    }
}

/// A chain 10,000 statements deep (elementwise ops reading the two values before them, so
/// every value is a kernel of its own), through the CUDA backend.
fn deep_chain(n: usize) -> String {
    let mut text = String::from(
        "graph @deep(%x: tensor<3x5xf32>, %y: tensor<3x5xf32>) -> tensor<3x5xf32> {\n",
    );
    let (mut a, mut b) = ("x".to_string(), "y".to_string());
    for i in 0..n {
        let op = ["add", "mul", "sub", "max"][i % 4];
        let _ = writeln!(text, "  %v{i} = {op} %{a}, %{b}");
        b = std::mem::replace(&mut a, format!("v{i}"));
    }
    let _ = writeln!(text, "  return %{a}\n}}");
    text
}

#[test]
fn deep_chain_of_binary_ops() {
    if let Err(e) = pipeline_with(&deep_chain(10_000), false, &["sm_80"]) {
        panic!("{e}");
    }
}

#[test]
#[cfg_attr(
    feature = "mlir",
    ignore = "crates/emit-mlir: 10,000 kernels take about 10 minutes (most of it in mlir::SymbolTable::lookupSymbolIn); passes, too slow for CI"
)]
fn deep_chain_of_binary_ops_through_mlir() {
    if let Err(e) = pipeline_with(&deep_chain(10_000), true, &["sm_80"]) {
        panic!("{e}");
    }
}

// ----- Once failures inside crates/lower, kept as regression tests. -----

#[test]
fn matmul_with_n_1() {
    let text = "graph @m(%a: tensor<16x16xf16>, %b: tensor<16x1xf16>) -> tensor<16x1xf16> {\n  %c = matmul %a, %b\n  return %c\n}\n";
    pipeline(text).unwrap();
}

#[test]
fn matmul_with_k_1() {
    let text = "graph @m(%a: tensor<16x1xf16>, %b: tensor<1x16xf16>) -> tensor<16x16xf16> {\n  %c = matmul %a, %b\n  return %c\n}\n";
    pipeline(text).unwrap();
}

#[test]
fn deep_chain_of_unary_ops() {
    let mut text =
        String::from("graph @deep(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %v0 = exp %x\n");
    for i in 1..7_000 {
        let _ = writeln!(text, "  %v{i} = exp %v{}", i - 1);
    }
    text.push_str("  return %v6999\n}\n");
    pipeline(&text).unwrap();
}

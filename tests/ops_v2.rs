//! The v2 ops (`gather`, `slice`, `concat`, `select`, comparisons, `iota`, `erf`, `floor`,
//! `ceil`, `round`): canonical printing and round trip, located typing errors, the
//! interpreter's defined behaviour on out-of-range indices and on halves, and the `-O` pipeline
//! keeping their meaning. Their numerics against numpy are in `tests/fixtures` (run by
//! `tests/interp.rs`).

#[path = "emulate.rs"]
mod emulate;

use irc_interp::{Data, Tensor, run_graph};
use irc_tests::{check, check_error};

/// Check that every v2 op prints canonically (attributes sorted, types written) and round-trips.
#[test]
fn prints_and_round_trips() {
    check(
        "graph @v2(%x: tensor<4x6xf32>, %i: tensor<2x3xi32>, %c: tensor<4x1xi1>) -> (tensor<4x2x3xf32>, tensor<4x6xf32>) {
  %g = gather %x, %i {axis = -1}
  %s = slice %x {starts = [0, 5], ends = [4, -100], steps = [1, -1], axes = [0, 1]}
  %k = concat %s, %x, %s {axis = 0}
  %h = slice %k {starts = [4], ends = [8]}
  %n = iota {axis = 1} : tensor<4x6xf32>
  %l = lt %h, %n
  %m = select %l, %h, %n
  %e = erf %m
  %y = select %c, %e, %x
  %q = eq %c, %c
  return %g, %y
}",
        "graph @v2(
    %x: tensor<4x6xf32>,
    %i: tensor<2x3xi32>,
    %c: tensor<4x1xi1>
) -> (tensor<4x2x3xf32>, tensor<4x6xf32>) {
  %g = gather %x, %i {axis = -1} : tensor<4x2x3xf32>
  %s = slice %x {axes = [0, 1], ends = [4, -100], starts = [0, 5], steps = [1, -1]} : tensor<4x6xf32>
  %k = concat %s, %x, %s {axis = 0} : tensor<12x6xf32>
  %h = slice %k {ends = [8], starts = [4]} : tensor<4x6xf32>
  %n = iota {axis = 1} : tensor<4x6xf32>
  %l = lt %h, %n : tensor<4x6xi1>
  %m = select %l, %h, %n : tensor<4x6xf32>
  %e = erf %m : tensor<4x6xf32>
  %y = select %c, %e, %x : tensor<4x6xf32>
  %q = eq %c, %c : tensor<4x1xi1>
  return %g, %y
}",
    );
}

/// Check that each v2 op's typing rule rejects a bad statement with a located message.
#[test]
fn typing_errors_are_located() {
    let sig = "graph @f(%x: tensor<4x8xf32>, %i: tensor<3xi64>, %c: tensor<4x8xi1>) -> tensor<4x8xf32> {\n";
    let cases: &[(&str, &str)] = &[
        (
            "  %y = gather %x, %x\n",
            "'gather' indices must be i32 or i64, got f32",
        ),
        (
            "  %y = gather %x, %i {axis = 2}\n",
            "axis 2 is out of range for rank 2",
        ),
        (
            "  %y = slice %x {starts = [0]}\n",
            "requires the attribute 'ends'",
        ),
        (
            "  %y = slice %x {starts = [0], ends = [2, 3]}\n",
            "'ends' has 2 entries",
        ),
        ("  %y = slice %x {starts = [3], ends = [1]}\n", "is empty"),
        (
            "  %y = slice %x {starts = [0], ends = [1], steps = [0]}\n",
            "'steps' entry is 0",
        ),
        (
            "  %y = slice %x {starts = [0, 0], ends = [1, 1], axes = [1, -1]}\n",
            "axis -1 is repeated",
        ),
        (
            "  %y = concat %x, %i {axis = 0}\n",
            "operands must have one dtype",
        ),
        (
            "  %y = concat %x, %c {axis = 0}\n",
            "operands must have one dtype",
        ),
        (
            "  %y = concat {axis = 0}\n",
            "'concat' takes 1 or more operands, got 0",
        ),
        (
            "  %t = transpose %x {perm = [1, 0]}\n  %y = concat %x, %t {axis = 0}\n",
            "does not match",
        ),
        (
            "  %y = select %x, %x, %x\n",
            "'select' condition must be i1",
        ),
        ("  %y = select %c, %x, %i\n", "operands must have one dtype"),
        ("  %y = lt %x, %i\n", "operands must have one dtype"),
        ("  %y = eq %x, %c\n", "operands must have one dtype"),
        ("  %y = iota {axis = 0}\n", "needs its result type written"),
        (
            "  %y = iota {axis = 2} : tensor<4x8xi32>\n",
            "axis 2 is out of range",
        ),
        ("  %y = iota : tensor<4xi1>\n", "not i1"),
        ("  %y = erf %i\n", "'erf' accepts float dtypes"),
        (
            "  %y = lt %x, %x : tensor<4x8xf32>\n",
            "produces tensor<4x8xi1>",
        ),
    ];
    for (stmt, msg) in cases {
        let line = 2 + stmt.matches('\n').count() - 1;
        check_error(&format!("{sig}{stmt}  return %x\n}}\n"), line, msg);
    }
}

fn run(src: &str, inputs: Vec<Data>) -> Result<Vec<Tensor>, irc_interp::InterpError> {
    let m = irc_frontend::parse_module(src).expect("parses");
    let g = &m.graphs[0];
    let inputs = g
        .params
        .iter()
        .zip(inputs)
        .map(|(&p, d)| Tensor::new(g.ty(p).clone(), d).unwrap())
        .collect();
    run_graph(g, inputs)
}

/// Check that gather indices in [-n, n) read (negative ones once from the end) and that any
/// other index is a run-time error naming it, never a read out of bounds.
#[test]
fn gather_index_range() {
    let src = "graph @g(%x: tensor<4xf32>, %i: tensor<3xi32>) -> tensor<3xf32> {\n  %y = gather %x, %i\n  return %y\n}";
    let x = Data::F32(vec![10.0, 11.0, 12.0, 13.0]);
    let out = run(src, vec![x.clone(), Data::I32(vec![-4, 3, -1])]).unwrap();
    assert_eq!(out[0].data, Data::F32(vec![10.0, 13.0, 13.0]));
    for bad in [4, -5, i32::MAX, i32::MIN] {
        let e = run(src, vec![x.clone(), Data::I32(vec![0, bad, 0])]).unwrap_err();
        assert!(
            e.to_string().contains(&format!("index {bad} (element 1")),
            "{e}"
        );
    }
}

/// Check that `-O` keeps the meaning of a graph mixing v2 ops with rewritable ones (the
/// transpose and the unit-step slice are views to the cost model; the gather a copy kernel).
#[test]
fn optimized_graph_agrees() {
    let src = "graph @t(%x: tensor<8x16xf32>, %i: tensor<5xi64>) -> (tensor<16x5xf32>, tensor<4x16xf32>) {
  %t = transpose %x {perm = [1, 0]}
  %g = gather %t, %i {axis = 1}
  %e = exp %g
  %s = slice %x {starts = [2], ends = [6]}
  %z = constant {value = 0.0} : tensor<f32>
  %p = gt %s, %z
  %n = neg %s
  %r = select %p, %s, %n
  return %e, %r
}";
    let m = irc_frontend::parse_module(src).unwrap();
    let pm = irc_passes::manager::PassManager::default_pipeline();
    let opt = pm.run(&m.graphs[0]).expect("-O runs").graph;
    let x: Vec<f32> = (0..128).map(|k| (k as f32 * 0.37).sin()).collect();
    let inputs = |g: &irc_ir::Graph| {
        vec![
            Tensor::new(g.ty(g.params[0]).clone(), Data::F32(x.clone())).unwrap(),
            Tensor::new(g.ty(g.params[1]).clone(), Data::I64(vec![0, 7, -1, 3, -8])).unwrap(),
        ]
    };
    let a = run_graph(&m.graphs[0], inputs(&m.graphs[0])).unwrap();
    let b = run_graph(&opt, inputs(&opt)).unwrap();
    assert_eq!(a, b);
}

/// `round` takes halves to the even integer (as `torch.round` and ONNX Round), `floor` and
/// `ceil` as their names say, NaN and the infinities unchanged, in the interpreter, in `-O`'s
/// constant folding, and in the kernels (emulated, every float type: `tests/gpu/rounding.ir`).
#[test]
fn rounding_ops_take_halves_to_even() {
    let xs = [
        -2.5,
        -1.5,
        -0.5,
        0.5,
        1.5,
        2.5,
        -0.7,
        0.7,
        3.2,
        f64::INFINITY,
        f64::NAN,
    ];
    let src = "graph @r(%x: tensor<11xf32>) -> (tensor<11xf32>, tensor<11xf32>, tensor<11xf32>) {\n  %r = round %x\n  %f = floor %x\n  %c = ceil %x\n  return %r, %f, %c\n}\n";
    let data = Data::F32(xs.iter().map(|&x| x as f32).collect());
    let out = run(src, vec![data]).unwrap();
    let want = [
        [
            -2.0,
            -2.0,
            -0.0,
            0.0,
            2.0,
            2.0,
            -1.0,
            1.0,
            3.0,
            f64::INFINITY,
            f64::NAN,
        ],
        [
            -3.0,
            -2.0,
            -1.0,
            0.0,
            1.0,
            2.0,
            -1.0,
            0.0,
            3.0,
            f64::INFINITY,
            f64::NAN,
        ],
        [
            -2.0,
            -1.0,
            -0.0,
            1.0,
            2.0,
            3.0,
            -0.0,
            1.0,
            4.0,
            f64::INFINITY,
            f64::NAN,
        ],
    ];
    for (t, w) in out.iter().zip(want) {
        let got = t.data.to_f64();
        for (g, w) in got.iter().zip(w) {
            assert!(g == &w || (g.is_nan() && w.is_nan()), "{got:?} vs {w:?}");
        }
    }
    // Constant folding agrees: round(2.5) + round(3.5) = 2 + 4.
    let folded = "graph @k() -> tensor<f32> {\n  %a = constant {value = 2.5} : tensor<f32>\n  %b = constant {value = 3.5} : tensor<f32>\n  %ra = round %a\n  %rb = round %b\n  %y = add %ra, %rb\n  return %y\n}\n";
    let m = irc_frontend::parse_module(folded).unwrap();
    let g = irc_passes::manager::PassManager::default_pipeline()
        .run(&m.graphs[0])
        .unwrap()
        .graph;
    assert!(
        g.insts.iter().all(|i| i.op != irc_ir::OpKind::Round),
        "-O folds round of constants"
    );
    let y = run_graph(&g, vec![]).unwrap();
    assert_eq!(y[0].data.to_f64(), vec![6.0]);
    let text = std::fs::read_to_string(irc_tests::root().join("tests/gpu/rounding.ir")).unwrap();
    let m = irc_frontend::parse_module(&text).unwrap();
    let g = &m.graphs[0];
    let k = irc_lower::lower_graph(g, irc_lower::SourceInfo::default()).unwrap();
    emulate::assert_agree(emulate::against_interpreter_all(g, &k, 5), "rounding");
}

//! ONNX's recurrent layers `RNN`, `GRU` and `LSTM`, unrolled over their static sequence. Per
//! direction, the input's product with `W` is one matmul over every step (the biases added to
//! it), then each step is one matmul of the hidden state with `R` (a GRU without
//! `linear_before_reset` has a second one, of the reset-gated state with `Rh`), the gates'
//! slices and their elementwise math; the steps' hidden states are concatenated into `Y`.
//!
//! `sequence_lens` must be known at import. Equal lengths `L` run `L` steps and zero `Y` past
//! them. Lengths that differ per batch row run the longest; a row past its length keeps its
//! state (a `select` by a known mask) and outputs zeros, and the reverse direction reads each
//! row reversed within its own length and writes it back so: a `gather` of known indices,
//! `ReverseSequence`'s permutation ([`reverse_index`]).

use super::Node;
use super::math::{bin, broadcast_to, cast_to, known_ints, reshape_to, sc, select, un};
use super::pad::slice_axis;
use super::shape::transpose_to;
use crate::ctx::{Ctx, R, Val};
use irc_interp::{Data, Tensor};
use irc_ir::{Attr, Attrs, DType, OpKind, TensorType};

/// The longest sequence unrolled: each step writes 10-30 statements.
const MAX_STEPS: u64 = 4096;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    fn gates(self) -> u64 {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }

    /// The default activations of one direction (f, g, h as the op names them).
    fn defaults(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// An activation function of the `activations` attribute, with its alpha and beta.
#[derive(Clone, Debug)]
struct Act {
    name: String,
    alpha: f64,
    beta: f64,
}

/// The activation functions, `per` direction in order (the forward direction's first). A list
/// naming one direction's functions serves both of a bidirectional layer (as ONNX Runtime
/// reads it). Each function that takes an alpha (a beta) takes the next of
/// `activation_alpha` (`activation_beta`), or its ONNX op's default when the list is spent.
fn activations(n: &Node, cell: Cell, dirs: usize) -> R<Vec<Act>> {
    let per = cell.defaults().len();
    let mut names: Vec<String> = match n.strings("activations") {
        Some(v) if !v.is_empty() => v,
        _ => cell.defaults().iter().map(|s| s.to_string()).collect(),
    };
    if names.len() == per && dirs == 2 {
        names.extend(names.clone());
    }
    if names.len() != per * dirs {
        return Err(format!(
            "activations names {} functions; {cell:?} takes {per} per direction ({dirs} here)",
            names.len()
        ));
    }
    let mut alphas = n.floats("activation_alpha").unwrap_or_default().into_iter();
    let mut betas = n.floats("activation_beta").unwrap_or_default().into_iter();
    names
        .iter()
        .map(|name| {
            let lower = name.to_ascii_lowercase();
            let (alpha, beta) = match lower.as_str() {
                "relu" | "tanh" | "sigmoid" | "softsign" | "softplus" => (None, None),
                "leakyrelu" => (Some(0.01), None),
                "thresholdedrelu" | "elu" => (Some(1.0), None),
                "affine" => (Some(1.0), Some(0.0)),
                "scaledtanh" => (Some(1.0), Some(1.0)),
                "hardsigmoid" => (Some(0.2), Some(0.5)),
                _ => {
                    return Err(format!(
                        "activation '{name}' is not one of Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus"
                    ));
                }
            };
            let take = |d: Option<f64>, it: &mut std::vec::IntoIter<f32>| {
                d.map_or(0.0, |d| it.next().map_or(d, f64::from))
            };
            let alpha = take(alpha, &mut alphas);
            let beta = take(beta, &mut betas);
            Ok(Act {
                name: lower,
                alpha,
                beta,
            })
        })
        .collect()
}

/// `a(x)`, its input clipped to `[-clip, clip]` first when the node sets `clip`.
fn activate(cx: &mut Ctx, a: &Act, x: &Val, clip: Option<f64>) -> R<Val> {
    let x = match clip {
        Some(c) => {
            let (lo, hi) = (sc(cx, -c, x), sc(cx, c, x));
            let y = bin(cx, OpKind::Max, x, &lo)?;
            bin(cx, OpKind::Min, &y, &hi)?
        }
        None => x.clone(),
    };
    let (alpha, beta) = (sc(cx, a.alpha, &x), sc(cx, a.beta, &x));
    let (zero, one) = (sc(cx, 0.0, &x), sc(cx, 1.0, &x));
    match a.name.as_str() {
        "sigmoid" => un(cx, OpKind::Sigmoid, &x),
        "tanh" => un(cx, OpKind::Tanh, &x),
        "relu" => un(cx, OpKind::Relu, &x),
        "affine" => {
            let ax = bin(cx, OpKind::Mul, &x, &alpha)?;
            bin(cx, OpKind::Add, &ax, &beta)
        }
        "leakyrelu" => {
            let ax = bin(cx, OpKind::Mul, &x, &alpha)?;
            let pos = bin(cx, OpKind::Ge, &x, &zero)?;
            select(cx, &pos, &x, &ax)
        }
        "thresholdedrelu" => {
            let keep = bin(cx, OpKind::Ge, &x, &alpha)?;
            select(cx, &keep, &x, &zero)
        }
        "scaledtanh" => {
            let bx = bin(cx, OpKind::Mul, &x, &beta)?;
            let t = un(cx, OpKind::Tanh, &bx)?;
            bin(cx, OpKind::Mul, &t, &alpha)
        }
        "hardsigmoid" => {
            let ax = bin(cx, OpKind::Mul, &x, &alpha)?;
            let y = bin(cx, OpKind::Add, &ax, &beta)?;
            let y = bin(cx, OpKind::Max, &y, &zero)?;
            bin(cx, OpKind::Min, &y, &one)
        }
        "elu" => {
            let e = un(cx, OpKind::Exp, &x)?;
            let e = bin(cx, OpKind::Sub, &e, &one)?;
            let e = bin(cx, OpKind::Mul, &e, &alpha)?;
            let pos = bin(cx, OpKind::Ge, &x, &zero)?;
            select(cx, &pos, &x, &e)
        }
        "softsign" => {
            let ab = un(cx, OpKind::Abs, &x)?;
            let d = bin(cx, OpKind::Add, &ab, &one)?;
            bin(cx, OpKind::Div, &x, &d)
        }
        "softplus" => {
            let e = un(cx, OpKind::Exp, &x)?;
            let s = bin(cx, OpKind::Add, &e, &one)?;
            un(cx, OpKind::Log, &s)
        }
        other => Err(format!("activation '{other}' is not supported")),
    }
}

/// Where row `b` of step `k` reads in a sequence reversed within each row's length `lens[b]`
/// (`ReverseSequence`'s permutation, its own inverse): `lens[b] - 1 - k` inside the length,
/// `k` past it.
pub(super) fn reverse_index(k: u64, len: u64) -> u64 {
    if k < len { len - 1 - k } else { k }
}

/// `x[t]` of a `[S, B, ...]` value, as `[B, ...]`.
fn step_of(cx: &mut Ctx, x: &Val, t: u64) -> R<Val> {
    let shape = cx.ty(x).shape;
    let s = slice_axis(cx, x, 0, t as i64, t as i64 + 1, 1)?;
    reshape_to(cx, &s, &shape[1..])
}

/// Row `d` of a `[D, ...]` value, as `[...]`.
fn direction_of(cx: &mut Ctx, x: &Val, d: usize) -> R<Val> {
    step_of(cx, x, d as u64)
}

/// Gate `k` (columns `k·h .. (k+1)·h`) of a `[B, G·h]` value.
fn gate(cx: &mut Ctx, x: &Val, k: u64, h: u64) -> R<Val> {
    slice_axis(cx, x, 1, (k * h) as i64, ((k + 1) * h) as i64, 1)
}

fn add_opt(cx: &mut Ctx, a: Val, b: Option<&Val>) -> R<Val> {
    match b {
        Some(b) => bin(cx, OpKind::Add, &a, b),
        None => Ok(a),
    }
}

/// `a · b`, or `None` where `b` is (a zero state).
fn mul_opt(cx: &mut Ctx, a: &Val, b: Option<&Val>) -> R<Option<Val>> {
    b.map(|b| bin(cx, OpKind::Mul, a, b)).transpose()
}

/// `h · Rᵀ` for a `[G·h, h]` recurrence weight, or `None` for a zero state.
fn recur(cx: &mut Ctx, h: Option<&Val>, r: &Val) -> R<Option<Val>> {
    let attrs = Attrs::new().with("transpose_b", Attr::Bool(true));
    h.map(|h| cx.op(OpKind::Matmul, &[h, r], attrs.clone()))
        .transpose()
}

/// What a direction's steps read, beyond the input's projection.
struct Dir {
    /// `[G·h, h]`, and for a GRU without `linear_before_reset` the `[h, h]` rows of `Rh`
    /// apart from the `[2h, h]` rows of `Rz`, `Rr`.
    r: Val,
    rh: Option<(Val, Val)>,
    /// GRU with `linear_before_reset`: `Rbh`, added to `h · Rhᵀ` before the reset gate.
    rbh: Option<Val>,
    /// LSTM peepholes `Pi`, `Po`, `Pf` (`[h]` each).
    p: Option<[Val; 3]>,
    acts: Vec<Act>,
}

/// The node's settings shared by its directions.
struct Setup {
    cell: Cell,
    h: u64,
    clip: Option<f64>,
    input_forget: bool,
}

/// One step: the new hidden state (and cell state for an LSTM) from the step's projected
/// input `xg` (`[B, G·h]`, biases added) and the previous states (`None`: zero).
fn cell_step(
    cx: &mut Ctx,
    s: &Setup,
    d: &Dir,
    xg: &Val,
    h: Option<&Val>,
    c: Option<&Val>,
) -> R<(Val, Option<Val>)> {
    let hs = s.h;
    let act = |cx: &mut Ctx, k: usize, x: &Val| activate(cx, &d.acts[k], x, s.clip);
    match s.cell {
        Cell::Rnn => {
            let hr = recur(cx, h, &d.r)?;
            let g = add_opt(cx, xg.clone(), hr.as_ref())?;
            Ok((act(cx, 0, &g)?, None))
        }
        Cell::Gru => {
            let (zr, rh) = match &d.rh {
                Some((zr, rh)) => (zr, Some(rh)),
                None => (&d.r, None),
            };
            let hr = recur(cx, h, zr)?;
            let [hz, hr_] = [0, 1].map(|k| hr.as_ref().map(|v| gate(cx, v, k, hs)).transpose());
            let (gz, gr) = (gate(cx, xg, 0, hs)?, gate(cx, xg, 1, hs)?);
            let gz = add_opt(cx, gz, hz?.as_ref())?;
            let gr = add_opt(cx, gr, hr_?.as_ref())?;
            let z = act(cx, 0, &gz)?;
            let r = act(cx, 0, &gr)?;
            let xh = gate(cx, xg, 2, hs)?;
            let pre = match rh {
                // (r ⊙ H) · Rhᵀ
                Some(rh) => {
                    let rhid = mul_opt(cx, &r, h)?;
                    let hh = recur(cx, rhid.as_ref(), rh)?;
                    add_opt(cx, xh, hh.as_ref())?
                }
                // r ⊙ (H · Rhᵀ + Rbh)
                None => {
                    let hh = match &hr {
                        Some(hr) => Some(gate(cx, hr, 2, hs)?),
                        None => None,
                    };
                    let hh = match (hh, &d.rbh) {
                        (Some(a), b) => Some(add_opt(cx, a, b.as_ref())?),
                        (None, b) => b.clone(),
                    };
                    let rhh = mul_opt(cx, &r, hh.as_ref())?;
                    add_opt(cx, xh, rhh.as_ref())?
                }
            };
            let cand = act(cx, 1, &pre)?;
            // (1 - z) ⊙ h~ + z ⊙ H
            let one = sc(cx, 1.0, &z);
            let keep = bin(cx, OpKind::Sub, &one, &z)?;
            let new = bin(cx, OpKind::Mul, &keep, &cand)?;
            let old = mul_opt(cx, &z, h)?;
            Ok((add_opt(cx, new, old.as_ref())?, None))
        }
        Cell::Lstm => {
            let hr = recur(cx, h, &d.r)?;
            let g = add_opt(cx, xg.clone(), hr.as_ref())?;
            let [gi, go, gf, gc] = [0, 1, 2, 3].map(|k| gate(cx, &g, k, hs));
            let (mut gi, mut go, mut gf, gc) = (gi?, go?, gf?, gc?);
            if let Some([pi, _, pf]) = &d.p {
                let a = mul_opt(cx, pi, c)?;
                gi = add_opt(cx, gi, a.as_ref())?;
                let b = mul_opt(cx, pf, c)?;
                gf = add_opt(cx, gf, b.as_ref())?;
            }
            let i = act(cx, 0, &gi)?;
            let f = if s.input_forget {
                let one = sc(cx, 1.0, &i);
                bin(cx, OpKind::Sub, &one, &i)?
            } else {
                act(cx, 0, &gf)?
            };
            let cand = act(cx, 1, &gc)?;
            let new = bin(cx, OpKind::Mul, &i, &cand)?;
            let kept = mul_opt(cx, &f, c)?;
            let c_new = add_opt(cx, new, kept.as_ref())?;
            if let Some([_, po, _]) = &d.p {
                let a = bin(cx, OpKind::Mul, po, &c_new)?;
                go = bin(cx, OpKind::Add, &go, &a)?;
            }
            let o = act(cx, 0, &go)?;
            // `clip` bounds the gates' inputs, not the cell state `h` reads (ONNX Runtime).
            let hc = activate(cx, &d.acts[2], &c_new, None)?;
            Ok((bin(cx, OpKind::Mul, &o, &hc)?, Some(c_new)))
        }
    }
}

/// The rows `rows` of `x` flattened over its first two axes, as `lead` + the other axes: a
/// `gather` of known indices.
pub(super) fn take_rows(cx: &mut Ctx, x: &Val, rows: Vec<i64>, lead: &[u64]) -> R<Val> {
    let shape = cx.ty(x).shape;
    if shape.len() < 2 {
        return Err(format!("{shape:?} has no two leading axes to index"));
    }
    let mut flat = vec![shape[0] * shape[1]];
    flat.extend_from_slice(&shape[2..]);
    let xf = reshape_to(cx, x, &flat)?;
    let idx = cx.ints_val(&rows);
    let attrs = Attrs::new().with("axis", Attr::Int(0));
    let y = cx.op(OpKind::Gather, &[&xf, &idx], attrs)?;
    let mut out = lead.to_vec();
    out.extend_from_slice(&shape[2..]);
    reshape_to(cx, &y, &out)
}

/// `[S, B, ...]` reversed along its first axis within each row's length (`lens[b]`, at most
/// S) of its second, as `[S, B, ...]`: ReverseSequence's permutation.
pub(super) fn reverse_within(cx: &mut Ctx, x: &Val, lens: &[u64]) -> R<Val> {
    let shape = cx.ty(x).shape;
    let (s, b) = (shape[0], lens.len() as u64);
    let rows = (0..s)
        .flat_map(|t| (0..b).map(move |r| (t, r)))
        .map(|(t, r)| (reverse_index(t, lens[r as usize]) * b + r) as i64)
        .collect();
    take_rows(cx, x, rows, &[s, b])
}

/// `[n, B, h]` zeros.
fn zeros(cx: &mut Ctx, like: &Val, shape: &[u64]) -> R<Val> {
    let z = sc(cx, 0.0, like);
    broadcast_to(cx, &z, shape)
}

/// One direction over the sequence: `Y` (`[S, B, h]`, when asked for) and the last states.
#[allow(clippy::too_many_arguments)]
fn run_direction(
    cx: &mut Ctx,
    s: &Setup,
    d: &Dir,
    xw: &Val,
    lens: &[u64],
    reverse: bool,
    mut h: Option<Val>,
    mut c: Option<Val>,
    want_y: bool,
) -> R<(Option<Val>, Val, Option<Val>)> {
    let shape = cx.ty(xw).shape;
    let (seq, batch) = (shape[0], shape[1]);
    let uniform = lens.windows(2).all(|w| w[0] == w[1]);
    let steps = lens.iter().copied().max().unwrap_or(seq);
    let mut ys = Vec::with_capacity(steps as usize);
    for k in 0..steps {
        let xg = match (reverse, uniform) {
            (false, _) => step_of(cx, xw, k)?,
            (true, true) => step_of(cx, xw, steps - 1 - k)?,
            (true, false) => {
                let rows = (0..batch)
                    .map(|b| (reverse_index(k, lens[b as usize]) * batch + b) as i64)
                    .collect();
                take_rows(cx, xw, rows, &[batch])?
            }
        };
        let (h_new, c_new) = cell_step(cx, s, d, &xg, h.as_ref(), c.as_ref())?;
        if uniform {
            ys.push(h_new.clone());
            (h, c) = (Some(h_new), c_new);
            continue;
        }
        // Rows past their length keep their states and output zeros.
        let live: Vec<bool> = lens.iter().map(|&l| k < l).collect();
        let mask = cx.konst(Tensor {
            ty: TensorType::new([batch, 1], DType::I1),
            data: Data::I1(live),
        });
        let zero = sc(cx, 0.0, &h_new);
        let keep = |cx: &mut Ctx, new: &Val, old: Option<&Val>| {
            select(cx, &mask, new, old.unwrap_or(&zero))
        };
        ys.push(keep(cx, &h_new, None)?);
        let hk = keep(cx, &h_new, h.as_ref())?;
        let ck = match &c_new {
            Some(cn) => Some(keep(cx, cn, c.as_ref())?),
            None => None,
        };
        (h, c) = (Some(hk), ck);
    }
    let h_last = h.ok_or("the sequence has no step")?;
    if !want_y {
        return Ok((None, h_last, c));
    }
    if uniform && reverse {
        ys.reverse();
    }
    let hs = cx.ty(&h_last).shape[1];
    let mut parts = Vec::with_capacity(ys.len() + 1);
    for y in &ys {
        parts.push(reshape_to(cx, y, &[1, batch, hs])?);
    }
    if steps < seq {
        parts.push(zeros(cx, &h_last, &[seq - steps, batch, hs])?);
    }
    let refs: Vec<&Val> = parts.iter().collect();
    let attrs = Attrs::new().with("axis", Attr::Int(0));
    let mut y = cx.op(OpKind::Concat, &refs, attrs)?;
    if reverse && !uniform {
        y = reverse_within(cx, &y, lens)?;
    }
    Ok((Some(y), h_last, c))
}

/// `shape` of `what`, or an error naming what it should be.
fn expect_shape(cx: &Ctx, v: &Val, want: &[u64], what: &str) -> R<()> {
    let got = cx.ty(v).shape;
    if got == want {
        Ok(())
    } else {
        Err(format!("{what} has shape {got:?}, expected {want:?}"))
    }
}

fn recurrent(cx: &mut Ctx, n: &Node, cell: Cell) -> R<Vec<Val>> {
    let (x, w, r) = (n.x(0)?, n.x(1)?, n.x(2)?);
    let dt = cx.ty(&x).dtype;
    if !dt.is_float() {
        return Err(format!(
            "{cell:?} of {dt} is not supported (float inputs only)"
        ));
    }
    // 16-bit floats are computed in f32 and rounded once at the end.
    let work = if matches!(dt, DType::F16 | DType::BF16) {
        DType::F32
    } else {
        dt
    };
    let up = |cx: &mut Ctx, v: Val| cast_to(cx, &v, work);
    let layout = n.int("layout", 0);
    if !matches!(layout, 0 | 1) {
        return Err(format!("layout = {layout} (0 or 1)"));
    }
    let direction = n.string("direction").unwrap_or_else(|| "forward".into());
    let reverse: &[bool] = match direction.as_str() {
        "forward" => &[false],
        "reverse" => &[true],
        "bidirectional" => &[false, true],
        other => {
            return Err(format!(
                "direction '{other}' is not one of forward, reverse, bidirectional"
            ));
        }
    };
    let dirs = reverse.len() as u64;
    let xs = cx.ty(&x).shape;
    if xs.len() != 3 {
        return Err(format!("X has shape {xs:?}, expected rank 3"));
    }
    // Everything in layout 0: [S, B, I], states [D, B, h].
    let x = if layout == 1 {
        transpose_to(cx, &x, &[1, 0, 2])?
    } else {
        x
    };
    let [seq, batch, input] = [0, 1, 2].map(|k| cx.ty(&x).shape[k]);
    if seq > MAX_STEPS {
        return Err(format!(
            "a sequence of {seq} steps is not supported (the steps are unrolled: at most {MAX_STEPS})"
        ));
    }
    let rs = cx.ty(&r).shape;
    let hs = *rs
        .last()
        .ok_or("R must be [num_directions, G·hidden, hidden]")?;
    if n.has("hidden_size") && n.int("hidden_size", 0) != hs as i64 {
        return Err(format!(
            "hidden_size = {} but R is {rs:?}",
            n.int("hidden_size", 0)
        ));
    }
    let gh = cell.gates() * hs;
    expect_shape(cx, &r, &[dirs, gh, hs], "R")?;
    expect_shape(cx, &w, &[dirs, gh, input], "W")?;
    let states = |cx: &mut Ctx, v: Option<Val>, what: &str| -> R<Option<Val>> {
        let Some(v) = v else { return Ok(None) };
        let v = if layout == 1 {
            transpose_to(cx, &v, &[1, 0, 2])?
        } else {
            v
        };
        expect_shape(cx, &v, &[dirs, batch, hs], what)?;
        Ok(Some(up(cx, v)?))
    };
    let h0 = states(cx, n.opt(5), "initial_h")?;
    let (c0, peep) = if cell == Cell::Lstm {
        (states(cx, n.opt(6), "initial_c")?, n.opt(7))
    } else {
        (None, None)
    };
    let lens: Vec<u64> = match n.opt(4) {
        None => vec![seq; batch as usize],
        Some(v) => {
            let l = known_ints(cx, &v, "sequence_lens")?;
            if l.len() as u64 != batch || l.iter().any(|&k| k < 1 || k as u64 > seq) {
                return Err(format!(
                    "sequence_lens {l:?} must hold {batch} lengths between 1 and {seq}"
                ));
            }
            l.into_iter().map(|k| k as u64).collect()
        }
    };
    let bias = match n.opt(3) {
        Some(b) => {
            expect_shape(cx, &b, &[dirs, 2 * gh], "B")?;
            Some(up(cx, b)?)
        }
        None => None,
    };
    if let Some(p) = &peep {
        expect_shape(cx, p, &[dirs, 3 * hs], "P")?;
    }
    let lbr = cell == Cell::Gru && n.int("linear_before_reset", 0) != 0;
    let setup = Setup {
        cell,
        h: hs,
        clip: match n.has("clip").then(|| n.float("clip", 0.0) as f64) {
            Some(c) if c.is_nan() || c <= 0.0 => {
                return Err(format!("clip = {c} (a positive threshold)"));
            }
            c => c,
        },
        input_forget: cell == Cell::Lstm && n.int("input_forget", 0) != 0,
    };
    let acts = activations(n, cell, dirs as usize)?;
    let per = cell.defaults().len();
    let (x, w, r) = (up(cx, x)?, up(cx, w)?, up(cx, r)?);
    let peep = peep.map(|p| up(cx, p)).transpose()?;
    let (want_y, want_c) = (n.wants(0), n.wants(2));
    let (mut ys, mut hl, mut cl) = (vec![], vec![], vec![]);
    for (k, &rev) in reverse.iter().enumerate() {
        let wd = direction_of(cx, &w, k)?;
        let rd = direction_of(cx, &r, k)?;
        let attrs = Attrs::new().with("transpose_b", Attr::Bool(true));
        let mut xw = cx.op(OpKind::Matmul, &[&x, &wd], attrs)?;
        let mut rbh = None;
        if let Some(b) = &bias {
            let bd = direction_of(cx, b, k)?;
            let wb = slice_axis(cx, &bd, 0, 0, gh as i64, 1)?;
            let rb = slice_axis(cx, &bd, 0, gh as i64, 2 * gh as i64, 1)?;
            let sum = if lbr {
                // Rbh is added to h · Rhᵀ, inside the reset gate.
                let zr = slice_axis(cx, &rb, 0, 0, 2 * hs as i64, 1)?;
                let zero = zeros(cx, &zr, &[hs])?;
                rbh = Some(slice_axis(cx, &rb, 0, 2 * hs as i64, gh as i64, 1)?);
                let rb = cx.op(
                    OpKind::Concat,
                    &[&zr, &zero],
                    Attrs::new().with("axis", Attr::Int(0)),
                )?;
                bin(cx, OpKind::Add, &wb, &rb)?
            } else {
                bin(cx, OpKind::Add, &wb, &rb)?
            };
            xw = bin(cx, OpKind::Add, &xw, &sum)?;
        }
        let rh = if cell == Cell::Gru && !lbr {
            let zr = slice_axis(cx, &rd, 0, 0, 2 * hs as i64, 1)?;
            let h = slice_axis(cx, &rd, 0, 2 * hs as i64, gh as i64, 1)?;
            Some((zr, h))
        } else {
            None
        };
        let p = match &peep {
            Some(p) => {
                let pd = direction_of(cx, p, k)?;
                let [a, b, c] = [0, 1, 2]
                    .map(|g| slice_axis(cx, &pd, 0, g * hs as i64, (g + 1) * hs as i64, 1));
                Some([a?, b?, c?])
            }
            None => None,
        };
        let dir = Dir {
            r: rd,
            rh,
            rbh,
            p,
            acts: acts[k * per..(k + 1) * per].to_vec(),
        };
        let h = h0.as_ref().map(|v| direction_of(cx, v, k)).transpose()?;
        let c = c0.as_ref().map(|v| direction_of(cx, v, k)).transpose()?;
        let (y, h, c) = run_direction(cx, &setup, &dir, &xw, &lens, rev, h, c, want_y)?;
        if let Some(y) = y {
            ys.push(reshape_to(cx, &y, &[seq, 1, batch, hs])?);
        }
        hl.push(reshape_to(cx, &h, &[1, batch, hs])?);
        if let Some(c) = c {
            cl.push(reshape_to(cx, &c, &[1, batch, hs])?);
        }
    }
    let join = |cx: &mut Ctx, parts: &[Val], axis: i64, perm: &[i64]| -> R<Val> {
        let refs: Vec<&Val> = parts.iter().collect();
        let v = cx.op(
            OpKind::Concat,
            &refs,
            Attrs::new().with("axis", Attr::Int(axis)),
        )?;
        let v = if layout == 1 {
            transpose_to(cx, &v, perm)?
        } else {
            v
        };
        cast_to(cx, &v, dt)
    };
    let y_h = join(cx, &hl, 0, &[1, 0, 2])?;
    // An output the node does not name is never bound: its slot holds Y_h.
    let y = if want_y {
        join(cx, &ys, 1, &[2, 0, 1, 3])?
    } else {
        y_h.clone()
    };
    let mut outs = vec![y, y_h.clone()];
    if cell == Cell::Lstm {
        outs.push(if want_c {
            join(cx, &cl, 0, &[1, 0, 2])?
        } else {
            y_h
        });
    }
    Ok(outs)
}

pub fn rnn(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    recurrent(cx, n, Cell::Rnn)
}

pub fn gru(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    recurrent(cx, n, Cell::Gru)
}

pub fn lstm(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    recurrent(cx, n, Cell::Lstm)
}

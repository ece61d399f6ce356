//! Differential testing of the whole compiler on random graphs over the full op set of the graph
//! IR: views (transposes, reshapes, broadcasts, slices with negative steps) on every operand,
//! numpy broadcasting, comparisons and `select`, `iota`, `concat`, `gather` with negative
//! indices, casts between the float dtypes and to integers, reductions over several axes, the
//! composites along any axis with their weights, batched matmuls with broadcast batch dims and
//! either operand transposed, attention chains with band masks, and several results (a
//! parameter's view among them).
//!
//! Each graph is printed and parsed (the text is what a failure shows), then
//! - lowered with sm_80's templates and run by the kernel-IR emulator (`emulate.rs`) against
//!   the interpreter, as written and after `-O`;
//! - lowered with the Hopper templates (sm_90a, what `irc` does by default): the kernel IR
//!   verifies, re-parses, emits CUDA with a valid manifest.
//!
//! `IRC_DIFF_CASES` sets the number of graphs (default 48: CI's share); `IRC_DIFF_DUMP=DIR`
//! writes each graph there (`bench/gpu/check_all.sh` runs such a folder on the GPU, where the
//! Hopper kernels run too).

use proptest::prelude::*;
use std::fmt::Write as _;

#[path = "emulate.rs"]
mod emulate;

/// The sizes a run draws from.
struct Sizes {
    /// Dims: 1s, primes, powers of two and one past them, where tiles, vectors and tails differ.
    dims: &'static [u64],
    /// The element budget of one value.
    max: u64,
    /// A matmul's N and an attention's key count.
    widths: &'static [u64],
    /// Attention head dims.
    heads: &'static [u64],
}

/// Small enough for the emulator to run quickly.
const SMALL: Sizes = Sizes {
    dims: &[1, 2, 3, 4, 5, 7, 8, 16, 17, 32, 33, 64],
    max: 6144,
    widths: &[1, 8, 16, 17, 32, 64],
    heads: &[8, 16, 32, 64],
};

/// `IRC_DIFF_LARGE=1`: where the GPU templates change schedule (tiles of 64 and 128 with
/// tails, rows long enough to split, attention over hundreds of keys); lowered and emitted
/// here but not emulated (too slow on a CPU): dumped (`IRC_DIFF_DUMP`) to run on the GPU.
const LARGE: Sizes = Sizes {
    dims: &[1, 3, 8, 17, 64, 100, 128, 255, 256, 1024, 4097, 16384],
    max: 1 << 20,
    widths: &[1, 8, 64, 72, 128, 200, 256, 1000],
    heads: &[32, 64, 80, 128, 256],
};

fn large() -> bool {
    std::env::var_os("IRC_DIFF_LARGE").is_some_and(|v| v != "0")
}
const FLOATS: [&str; 4] = ["f32", "f16", "bf16", "f64"];
const SMOOTH: [&str; 9] = [
    "neg", "abs", "exp", "tanh", "sigmoid", "relu", "gelu", "silu", "erf",
];
const PERIODIC: [&str; 2] = ["sin", "cos"];
/// Ops defined on part of the line only: applied to `|x| + 0.5`.
const POSITIVE: [&str; 4] = ["log", "sqrt", "rsqrt", "recip"];
/// Discontinuous ops: applied only to values both sides compute exactly.
const STEPS: [&str; 3] = ["floor", "ceil", "round"];
const BINARY: [&str; 5] = ["add", "sub", "mul", "max", "min"];
const COMPARE: [&str; 6] = ["eq", "ne", "lt", "le", "gt", "ge"];

/// A deterministic stream of choices from one proptest word (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    fn coin(&mut self) -> bool {
        self.next() % 2 == 0
    }
}

#[derive(Clone)]
struct Val {
    name: String,
    shape: Vec<u64>,
    dt: &'static str,
    /// Computed by exact operations only (parameters, views, copies, iota, integer math), so
    /// the kernels and the interpreter agree bit for bit and a discontinuous op may read it.
    exact: bool,
}

fn ty(shape: &[u64], dt: &str) -> String {
    let mut s = String::from("tensor<");
    for d in shape {
        let _ = write!(s, "{d}x");
    }
    format!("{s}{dt}>")
}

fn numel(shape: &[u64]) -> u64 {
    shape.iter().product()
}

fn list(xs: impl IntoIterator<Item = i64>) -> String {
    let v: Vec<String> = xs.into_iter().map(|x| x.to_string()).collect();
    format!("[{}]", v.join(", "))
}

/// A graph under construction: parameters, statements and the values they define.
struct Graph {
    sizes: &'static Sizes,
    params: Vec<Val>,
    body: String,
    vals: Vec<Val>,
    count: usize,
}

impl Graph {
    fn param(&mut self, shape: Vec<u64>, dt: &'static str) -> Val {
        let v = Val {
            name: format!("p{}", self.params.len()),
            shape,
            dt,
            exact: true,
        };
        self.params.push(v.clone());
        self.vals.push(v.clone());
        v
    }

    /// Appends `%vN = line` with the given result; returns it.
    fn stmt(&mut self, line: String, shape: Vec<u64>, dt: &'static str, exact: bool) -> Val {
        let name = format!("v{}", self.count);
        self.count += 1;
        let _ = writeln!(self.body, "  %{name} = {line}");
        let v = Val {
            name,
            shape,
            dt,
            exact,
        };
        self.vals.push(v.clone());
        v
    }

    fn splat(&mut self, value: &str, shape: &[u64], dt: &'static str) -> Val {
        self.stmt(
            format!("constant {{value = {value}}} : {}", ty(shape, dt)),
            shape.to_vec(),
            dt,
            true,
        )
    }

    /// `|x| + 0.5`: a value every partial op accepts.
    fn positive(&mut self, x: &Val) -> Val {
        let a = self.stmt(format!("abs %{}", x.name), x.shape.clone(), x.dt, x.exact);
        let h = self.splat("0.5", &[], x.dt);
        self.stmt(
            format!("add %{}, %{}", a.name, h.name),
            x.shape.clone(),
            x.dt,
            false,
        )
    }

    /// A value of `x`'s dtype whose shape broadcasts to `x`'s: an earlier one, or a new
    /// parameter with some dims 1 and some leading dims dropped.
    fn partner(&mut self, r: &mut Rng, x: &Val) -> Val {
        let fits = |v: &Val| {
            v.dt == x.dt
                && v.shape.len() <= x.shape.len()
                && v.shape
                    .iter()
                    .rev()
                    .zip(x.shape.iter().rev())
                    .all(|(&a, &b)| a == b || a == 1)
        };
        let earlier: Vec<Val> = self.vals.iter().filter(|v| fits(v)).cloned().collect();
        if !earlier.is_empty() && r.coin() {
            return r.pick(&earlier).clone();
        }
        let drop = r.below(x.shape.len() + 1).min(x.shape.len());
        let shape = x.shape[drop..]
            .iter()
            .map(|&d| if r.below(3) == 0 { 1 } else { d })
            .collect();
        self.param(shape, x.dt)
    }

    /// An operand: most often one of the last few values (chains grow deep), rarely a scalar
    /// (the splats written for `positive` and masks).
    fn operand(&mut self, r: &mut Rng) -> Val {
        for _ in 0..4 {
            let n = self.vals.len();
            let v = if r.coin() {
                &self.vals[n - 1 - r.below(n.min(4))]
            } else {
                r.pick(&self.vals)
            };
            if !v.shape.is_empty() || r.below(4) == 0 {
                return v.clone();
            }
        }
        self.vals[0].clone()
    }

    /// One random statement (or a few) reading earlier values.
    fn step(&mut self, kind: u8, r: &mut Rng) {
        let x = self.operand(r);
        let rank = x.shape.len();
        let float = FLOATS.contains(&x.dt);
        match kind % 16 {
            0 if float => {
                let op = *r.pick(&SMOOTH);
                self.stmt(format!("{op} %{}", x.name), x.shape.clone(), x.dt, false);
            }
            1 if float => {
                let op = *r.pick(&POSITIVE);
                let p = self.positive(&x);
                self.stmt(format!("{op} %{}", p.name), x.shape.clone(), x.dt, false);
            }
            2 if float && x.exact => {
                let op = if r.coin() {
                    *r.pick(&STEPS)
                } else {
                    *r.pick(&PERIODIC)
                };
                self.stmt(format!("{op} %{}", x.name), x.shape.clone(), x.dt, false);
            }
            3 if x.dt != "i1" => {
                // A binary op with numpy broadcasting, either operand first.
                let y = self.partner(r, &x);
                let op = if float {
                    *r.pick(&["add", "sub", "mul", "max", "min", "div", "pow"])
                } else {
                    *r.pick(&BINARY)
                };
                let (a, b) = if op == "div" || op == "pow" {
                    let b = self.positive(&y);
                    (x.clone(), b)
                } else if r.coin() {
                    (y.clone(), x.clone())
                } else {
                    (x.clone(), y.clone())
                };
                let (a, b) = if op == "pow" {
                    // A base ≥ 0.5 raised to a power in (-1, 1): no overflow.
                    let base = self.positive(&x);
                    let e = self.stmt(format!("tanh %{}", y.name), y.shape.clone(), y.dt, false);
                    (base, e)
                } else {
                    (a, b)
                };
                let exact = x.exact && y.exact && matches!(op, "max" | "min") || !float;
                self.stmt(
                    format!("{op} %{}, %{}", a.name, b.name),
                    x.shape.clone(),
                    x.dt,
                    exact,
                );
            }
            4 if x.exact => {
                // select(x cmp y, x, z): a comparison of exact values picks between two values.
                let y = self.partner(r, &x);
                let op = *r.pick(&COMPARE);
                let c = self.stmt(
                    format!("{op} %{}, %{}", x.name, y.name),
                    x.shape.clone(),
                    "i1",
                    true,
                );
                let z = self.partner(r, &x);
                let (a, b) = if r.coin() { (&x, &z) } else { (&z, &x) };
                let exact = a.exact && b.exact;
                self.stmt(
                    format!("select %{}, %{}, %{}", c.name, a.name, b.name),
                    x.shape.clone(),
                    x.dt,
                    exact,
                );
            }
            5 if rank >= 1 && x.dt != "i1" => {
                // A reduction over one or more axes (or all), keeping them or not.
                let mut axes: Vec<i64> = (0..rank as i64).filter(|_| r.coin()).collect();
                if axes.is_empty() {
                    axes.push(r.below(rank) as i64);
                }
                let keep = r.coin();
                let ops: &[&str] = if float {
                    &["reduce_sum", "reduce_max", "reduce_min", "reduce_mean"]
                } else {
                    &["reduce_sum", "reduce_max", "reduce_min"]
                };
                let op = *r.pick(ops);
                let shape: Vec<u64> = (0..rank)
                    .filter_map(|i| match (axes.contains(&(i as i64)), keep) {
                        (false, _) => Some(x.shape[i]),
                        (true, true) => Some(1),
                        (true, false) => None,
                    })
                    .collect();
                let all = axes.len() == rank && r.coin();
                let written: Vec<i64> = axes
                    .iter()
                    .map(|&a| if r.coin() { a - rank as i64 } else { a })
                    .collect();
                let attrs = if all {
                    format!("{{keepdims = {keep}}}")
                } else {
                    format!("{{axes = {}, keepdims = {keep}}}", list(written))
                };
                let exact = !float || matches!(op, "reduce_max" | "reduce_min") && x.exact;
                self.stmt(format!("{op} %{} {attrs}", x.name), shape, x.dt, exact);
            }
            6 if float && rank >= 1 => {
                // A composite along any axis, with its weights.
                let axis = r.below(rank);
                let n = x.shape[axis];
                let written = if r.coin() {
                    axis as i64 - rank as i64
                } else {
                    axis as i64
                };
                let line = match r.below(4) {
                    0 => format!("softmax %{} {{axis = {written}}}", x.name),
                    1 => format!("log_softmax %{} {{axis = {written}}}", x.name),
                    2 => {
                        let w = self.param(vec![n], x.dt);
                        format!("rmsnorm %{}, %{} {{axis = {written}}}", x.name, w.name)
                    }
                    _ => {
                        let w = self.param(vec![n], x.dt);
                        let b = self.param(vec![n], x.dt);
                        format!(
                            "layernorm %{}, %{}, %{} {{axis = {written}, eps = 0.001}}",
                            x.name, w.name, b.name
                        )
                    }
                };
                self.stmt(line, x.shape.clone(), x.dt, false);
            }
            7 if float && rank >= 1 => self.matmul(r, &x),
            8 if rank >= 2 => {
                let mut perm: Vec<i64> = (0..rank as i64).collect();
                for i in (1..rank).rev() {
                    perm.swap(i, r.below(i + 1));
                }
                let shape = perm.iter().map(|&p| x.shape[p as usize]).collect();
                let written = perm
                    .iter()
                    .map(|&p| if r.coin() { p - rank as i64 } else { p });
                self.stmt(
                    format!("transpose %{} {{perm = {}}}", x.name, list(written)),
                    shape,
                    x.dt,
                    x.exact,
                );
            }
            9 if rank >= 1 => self.reshape(r, &x),
            10 if rank <= 3 && numel(&x.shape) * 3 <= self.sizes.max => {
                // A broadcast: a new leading dim, and each 1 stretched or kept.
                let lead = *r.pick(&[2u64, 3]);
                let shape: Vec<u64> = std::iter::once(lead)
                    .chain(
                        x.shape
                            .iter()
                            .map(|&d| if d == 1 { *r.pick(&[1, 3]) } else { d }),
                    )
                    .collect();
                let written = shape.iter().map(|&d| d as i64);
                self.stmt(
                    format!("broadcast %{} {{shape = {}}}", x.name, list(written)),
                    shape,
                    x.dt,
                    x.exact,
                );
            }
            11 if rank >= 1 => self.slice(r, &x),
            12 if rank >= 1 => {
                // concat along an axis with one or two values that agree elsewhere.
                let axis = r.below(rank);
                let mut names = vec![x.name.clone()];
                let mut shape = x.shape.clone();
                for _ in 0..1 + r.below(2) {
                    let mut s = x.shape.clone();
                    s[axis] = *r.pick(&[1u64, 2, 3, 8]);
                    if numel(&shape) + numel(&s) > self.sizes.max {
                        break;
                    }
                    let other = if r.coin() {
                        x.clone()
                    } else {
                        self.param(s, x.dt)
                    };
                    shape[axis] += other.shape[axis];
                    names.push(other.name);
                }
                let operands: Vec<String> = names.iter().map(|n| format!("%{n}")).collect();
                let written = if r.coin() {
                    axis as i64 - rank as i64
                } else {
                    axis as i64
                };
                self.stmt(
                    format!("concat {} {{axis = {written}}}", operands.join(", ")),
                    shape,
                    x.dt,
                    x.exact,
                );
            }
            13 if rank >= 1 => {
                // gather with known indices in [-n, n), of rank 0 to 2.
                let axis = r.below(rank);
                let n = x.shape[axis] as i64;
                let ishape: Vec<u64> = (0..r.below(3)).map(|_| *r.pick(&[1u64, 2, 3, 5])).collect();
                let values: Vec<i64> = (0..numel(&ishape))
                    .map(|_| r.below(2 * n as usize) as i64 - n)
                    .collect();
                let idt = *r.pick(&["i32", "i64"]);
                let value = if ishape.is_empty() {
                    values[0].to_string()
                } else {
                    list(values)
                };
                let i = self.stmt(
                    format!("constant {{value = {value}}} : {}", ty(&ishape, idt)),
                    ishape.clone(),
                    idt,
                    true,
                );
                let shape: Vec<u64> = x.shape[..axis]
                    .iter()
                    .chain(&ishape)
                    .chain(&x.shape[axis + 1..])
                    .copied()
                    .collect();
                if numel(&shape) <= self.sizes.max {
                    self.stmt(
                        format!("gather %{}, %{} {{axis = {axis}}}", x.name, i.name),
                        shape,
                        x.dt,
                        x.exact,
                    );
                }
            }
            14 => {
                // A cast to another float dtype, or to an integer and back (of exact values).
                if float && (!x.exact || r.coin()) {
                    let dt = *r.pick(&FLOATS);
                    self.stmt(
                        format!("cast %{} {{dtype = {dt}}}", x.name),
                        x.shape.clone(),
                        dt,
                        x.exact,
                    );
                } else if x.exact {
                    let dt = *r.pick(&["i32", "i64", "f32", "f16"]);
                    self.stmt(
                        format!("cast %{} {{dtype = {dt}}}", x.name),
                        x.shape.clone(),
                        dt,
                        true,
                    );
                }
            }
            15 if rank >= 1 && x.dt != "i1" => {
                // iota along an axis, added to x (a position bias), or an attention chain.
                if float && r.coin() {
                    // On x, or on new heads [B, H, S, D] of a head dim the templates take.
                    let q = if rank >= 2 && r.coin() {
                        x.clone()
                    } else {
                        let s = *r.pick(self.sizes.widths);
                        let d = *r.pick(self.sizes.heads);
                        let shape = vec![1 + r.below(2) as u64, *r.pick(&[1, 2, 4]), s, d];
                        if numel(&shape) > self.sizes.max {
                            return;
                        }
                        self.param(shape, x.dt)
                    };
                    self.attention(r, &q);
                    return;
                }
                let axis = r.below(rank) as i64 - if r.coin() { rank as i64 } else { 0 };
                let i = self.stmt(
                    format!("iota {{axis = {axis}}} : {}", ty(&x.shape, x.dt)),
                    x.shape.clone(),
                    x.dt,
                    true,
                );
                self.stmt(
                    format!("add %{}, %{}", x.name, i.name),
                    x.shape.clone(),
                    x.dt,
                    !float,
                );
            }
            _ => {
                if float {
                    self.stmt(format!("tanh %{}", x.name), x.shape.clone(), x.dt, false);
                } else if x.dt != "i1" {
                    self.stmt(format!("neg %{}", x.name), x.shape.clone(), x.dt, true);
                }
            }
        }
    }

    /// `x @ w` with a new parameter `w` (batch dims broadcast, either operand transposed), or
    /// `x @ xᵀ`.
    fn matmul(&mut self, r: &mut Rng, x: &Val) {
        let rank = x.shape.len();
        let n = *r.pick(self.sizes.widths);
        let ta = rank >= 2 && r.below(4) == 0;
        let (m, k) = match rank {
            1 => (None, x.shape[0]),
            _ if ta => (Some(x.shape[rank - 1]), x.shape[rank - 2]),
            _ => (Some(x.shape[rank - 2]), x.shape[rank - 1]),
        };
        let batch: Vec<u64> = if rank > 2 {
            x.shape[..rank - 2].to_vec()
        } else {
            vec![]
        };
        let wbatch: Vec<u64> = match r.below(3) {
            0 => vec![],
            1 => batch
                .iter()
                .map(|&d| if r.coin() { 1 } else { d })
                .collect(),
            _ => batch.clone(),
        };
        let tb = r.below(3) == 0;
        if rank >= 2 && !ta && r.below(4) == 0 && m.is_some_and(|m| m <= 64) {
            // x @ xᵀ (a Gram matrix).
            let m = m.unwrap_or(1);
            let mut shape = batch.clone();
            shape.extend([m, m]);
            if numel(&shape) <= self.sizes.max {
                self.stmt(
                    format!("matmul %{0}, %{0} {{transpose_b = true}}", x.name),
                    shape,
                    x.dt,
                    false,
                );
            }
            return;
        }
        let mut wshape = wbatch.clone();
        wshape.extend(if tb { [n, k] } else { [k, n] });
        let mut shape = batch;
        shape.extend(m);
        shape.push(n);
        if numel(&shape) > self.sizes.max || numel(&wshape) > self.sizes.max {
            return;
        }
        let w = self.param(wshape, x.dt);
        let mut attrs = vec![];
        if ta {
            attrs.push("transpose_a = true");
        }
        if tb {
            attrs.push("transpose_b = true");
        }
        let attrs = if attrs.is_empty() {
            String::new()
        } else {
            format!(" {{{}}}", attrs.join(", "))
        };
        self.stmt(
            format!("matmul %{}, %{}{attrs}", x.name, w.name),
            shape,
            x.dt,
            false,
        );
    }

    /// softmax(prologue(x·Kᵀ·s)) · V over new K and V parameters (heads broadcast half of the
    /// time), the softmax written whole or decomposed, the heads merged back half of the time.
    fn attention(&mut self, r: &mut Rng, q: &Val) {
        let rank = q.shape.len();
        let (sq, d) = (q.shape[rank - 2], q.shape[rank - 1]);
        let sk = if r.coin() {
            sq
        } else {
            *r.pick(self.sizes.widths)
        };
        let batch = &q.shape[..rank - 2];
        let kv_batch: Vec<u64> = batch
            .iter()
            .map(|&b| if r.coin() { 1 } else { b })
            .collect();
        let kshape: Vec<u64> = kv_batch.iter().copied().chain([sk, d]).collect();
        let mut sshape: Vec<u64> = batch.to_vec();
        sshape.extend([sq, sk]);
        if numel(&kshape) > self.sizes.max || numel(&sshape) > self.sizes.max {
            return;
        }
        let dt = q.dt;
        let k = self.param(kshape.clone(), dt);
        let v = self.param(kshape, dt);
        let s = self.stmt(
            format!("matmul %{}, %{} {{transpose_b = true}}", q.name, k.name),
            sshape.clone(),
            dt,
            false,
        );
        let c = self.splat("0.125", &[], dt);
        let mut s = self.stmt(
            format!("mul %{}, %{}", s.name, c.name),
            sshape.clone(),
            dt,
            false,
        );
        // The scores' prologue: a soft cap, then a causal band (windowed: two selects), an
        // additive bias, or a boolean mask (rows masked whole give NaN, as the graph says).
        let apply = |g: &mut Self, s: &Val, line: String| {
            g.stmt(
                line.replace("%s", &format!("%{}", s.name)),
                s.shape.clone(),
                dt,
                false,
            )
        };
        if r.below(4) == 0 {
            let inv = self.splat("0.0333", &[], dt);
            let cap = self.splat("30.0", &[], dt);
            let t = apply(self, &s, format!("mul %s, %{}", inv.name));
            let t = apply(self, &t, "tanh %s".into());
            s = apply(self, &t, format!("mul %s, %{}", cap.name));
        }
        match r.below(5) {
            0 | 1 => {
                let iota = |g: &mut Self, axis: u8| {
                    g.stmt(
                        format!("iota {{axis = {axis}}} : {}", ty(&[sq, sk], "i64")),
                        vec![sq, sk],
                        "i64",
                        true,
                    )
                };
                let (rows, cols) = (iota(self, 0), iota(self, 1));
                let mut keeps = vec![self.stmt(
                    format!("ge %{}, %{}", rows.name, cols.name),
                    vec![sq, sk],
                    "i1",
                    true,
                )];
                if r.coin() {
                    let diff = self.stmt(
                        format!("sub %{}, %{}", rows.name, cols.name),
                        vec![sq, sk],
                        "i64",
                        true,
                    );
                    let w = self.splat(&(1 + r.below(20)).to_string(), &[], "i64");
                    keeps.push(self.stmt(
                        format!("lt %{}, %{}", diff.name, w.name),
                        vec![sq, sk],
                        "i1",
                        true,
                    ));
                }
                let ninf = self.splat(*r.pick(&["-inf", "-10000.0"]), &[], dt);
                for keep in keeps {
                    s = apply(
                        self,
                        &s,
                        format!("select %{}, %s, %{}", keep.name, ninf.name),
                    );
                }
            }
            2 => {
                let bshape = if r.coin() { vec![sq, sk] } else { vec![1, sk] };
                let bias = self.param(bshape, dt);
                s = apply(self, &s, format!("add %s, %{}", bias.name));
            }
            3 => {
                let mask = self.param(vec![sq, sk], "i1");
                let fill = self.splat(*r.pick(&["-inf", "-10000.0"]), &[], dt);
                s = apply(
                    self,
                    &s,
                    format!("select %{}, %s, %{}", mask.name, fill.name),
                );
            }
            _ => {}
        }
        let p = if r.coin() {
            self.stmt(format!("softmax %{}", s.name), sshape.clone(), dt, false)
        } else {
            // The decomposed form: max, sub, exp, sum, div.
            let mut row = sshape.clone();
            *row.last_mut().expect("scores have rank 2 or more") = 1;
            let m = self.stmt(
                format!("reduce_max %{} {{axes = [-1], keepdims = true}}", s.name),
                row.clone(),
                dt,
                false,
            );
            let e = apply(self, &s, format!("sub %s, %{}", m.name));
            let e = apply(self, &e, "exp %s".into());
            let z = self.stmt(
                format!("reduce_sum %{} {{axes = [-1], keepdims = true}}", e.name),
                row,
                dt,
                false,
            );
            apply(self, &e, format!("div %s, %{}", z.name))
        };
        let mut oshape = batch.to_vec();
        oshape.extend([sq, d]);
        let o = self.stmt(
            format!("matmul %{}, %{}", p.name, v.name),
            oshape.clone(),
            dt,
            false,
        );
        if rank == 4 && r.coin() {
            // The heads merged back: [B, H, S, D] -> [B, S, H·D].
            let (b, h) = (oshape[0], oshape[1]);
            let t = self.stmt(
                format!("transpose %{} {{perm = [0, 2, 1, 3]}}", o.name),
                vec![b, sq, h, d],
                dt,
                false,
            );
            self.stmt(
                format!("reshape %{} {{shape = [{b}, {sq}, {}]}}", t.name, h * d),
                vec![b, sq, h * d],
                dt,
                false,
            );
        }
    }

    /// A reshape that merges two neighbouring dims, splits one, or flattens.
    fn reshape(&mut self, r: &mut Rng, x: &Val) {
        let rank = x.shape.len();
        let mut shape = x.shape.clone();
        match r.below(3) {
            0 if rank >= 2 => {
                let i = r.below(rank - 1);
                let merged = shape[i] * shape[i + 1];
                shape.splice(i..i + 2, [merged]);
            }
            1 if rank < 4 => {
                let i = r.below(rank);
                let d = shape[i];
                let f = (2..=d).find(|f| d % f == 0 && r.coin()).unwrap_or(1);
                shape.splice(i..=i, [f, d / f]);
            }
            _ => shape = vec![numel(&x.shape)],
        }
        let infer = r.below(shape.len() + 1);
        let written = shape
            .iter()
            .enumerate()
            .map(|(i, &d)| if i == infer { -1 } else { d as i64 });
        self.stmt(
            format!("reshape %{} {{shape = {}}}", x.name, list(written)),
            shape,
            x.dt,
            x.exact,
        );
    }

    /// A slice of one or two axes: bounds past the ends, negative bounds and steps.
    fn slice(&mut self, r: &mut Rng, x: &Val) {
        let rank = x.shape.len();
        let mut shape = x.shape.clone();
        let (mut axes, mut starts, mut ends, mut steps) = (vec![], vec![], vec![], vec![]);
        for axis in 0..rank {
            if axes.len() == 2 || r.coin() {
                continue;
            }
            let n = x.shape[axis] as i64;
            let step = *r.pick(&[1i64, 1, 2, 3, -1, -2]);
            let bound = |r: &mut Rng| r.below(2 * n as usize + 3) as i64 - n - 1;
            let (start, end) = (bound(r), if r.below(4) == 0 { i64::MAX } else { bound(r) });
            let len = python_len(n, start, end, step);
            if len == 0 {
                continue;
            }
            shape[axis] = len as u64;
            axes.push(if r.coin() {
                axis as i64 - rank as i64
            } else {
                axis as i64
            });
            starts.push(start);
            ends.push(end);
            steps.push(step);
        }
        if axes.is_empty() {
            return;
        }
        self.stmt(
            format!(
                "slice %{} {{starts = {}, ends = {}, axes = {}, steps = {}}}",
                x.name,
                list(starts),
                list(ends),
                list(axes),
                list(steps)
            ),
            shape,
            x.dt,
            x.exact,
        );
    }

    /// The graph's text: results are the last value and up to two others.
    fn text(&self, r: &mut Rng) -> String {
        let last = self.vals.last().expect("a value");
        let mut results = vec![last.clone()];
        for _ in 0..r.below(3) {
            let v = r.pick(&self.vals).clone();
            if results.iter().all(|x| x.name != v.name) {
                results.push(v);
            }
        }
        let params: Vec<String> = self
            .params
            .iter()
            .map(|p| format!("%{}: {}", p.name, ty(&p.shape, p.dt)))
            .collect();
        let tys: Vec<String> = results.iter().map(|v| ty(&v.shape, v.dt)).collect();
        let names: Vec<String> = results.iter().map(|v| format!("%{}", v.name)).collect();
        format!(
            "graph @diff({}) -> ({}) {{\n{}  return {}\n}}\n",
            params.join(", "),
            tys.join(", "),
            self.body,
            names.join(", ")
        )
    }
}

/// The length of Python's `range(n)[start:end:step]`.
fn python_len(n: i64, start: i64, end: i64, step: i64) -> i64 {
    let clamp = |i: i64, lo: i64, hi: i64| {
        let i = if i < 0 { i.saturating_add(n) } else { i };
        i.clamp(lo, hi)
    };
    if step > 0 {
        let (s, e) = (clamp(start, 0, n), clamp(end, 0, n));
        ((e - s).max(0) + step - 1) / step
    } else {
        let (s, e) = (clamp(start, -1, n - 1), clamp(end, -1, n - 1));
        ((s - e).max(0) + (-step) - 1) / (-step)
    }
}

/// The graph text of one case: a first parameter, then `steps`.
fn build(seed: u64, steps: &[u8]) -> String {
    let mut r = Rng(seed);
    let sizes = if large() { &LARGE } else { &SMALL };
    let mut g = Graph {
        sizes,
        params: vec![],
        body: String::new(),
        vals: vec![],
        count: 0,
    };
    let rank = 1 + r.below(4);
    let mut shape = vec![];
    for _ in 0..rank {
        let d = *r.pick(sizes.dims);
        if numel(&shape) * d <= sizes.max / 4 {
            shape.push(d);
        }
    }
    if shape.is_empty() {
        shape.push(*r.pick(sizes.dims));
    }
    let dt = if r.below(8) == 0 {
        "i32"
    } else {
        *r.pick(&FLOATS)
    };
    g.param(shape, dt);
    for &k in steps {
        g.step(k, &mut r);
    }
    g.text(&mut r)
}

/// Whether the kernels `k` (lowered from `g`) compute what the interpreter does on
/// `reference` (`g` before `-O`, which keeps the parameters and results).
fn agrees(g: &irc_ir::Graph, reference: &irc_ir::Graph, k: &irc_kir::Module) -> Result<(), String> {
    let inputs: Vec<_> = g
        .params
        .iter()
        .enumerate()
        .map(|(i, &p)| irc_interp::random_tensor(g.ty(p), 23, i as u64))
        .collect();
    let pairs = emulate::against_interpreter_on(reference, k, inputs);
    let tolerances = irc_interp::compare::result_tolerances(reference);
    for (i, ((got, want), tol)) in pairs.into_iter().zip(tolerances).enumerate() {
        let cmp = irc_interp::compare::compare_at(&got, &want, tol).map_err(|e| e.to_string())?;
        // A result that cancels to near zero (`softmax(x) - mean(softmax(x))` of equal rows)
        // has no relative accuracy: there, an absolute bound of the tolerance (the inputs and
        // most values are of order one).
        let cancelled = cmp.bad_nonfinite == 0 && cmp.max_abs_err <= tol;
        if !cmp.passed() && !cancelled {
            return Err(format!("result {i}: {cmp:?}"));
        }
    }
    Ok(())
}

/// One case through every check; the first failure.
fn check(text: &str) -> Result<(), String> {
    let m = irc_frontend::parse_module(text).map_err(|d| format!("does not parse: {d:?}"))?;
    let g = &m.graphs[0];
    let o = irc_passes::manager::PassManager::default_pipeline()
        .run(g)
        .map_err(|e| format!("-O: {e}"))?
        .graph;
    for (graph, when) in [(g, "as written"), (&o, "after -O")] {
        let k = irc_lower::lower_graph(graph, Default::default())
            .map_err(|e| format!("sm_80, {when}: {e}"))?;
        irc_kir::verify_module(&k).map_err(|e| format!("sm_80 kernel IR, {when}: {e}"))?;
        if !large() {
            agrees(graph, g, &k).map_err(|e| format!("sm_80, {when}: {e}"))?;
        }
    }
    let hopper = irc_lower::LowerOptions {
        wgmma: true,
        ..Default::default()
    };
    let k = irc_lower::plan_and_lower_with(g, Default::default(), &hopper)
        .map_err(|e| format!("sm_90a: {e}"))?
        .kernels;
    irc_kir::verify_module(&k).map_err(|e| format!("sm_90a kernel IR: {e}"))?;
    let printed = irc_kir::print_module(&k);
    let back = irc_kir::parse_module(&printed).map_err(|e| format!("sm_90a re-parse: {e}"))?;
    if back != k {
        return Err("sm_90a: the kernel IR does not re-parse to itself".into());
    }
    let cu = irc_emit_cuda::emit(&k);
    cu.manifest
        .check()
        .map_err(|e| format!("sm_90a manifest: {e}"))?;
    Ok(())
}

fn cases() -> u32 {
    std::env::var("IRC_DIFF_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_over_every_op_compute_what_the_interpreter_does(
        seed in any::<u64>(),
        steps in prop::collection::vec(any::<u8>(), 1..14),
    ) {
        let text = build(seed, &steps);
        if let Ok(dir) = std::env::var("IRC_DIFF_DUMP") {
            let path = std::path::Path::new(&dir).join(format!("diff_{seed:016x}.ir"));
            std::fs::write(&path, &text).expect("IRC_DIFF_DUMP is a writable folder");
        }
        if let Err(e) = check(&text) {
            return Err(TestCaseError::fail(format!("{e}\n{text}")));
        }
    }
}

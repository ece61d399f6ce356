//! The compound statements of the generator: matmuls, attention chains, reshapes and slices.

use super::graphs::{Graph, Rng, Val, list, numel, ty};

impl Graph {
    /// `x @ w` with a new parameter `w` (batch dims broadcast, either operand transposed), or
    /// `x @ xᵀ`.
    pub(crate) fn matmul(&mut self, r: &mut Rng, x: &Val) {
        let rank = x.shape.len();
        if r.below(6) == 0 {
            // A vector operand (promoted and squeezed): x · w[K], the matrix-vector product.
            let k = x.shape[rank - 1];
            let w = self.param(vec![k], x.dt);
            self.stmt(
                format!("matmul %{}, %{}", x.name, w.name),
                x.shape[..rank - 1].to_vec(),
                x.dt,
                false,
            );
            return;
        }
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
    pub(crate) fn attention(&mut self, r: &mut Rng, q: &Val) {
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
    pub(crate) fn reshape(&mut self, r: &mut Rng, x: &Val) {
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
    pub(crate) fn slice(&mut self, r: &mut Rng, x: &Val) {
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
            axes.push(r.written_axis(axis, rank));
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

//! The kernel IR's verifier.
//!
//! Invariants checked (each failure names the kernel and the offending item):
//! - names are unique: buffers, constants, kernels; and within a kernel, parameters, tensors and
//!   scalar variables (every variable is defined once, so emitters need no renaming);
//! - launches name a defined kernel with one buffer per parameter of the same dtype; results name
//!   buffers; grid and block are non-empty, a block has at most 1024 threads, grid y and z at
//!   most 65535;
//! - a global tensor views a parameter of its dtype, and for every launch its layout stays inside
//!   the bound buffer (`offset + max layout(c) < elements` and `offset + min layout(c) >= 0`;
//!   only global and const tensors have a base offset or negative strides), so every in-range
//!   coordinate is in bounds;
//!   a const tensor stays inside its constant; shared memory is at most 48 KiB per block (static)
//!   or the target's opt-in limit (dynamic, `smem`); a
//!   register tensor has at most 256 elements;
//! - every use of a variable is dominated by its definition (block scoping), assignments target
//!   `var`s, and every expression is well typed: index arithmetic on `idx`, comparisons give
//!   `i1`, math functions take `f32`/`f64` (integers where the function is defined on them;
//!   `eq ne lt le gt ge` give `i1`, `idx` turns an i32/i64 into an index), and
//!   a float literal appears only as the argument of a cast;
//! - a load or store coordinate has one index per top-level mode of the tensor's layout, or a
//!   single index; constants are never stored to.
//! - an intrinsic has the operands its table row names, each of its kind (register fragments
//!   at their modes after mode 0, shared and global operands at a full coordinate, immediates
//!   as integer literals), and passes the row's check: ldmatrix rows 16-byte aligned, mma and
//!   wgmma dtypes, mbarriers and tensor maps as `i64`, a `cp.async`'s two tensors of one dtype
//!   with every offset either can reach aligned to the copy's width.
//! - a `copy` with a cache hint (`copy.N.evict_first`) reads global memory into registers.

use super::*;
use irc_target::Target;
use std::collections::{HashMap, HashSet};
use std::fmt;

/// What the verifier found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyError {
    /// `@kernel` or `module`.
    pub location: String,
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel IR verifier: {}: {}", self.location, self.message)
    }
}

impl std::error::Error for VerifyError {}

pub fn verify_module(m: &Module) -> Result<(), VerifyError> {
    verify_module_for(m, &Target::default())
}

/// [`verify_module`] against the limits of `target`.
pub fn verify_module_for(m: &Module, target: &Target) -> Result<(), VerifyError> {
    verify_module_twins_for(m, target, &[])
}

/// [`verify_module`] of a module where kernel `i` is a copy of the earlier kernel `twins[i]`
/// but for its name and origins (what lowering reports for a repeated group): a kernel that
/// [`crate::shares_code`] with its twin is checked once, as its twin; any other is checked on
/// its own.
pub fn verify_module_with_twins(m: &Module, twins: &[Option<usize>]) -> Result<(), VerifyError> {
    verify_module_twins_for(m, &Target::default(), twins)
}

fn verify_module_twins_for(
    m: &Module,
    target: &Target,
    twins: &[Option<usize>],
) -> Result<(), VerifyError> {
    let merr = |message: String| VerifyError {
        location: "module".into(),
        message,
    };
    let mut buffers = HashMap::new();
    for b in &m.buffers {
        if buffers.insert(b.name.as_str(), b).is_some() {
            return Err(merr(format!("buffer %{} is declared twice", b.name)));
        }
        if b.shape.contains(&0) {
            return Err(merr(format!("buffer %{} has an empty dimension", b.name)));
        }
    }
    for b in &m.buffers {
        if let Some(t) = &b.tensor_map {
            verify_tensor_map(b, t, &buffers)
                .map_err(|e| merr(format!("tensormap %{}: {e}", b.name)))?;
        }
    }
    let mut consts = HashMap::new();
    for c in &m.constants {
        if consts.insert(c.name.as_str(), c).is_some() {
            return Err(merr(format!("constant @{} is declared twice", c.name)));
        }
    }
    let mut kernels = HashMap::new();
    for k in &m.kernels {
        if kernels.insert(k.name.as_str(), k).is_some() {
            return Err(merr(format!("kernel @{} is declared twice", k.name)));
        }
    }
    // Kernels verify independently: in parallel, the first error in kernel order reported.
    {
        use rayon::prelude::*;
        let checked: Vec<Result<(), VerifyError>> = m
            .kernels
            .par_iter()
            .enumerate()
            .map(|(i, k)| {
                let twin = twins.get(i).copied().flatten().filter(|&j| j < i);
                match twin.and_then(|j| m.kernels.get(j)) {
                    Some(t) if crate::shares_code(k, t) => Ok(()),
                    _ => verify_kernel(k, &consts, target),
                }
            })
            .collect();
        checked.into_iter().collect::<Result<(), VerifyError>>()?;
    }
    for l in &m.launches {
        let k = kernels
            .get(l.kernel.as_str())
            .ok_or_else(|| merr(format!("launch of undefined kernel @{}", l.kernel)))?;
        if l.args.len() != k.params.len() {
            return Err(merr(format!(
                "launch of @{} passes {} buffers for {} parameters",
                l.kernel,
                l.args.len(),
                k.params.len()
            )));
        }
        let mut bound = HashMap::new();
        for (a, p) in l.args.iter().zip(&k.params) {
            let b = buffers.get(a.as_str()).ok_or_else(|| {
                merr(format!(
                    "launch of @{} names undefined buffer %{a}",
                    l.kernel
                ))
            })?;
            if b.dtype != p.dtype {
                return Err(merr(format!(
                    "launch of @{}: buffer %{a} is {} but parameter %{} is {}",
                    l.kernel, b.dtype, p.name, p.dtype
                )));
            }
            bound.insert(p.name.as_str(), b.elements());
        }
        for t in &k.tensors {
            if let Space::Global(p) = &t.space {
                let cosize = t.span().1.saturating_add(1);
                let elems = bound.get(p.as_str()).copied().unwrap_or(0);
                if cosize as u64 > elems {
                    return Err(merr(format!(
                        "launch of @{}: tensor %{} reaches offset {} but the buffer bound to %{p} has {elems} elements",
                        l.kernel,
                        t.name,
                        cosize - 1
                    )));
                }
            }
        }
    }
    for r in &m.results {
        if !buffers.contains_key(r.as_str()) {
            return Err(merr(format!("result names undefined buffer %{r}")));
        }
    }
    Ok(())
}

/// A tensor map's buffer is 16 `i64` temps; the map stays inside the buffer it maps and meets
/// `cuTensorMapEncodeTiled`'s rules (rank 1..=5, 16-byte strides, boxes of at most 256, the
/// box's inner extent within the swizzle span).
fn verify_tensor_map(
    b: &BufferDecl,
    t: &TensorMapDecl,
    buffers: &HashMap<&str, &BufferDecl>,
) -> Result<(), String> {
    if b.dtype != DType::I64 || b.shape != [16] || b.kind != BufferKind::Temp {
        return Err("a tensor map is a temp buffer of type tensor<16xi64>".into());
    }
    let of = buffers
        .get(t.of.as_str())
        .ok_or_else(|| format!("maps undefined buffer %{}", t.of))?;
    if of.tensor_map.is_some() {
        return Err(format!("maps %{}, itself a tensor map", t.of));
    }
    let rank = t.dims.len();
    if !(1..=5).contains(&rank) || t.strides.len() + 1 != rank || t.box_dims.len() != rank {
        return Err(format!(
            "rank {rank} with {} strides and {} box extents (rank 1 to 5, one stride per dimension after the first)",
            t.strides.len(),
            t.box_dims.len()
        ));
    }
    let elem = of.dtype.size_bytes();
    if t.strides.iter().any(|&s| s % 16 != 0 || s == 0) {
        return Err("strides must be non-zero multiples of 16 bytes".into());
    }
    if t.dims.contains(&0) || t.box_dims.iter().any(|&x| x == 0 || x > 256) {
        return Err("extents must be positive and box extents at most 256".into());
    }
    if !matches!(t.swizzle, 0 | 32 | 64 | 128)
        || (t.swizzle > 0 && u64::from(t.box_dims[0]) * elem > u64::from(t.swizzle))
    {
        return Err(format!(
            "swizzle {} with an inner box of {} bytes (0, 32, 64 or 128, at least the inner box)",
            t.swizzle,
            u64::from(t.box_dims[0]) * elem
        ));
    }
    let last = (t.dims[0] - 1) * elem
        + t.dims[1..]
            .iter()
            .zip(&t.strides)
            .map(|(&d, &s)| (d - 1).saturating_mul(s))
            .sum::<u64>();
    if last + elem > of.elements() * elem {
        return Err(format!(
            "reaches byte {} of %{}, which has {} bytes",
            last + elem,
            t.of,
            of.elements() * elem
        ));
    }
    Ok(())
}

fn verify_kernel(
    k: &Kernel,
    consts: &HashMap<&str, &ConstDecl>,
    target: &Target,
) -> Result<(), VerifyError> {
    let max_register_elems = target.max_register_elems as i64;
    let max_shared_bytes = target.max_shared_bytes as i64;
    let err = |message: String| VerifyError {
        location: format!("@{}", k.name),
        message,
    };
    if k.grid.contains(&0) || k.block.contains(&0) {
        return Err(err("grid and block must be non-empty".into()));
    }
    if k.grid[1] > 65535 || k.grid[2] > 65535 {
        return Err(err("grid y and z are at most 65535".into()));
    }
    let threads = k.block.iter().map(|&b| u64::from(b)).product::<u64>();
    if threads > 1024 {
        return Err(err("a block has at most 1024 threads".into()));
    }
    if k.occupancy == 0
        || u64::from(k.occupancy) * threads > u64::from(target.max_threads_per_sm)
        || k.occupancy > target.max_blocks_per_sm
    {
        return Err(err(format!(
            "occupancy({}) of {threads}-thread blocks: an SM holds 1 to {} threads in at most {} blocks",
            k.occupancy, target.max_threads_per_sm, target.max_blocks_per_sm
        )));
    }
    let mut params = HashMap::new();
    for p in &k.params {
        if params.insert(p.name.as_str(), p.dtype).is_some() {
            return Err(err(format!("parameter %{} is declared twice", p.name)));
        }
    }
    let mut tensors = HashMap::new();
    let mut shared_bytes = 0i64;
    for t in &k.tensors {
        if params.contains_key(t.name.as_str()) || tensors.insert(t.name.as_str(), t).is_some() {
            return Err(err(format!("tensor %{} is declared twice", t.name)));
        }
        let memory = matches!(t.space, Space::Global(_) | Space::Const(_));
        if !memory && (t.offset != 0 || t.layout.leaves().iter().any(|&(_, d)| d < 0)) {
            return Err(err(format!(
                "tensor %{} has a negative stride or a base offset (only global and const tensors may)",
                t.name
            )));
        }
        let (lo, hi) = t.span();
        if lo < 0 {
            return Err(err(format!(
                "tensor %{} reaches offset {lo}, before its first element",
                t.name
            )));
        }
        // One past the greatest offset reached (the layout's cosize when the offset is 0 and
        // every stride is non-negative).
        let cosize = hi.saturating_add(1);
        let size = t
            .layout
            .size()
            .map_err(|e| err(format!("tensor %{}: {e}", t.name)))?;
        match &t.space {
            Space::Global(p) => match params.get(p.as_str()) {
                Some(&d) if d == t.dtype => {}
                Some(&d) => {
                    return Err(err(format!(
                        "tensor %{} is {} but parameter %{p} is {d}",
                        t.name, t.dtype
                    )));
                }
                None => {
                    return Err(err(format!(
                        "tensor %{} views undefined parameter %{p}",
                        t.name
                    )));
                }
            },
            Space::Const(c) => {
                let c = consts.get(c.as_str()).ok_or_else(|| {
                    err(format!("tensor %{} views undefined constant @{c}", t.name))
                })?;
                if c.dtype != t.dtype || cosize as usize > c.values.len() {
                    return Err(err(format!(
                        "tensor %{} does not fit constant @{}",
                        t.name, c.name
                    )));
                }
            }
            Space::Shared => {
                shared_bytes =
                    shared_bytes.saturating_add(cosize.saturating_mul(t.dtype.size_bytes() as i64));
            }
            Space::View(base) => {
                let b = tensors
                    .get(base.as_str())
                    .filter(|b| matches!(b.space, Space::Shared | Space::Registers))
                    .ok_or_else(|| {
                        err(format!(
                            "tensor %{} views %{base}, which is not a shared or register tensor declared before it",
                            t.name
                        ))
                    })?;
                let base_cosize = b.layout.cosize().map_err(|e| err(e.to_string()))?;
                if b.dtype != t.dtype || cosize > base_cosize {
                    return Err(err(format!(
                        "view %{} must have the dtype of %{base} and stay inside its {base_cosize} elements",
                        t.name
                    )));
                }
            }
            Space::Registers => {
                if size > max_register_elems || cosize > max_register_elems {
                    return Err(err(format!(
                        "register tensor %{} has more than {max_register_elems} elements",
                        t.name
                    )));
                }
            }
        }
    }
    // Shared memory past the static limit is dynamic (`smem::dynamic_shared`), up to the
    // target's opt-in limit, alignment padding included.
    let (shared_bytes, max_shared_bytes) = match crate::smem::dynamic_shared(k) {
        Some(d) => (d.bytes as i64, target.max_dynamic_shared_bytes as i64),
        None => (shared_bytes, max_shared_bytes),
    };
    if shared_bytes > max_shared_bytes {
        return Err(err(format!(
            "{shared_bytes} bytes of shared memory exceed {max_shared_bytes}"
        )));
    }
    let mut cx = Checker {
        k,
        tensors,
        scopes: vec![HashMap::new()],
        all: HashSet::new(),
    };
    cx.block(&k.body).map_err(err)
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum VarKind {
    Let,
    Mut,
}

struct Checker<'k> {
    k: &'k Kernel,
    tensors: HashMap<&'k str, &'k TensorDecl>,
    scopes: Vec<HashMap<&'k str, (Ty, VarKind)>>,
    all: HashSet<&'k str>,
}

impl<'k> Checker<'k> {
    fn define(&mut self, v: &'k str, ty: Ty, kind: VarKind) -> Result<(), String> {
        if !self.all.insert(v)
            || self.tensors.contains_key(v)
            || self.k.params.iter().any(|p| p.name == v)
        {
            return Err(format!("%{v} is defined twice"));
        }
        self.scopes
            .last_mut()
            .expect("a scope")
            .insert(v, (ty, kind));
        Ok(())
    }

    fn lookup(&self, v: &str) -> Result<(Ty, VarKind), String> {
        self.scopes
            .iter()
            .rev()
            .find_map(|s| s.get(v).copied())
            .ok_or_else(|| format!("%{v} is used where it is not defined"))
    }

    fn block(&mut self, body: &'k [Stmt]) -> Result<(), String> {
        self.scopes.push(HashMap::new());
        for s in body {
            self.stmt(s)?;
        }
        self.scopes.pop();
        Ok(())
    }

    fn stmt(&mut self, s: &'k Stmt) -> Result<(), String> {
        match s {
            Stmt::Let { var, ty, value }
            | Stmt::Var {
                var,
                ty,
                init: value,
            } => {
                let t = self.expr(value)?;
                if t != *ty {
                    return Err(format!(
                        "%{var} is declared {} but its value is {}",
                        ty.name(),
                        t.name()
                    ));
                }
                let kind = if matches!(s, Stmt::Var { .. }) {
                    VarKind::Mut
                } else {
                    VarKind::Let
                };
                self.define(var, *ty, kind)
            }
            Stmt::Assign { var, value } => {
                let (ty, kind) = self.lookup(var)?;
                if kind != VarKind::Mut {
                    return Err(format!(
                        "%{var} is assigned but was not declared with `var`"
                    ));
                }
                let t = self.expr(value)?;
                if t != ty {
                    return Err(format!(
                        "%{var} is {} but is assigned a {}",
                        ty.name(),
                        t.name()
                    ));
                }
                Ok(())
            }
            Stmt::Store {
                tensor,
                coord,
                value,
            } => {
                let t = self.tensor(tensor, coord)?;
                if matches!(t.space, Space::Const(_)) {
                    return Err(format!("store to constant tensor %{tensor}"));
                }
                let vt = self.expr(value)?;
                if vt != Ty::Elem(t.dtype) {
                    return Err(format!(
                        "store of {} into {} tensor %{tensor}",
                        vt.name(),
                        t.dtype
                    ));
                }
                Ok(())
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
                ..
            } => {
                for e in [start, end, step] {
                    if self.expr(e)? != Ty::Idx {
                        return Err(format!("loop bounds of %{var} must be idx"));
                    }
                }
                if *step == Expr::Int(0) {
                    return Err(format!("loop %{var} has step 0"));
                }
                self.scopes.push(HashMap::new());
                self.define(var, Ty::Idx, VarKind::Let)?;
                self.block(body)?;
                self.scopes.pop();
                Ok(())
            }
            Stmt::If { cond, body, orelse } => {
                if self.expr(cond)? != Ty::Elem(DType::I1) {
                    return Err("the condition of `if` must be i1".into());
                }
                self.block(body)?;
                self.block(orelse)
            }
            Stmt::Copy {
                width,
                dst,
                src,
                hint,
            } => {
                let w = i64::from(*width);
                let (td, ts) = (self.vector(dst, w)?, self.vector(src, w)?);
                if td.dtype != ts.dtype {
                    return Err(format!(
                        "copy between %{} ({}) and %{} ({})",
                        dst.tensor, td.dtype, src.tensor, ts.dtype
                    ));
                }
                if !matches!(w * td.dtype.size_bytes() as i64, 4 | 8 | 16) {
                    return Err(format!(
                        "copy.{w} of {} moves {} bytes; 4, 8 or 16 are supported",
                        td.dtype,
                        w * td.dtype.size_bytes() as i64
                    ));
                }
                let regs = |t: &TensorDecl| matches!(t.space, Space::Registers);
                if matches!(td.space, Space::Const(_)) || (regs(td) && regs(ts)) {
                    return Err(
                        "copy moves between global and shared memory (or shared views), or between either and registers"
                            .into(),
                    );
                }
                if *hint != CacheHint::Normal {
                    self.hinted_copy(w, *hint, src, ts, regs(td))?;
                }
                Ok(())
            }
            Stmt::Sync => Ok(()),
            Stmt::Intrinsic { op, args } => {
                let info = op.info();
                // A variant without a row of its own (`wgmma` of an N the table lacks).
                if info.op != *op {
                    return Err(format!("{op:?} is not an intrinsic of the kernel IR"));
                }
                if args.len() != info.args.len() {
                    return Err(format!(
                        "{} takes {} operands, got {}",
                        info.name,
                        info.args.len(),
                        args.len()
                    ));
                }
                let mut tensors = vec![];
                for ((name, kind), arg) in info.args.iter().zip(args) {
                    tensors.push(match (kind, arg) {
                        (ArgKind::Index, Arg::Expr(e)) => {
                            if self.expr(e)? != Ty::Idx {
                                return Err(format!("{} operand {name} must be idx", info.name));
                            }
                            None
                        }
                        (
                            ArgKind::RegIn(n) | ArgKind::RegOut(n) | ArgKind::RegInOut(n),
                            Arg::Frag(f),
                        ) => {
                            self.frag(f, *n)?;
                            self.tensors.get(f.tensor.as_str()).copied()
                        }
                        (ArgKind::Imm, Arg::Expr(e)) => {
                            if !matches!(e, Expr::Int(_)) {
                                return Err(format!(
                                    "{} operand {name} must be an integer literal",
                                    info.name
                                ));
                            }
                            None
                        }
                        (
                            ArgKind::SharedIn | ArgKind::SharedOut | ArgKind::Barrier,
                            Arg::Frag(f),
                        ) => Some(self.shared_at(f)?),
                        (
                            ArgKind::TensorMap | ArgKind::GlobalIn | ArgKind::GlobalAtomic,
                            Arg::Frag(f),
                        ) => {
                            let t = self
                                .tensors
                                .get(f.tensor.as_str())
                                .copied()
                                .ok_or_else(|| format!("undefined tensor %{}", f.tensor))?;
                            if !matches!(t.space, Space::Global(_)) || f.at.len() != t.layout.rank()
                            {
                                return Err(format!(
                                    "{} operand {name}: %{} must be a global tensor at one coordinate per mode",
                                    info.name, f.tensor
                                ));
                            }
                            for c in &f.at {
                                self.expr(c)?;
                            }
                            Some(t)
                        }
                        _ => {
                            return Err(format!("{} operand {name} has the wrong kind", info.name));
                        }
                    });
                }
                (info.check)(&tensors).map_err(|e| format!("{e} (%{})", first_tensor(args)))
            }
            Stmt::BlockReduce { var, ty, value, .. } | Stmt::WarpReduce { var, ty, value, .. } => {
                let t = self.expr(value)?;
                if t != *ty
                    || !matches!(
                        t,
                        Ty::Elem(DType::F32 | DType::F64 | DType::I32 | DType::I64)
                    )
                {
                    return Err(format!(
                        "block_reduce of %{var} needs f32, f64, i32 or i64 matching its type"
                    ));
                }
                if let Stmt::WarpReduce { width, .. } = s
                    && !(width.is_power_of_two() && (2..=32).contains(width))
                {
                    return Err(format!(
                        "warp_reduce of %{var}: the lane group is a power of two from 2 to 32, not {width}"
                    ));
                }
                self.define(var, *ty, VarKind::Let)
            }
        }
    }

    /// A shared tensor (or a view of one) read at a full coordinate of idx expressions.
    fn shared_at(&mut self, f: &'k Frag) -> Result<&'k TensorDecl, String> {
        let t = *self
            .tensors
            .get(f.tensor.as_str())
            .ok_or_else(|| format!("undefined tensor %{}", f.tensor))?;
        let shared = match &t.space {
            Space::Shared => true,
            Space::View(b) => self
                .tensors
                .get(b.as_str())
                .is_some_and(|b| b.space == Space::Shared),
            _ => false,
        };
        if !shared || f.at.len() != t.layout.rank() {
            return Err(format!(
                "%{} must be a shared tensor (or a view of one) at one coordinate per mode",
                f.tensor
            ));
        }
        for c in &f.at {
            if self.expr(c)? != Ty::Idx {
                return Err(format!("coordinates of %{} must be idx", f.tensor));
            }
        }
        Ok(t)
    }

    /// A copy with a cache hint reads global memory into registers, from a buffer the kernel
    /// does not write (the emitters' hinted loads are not ordered after the kernel's stores).
    fn hinted_copy(
        &self,
        w: i64,
        hint: CacheHint,
        src: &Frag,
        ts: &TensorDecl,
        to_registers: bool,
    ) -> Result<(), String> {
        let what = format!("copy.{w}{}", hint.suffix('.'));
        let Space::Global(param) = &ts.space else {
            return Err(format!(
                "{what} reads global memory; %{} is not global",
                src.tensor
            ));
        };
        if !to_registers {
            return Err(format!("{what} loads into registers"));
        }
        let written = accesses(&self.k.body).into_iter().any(|a| match a {
            Access::Write(t) => self
                .tensors
                .get(t)
                .is_some_and(|d| matches!(&d.space, Space::Global(q) if q == param)),
            _ => false,
        });
        if written {
            return Err(format!(
                "{what} reads %{param}, which the kernel writes (a hinted load is for a buffer read only)"
            ));
        }
        Ok(())
    }

    /// A vector operand of `copy.w`: mode 0 is `w:1`, every other stride a multiple of `w`.
    fn vector(&mut self, f: &'k Frag, w: i64) -> Result<&'k TensorDecl, String> {
        let t = *self
            .tensors
            .get(f.tensor.as_str())
            .ok_or_else(|| format!("undefined tensor %{}", f.tensor))?;
        if !crate::is_vector_operand(&t.layout, w, f.at.len()) {
            return Err(format!(
                "copy.{w} operand %{} needs mode 0 = {w}:1, other strides multiples of {w}, and one coordinate per other mode",
                f.tensor
            ));
        }
        for c in &f.at {
            if self.expr(c)? != Ty::Idx {
                return Err(format!("coordinates of %{} must be idx", f.tensor));
            }
        }
        Ok(t)
    }

    /// A register fragment with `values` values in mode 0; returns its dtype.
    fn frag(&mut self, f: &'k Frag, values: i64) -> Result<DType, String> {
        let t = *self
            .tensors
            .get(f.tensor.as_str())
            .ok_or_else(|| format!("undefined tensor %{}", f.tensor))?;
        let in_regs = match &t.space {
            Space::Registers => true,
            Space::View(b) => self
                .tensors
                .get(b.as_str())
                .is_some_and(|b| b.space == Space::Registers),
            _ => false,
        };
        let mode0 = t.layout.mode(0).and_then(|m| m.size()).unwrap_or(0);
        if !in_regs || mode0 != values || f.at.len() + 1 != t.layout.rank() {
            return Err(format!(
                "fragment %{} must be a register tensor with {values} values in mode 0, indexed at its other {} modes",
                f.tensor,
                t.layout.rank().saturating_sub(1)
            ));
        }
        for c in &f.at {
            if self.expr(c)? != Ty::Idx {
                return Err(format!("coordinates of %{} must be idx", f.tensor));
            }
        }
        Ok(t.dtype)
    }

    fn tensor(&mut self, name: &str, coord: &'k [Expr]) -> Result<&'k TensorDecl, String> {
        let t = *self
            .tensors
            .get(name)
            .ok_or_else(|| format!("undefined tensor %{name}"))?;
        if coord.len() != 1 && coord.len() != t.layout.rank() {
            return Err(format!(
                "tensor %{name} has {} modes but is indexed with {} coordinates",
                t.layout.rank(),
                coord.len()
            ));
        }
        for c in coord {
            if self.expr(c)? != Ty::Idx {
                return Err(format!("coordinates of %{name} must be idx"));
            }
        }
        Ok(t)
    }

    fn expr(&mut self, e: &'k Expr) -> Result<Ty, String> {
        match e {
            Expr::Int(_) | Expr::Builtin(_) => Ok(Ty::Idx),
            Expr::Float(_) => {
                Err("a float literal must be the argument of a cast, as `f32(1.5)`".into())
            }
            Expr::Var(v) => Ok(self.lookup(v)?.0),
            Expr::Load { tensor, coord } => Ok(Ty::Elem(self.tensor(tensor, coord)?.dtype)),
            Expr::Idx(op, a, b) => {
                let (ta, tb) = (self.expr(a)?, self.expr(b)?);
                match op {
                    IdxOp::And if ta == Ty::Elem(DType::I1) && tb == ta => Ok(ta),
                    IdxOp::And => Err("`&&` takes i1 operands".into()),
                    _ if ta != Ty::Idx || tb != Ty::Idx => Err(format!(
                        "`{}` takes idx operands, not {} and {}",
                        op.symbol(),
                        ta.name(),
                        tb.name()
                    )),
                    op if op.is_compare() => Ok(Ty::Elem(DType::I1)),
                    _ => Ok(Ty::Idx),
                }
            }
            Expr::Call(f, args) => {
                if args.len() != f.arity() {
                    return Err(format!(
                        "{} takes {} arguments, not {}",
                        f.name(),
                        f.arity(),
                        args.len()
                    ));
                }
                if let Func::Cast(d) = f {
                    if !matches!(args[0], Expr::Float(_)) {
                        self.expr(&args[0])?;
                    }
                    return Ok(Ty::Elem(*d));
                }
                let tys = args
                    .iter()
                    .map(|a| self.expr(a))
                    .collect::<Result<Vec<_>, _>>()?;
                if *f == Func::Index {
                    return match tys[0] {
                        Ty::Elem(DType::I32 | DType::I64) => Ok(Ty::Idx),
                        t => Err(format!("idx takes an i32 or i64 value, not {}", t.name())),
                    };
                }
                if *f == Func::Select {
                    if tys[0] != Ty::Elem(DType::I1) || tys[1] != tys[2] {
                        return Err(
                            "select takes an i1 condition and two values of one type".into()
                        );
                    }
                    return Ok(tys[1]);
                }
                let t = tys[0];
                if *f == Func::Tf32 && t != Ty::Elem(DType::F32) {
                    return Err(format!("tf32 rounds an f32, not {}", t.name()));
                }
                if tys.iter().any(|&x| x != t) {
                    return Err(format!("{} takes arguments of one type", f.name()));
                }
                let result = if f.is_compare() {
                    Ty::Elem(DType::I1)
                } else {
                    t
                };
                match t {
                    Ty::Elem(DType::F32 | DType::F64) => Ok(result),
                    Ty::Elem(DType::I32 | DType::I64) if f.int_ok() => Ok(result),
                    _ => Err(format!(
                        "{} is not defined on {} (convert 16-bit floats to f32 first)",
                        f.name(),
                        t.name()
                    )),
                }
            }
        }
    }
}

fn first_tensor(args: &[Arg]) -> &str {
    args.iter()
        .find_map(Arg::frag)
        .map_or("", |f| f.tensor.as_str())
}

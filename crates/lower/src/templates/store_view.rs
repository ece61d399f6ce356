//! Where a reduction or row kernel stores its anchor: the anchor's own buffer, or — when the
//! fusion policy gave the anchor none (rule 2: a result that is a view of it) — the result
//! view's buffer, through the inverse of the views' layout. A reshape of a contiguous result
//! is the identity; a transpose permutes the store; no copy kernel runs either way.

use crate::lower::*;
use irc_ir::ValueId;
use irc_layout::{Layout, composition, right_inverse};

impl Builder<'_, '_> {
    /// The global tensor through which the kernel stores `v` at `access` (the iteration
    /// coordinate → `v`'s row-major index).
    pub(crate) fn output(&mut self, v: ValueId, access: &Layout) -> R<String> {
        if self.l.buffer_of.contains_key(&v) {
            return Ok(self.global(v, access.clone()));
        }
        for root in self.roots.clone() {
            if let Some(t) = self.view_store(root, v, access)? {
                return Ok(t);
            }
        }
        Err(Retry::Fail(crate::LowerError::Internal(format!(
            "%{} has no buffer and no stored view",
            self.l.names[v.index()]
        ))))
    }

    /// The value a view `r` reads through its chain of views (`None` where `r` is no view).
    pub(crate) fn view_base(&self, r: ValueId) -> Option<ValueId> {
        let mut u = r;
        while let Some(inst) = self.def(u).filter(|i| is_view(i.op)) {
            u = inst.operands[0];
        }
        (u != r).then_some(u)
    }

    /// The global tensor through which a kernel storing `v` at `access` also stores `root`, a
    /// view of `v` with a buffer of its own, through the inverse of the views' layout; `None`
    /// where `root` is not views of `v`.
    pub(crate) fn view_store(
        &mut self,
        root: ValueId,
        v: ValueId,
        access: &Layout,
    ) -> R<Option<String>> {
        // `chain`: the root's index → the index of the value reached so far.
        let n = self.ty(root).numel();
        let mut chain = linear(n).map_err(internal)?;
        let mut u = root;
        let mut views = vec![];
        while u != v {
            let Some(inst) = self.def(u).filter(|i| is_view(i.op)) else {
                break;
            };
            let view = self.view_layout(inst).map_err(internal)?;
            chain = composition(&view, &chain).map_err(|_| self.materialize(root))?;
            views.push(inst);
            u = inst.operands[0];
        }
        if u != v {
            return Ok(None);
        }
        for inst in views {
            let origin = self.l.origin(inst);
            if !self.kernel.origins.contains(&origin) {
                self.kernel.origins.push(origin);
            }
        }
        // `chain` is a bijection of [0, n) (no view adds elements): its right inverse maps
        // v's index to the root's, and the store goes through it.
        let inverse = right_inverse(&chain).map_err(internal)?;
        if inverse.size().map_err(internal)? != n as i64 {
            return Err(self.materialize(root));
        }
        let store = composition(&inverse, access).map_err(|_| self.materialize(root))?;
        Ok(Some(self.global(root, store)))
    }

    /// Store the view `root` with a copy kernel instead (the policy's rule 7).
    fn materialize(&self, root: ValueId) -> Retry {
        Retry::Materialize(self.l.names[root.index()].clone())
    }
}

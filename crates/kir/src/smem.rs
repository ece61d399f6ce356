//! Where a kernel's shared tensors live.
//!
//! A kernel's shared tensors are static arrays (`__shared__`, a `workgroup` global) while they
//! fit the 48 KiB a block may declare statically and the kernel issues no asynchronous copy (a
//! TMA load or a `cp.async`, which write swizzled tiles whose bank pattern assumes 128-byte
//! aligned starts, more than a static array's 16). Otherwise
//! they are placed in one dynamic allocation, the launch asks for its size
//! ([`Launch::shared_bytes`](crate::Launch)), and each tensor sits at an offset aligned to 1024
//! bytes (what a 128-byte-swizzled TMA box and a wgmma descriptor need), or 16 for tensors
//! under 1 KiB. Both emitters and the manifest read the placement from here.

use crate::{Kernel, Space, Stmt, walk};

/// The dynamic shared-memory placement of a kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DynamicShared {
    /// Each shared tensor's byte offset, in declaration order.
    pub offsets: Vec<(String, u64)>,
    /// Bytes the launch asks for.
    pub bytes: u64,
}

/// Bytes of one shared tensor (its cosize times its element size).
pub fn shared_tensor_bytes(t: &crate::TensorDecl) -> u64 {
    let cosize = t.span().1.saturating_add(1).max(1) as u64;
    cosize * t.dtype.size_bytes()
}

/// Whether the kernel issues TMA loads.
pub fn uses_tma(k: &Kernel) -> bool {
    let mut found = false;
    walk(&k.body, &mut |s| {
        found |= matches!(s, Stmt::Intrinsic { op, .. } if op.is_tma_load())
    });
    found
}

/// Whether the kernel issues `cp.async` copies.
pub fn uses_cp_async(k: &Kernel) -> bool {
    let mut found = false;
    walk(
        &k.body,
        &mut |s| found |= matches!(s, Stmt::Intrinsic { op, .. } if op.cp_async_bytes().is_some()),
    );
    found
}

/// The static limit on a block's shared memory, in bytes.
pub const STATIC_SHARED_LIMIT: u64 = 48 * 1024;

/// `None` where the kernel's shared tensors are static arrays; otherwise their placement in
/// dynamic shared memory.
pub fn dynamic_shared(k: &Kernel) -> Option<DynamicShared> {
    let shared: Vec<_> = k
        .tensors
        .iter()
        .filter(|t| t.space == Space::Shared)
        .collect();
    let total: u64 = shared.iter().map(|t| shared_tensor_bytes(t)).sum();
    if total <= STATIC_SHARED_LIMIT && !uses_tma(k) && !uses_cp_async(k) {
        return None;
    }
    let mut offsets = Vec::with_capacity(shared.len());
    let mut at = 0u64;
    for t in shared {
        let bytes = shared_tensor_bytes(t);
        let align = if bytes >= 1024 { 1024 } else { 16 };
        at = at.div_ceil(align) * align;
        offsets.push((t.name.clone(), at));
        at += bytes;
    }
    Some(DynamicShared {
        offsets,
        bytes: at.div_ceil(16) * 16,
    })
}

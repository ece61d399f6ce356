//! The kernel's tensor declarations: dynamic shared memory carved into its tiles, static shared
//! tiles, and register arrays (16-byte aligned where a vector copy reads or writes them).

use crate::c_type;
use irc_kir::{self as kir, Space, Stmt};
use std::fmt::Write;

/// Writes the declarations of `k`'s shared and register tensors.
pub(crate) fn declare_tensors(out: &mut String, k: &kir::Kernel) {
    let dynamic = kir::dynamic_shared(k);
    if let Some(d) = &dynamic {
        let _ = writeln!(
            out,
            "  extern __shared__ __align__(1024) unsigned char irc_smem[]; // {} bytes",
            d.bytes
        );
    }
    // Register tensors a vector copy reads or writes are aligned for its widest access.
    let mut copied = std::collections::HashSet::new();
    kir::walk(&k.body, &mut |s| {
        if let Stmt::Copy { dst, src, .. } = s {
            copied.insert(dst.tensor.as_str());
            copied.insert(src.tensor.as_str());
        }
    });
    for t in &k.tensors {
        let size = t.layout.cosize().unwrap_or(1).max(1);
        match t.space {
            Space::Shared if dynamic.is_some() => {
                let off = dynamic
                    .iter()
                    .flat_map(|d| &d.offsets)
                    .find(|(n, _)| n == &t.name)
                    .map_or(0, |(_, o)| *o);
                let ty = c_type(t.dtype);
                let _ = writeln!(
                    out,
                    "  {ty}* const t_{} = reinterpret_cast<{ty}*>(irc_smem + {off});",
                    t.name
                );
            }
            Space::Shared => {
                let _ = writeln!(
                    out,
                    "  __shared__ __align__(16) {} t_{}[{size}];",
                    c_type(t.dtype),
                    t.name
                );
            }
            Space::Registers => {
                let align = if copied.contains(t.name.as_str()) {
                    "__align__(16) "
                } else {
                    ""
                };
                let _ = writeln!(out, "  {align}{} t_{}[{size}];", c_type(t.dtype), t.name);
            }
            _ => {}
        }
    }
}

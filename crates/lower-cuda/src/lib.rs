//! Lowering of irc graphs to GPU kernels.
//!
//! Today this crate holds the CuTe-style layout algebra ([`layout`]), pure math with no other
//! dependency, from which every index an emitter writes will be computed. Later work adds the
//! kernel (layout-level) IR, the lowering from fused graph IR to it, and CUDA C++ emission.
//!
//! API Boundary: no IO; emitters return text, the driver writes it.

pub mod layout;

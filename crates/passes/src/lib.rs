//! Graph-level rewriting for irc.
//!
//! This crate will hold the e-graph passes (egg): canonicalization, transpose folding into matmul
//! and into every consumer's load layout, algebraic rules, and extraction with a roofline cost
//! model, plus the MLIR-style pass manager and registry.
//!
//! API Boundary: depends on `irc-ir` alone — no frontend, no driver, no CUDA, no LLVM. Passes
//! never emit text and never do IO; every pass's output verifies.

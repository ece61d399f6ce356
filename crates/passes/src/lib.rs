//! Graph-level rewriting for irc.
//!
//! API Boundary: depends on `irc-ir` alone — no frontend, no driver, no CUDA, no LLVM. Passes
//! never emit text and never do IO; every pass's output verifies.

pub mod cost;
pub mod eqsat;
pub mod extract;
pub mod lang;
pub mod manager;
pub mod pipeline;
pub mod registry;
pub mod rules;

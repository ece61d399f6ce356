//! Graph-level rewriting for irc: equality saturation (egg) with a roofline cost model, and an
//! MLIR-style pass manager.
//!
//! - [`lang`]: the graph IR as an egg language (attributes as data), the type analysis, and the
//!   conversions `Graph → EGraph → Graph` (sharing, multiple results and names kept);
//! - [`eqsat`]: rules as Rust functions over the e-graph, saturation with node, iteration and
//!   time limits, egg's `StopReason` reported;
//! - [`rules`]: the rules by topic (`rules/README.md` is the rulebook);
//! - [`cost`]: the cost model (picoseconds on a [`cost::Target`], H100 by default);
//! - [`extract`]: DAG-aware extraction (shared producers counted once);
//! - [`registry`], [`pipeline`], [`manager`]: passes as data, the `graph(p1,p2{k=v})` pipeline
//!   syntax, and the pass manager with IR snapshots, verification, timing and statistics.
//!
//! Embedding (no CLI involved): see [`manager`].
//!
//! API Boundary: depends on `irc-ir` alone — no frontend, no driver, no CUDA, no LLVM. Passes
//! never print and never do IO (IR snapshots go to a callback; reports are returned as
//! strings); every pass's output verifies.

pub mod cost;
pub mod eqsat;
pub mod extract;
pub mod lang;
pub mod manager;
pub mod pipeline;
pub mod registry;
pub mod rules;
pub mod search;

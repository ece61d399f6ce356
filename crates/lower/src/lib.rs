//! Lowering of irc graphs to the kernel IR ([`irc_kir`]).
//!
//! API Boundary: no IO and no text but the kernel IR's own; emitters live in `irc-emit-cuda`
//! and `irc-emit-mlir`.

mod builder;
mod exprs;
mod indexing;
pub mod lower;
mod rebuild;
pub mod templates;
mod twins;

/// Why a graph could not be lowered.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LowerError {
    #[error("cannot lower `{op}`: {reason}")]
    Unsupported { op: String, reason: String },
    /// A bug in irc: the lowering produced something its own checks reject.
    #[error("internal error in lowering: {0}")]
    Internal(String),
}

pub use lower::{
    Choice, ConfigSource, LowerOptions, Planned, SourceInfo, lower_fused, lower_graph,
    plan_and_lower, plan_and_lower_with,
};
pub use templates::{Config, MmaConfig, Problem};

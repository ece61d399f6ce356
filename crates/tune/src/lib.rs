//! Autotuning: which configurations of a kernel's space to measure, and the persistent cache
//! of the winners.
//!
//! The spaces themselves are declared by the templates (`irc_lower::templates::config`); this
//! crate ranks them ([`candidates`]), keeps the results ([`cache`]) and turns cache files into
//! the per-kernel configurations lowering takes ([`lookup`]). The measuring is the driver's
//! (`irc tune`, through `irc-runtime`).
//!
//! API Boundary: besides the driver, the only crate that does IO, and only on cache files.

pub mod cache;

pub use cache::{Cache, CacheError, Entry, IRC_VERSION, Loaded};
use irc_lower::{Config, Problem};
use irc_target::Target;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A configuration to measure, with its estimated time.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub config: Config,
    pub estimate_us: f64,
    /// The template's heuristic choice (the baseline).
    pub default: bool,
}

/// What `irc tune` measures for `p`: the heuristic's point first (the baseline every winner
/// is compared with), then the `top_k` best others of the checked space by their estimate.
/// Empty for a template without a space.
pub fn candidates(p: &Problem, target: &Target, top_k: usize) -> Vec<Candidate> {
    let Some(space) = irc_lower::templates::space_of(p.template) else {
        return vec![];
    };
    let heuristic = space.heuristic(p, target);
    let mut out = vec![Candidate {
        config: heuristic,
        estimate_us: space.estimate_us(&heuristic, p, target),
        default: true,
    }];
    out.extend(
        irc_lower::templates::ranked(p, target)
            .into_iter()
            .filter(|(c, _)| *c != heuristic)
            .take(top_k)
            .map(|(config, estimate_us)| Candidate {
                config,
                estimate_us,
                default: false,
            }),
    );
    out
}

/// Per-kernel configurations read from cache files.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Lookup {
    /// For [`irc_lower::LowerOptions::configs`].
    pub configs: BTreeMap<String, Config>,
    /// The file each configuration came from.
    pub origin: BTreeMap<String, PathBuf>,
    /// Files ignored as corrupt, entries that no longer parse.
    pub warnings: Vec<String>,
}

/// The configurations for `arch` (and this irc version) in `files`; where several files
/// configure a kernel, the first one listed wins.
pub fn lookup(files: &[PathBuf], arch: &str) -> Lookup {
    let mut out = Lookup::default();
    for f in files {
        let loaded = cache::read(f);
        out.warnings.extend(loaded.warning);
        let (configs, warnings) = loaded.cache.configs(arch, IRC_VERSION);
        out.warnings.extend(warnings);
        for (k, c) in configs {
            if !out.configs.contains_key(&k) {
                out.origin.insert(k.clone(), f.clone());
                out.configs.insert(k, c);
            }
        }
    }
    out
}

//! The tuning-cache flags every compiling command shares (`irc FILE --emit=…`, `irc run`,
//! `irc bench`, `irc tune`), and `--explain`'s account of each kernel's configuration.
//!
//! Files read, the first that configures a kernel winning: with `--tune-cache PATH`, PATH then
//! the project file `FILE.tune.json` beside the graph; without it, the project file then the
//! user's cache (`$IRC_TUNE_CACHE`, else `irc/tune.json` under the user's cache directory).
//! `--no-tune-cache` reads none: every kernel gets its template's heuristic choice.

use irc_lower::{Choice, ConfigSource, LowerOptions, MmaConfig};
use irc_tune::Lookup;
use std::fmt::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug, Default, Clone)]
pub struct CacheArgs {
    /// The tuning cache file (default: $IRC_TUNE_CACHE, else irc/tune.json under the user's
    /// cache directory); `irc tune` writes its results there.
    #[arg(long, value_name = "PATH")]
    pub tune_cache: Option<PathBuf>,
    /// Use no tuning cache: every kernel gets its template's heuristic configuration
    /// (reproducible builds).
    #[arg(long, conflicts_with = "tune_cache")]
    pub no_tune_cache: bool,
}

impl CacheArgs {
    /// The cache `irc tune` writes and `--show`/`--clear` act on.
    pub fn write_path(&self) -> anyhow::Result<PathBuf> {
        match &self.tune_cache {
            Some(p) => Ok(p.clone()),
            None => irc_tune::cache::default_path().ok_or_else(|| {
                anyhow::anyhow!(
                    "no cache directory for the tuning cache on this machine; name one with \
                     --tune-cache PATH or IRC_TUNE_CACHE"
                )
            }),
        }
    }

    /// The files read for the graph file `input`, in priority order.
    pub fn read_paths(&self, input: &str) -> Vec<PathBuf> {
        if self.no_tune_cache {
            return vec![];
        }
        let project = (input != "-")
            .then(|| irc_tune::cache::project_path(Path::new(input)))
            .filter(|p| p.is_file());
        let mut out = vec![];
        match &self.tune_cache {
            Some(p) => out.extend([Some(p.clone()), project].into_iter().flatten()),
            None => out.extend(
                [project, irc_tune::cache::default_path()]
                    .into_iter()
                    .flatten(),
            ),
        }
        out
    }

    /// The configurations the cache files hold for `arch`; their warnings go to stderr.
    pub fn lookup(&self, input: &str, arch: &str) -> Lookup {
        // Entries are recorded under the architecture's canonical name.
        let arch = irc_runtime::Arch::parse(arch).map_or(arch.to_string(), |a| a.to_string());
        let l = irc_tune::lookup(&self.read_paths(input), &arch);
        for w in &l.warnings {
            eprintln!("irc: warning: {w}");
        }
        l
    }

    /// Lowering's options: `--mma-config` and the looked-up per-kernel configurations.
    pub fn options(&self, mma: Option<MmaConfig>, lookup: &Lookup) -> LowerOptions {
        LowerOptions {
            mma,
            configs: lookup.configs.clone(),
            ..Default::default()
        }
    }
}

/// One line per group: its kernel(s), template, problem, configuration and where it came
/// from.
pub fn explain(choices: &[Choice], lookup: &Lookup) -> String {
    let mut out = String::new();
    for c in choices {
        let config = c
            .config
            .map_or("(no configuration space)".to_string(), |x| x.to_string());
        let key = c.problem.key();
        let from = match &c.source {
            ConfigSource::Heuristic if c.config.is_none() => String::new(),
            ConfigSource::Heuristic => " [heuristic: not in the tuning cache]".to_string(),
            ConfigSource::Flag => " [--mma-config]".to_string(),
            ConfigSource::Given => match lookup.origin.get(&key) {
                Some(p) => format!(" [tuning cache: {}]", p.display()),
                None => " [given]".to_string(),
            },
            ConfigSource::Rejected(why) => {
                format!(" [heuristic: the tuning cache's configuration is rejected: {why}]")
            }
        };
        let _ = writeln!(
            out,
            "irc: config: @{} ({}; {}): {config}{from}",
            c.kernels.join(", @"),
            c.problem.template,
            c.problem.signature
        );
    }
    out
}

//! The persistent tuning cache: one JSON file.
//!
//! ```json
//! {
//!   "format": "irc-tune-cache",
//!   "version": 1,
//!   "entries": {
//!     "matmul_mma@v2:matmul f16 b1 m4096 n4096 k4096 ops1#…|sm_90a|irc 0.1.0": {
//!       "template": "matmul_mma", "space_version": 2,
//!       "problem": "matmul f16 b1 m4096 n4096 k4096 ops1#…",
//!       "arch": "sm_90a", "irc_version": "0.1.0",
//!       "config": "128x128x32/2x4/4", "ms": 0.201,
//!       "default_config": "128x128x32/2x4/4", "default_ms": 0.201,
//!       "device": "NVIDIA H100 80GB HBM3", "candidates": 12, "tuned_at": 1795000000
//!     }
//!   }
//! }
//! ```
//!
//! An entry's key is its template, the template's configuration-space version, the problem
//! signature ([`irc_lower::Problem`]: shapes, dtypes, views and layouts, epilogue), the GPU
//! architecture and the irc version: a change of any of them misses. Where the file lives:
//! [`default_path`] (`$IRC_TUNE_CACHE`, else `irc/tune.json` under the user's cache directory,
//! `$XDG_CACHE_HOME` or `~/.cache` on Linux), or any path a user names (a file shipped beside
//! a graph, [`project_path`]).
//!
//! Writers take an exclusive lock on `PATH.lock`, read the file again, merge their entries
//! into it and replace it by a rename of a fully written temporary file in the same
//! directory: concurrent `irc tune` runs lose no entry and a reader never sees half a file.
//! A file that does not parse (truncated, corrupt, another format or version) is reported as
//! a warning and treated as empty, never an error; the next write replaces it.

use fd_lock::RwLock;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The `format` field of every cache file.
pub const FORMAT: &str = "irc-tune-cache";
/// The file format's version.
pub const VERSION: u32 = 1;
/// The irc version entries are keyed by.
pub const IRC_VERSION: &str = env!("CARGO_PKG_VERSION");

/// One tuned kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub template: String,
    pub space_version: u32,
    /// The problem signature.
    pub problem: String,
    pub arch: String,
    pub irc_version: String,
    /// The winning configuration's text.
    pub config: String,
    /// Its median time, ms.
    pub ms: f64,
    /// The heuristic's configuration and median time.
    pub default_config: String,
    pub default_ms: f64,
    /// The GPU it was measured on.
    pub device: String,
    /// Configurations measured.
    pub candidates: usize,
    /// Seconds since the Unix epoch.
    pub tuned_at: u64,
}

impl Entry {
    /// The key of [`irc_lower::LowerOptions::configs`] this entry configures.
    pub fn problem_key(&self) -> String {
        format!("{}@v{}:{}", self.template, self.space_version, self.problem)
    }

    /// The entry's key in the file.
    pub fn key(&self) -> String {
        key(&self.problem_key(), &self.arch, &self.irc_version)
    }
}

/// The file key of a problem key on `arch` for `irc_version`.
pub fn key(problem_key: &str, arch: &str, irc_version: &str) -> String {
    format!("{problem_key}|{arch}|irc {irc_version}")
}

/// A cache file's contents.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cache {
    pub format: String,
    pub version: u32,
    pub entries: BTreeMap<String, Entry>,
}

impl Default for Cache {
    fn default() -> Cache {
        Cache {
            format: FORMAT.into(),
            version: VERSION,
            entries: BTreeMap::new(),
        }
    }
}

impl Cache {
    /// Adds or replaces an entry under its key.
    pub fn insert(&mut self, e: Entry) {
        self.entries.insert(e.key(), e);
    }

    /// The entries for `arch` and `irc_version` as per-kernel configurations, keyed as
    /// [`irc_lower::LowerOptions::configs`] is, with a warning for each entry whose
    /// configuration no longer parses.
    pub fn configs(
        &self,
        arch: &str,
        irc_version: &str,
    ) -> (BTreeMap<String, irc_lower::Config>, Vec<String>) {
        let mut out = BTreeMap::new();
        let mut warnings = vec![];
        for e in self.entries.values() {
            if e.arch != arch || e.irc_version != irc_version {
                continue;
            }
            match irc_lower::Config::parse(&e.template, &e.config) {
                Ok(c) => {
                    out.insert(e.problem_key(), c);
                }
                Err(why) => {
                    warnings.push(format!("tuning cache entry `{}` ignored: {why}", e.key()))
                }
            }
        }
        (out, warnings)
    }
}

/// Why the cache could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("tuning cache {path}: {what}: {error}")]
    Io {
        path: PathBuf,
        what: &'static str,
        error: std::io::Error,
    },
}

fn io(path: &Path, what: &'static str) -> impl FnOnce(std::io::Error) -> CacheError {
    let path = path.to_path_buf();
    move |error| CacheError::Io { path, what, error }
}

/// The cache file when no path is given: `$IRC_TUNE_CACHE` when set and not empty, else
/// `irc/tune.json` under the user's cache directory; `None` when there is neither.
pub fn default_path() -> Option<PathBuf> {
    match std::env::var_os("IRC_TUNE_CACHE") {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => dirs::cache_dir().map(|d| d.join("irc").join("tune.json")),
    }
}

/// The project-local cache shipped beside a graph file: `FILE.tune.json`.
pub fn project_path(graph_file: &Path) -> PathBuf {
    let mut name = graph_file.as_os_str().to_owned();
    name.push(".tune.json");
    PathBuf::from(name)
}

/// A cache's text as the file holds it.
pub fn parse(text: &str) -> Result<Cache, String> {
    let c: Cache = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if c.format != FORMAT {
        return Err(format!("format `{}`, not `{FORMAT}`", c.format));
    }
    if c.version != VERSION {
        return Err(format!(
            "format version {}, this irc reads {VERSION}",
            c.version
        ));
    }
    Ok(c)
}

/// What reading a cache file found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Loaded {
    pub cache: Cache,
    /// Why the file's contents were ignored, if they were.
    pub warning: Option<String>,
}

/// Reads a cache file: a missing file is an empty cache; an unreadable or corrupt one is an
/// empty cache with a warning.
pub fn read(path: &Path) -> Loaded {
    match std::fs::read_to_string(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Loaded::default(),
        Err(e) => Loaded {
            cache: Cache::default(),
            warning: Some(format!(
                "tuning cache {} ignored: cannot read it: {e}",
                path.display()
            )),
        },
        Ok(text) => match parse(&text) {
            Ok(cache) => Loaded {
                cache,
                warning: None,
            },
            Err(why) => Loaded {
                cache: Cache::default(),
                warning: Some(format!(
                    "tuning cache {} ignored (corrupt or truncated?): {why}",
                    path.display()
                )),
            },
        },
    }
}

/// The lock file of a cache file.
fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Runs `f` holding the cache's exclusive lock (creating its directory).
fn locked<T>(path: &Path, f: impl FnOnce() -> Result<T, CacheError>) -> Result<T, CacheError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io(dir, "cannot create its directory"))?;
    }
    let lp = lock_path(path);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lp)
        .map_err(io(&lp, "cannot open the lock file"))?;
    let mut lock = RwLock::new(file);
    let _guard = lock.write().map_err(io(&lp, "cannot lock"))?;
    f()
}

/// Writes `cache` to `path` through a temporary file and a rename.
fn write_atomic(path: &Path, cache: &Cache) -> Result<(), CacheError> {
    let mut text = serde_json::to_string_pretty(cache).unwrap_or_default();
    text.push('\n');
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let mut f = File::create(&tmp).map_err(io(&tmp, "cannot create a temporary file"))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io(&tmp, "cannot write"))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(path, "cannot replace")(e)
    })
}

/// Reads the cache at `path` under its lock, lets `f` change it, and writes it back: entries
/// other writers added meanwhile are kept. Returns the warning of a corrupt file replaced.
pub fn update(path: &Path, f: impl FnOnce(&mut Cache)) -> Result<Option<String>, CacheError> {
    locked(path, || {
        let Loaded { mut cache, warning } = read(path);
        f(&mut cache);
        write_atomic(path, &cache)?;
        Ok(warning)
    })
}

/// Deletes the cache file; `false` when there was none.
pub fn clear(path: &Path) -> Result<bool, CacheError> {
    locked(path, || match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io(path, "cannot remove")(e)),
    })
}

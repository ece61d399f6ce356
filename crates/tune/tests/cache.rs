//! The tuning cache: round trip, corrupt and truncated files, concurrent writers (threads and
//! processes), and keys that miss when any of their parts changes.

use irc_lower::{LowerOptions, plan_and_lower, plan_and_lower_with};
use irc_tune::cache::{self, Cache, Entry};
use irc_tune::{IRC_VERSION, candidates, lookup};
use std::path::{Path, PathBuf};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("irc-tune-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("sub").join("tune.json")
}

fn problem(text: &str) -> irc_lower::Problem {
    let m = irc_frontend::parse_module(text).unwrap();
    plan_and_lower(&m.graphs[0], Default::default())
        .unwrap()
        .choices[0]
        .problem
        .clone()
}

const SOFTMAX: &str = "graph @s(%x: tensor<64x3000xf16>) -> tensor<64x3000xf16> {\n  %r = softmax %x {axis = -1}\n  return %r\n}\n";

fn entry(p: &irc_lower::Problem, config: &str, arch: &str) -> Entry {
    Entry {
        template: p.template.into(),
        space_version: irc_lower::templates::space_of(p.template)
            .unwrap()
            .version(),
        problem: p.signature.clone(),
        arch: arch.into(),
        irc_version: IRC_VERSION.into(),
        config: config.into(),
        ms: 0.5,
        default_config: "block,threads=256".into(),
        default_ms: 0.6,
        device: "test".into(),
        candidates: 3,
        tuned_at: 1,
    }
}

fn synthetic(i: usize) -> Entry {
    Entry {
        template: "pointwise".into(),
        space_version: 1,
        problem: format!("pointwise f16 n{i} ops1#{i:016x}"),
        arch: "sm_90a".into(),
        irc_version: IRC_VERSION.into(),
        config: "threads=128".into(),
        ms: i as f64,
        default_config: "threads=256".into(),
        default_ms: i as f64 + 1.0,
        device: "test".into(),
        candidates: 1,
        tuned_at: i as u64,
    }
}

#[test]
fn a_cache_round_trips_and_configures_lowering() {
    let path = scratch("roundtrip");
    let p = problem(SOFTMAX);
    let e = entry(&p, "block,threads=512", "sm_90a");
    assert_eq!(cache::update(&path, |c| c.insert(e.clone())).unwrap(), None);
    let loaded = cache::read(&path);
    assert_eq!(loaded.warning, None);
    assert_eq!(loaded.cache.entries.len(), 1);
    assert_eq!(loaded.cache.entries[&e.key()], e);
    // The file is the documented JSON.
    let text = std::fs::read_to_string(&path).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["format"], "irc-tune-cache");
    assert_eq!(v["version"], 1);
    // Lookup gives lowering the configuration, and lowering uses it.
    let l = lookup(std::slice::from_ref(&path), "sm_90a");
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    assert_eq!(l.configs.len(), 1);
    assert_eq!(l.origin[&p.key()], path);
    let m = irc_frontend::parse_module(SOFTMAX).unwrap();
    let options = LowerOptions {
        configs: l.configs,
        ..Default::default()
    };
    let planned = plan_and_lower_with(&m.graphs[0], Default::default(), &options).unwrap();
    assert_eq!(
        planned.choices[0].config.map(|c| c.to_string()).as_deref(),
        Some("block,threads=512")
    );
    assert_eq!(planned.kernels.kernels[0].block, [512, 1, 1]);
    // clear removes it; a second clear finds nothing.
    assert!(cache::clear(&path).unwrap());
    assert!(!cache::clear(&path).unwrap());
    assert_eq!(cache::read(&path), cache::Loaded::default());
}

#[test]
fn corrupt_and_truncated_files_are_warnings_not_errors() {
    let path = scratch("corrupt");
    cache::update(&path, |c| {
        for i in 0..5 {
            c.insert(synthetic(i));
        }
    })
    .unwrap();
    let good = std::fs::read_to_string(&path).unwrap();
    let cases = [
        good[..good.len() / 2].to_string(),
        String::new(),
        "\u{0}\u{1}garbage".to_string(),
        good.replace("irc-tune-cache", "something-else"),
        good.replace("\"version\": 1", "\"version\": 99"),
        "[1, 2, 3]".to_string(),
    ];
    for bad in cases {
        std::fs::write(&path, &bad).unwrap();
        let loaded = cache::read(&path);
        assert!(loaded.warning.is_some(), "{bad:?}");
        assert!(loaded.cache.entries.is_empty());
        let l = lookup(std::slice::from_ref(&path), "sm_90a");
        assert!(l.configs.is_empty() && l.warnings.len() == 1);
        // The next write replaces it, and says so.
        let w = cache::update(&path, |c| c.insert(synthetic(7))).unwrap();
        assert!(w.is_some());
        assert_eq!(cache::read(&path).cache.entries.len(), 1);
    }
    // An entry whose configuration no longer parses is skipped with a warning.
    let mut e = synthetic(1);
    e.config = "threads=lots".into();
    cache::update(&path, |c| c.insert(e)).unwrap();
    let l = lookup(std::slice::from_ref(&path), "sm_90a");
    assert_eq!(l.configs.len(), 1);
    assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
}

#[test]
fn concurrent_threads_lose_no_entry() {
    let path = scratch("threads");
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                for i in 0..10 {
                    cache::update(&path, |c| c.insert(synthetic(t * 100 + i))).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let loaded = cache::read(&path);
    assert_eq!(loaded.warning, None);
    assert_eq!(loaded.cache.entries.len(), 80);
}

/// The child of `concurrent_processes_lose_no_entry`: does nothing unless that test runs it.
#[test]
fn child_writer() {
    let (Ok(path), Ok(id)) = (
        std::env::var("IRC_TUNE_TEST_PATH"),
        std::env::var("IRC_TUNE_TEST_ID"),
    ) else {
        return;
    };
    let id: usize = id.parse().unwrap();
    for i in 0..10 {
        cache::update(Path::new(&path), |c| c.insert(synthetic(id * 100 + i))).unwrap();
    }
}

#[test]
fn concurrent_processes_lose_no_entry() {
    let path = scratch("processes");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|id| {
            std::process::Command::new(&exe)
                .args(["--exact", "child_writer", "--test-threads=1"])
                .env("IRC_TUNE_TEST_PATH", &path)
                .env("IRC_TUNE_TEST_ID", id.to_string())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let loaded = cache::read(&path);
    assert_eq!(loaded.warning, None);
    assert_eq!(loaded.cache.entries.len(), 40);
    // No temporary file is left behind.
    let dir = path.parent().unwrap();
    let names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| n == "tune.json" || n == "tune.json.lock"),
        "{names:?}"
    );
}

#[test]
fn a_changed_key_component_misses() {
    let path = scratch("keys");
    let p = problem(SOFTMAX);
    cache::update(&path, |c| {
        c.insert(entry(&p, "block,threads=512", "sm_90a"))
    })
    .unwrap();
    let hit = |arch: &str, key: &str| {
        lookup(std::slice::from_ref(&path), arch)
            .configs
            .contains_key(key)
    };
    assert!(hit("sm_90a", &p.key()));
    // Another arch.
    assert!(!hit("sm_80", &p.key()));
    // Another shape.
    let other = problem(&SOFTMAX.replace("64x3000", "64x3001"));
    assert_ne!(other.key(), p.key());
    assert!(!hit("sm_90a", &other.key()));
    // Another dtype.
    let other = problem(&SOFTMAX.replace("f16", "bf16"));
    assert!(!hit("sm_90a", &other.key()));
    // Another irc version or space version: the entry is stored but not used.
    let mut c = Cache::default();
    let mut e = entry(&p, "block,threads=512", "sm_90a");
    e.irc_version = "0.0.0-other".into();
    c.insert(e.clone());
    assert!(c.configs("sm_90a", IRC_VERSION).0.is_empty());
    e.irc_version = IRC_VERSION.into();
    e.space_version += 1;
    let mut c = Cache::default();
    c.insert(e);
    let (configs, _) = c.configs("sm_90a", IRC_VERSION);
    assert!(!configs.contains_key(&p.key()));
    // Another template: a different key even for the same signature.
    let mut e = entry(&p, "threads=128", "sm_90a");
    e.template = "pointwise".into();
    assert_ne!(e.key(), entry(&p, "threads=128", "sm_90a").key());
}

#[test]
fn the_first_file_listed_wins() {
    let project = scratch("project");
    let user = project.with_file_name("user.json");
    let p = problem(SOFTMAX);
    cache::update(&project, |c| {
        c.insert(entry(&p, "block,threads=512", "sm_90a"))
    })
    .unwrap();
    cache::update(&user, |c| {
        c.insert(entry(&p, "block,threads=128", "sm_90a"))
    })
    .unwrap();
    let l = lookup(&[project.clone(), user.clone()], "sm_90a");
    assert_eq!(l.configs[&p.key()].to_string(), "block,threads=512");
    assert_eq!(l.origin[&p.key()], project);
    let l = lookup(&[user.clone(), project], "sm_90a");
    assert_eq!(l.configs[&p.key()].to_string(), "block,threads=128");
    assert_eq!(
        cache::project_path(Path::new("a/g.ir")),
        Path::new("a/g.ir.tune.json")
    );
}

#[test]
fn candidates_start_with_the_default_and_follow_the_ranking() {
    let p = problem(SOFTMAX);
    let target = irc_target::Target::default();
    let c = candidates(&p, &target, 3);
    assert_eq!(c.len(), 4);
    assert!(c[0].default && c[1..].iter().all(|x| !x.default));
    assert_eq!(c[0].config.to_string(), "block,threads=256");
    assert!(
        c[1..]
            .windows(2)
            .all(|w| w[0].estimate_us <= w[1].estimate_us)
    );
    let all = candidates(&p, &target, 1000);
    assert_eq!(all.len(), irc_lower::templates::space(&p, &target).len());
    // A template without a space has nothing to tune.
    let simt = problem(
        "graph @m(%a: tensor<8x8xf64>, %b: tensor<8x8xf64>) -> tensor<8x8xf64> {\n  %c = matmul %a, %b\n  return %c\n}\n",
    );
    assert_eq!(simt.template, "matmul_simt");
    assert!(candidates(&simt, &target, 20).is_empty());
}

//! Workspace-level test support: every test goes through these few helpers, so a change of API
//! edits this file, not hundreds of tests.

use std::path::{Path, PathBuf};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Parses `input`, prints it, and checks the print against `expected`; also checks that the
/// print re-parses to the same print (the round-trip property).
#[track_caller]
pub fn check(input: &str, expected: &str) {
    let printed = match irc_frontend::parse_module(input) {
        Ok(m) => irc_ir::print_module(&m),
        Err(d) => panic!("unexpected errors: {d:#?}"),
    };
    assert_eq!(
        printed.trim_end(),
        expected.trim_end(),
        "canonical print differs"
    );
    let again = irc_frontend::parse_module(&printed).map(|m| irc_ir::print_module(&m));
    assert_eq!(
        again.as_deref(),
        Ok(printed.as_str()),
        "print does not re-parse to itself"
    );
}

/// The kernels of `src`'s first graph lowered with the Hopper templates (sm_90a), verified.
#[track_caller]
pub fn hopper_kernels(src: &str) -> irc_kir::Module {
    let m = irc_frontend::parse_module(src).unwrap_or_else(|e| panic!("{e:?}\n{src}"));
    let hopper = irc_lower::LowerOptions {
        wgmma: true,
        ..Default::default()
    };
    let k = irc_lower::plan_and_lower_with(&m.graphs[0], Default::default(), &hopper)
        .unwrap_or_else(|e| panic!("{e}\n{src}"))
        .kernels;
    irc_kir::verify_module(&k).unwrap_or_else(|e| panic!("{e}\n{src}"));
    k
}

/// Checks that `input` is rejected with a diagnostic whose message contains `expected` and
/// whose span starts on the 1-based line `line`.
#[track_caller]
pub fn check_error(input: &str, line: usize, expected: &str) {
    let diags = match irc_frontend::parse_module(input) {
        Ok(m) => panic!("expected an error, got:\n{}", irc_ir::print_module(&m)),
        Err(d) => d,
    };
    let found = diags.iter().any(|d| {
        let at = d.span.map(|s| {
            input[..(s.start as usize).min(input.len())]
                .matches('\n')
                .count()
                + 1
        });
        d.message.contains(expected) && at == Some(line)
    });
    assert!(
        found,
        "no error containing {expected:?} on line {line}; got {diags:#?}"
    );
}

/// Every example graph: the benchmark workloads and their small versions.
pub fn examples() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in [root().join("examples"), root().join("examples/small")] {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            files.extend(
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|e| e == "ir")),
            );
        }
    }
    files.sort();
    files
}

/// Every graph file of the repository that lowers: the examples, their small versions and the
/// GPU test graphs (the shared corpus of the pipeline tests).
pub fn corpus() -> Vec<PathBuf> {
    let mut files = examples();
    if let Ok(entries) = std::fs::read_dir(root().join("tests/gpu")) {
        let mut gpu: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "ir"))
            .collect();
        gpu.sort();
        files.extend(gpu);
    }
    files
}

/// Plans and lowers `g`, and checks the Fused IR round-trips and verifies and that the cost
/// model assumes the kernels lowering built: as many, in the same order, each moving the same
/// bytes. Returns `false` (checking nothing more) when lowering had to force a view into memory,
/// which the cost model cannot foresee.
pub fn check_fusion_agrees(g: &irc_ir::Graph) -> Result<bool, String> {
    let p = irc_lower::plan_and_lower(g, irc_lower::SourceInfo::default())
        .map_err(|e| format!("@{}: {e}", g.name))?;
    let text = irc_fused::print_module(&p.fused);
    let back = irc_fused::parse_module(&text).map_err(|e| format!("{e}\n{text}"))?;
    if back != p.fused {
        return Err(format!("the Fused IR does not re-parse to itself:\n{text}"));
    }
    irc_fused::verify_module(&back).map_err(|e| format!("{e}\n{text}"))?;
    let lowered = irc_lower::lower_fused(&back).map_err(|e| format!("{e}\n{text}"))?;
    if lowered != p.kernels {
        return Err(format!("lowering the re-parsed Fused IR differs:\n{text}"));
    }
    if !p.forced.is_empty() {
        return Ok(false);
    }
    let assumed = irc_passes::cost::graph_kernels(g).ok_or("ill-typed graph")?;
    let built: Vec<u64> = p
        .fused
        .groups
        .iter()
        .map(|k| p.fused.group_bytes(k))
        .collect();
    let assumed_bytes: Vec<u64> = assumed.iter().map(|k| k.bytes).collect();
    // One kernel per group, named after it; a split row schedule adds a first-pass kernel
    // (`<group>_partial`) that the cost model does not price (its documented gap).
    let named = p
        .kernels
        .kernels
        .iter()
        .filter(|k| p.fused.groups.iter().any(|g| g.name == k.name))
        .count();
    if built.len() != named || assumed_bytes != built {
        return Err(format!(
            "@{}: the cost model assumes {} kernels moving {assumed_bytes:?} bytes; lowering built {} moving {built:?}\n{text}",
            g.name,
            assumed.len(),
            built.len()
        ));
    }
    Ok(true)
}

use irc_kir::{Module, Space};
use std::collections::{HashMap, HashSet};

/// The checks every lowered module passes beyond verification (which lowering does): its
/// kernel IR prints and re-parses to itself, its CUDA's launch manifest is valid with one output
/// per result of `g`, and no kernel reads a buffer it writes.
pub fn check_kernels(g: &irc_ir::Graph, k: &Module) -> Result<(), String> {
    let text = irc_kir::print_module(k);
    let back = irc_kir::parse_module(&text).map_err(|e| format!("{e}\n{text}"))?;
    if &back != k {
        return Err("the kernel IR does not re-parse to itself".into());
    }
    let cu = irc_emit_cuda::emit(k);
    cu.manifest.check().map_err(|e| e.to_string())?;
    if cu.manifest.outputs.len() != g.results.len() {
        return Err(format!(
            "{} outputs in the manifest for {} results",
            cu.manifest.outputs.len(),
            g.results.len()
        ));
    }
    let own = reads_of_own_writes(k);
    if !own.is_empty() {
        return Err(format!("{own:?}"));
    }
    Ok(())
}

/// Each kernel of `k` that reads a buffer it writes where nothing orders the read after the
/// writes, with the buffer, unless the buffer is the kernel's own workspace (a temp no other
/// launch touches: split reductions' partials). A read is ordered when, in program order, the
/// buffer was written before it and a barrier came between the last such write and the read
/// (ARCHITECTURE.md: a row kernel's last pass reading back the row input its first pass
/// stored, across a block barrier or the blocks' row barrier). The check is of the program
/// text: it does not see which threads a barrier waits for, nor loop iterations.
pub fn reads_of_own_writes(k: &Module) -> Vec<String> {
    use irc_kir::Access;
    let mut users: HashMap<&str, usize> = HashMap::new();
    for l in &k.launches {
        for a in l.args.iter().collect::<HashSet<_>>() {
            *users.entry(a.as_str()).or_default() += 1;
        }
    }
    let mut bad = vec![];
    for l in &k.launches {
        let kernel = k.kernels.iter().find(|x| x.name == l.kernel).unwrap();
        let buffer_of = |t: &str| -> Option<&str> {
            let decl = kernel.tensors.iter().find(|d| d.name == t)?;
            match &decl.space {
                Space::Global(p) => {
                    let i = kernel.params.iter().position(|x| &x.name == p)?;
                    Some(l.args[i].as_str())
                }
                _ => None,
            }
        };
        let workspace = |b: &str| {
            let decl = k.buffers.iter().find(|d| d.name == b).unwrap();
            users[b] == 1
                && matches!(
                    decl.kind,
                    irc_kir::BufferKind::Temp | irc_kir::BufferKind::Zeroed
                )
        };
        let writes: HashSet<&str> = irc_kir::written_tensors(&kernel.body)
            .into_iter()
            .filter_map(buffer_of)
            .filter(|b| !workspace(b))
            .collect();
        // Per buffer written so far: whether a barrier came after its last write.
        let mut ordered: HashMap<&str, bool> = HashMap::new();
        let mut found = HashSet::new();
        for a in irc_kir::accesses(&kernel.body) {
            match a {
                Access::Barrier => ordered.values_mut().for_each(|o| *o = true),
                Access::Write(t) => {
                    if let Some(b) = buffer_of(t) {
                        ordered.insert(b, false);
                    }
                }
                Access::Read(t) => match buffer_of(t).filter(|b| writes.contains(b)) {
                    // Before the first write: what the launch found there, while the kernel's
                    // own writes land.
                    Some(b) if !ordered.contains_key(b) => {
                        found.insert(format!("@{} reads {b} before writing it", l.kernel));
                    }
                    Some(b) if !ordered[b] => {
                        found.insert(format!("@{} reads {b} right after writing it", l.kernel));
                    }
                    _ => {}
                },
            }
        }
        let mut found: Vec<String> = found.into_iter().collect();
        found.sort();
        bad.extend(found);
    }
    bad
}

/// The number of proptest cases: the environment variable `var` where it holds a number, else
/// `default` (CI's share).
pub fn cases_from_env(var: &str, default: u32) -> u32 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

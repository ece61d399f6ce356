//! Differential testing of the whole compiler on random graphs over the full op set of the graph
//! IR: views (transposes, reshapes, broadcasts, slices with negative steps) on every operand,
//! numpy broadcasting, comparisons and `select`, `iota`, `concat`, `gather` with negative
//! indices, casts between the float dtypes and to integers, reductions over several axes, the
//! composites along any axis with their weights, batched, transposed and matrix-vector matmuls,
//! attention chains (soft caps, bands, bias and boolean masks, the softmax whole or decomposed),
//! rank-0 parameters, and several results (a parameter itself among them at times).
//!
//! Each graph is printed and parsed (the text is what a failure shows), then
//! - lowered with sm_80's templates and run by the kernel-IR emulator (`emulate.rs`) against
//!   the interpreter, as written and after `-O`;
//! - lowered with the Hopper templates (sm_90a, what `irc` does by default);
//!
//! every module passing `irc_tests::check_kernels` (the kernel IR re-parses to itself, a valid
//! launch manifest, no kernel reading a buffer it writes).
//!
//! `IRC_DIFF_CASES` sets the number of graphs (default 48: CI's share); `IRC_DIFF_DUMP=DIR`
//! writes each graph there (`bench/gpu/check_all.sh` runs such a folder on the GPU, where the
//! Hopper kernels run too).

use proptest::prelude::*;

#[path = "emulate.rs"]
mod emulate;

#[path = "differential/chains.rs"]
mod chains;
#[path = "differential/graphs.rs"]
mod graphs;
use graphs::{build, large};

/// Whether the kernels `k` (lowered from `g`) compute what the interpreter does on
/// `reference` (`g` before `-O`, which keeps the parameters and results).
fn agrees(g: &irc_ir::Graph, reference: &irc_ir::Graph, k: &irc_kir::Module) -> Result<(), String> {
    let inputs: Vec<_> = g
        .params
        .iter()
        .enumerate()
        .map(|(i, &p)| irc_interp::random_tensor(g.ty(p), 23, i as u64))
        .collect();
    let pairs = emulate::against_interpreter_on(reference, k, inputs);
    let tolerances = irc_interp::compare::result_tolerances(reference);
    for (i, ((got, want), tol)) in pairs.into_iter().zip(tolerances).enumerate() {
        let cmp = irc_interp::compare::compare_at(&got, &want, tol).map_err(|e| e.to_string())?;
        // A result that cancels to near zero (`softmax(x) - mean(softmax(x))` of equal rows)
        // has no relative accuracy: there, an absolute bound of the tolerance (the inputs and
        // most values are of order one).
        let cancelled = cmp.bad_nonfinite == 0 && cmp.max_abs_err <= tol;
        if !cmp.passed() && !cancelled {
            return Err(format!("result {i}: {cmp:?}"));
        }
    }
    Ok(())
}

/// One case through every check; the first failure.
fn check(text: &str) -> Result<(), String> {
    let m = irc_frontend::parse_module(text).map_err(|d| format!("does not parse: {d:?}"))?;
    let g = &m.graphs[0];
    let o = irc_passes::manager::PassManager::default_pipeline()
        .run(g)
        .map_err(|e| format!("-O: {e}"))?
        .graph;
    for (graph, when) in [(g, "as written"), (&o, "after -O")] {
        let k = irc_lower::lower_graph(graph, Default::default())
            .map_err(|e| format!("sm_80, {when}: {e}"))?;
        irc_tests::check_kernels(graph, &k).map_err(|e| format!("sm_80, {when}: {e}"))?;
        if !large() {
            agrees(graph, g, &k).map_err(|e| format!("sm_80, {when}: {e}"))?;
        }
    }
    let hopper = irc_lower::LowerOptions {
        wgmma: true,
        ..Default::default()
    };
    let k = irc_lower::plan_and_lower_with(g, Default::default(), &hopper)
        .map_err(|e| format!("sm_90a: {e}"))?
        .kernels;
    irc_tests::check_kernels(g, &k).map_err(|e| format!("sm_90a: {e}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: irc_tests::cases_from_env("IRC_DIFF_CASES", 48), ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_over_every_op_compute_what_the_interpreter_does(
        seed in any::<u64>(),
        steps in prop::collection::vec(any::<u8>(), 1..14),
    ) {
        let text = build(seed, &steps);
        if let Ok(dir) = std::env::var("IRC_DIFF_DUMP") {
            let path = std::path::Path::new(&dir).join(format!("diff_{seed:016x}.ir"));
            std::fs::write(&path, &text).expect("IRC_DIFF_DUMP is a writable folder");
        }
        if let Err(e) = check(&text) {
            return Err(TestCaseError::fail(format!("{e}\n{text}")));
        }
    }
}

//! Repeated groups are lowered once (`twins.rs`): the kernel IR is the same as lowering every
//! group on its own, each copy is its kernel but for name and origins, and the CUDA written
//! with the twins is the CUDA written without them.

use irc_lower::{LowerOptions, SourceInfo, plan_and_lower_with};
use std::path::Path;

/// `layers` repetitions of a block with a matmul and its epilogue, a row composite, an
/// elementwise chain, a constant array, a split row group (few long rows) and a residual.
fn repeated(layers: usize) -> String {
    let mut params = vec![
        "%x: tensor<64x64xf32>".to_string(),
        "%l: tensor<2x40000xf32>".into(),
    ];
    let mut body = String::new();
    let (mut x, mut l) = ("x".to_string(), "l".to_string());
    for i in 0..layers {
        params.push(format!("%w{i}: tensor<64x64xf32>"));
        params.push(format!("%g{i}: tensor<64xf32>"));
        body.push_str(&format!(
            "  %n{i} = rmsnorm %{x}, %g{i} {{axis = -1, eps = 1e-6}}
  %h{i} = matmul %n{i}, %w{i}
  %r{i} = relu %h{i}
  %c{i} = constant {{value = [1.0, -0.0, 2.5, 3.0]}} : tensor<4xf32>
  %cb{i} = reshape %c{i} {{shape = [1, 4]}}
  %rr{i} = reshape %r{i} {{shape = [1024, 4]}}
  %a{i} = add %rr{i}, %cb{i}
  %b{i} = reshape %a{i} {{shape = [64, 64]}}
  %s{i} = softmax %b{i} {{axis = -1}}
  %y{i} = add %{x}, %s{i}
  %ls{i} = softmax %{l} {{axis = -1}}
  %le{i} = exp %ls{i}
"
        ));
        x = format!("y{i}");
        l = format!("le{i}");
    }
    format!(
        "graph @rep({}) -> (tensor<64x64xf32>, tensor<2x40000xf32>) {{\n{body}  return %{x}, %{l}\n}}\n",
        params.join(", ")
    )
}

fn graphs() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut out = vec![("repeated".to_string(), repeated(3))];
    for dir in ["examples", "examples/small", "tests/gpu"] {
        for e in std::fs::read_dir(root.join(dir)).expect("examples folder") {
            let p = e.expect("dir entry").path();
            if p.extension().is_some_and(|x| x == "ir") {
                let text = std::fs::read_to_string(&p).expect("readable");
                out.push((p.display().to_string(), text));
            }
        }
    }
    out
}

#[test]
fn repeated_groups_lower_to_renamed_copies() {
    let mut copied = 0;
    for (name, text) in graphs() {
        let module = irc_frontend::parse_module(&text).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        for g in &module.graphs {
            for g in [g.clone(), irc_ir::decompose_graph(g).expect("decomposes")] {
                let src = SourceInfo {
                    name: &name,
                    text: &text,
                };
                let shared = plan_and_lower_with(&g, src, &LowerOptions::default())
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                let each = LowerOptions {
                    lower_each_group: true,
                    ..Default::default()
                };
                let alone =
                    plan_and_lower_with(&g, src, &each).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(
                    irc_kir::print_module(&shared.kernels),
                    irc_kir::print_module(&alone.kernels),
                    "{name}: sharing changed the kernel IR"
                );
                assert_eq!(shared.choices, alone.choices, "{name}");
                assert!(alone.twins.iter().all(Option::is_none), "{name}");
                assert_eq!(shared.twins.len(), shared.kernels.kernels.len(), "{name}");
                for (i, t) in shared.twins.iter().enumerate() {
                    if let Some(j) = *t {
                        let (a, b) = (&shared.kernels.kernels[i], &shared.kernels.kernels[j]);
                        assert!(j < i && irc_kir::shares_code(a, b), "{name}: @{}", a.name);
                        assert!(irc_kir::same_code(a, b), "{name}: @{}", a.name);
                        assert_ne!(a.name, b.name);
                        copied += 1;
                    }
                }
                let cuda = irc_emit_cuda::emit(&shared.kernels).source;
                assert_eq!(
                    irc_emit_cuda::emit_with_twins(&shared.kernels, &shared.twins).source,
                    cuda,
                    "{name}: the CUDA written with twins differs"
                );
                // A twin that does not share its kernel's code is checked and written alone.
                let wrong: Vec<Option<usize>> =
                    (0..shared.twins.len()).map(|i| i.checked_sub(1)).collect();
                irc_kir::verify_module_with_twins(&alone.kernels, &wrong)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(
                    irc_emit_cuda::emit_with_twins(&alone.kernels, &wrong).source,
                    irc_emit_cuda::emit(&alone.kernels).source,
                    "{name}: wrong twins changed the CUDA"
                );
            }
        }
    }
    assert!(copied >= 8, "only {copied} kernels were copies");
}

/// A copy names its own group's statements and buffers, not its representative's.
#[test]
fn copies_name_their_own_statements() {
    let text = repeated(2);
    let g = &irc_frontend::parse_module(&text).expect("parses").graphs[0];
    let src = SourceInfo {
        name: "rep.ir",
        text: &text,
    };
    let p = plan_and_lower_with(g, src, &LowerOptions::default()).expect("lowers");
    let printed = irc_kir::print_module(&p.kernels);
    for v in ["%h1 = matmul %n1, %w1", "%ls1 = softmax %le0"] {
        assert!(printed.contains(v), "no origin `{v}` in\n{printed}");
    }
    let (twin, rep) = p
        .twins
        .iter()
        .enumerate()
        .find_map(|(i, t)| t.map(|j| (i, j)))
        .expect("a copy");
    let (a, b) = (&p.kernels.launches[twin], &p.kernels.launches[rep]);
    assert_ne!(a.args, b.args, "a copy reads its representative's buffers");
    assert_ne!(
        p.kernels.kernels[twin].origins, p.kernels.kernels[rep].origins,
        "a copy names its representative's statements"
    );
}

/// Two causal attention heads of the same shapes: each kernel reads the order of its work units
/// from a constant table (`attention/schedule.rs`). The tables are equal, so the module keeps
/// one and the second kernel is a twin of the first.
#[test]
fn copies_that_read_constants_share_them() {
    let layer = |o: &str, q: &str| {
        format!(
            "  %s{o} = matmul %{q}, %k {{transpose_b = true}}
  %c{o} = constant {{value = 0.125}} : tensor<f16>
  %ss{o} = mul %s{o}, %c{o}
  %row{o} = iota {{axis = 0}} : tensor<512x512xi32>
  %col{o} = iota {{axis = 1}} : tensor<512x512xi32>
  %keep{o} = ge %row{o}, %col{o}
  %ninf{o} = constant {{value = -inf}} : tensor<f16>
  %m{o} = select %keep{o}, %ss{o}, %ninf{o}
  %p{o} = softmax %m{o} {{axis = -1}}
  %o{o} = matmul %p{o}, %v
"
        )
    };
    // 512 units of 128 query rows: more than the 264 blocks of two an SM, so a table.
    let t = "tensor<8x16x512x64xf16>";
    let text = format!(
        "graph @layers(%q0: {t}, %q1: {t}, %k: {t}, %v: {t}) -> ({t}, {t}) {{\n{}{}  return %o0, %o1\n}}\n",
        layer("0", "q0"),
        layer("1", "q1")
    );
    let g = &irc_frontend::parse_module(&text).expect("parses").graphs[0];
    let src = SourceInfo {
        name: "layers.ir",
        text: &text,
    };
    // sm_90a: the Hopper attention kernel, whose causal form reads the table.
    let hopper = LowerOptions {
        wgmma: true,
        ..Default::default()
    };
    let p = plan_and_lower_with(g, src, &hopper).expect("lowers");
    let reads = |k: &irc_kir::Kernel| {
        k.tensors
            .iter()
            .filter_map(|t| match &t.space {
                irc_kir::Space::Const(c) => Some(c.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let ks = &p.kernels.kernels;
    assert_eq!(ks.len(), 2, "{}", irc_kir::print_module(&p.kernels));
    assert!(!reads(&ks[0]).is_empty(), "no unit table: {}", ks[0].name);
    assert_eq!(reads(&ks[0]), reads(&ks[1]));
    assert_eq!(p.kernels.constants.len(), 1);
    assert_eq!(p.twins, vec![None, Some(0)]);
    irc_kir::verify_module_with_twins(&p.kernels, &p.twins).expect("verifies");
}

//! Inputs for the benchmarks.

/// A graph IR text of `n` statements: a chain of elementwise ops, matmuls, reductions and views
/// over small tensors, the mix a transformer graph has.
pub fn generated_graph(n: usize) -> String {
    let mut s = String::from(
        "graph @big(%x: tensor<64x64xf16>, %w: tensor<64x64xf16>) -> tensor<64x64xf16> {\n",
    );
    let mut prev = "x".to_string();
    for i in 0..n {
        let cur = format!("v{i}");
        let line = match i % 6 {
            0 => format!("  %{cur} = matmul %{prev}, %w : tensor<64x64xf16>\n"),
            1 => format!("  %{cur} = add %{prev}, %x\n"),
            2 => format!("  %{cur} = transpose %{prev} {{perm = [1, 0]}}\n"),
            3 => format!("  %{cur} = exp %{prev} loc(\"model.py\":{i}:5)\n"),
            4 => format!("  %{cur} = softmax %{prev} {{axis = -1}}\n"),
            _ => format!("  %{cur} = mul %{prev}, %{prev}\n"),
        };
        s.push_str(&line);
        prev = cur;
    }
    s.push_str(&format!("  return %{prev}\n}}\n"));
    s
}

/// A transformer of `layers` blocks (attention + SwiGLU MLP + two RMSNorms, pre-norm,
/// residuals) over `x: [seq, dim]` bf16 with `heads` heads, as graph IR text. Every weight is a
/// parameter. Written with composites; `irc_ir::decompose_graph` turns each block into about
/// 70 primitive statements, so 32 layers are a few thousand ops.
pub fn transformer_graph(layers: usize, seq: u64, dim: u64, heads: u64) -> String {
    let hd = dim / heads;
    let ffn = dim * 2;
    let t = |s: &[u64]| {
        let dims: Vec<String> = s.iter().map(u64::to_string).collect();
        format!("tensor<{}xbf16>", dims.join("x"))
    };
    let mut params = vec![format!("%x: {}", t(&[seq, dim]))];
    let mut body = String::new();
    let mut x = "x".to_string();
    for l in 0..layers {
        for (w, shape) in [
            ("g1", vec![dim]),
            ("wq", vec![dim, dim]),
            ("wk", vec![dim, dim]),
            ("wv", vec![dim, dim]),
            ("wo", vec![dim, dim]),
            ("g2", vec![dim]),
            ("w1", vec![dim, ffn]),
            ("w3", vec![dim, ffn]),
            ("w2", vec![ffn, dim]),
        ] {
            params.push(format!("%{w}_{l}: {}", t(&shape)));
        }
        let scale = 1.0 / (hd as f64).sqrt();
        body.push_str(&format!(
            "  %n1_{l} = rmsnorm %{x}, %g1_{l} {{axis = -1, eps = 1e-6}}
  %q_{l} = matmul %n1_{l}, %wq_{l}
  %k_{l} = matmul %n1_{l}, %wk_{l}
  %v_{l} = matmul %n1_{l}, %wv_{l}
  %qh_{l} = reshape %q_{l} {{shape = [{seq}, {heads}, {hd}]}}
  %qt_{l} = transpose %qh_{l} {{perm = [1, 0, 2]}}
  %kh_{l} = reshape %k_{l} {{shape = [{seq}, {heads}, {hd}]}}
  %kt_{l} = transpose %kh_{l} {{perm = [1, 0, 2]}}
  %ktt_{l} = transpose %kt_{l} {{perm = [0, 2, 1]}}
  %vh_{l} = reshape %v_{l} {{shape = [{seq}, {heads}, {hd}]}}
  %vt_{l} = transpose %vh_{l} {{perm = [1, 0, 2]}}
  %s_{l} = matmul %qt_{l}, %ktt_{l}
  %c_{l} = constant {{value = {scale:?}}} : tensor<bf16>
  %ss_{l} = mul %s_{l}, %c_{l}
  %p_{l} = softmax %ss_{l} {{axis = -1}}
  %o_{l} = matmul %p_{l}, %vt_{l}
  %ot_{l} = transpose %o_{l} {{perm = [1, 0, 2]}}
  %o2_{l} = reshape %ot_{l} {{shape = [{seq}, {dim}]}}
  %proj_{l} = matmul %o2_{l}, %wo_{l}
  %x1_{l} = add %{x}, %proj_{l}
  %n2_{l} = rmsnorm %x1_{l}, %g2_{l} {{axis = -1, eps = 1e-6}}
  %h_{l} = matmul %n2_{l}, %w1_{l}
  %a_{l} = silu %h_{l}
  %u_{l} = matmul %n2_{l}, %w3_{l}
  %m_{l} = mul %a_{l}, %u_{l}
  %d_{l} = matmul %m_{l}, %w2_{l}
  %x2_{l} = add %x1_{l}, %d_{l}
"
        ));
        x = format!("x2_{l}");
    }
    format!(
        "graph @transformer({}) -> {} {{\n{body}  return %{x}\n}}\n",
        params.join(", "),
        t(&[seq, dim])
    )
}

/// A chain of `n` elementwise statements over `tensor<64x64xf32>` in which every value is read
/// twice (`v[i]` reads `v[i-1]` and, every other op, `v[i-2]`): the shape on which the `-O`
/// pipeline was once quadratic.
pub fn chain_graph(n: usize) -> String {
    let mut s = String::from(
        "graph @chain(%x: tensor<64x64xf32>, %y: tensor<64x64xf32>) -> tensor<64x64xf32> {\n",
    );
    let (mut prev, mut prev2) = ("x".to_string(), "y".to_string());
    for i in 0..n {
        let line = match i % 6 {
            0 => format!("  %v{i} = exp %{prev}\n"),
            1 => format!("  %v{i} = add %{prev}, %{prev2}\n"),
            2 => format!("  %v{i} = mul %{prev}, %{prev2}\n"),
            3 => format!("  %v{i} = relu %{prev}\n"),
            4 => format!("  %v{i} = sub %{prev}, %{prev2}\n"),
            _ => format!("  %v{i} = tanh %{prev}\n"),
        };
        s.push_str(&line);
        prev2 = std::mem::replace(&mut prev, format!("v{i}"));
    }
    s.push_str(&format!("  return %{prev}\n}}\n"));
    s
}

/// A decomposed transformer (`transformer_graph(layers, 128, 256, 4)`, the composites written
/// in primitives: 51 statements a layer) with about `statements` statements.
pub fn transformer_statements(statements: usize) -> irc_ir::Graph {
    let layers = statements.div_ceil(51).max(1);
    let text = transformer_graph(layers, 128, 256, 4);
    let m = irc_frontend::parse_module(&text).expect("the generated transformer parses");
    irc_ir::decompose_graph(&m.graphs[0]).expect("the generated transformer decomposes")
}

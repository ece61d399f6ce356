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

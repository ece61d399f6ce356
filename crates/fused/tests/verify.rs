//! The verifier on hand-written groups with reductions in a matmul's epilogue
//! (`Group::epilogue_reductions`): accepted when the reduced value has the matmul's shape and
//! the matmul reads two matrices; rejected otherwise, as lowering could not build them.

fn verify(text: &str) -> Result<(), String> {
    let m = irc_fused::parse_module(text).map_err(|e| e.to_string())?;
    irc_fused::verify_module(&m).map_err(|e| e.to_string())
}

/// A column sum of `matmul(a, b) + z`, with `a`'s and `z`'s types given.
fn group(a: &str, c: &str) -> String {
    format!(
        "fused @g flops=0 min_bytes=0 {{
  buffer @a = %a : {a} input
  buffer @b = %b : tensor<32x48xf16> input
  buffer @z = %z : tensor<64x48xf16> input
  buffer @s = %s : tensor<48xf16> output
  group @g_k0_matmul matmul {{
    %a = load @a
    %b = load @b
    %z = load @z
    %c = matmul %a, %b : {c}
    %y = add %c, %z : tensor<64x48xf16>
    %s = reduce_sum %y {{axes = [0]}} : tensor<48xf16>
    store %s -> @s
  }}
  return @s
}}
"
    )
}

#[test]
fn a_column_sum_of_the_matmuls_shape_verifies() {
    let ok = group("tensor<64x32xf16>", "tensor<64x48xf16>");
    assert_eq!(verify(&ok), Ok(()));
}

#[test]
fn a_reduction_of_a_broadcast_matmul_value_is_rejected() {
    // The matmul is [1, 48]; the reduced value [64, 48] is the matmul broadcast by `add`: the
    // epilogue, run at the matmul's coordinate, could not compute it.
    let bad = group("tensor<1x32xf16>", "tensor<1x48xf16>");
    let err = verify(&bad).unwrap_err();
    assert!(err.contains("2 anchors in one group"), "{err}");
}

#[test]
fn a_reduction_of_a_matrix_vector_product_is_rejected() {
    let text = "fused @g flops=0 min_bytes=0 {
  buffer @a = %a : tensor<4x64x32xf16> input
  buffer @x = %x : tensor<32xf16> input
  buffer @s = %s : tensor<4xf16> output
  group @g_k0_matmul matmul {
    %a = load @a
    %x = load @x
    %c = matmul %a, %x : tensor<4x64xf16>
    %s = reduce_sum %c {axes = [1]} : tensor<4xf16>
    store %s -> @s
  }
  return @s
}
";
    let err = verify(text).unwrap_err();
    assert!(err.contains("vector operand"), "{err}");
}

//! Each kernel's own work (`group_work`): the flops of its ops and the bytes of the buffers it
//! loads and stores, each once; the kernels' flops add up to the graph's.

use irc_fused::{SourceInfo, Work, group_work, plan_graph};

fn plan(text: &str) -> irc_fused::Module {
    let m = irc_frontend::parse_module(text).expect("parses");
    let src = SourceInfo { name: "t.ir", text };
    plan_graph(&m.graphs[0], src, &[]).0
}

#[test]
fn a_gemm_with_its_epilogue_is_one_kernel_of_the_whole_work() {
    let m = plan(
        "graph @g(%a: tensor<64x32xf16>, %b: tensor<32x16xf16>, %bias: tensor<16xf16>) -> tensor<64x16xf16> {
  %c = matmul %a, %b
  %d = add %c, %bias
  %r = relu %d
  return %r
}",
    );
    let work = group_work(&m);
    assert_eq!(work.len(), 1, "{m:?}");
    assert_eq!(
        work[0],
        Work {
            flops: 2 * 64 * 16 * 32 + 64 * 16 + 64 * 16,
            bytes: 2 * (64 * 32 + 32 * 16 + 16 + 64 * 16),
        }
    );
    assert_eq!(work[0].flops, m.flops);
    assert_eq!(work[0].bytes, m.min_bytes);
}

#[test]
fn kernels_that_pass_a_temporary_count_it_on_both_sides() {
    // A row reduction feeding a matmul: the normalized rows are written by one kernel and
    // read by the next, so the kernels' bytes exceed the graph's minimum by twice that buffer.
    let m = plan(
        "graph @g(%x: tensor<64x128xf32>, %w: tensor<128x32xf32>) -> tensor<64x32xf32> {
  %s = softmax %x {axis = -1}
  %y = matmul %s, %w
  return %y
}",
    );
    let work = group_work(&m);
    let flops: u64 = work.iter().map(|w| w.flops).sum();
    let bytes: u64 = work.iter().map(|w| w.bytes).sum();
    assert_eq!(flops, m.flops);
    assert_eq!(work.len(), 2, "{m:?}");
    assert_eq!(bytes, m.min_bytes + 2 * 64 * 128 * 4);
}

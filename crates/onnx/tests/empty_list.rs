//! An empty list of integers (an INT64 tensor of shape [0]) is a known value where a shape or
//! axes are read, and an error anywhere else.

mod common;
use common::{FLOAT, INT64, f32s, model, node, tensor_attr, value};
use irc_onnx::proto::TensorProto;

fn empty_i64() -> TensorProto {
    TensorProto {
        dims: vec![0],
        data_type: INT64,
        ..Default::default()
    }
}

#[test]
fn constant_of_shape_of_an_empty_list_is_a_scalar() {
    // y = x + ConstantOfShape([]) (value 2.5): the fill is a scalar, broadcast over x.
    let fill = TensorProto {
        dims: vec![1],
        data_type: FLOAT,
        float_data: vec![2.5],
        ..Default::default()
    };
    let m = model(
        vec![
            node(
                "Constant",
                &[],
                &["s"],
                vec![tensor_attr("value", empty_i64())],
            ),
            node(
                "ConstantOfShape",
                &["s"],
                &["c"],
                vec![tensor_attr("value", fill)],
            ),
            node("Add", &["x", "c"], &["y"], vec![]),
        ],
        vec![value("x", FLOAT, &[3])],
        vec![value("y", FLOAT, &[3])],
    );
    let y = common::run(&m, vec![f32s(&[3], vec![1.0, 2.0, 3.0])]).unwrap();
    assert_eq!(y, vec![3.5, 4.5, 5.5]);
}

#[test]
fn an_empty_list_computed_with_is_an_error() {
    // Cast of the empty list would need a zero-sized tensor in the graph.
    let m = model(
        vec![
            node(
                "Constant",
                &[],
                &["s"],
                vec![tensor_attr("value", empty_i64())],
            ),
            node(
                "Cast",
                &["s"],
                &["f"],
                vec![common::int_attr("to", FLOAT as i64)],
            ),
            node("Add", &["x", "f"], &["y"], vec![]),
        ],
        vec![value("x", FLOAT, &[3])],
        vec![value("y", FLOAT, &[3])],
    );
    let e = common::run(&m, vec![f32s(&[3], vec![1.0, 2.0, 3.0])]).unwrap_err();
    assert!(e.contains("can only be a shape"), "{e}");
    assert!(e.contains("node #1"), "{e}");
}

//! zinc's reference dequantizers against the `gguf` Python package's, on the random blocks
//! in tests/fixtures/reference/quant_blocks.json (made by scripts/reference/quant_blocks.py).

use zinc_formats::{dequant::dequantize_row, GgmlType};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn dequantization_matches_gguf_py_for_every_type() {
    let path = zinc_tests::repo_root().join("tests/fixtures/reference/quant_blocks.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let types = v["types"].as_object().unwrap();
    assert!(types.len() >= 15, "fixture lists {} types", types.len());
    for (name, t) in types {
        let ty = GgmlType::from_id(t["id"].as_u64().unwrap() as u32).unwrap();
        assert_eq!(ty.name(), name.as_str());
        let bytes = hex(t["hex"].as_str().unwrap());
        let want: Vec<f32> = t["values"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
        let mut got = vec![0f32; want.len()];
        assert!(dequantize_row(ty, &bytes, &mut got), "{name}: dequantize refused the row");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-6 * (1.0 + w.abs()), "{name} element {i}: zinc {g}, gguf-py {w}");
        }
    }
}

//! The centre column of rule 30 grown from a lone live cell, against the published sequence.

use tlpx_rule30::{centre_column, centre_column_of, Variant};

/// OEIS A051023, "Middle column of rule-30 1-D cellular automaton, from a lone 1 cell",
/// a(0)..a(101) as published in the sequence's data section (https://oeis.org/A051023); the
/// same terms as gateware/tlpx_gateware/cores/rule30/test_rule30_core.py.
const A051023: [u8; 102] = [
    1, 1, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0, 0, 1, 1, 1, 0, 1, 0, 1, 1, //
    1, 0, 0, 1, 1, 1, 0, 1, 0, 1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0, 1, 1, 0, 1, 0, //
    1, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 1, 0, 1, 1, 1, 0, 0, 0, 0, //
    0, 1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 1,
];

#[test]
fn centre_column_of_rule_30_is_oeis_a051023() {
    assert_eq!(centre_column(A051023.len()).expect("few enough terms"), A051023);
    for variant in Variant::ALL {
        assert_eq!(centre_column_of(30, A051023.len(), variant).expect("valid"), A051023, "{variant}");
        // Rule 86, the mirror image of rule 30, has the same centre column (OEIS comment).
        assert_eq!(centre_column_of(86, A051023.len(), variant).expect("valid"), A051023, "{variant} rule 86");
    }
}

#[test]
fn centre_column_is_the_same_on_the_widest_ring() {
    // 512 terms use the whole 1023-cell ring; every variant agrees with the char reference and
    // the published prefix is unchanged.
    let golden = centre_column_of(30, 512, Variant::SwChar).expect("valid");
    assert_eq!(golden[..A051023.len()], A051023);
    for variant in [Variant::SwBit, Variant::SwFast] {
        assert_eq!(centre_column_of(30, 512, variant).expect("valid"), golden, "{variant}");
    }
}

//! `parse_address`: the forms users type (`lspci -D` and plain `lspci` output), and the
//! mistakes they make, each rejected with a message naming the string and the accepted
//! forms.

use tlpx_device::pci::parse_address;
use tlpx_device::DeviceError;

#[test]
fn pci_address_accepted_forms() {
    assert_eq!(parse_address("0000:03:00.0").ok(), Some((0, 3, 0, 0)));
    assert_eq!(parse_address("03:00.0").ok(), Some((0, 3, 0, 0)));
    assert_eq!(parse_address("ffff:ff:1f.7").ok(), Some((0xffff, 0xff, 0x1f, 7)));
    assert_eq!(parse_address("00AB:0A:1F.3").ok(), Some((0xab, 0x0a, 0x1f, 3)), "upper-case hex");
    assert_eq!(parse_address("1:2:3.4").ok(), Some((1, 2, 3, 4)), "short fields");
}

#[test]
fn pci_address_rejected_forms_name_the_string_and_the_accepted_forms() {
    for bad in [
        "",
        "03:00",
        "03.00.0",
        "0000:03:00:0",
        "0000:0000:03:00.0",
        "03:00.8",
        "03:20.0",
        "103:00.0",
        "10000:03:00.0",
        "0x03:00.0",
        "03:00.0 ",
        " 03:00.0",
        "03:00.",
        ":00.0",
        "0000::00.0",
        "gg:00.0",
        "03:00.00",
        "03:-1.0",
        "+3:00.0",
        "03:00.0.1",
    ] {
        match parse_address(bad) {
            Err(DeviceError::InvalidArgument(msg)) => {
                assert!(msg.contains(&format!("{bad:?}")), "message does not quote {bad:?}: {msg}");
                assert!(msg.contains("0000:03:00.0") && msg.contains("03:00.0"), "{msg}");
            }
            other => panic!("{bad:?} should be rejected, got {other:?}"),
        }
    }
}

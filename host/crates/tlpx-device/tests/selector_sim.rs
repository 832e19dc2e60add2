//! `tlpx_device::selector` against the real tlpx-sim: a `sim:PATH` selector opens the card
//! behind it, locates the same PCI function without keeping a connection, and the listing
//! names the simulated card by that selector.

use tlpx_device::card::Card;
use tlpx_device::selector::{self, ListSource, Selector};
use tlpx_testkit::SimProcess;

#[test]
fn a_sim_selector_opens_locates_and_lists_the_same_card() {
    let sim = SimProcess::start(&[]);
    let selector = Selector::parse(&sim.selector()).expect("a sim selector");

    let opened = selector.open().expect("open the simulated card");
    let summary = opened.sim.as_ref().expect("the simulator's side");
    assert_eq!(summary.socket, sim.socket().display().to_string());
    assert!(selector::is_tlpx_card(&opened.pci), "{:04x}:{:04x}", opened.pci.vendor_id, opened.pci.device_id);
    let address = opened.pci.address();
    let card = Card::open(opened.device).expect("a tlpx card behind the selector");
    assert!(!card.identity().features.is_empty());

    let located = selector.locate().expect("locate");
    assert_eq!((located.function.address(), located.location.as_str()), (address.clone(), sim.selector().as_str()));
    assert_eq!(located.sim.as_ref().map(|(socket, _)| socket.clone()), Some(sim.socket()));

    let list = selector::list_devices(&selector);
    let cards: Vec<_> = list.functions.iter().filter(|l| l.source == ListSource::Sim).collect();
    assert_eq!(cards.len(), 1, "one simulated function: {:?}", list.notes);
    assert!(cards[0].is_tlpx_card() && cards[0].driver.is_none());
    assert_eq!((cards[0].selector.as_str(), cards[0].function.address()), (sim.selector().as_str(), address));
}

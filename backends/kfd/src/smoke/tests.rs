//! The real driver code against the emulated device: lifecycle, ring wrap-around and
//! back-pressure, timeouts, slow retirement, memory faults, doorbell values.

use super::*;
use zinc_amd_sys::fake::FakeNode;

fn node(extra: &str) -> Arc<dyn Os> {
    let text = format!(
        "[kfd]\n[[gpus]]\nname = \"Emulated\"\ngpu_id = 7\ngfx_target_version = 110000\ndrm_render_minor = 128\nmemory_bytes = 1048576\n{extra}"
    );
    Arc::new(FakeNode::from_toml(&text, "test").unwrap())
}

struct Rig {
    dev: KfdDevice,
    page: Buffer,
    events: Buffer,
    ev: u32,
    slot: u32,
    fault: u32,
}

fn rig(extra: &str) -> Rig {
    let dev = KfdDevice::open(node(extra)).unwrap();
    let page = dev.alloc(4096, HOST_VISIBLE).unwrap();
    let events = dev.alloc(4096, HOST_VISIBLE).unwrap();
    let (ev, slot) = dev.create_event(EVENT_SIGNAL, Some(&events)).unwrap();
    let (fault, _) = dev.create_event(EVENT_MEMORY, None).unwrap();
    Rig { dev, page, events, ev, slot, fault }
}

impl Rig {
    fn signal(&self, i: u64, value: i64) -> Signal {
        let s = Signal { addr: self.page.va + 64 * i };
        s.init(value, self.events.va + self.slot as u64 * 8, self.ev);
        s
    }
    fn wait(&self, s: &Signal, timeout: Duration) -> DriverResult<Duration> {
        wait_signal(&self.dev, s, 0, self.ev, &[self.fault], Duration::from_micros(50), timeout)
    }
}

#[test]
fn the_smoke_test_passes_on_the_emulated_device() {
    let report = smoke(node("")).unwrap();
    assert!(report.iter().any(|l| l.starts_with("barrier-AND") && l.contains("signal 1 -> 0")), "{report:#?}");
    assert!(report.iter().any(|l| l.contains("wrote 0x5a17c0de")), "{report:#?}");
    assert!(report.iter().any(|l| l.starts_with("code object: gfx1100 zinc_write_value")), "{report:#?}");
}

#[test]
fn a_target_without_a_bundled_code_object_skips_only_the_kernel_step() {
    let text = "[kfd]\n[[gpus]]\ngpu_id = 7\ngfx_target_version = 90010\ndrm_render_minor = 128\n";
    let report = smoke(Arc::new(FakeNode::from_toml(text, "test").unwrap())).unwrap();
    assert!(report.iter().any(|l| l.starts_with("barrier-AND")), "{report:#?}");
    assert!(report.iter().any(|l| l.contains("no code object for gfx90a")), "{report:#?}");
}

#[test]
fn the_gfx12_code_object_is_the_one_loaded_on_a_gfx12_node() {
    let text = "[kfd]\n[[gpus]]\ngpu_id = 7\ngfx_target_version = 120001\ndrm_render_minor = 128\n";
    let report = smoke(Arc::new(FakeNode::from_toml(text, "test").unwrap())).unwrap();
    assert!(report.iter().any(|l| l.starts_with("code object: gfx1201")), "{report:#?}");
    assert!(report.iter().any(|l| l.contains("wrote 0x5a17c0de")), "{report:#?}");
}

#[test]
fn a_four_packet_ring_wraps_and_applies_back_pressure() {
    let r = rig("[emulator]\nretire_delay_ms = 2\n");
    let mut q = AqlQueue::create(&r.dev, 4).unwrap();
    let sig = r.signal(0, 10);
    for i in 0..10 {
        // Writing the fifth packet must wait for the first to retire (ring of four).
        let idx = q.write_packet(&barrier_and([0; 5], sig.addr), Duration::from_secs(5)).unwrap();
        assert_eq!(idx, i);
        q.ring();
        assert_eq!(q.last_doorbell, i as i64, "the doorbell carries the last packet's index");
    }
    r.wait(&sig, Duration::from_secs(5)).unwrap();
    assert_eq!(sig.value(), 0, "all ten packets retired, each decrementing the signal once");
    q.destroy(&r.dev);
}

#[test]
fn a_packet_that_never_retires_is_a_timeout_error_not_a_hang() {
    let r = rig("[emulator]\nnever_retire = true\n");
    let mut q = AqlQueue::create(&r.dev, 4).unwrap();
    let sig = r.signal(0, 1);
    q.write_packet(&barrier_and([0; 5], sig.addr), Duration::from_secs(1)).unwrap();
    q.ring();
    let t = std::time::Instant::now();
    let err = r.wait(&sig, Duration::from_millis(300)).unwrap_err();
    assert!(err.contains("never retired"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(2));
    // The ring fills and then refuses, also with a bounded wait.
    for _ in 0..3 {
        q.write_packet(&barrier_and([0; 5], sig.addr), Duration::from_millis(100)).unwrap();
    }
    let full = q.write_packet(&barrier_and([0; 5], sig.addr), Duration::from_millis(100)).unwrap_err();
    assert!(full.contains("stayed full"), "{full}");
    q.destroy(&r.dev);
}

#[test]
fn slow_retirement_is_waited_for_through_events() {
    let r = rig("[emulator]\nretire_delay_ms = 50\n");
    let mut q = AqlQueue::create(&r.dev, 8).unwrap();
    let sig = r.signal(0, 1);
    q.write_packet(&barrier_and([0; 5], sig.addr), Duration::from_secs(1)).unwrap();
    q.ring();
    let waited = r.wait(&sig, Duration::from_secs(5)).unwrap();
    assert!(waited >= Duration::from_millis(40), "{waited:?}");
    q.destroy(&r.dev);
}

#[test]
fn a_memory_fault_is_reported_as_an_error() {
    let r = rig("[emulator]\nmemory_fault_at_packet = 0\n");
    let mut q = AqlQueue::create(&r.dev, 4).unwrap();
    let sig = r.signal(0, 1);
    q.write_packet(&barrier_and([0; 5], sig.addr), Duration::from_secs(1)).unwrap();
    q.ring();
    let err = r.wait(&sig, Duration::from_secs(5)).unwrap_err();
    assert!(err.contains("fault"), "{err}");
    q.destroy(&r.dev);
}

#[test]
fn a_barrier_waits_for_its_dependency_signal() {
    let r = rig("");
    let mut q = AqlQueue::create(&r.dev, 8).unwrap();
    let dep = r.signal(1, 1);
    let done = r.signal(0, 1);
    q.write_packet(&barrier_and([dep.addr, 0, 0, 0, 0], done.addr), Duration::from_secs(1)).unwrap();
    q.ring();
    assert!(r.wait(&done, Duration::from_millis(100)).is_err(), "must not retire before its dependency");
    // Satisfy the dependency from the host; the barrier then retires.
    dep.init(0, 0, 0);
    r.wait(&done, Duration::from_secs(5)).unwrap();
    q.destroy(&r.dev);
}

#[test]
fn a_header_left_invalid_stalls_the_queue() {
    let r = rig("");
    let mut q = AqlQueue::create(&r.dev, 4).unwrap();
    let sig = r.signal(0, 1);
    let mut pkt = barrier_and([0; 5], sig.addr);
    pkt[0..2].copy_from_slice(&zinc_amd_sys::aql::packet_type::INVALID.to_le_bytes());
    q.write_packet(&pkt, Duration::from_secs(1)).unwrap();
    q.ring();
    assert!(r.wait(&sig, Duration::from_millis(100)).is_err(), "an INVALID header must stall, not run");
    q.destroy(&r.dev);
}

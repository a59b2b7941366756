//! The real user-queue driver against the emulated node: creation and teardown, the packet
//! landing, doorbell and pointer values, ring wrap-around with back-pressure, a queue that
//! never runs, slots running out, and nodes that must fall back.

use super::*;
use crate::SLOTS_MISSING;
use zinc_amd_sys::fake::FakeNode;

fn node(drm: &str, extra: &str) -> Arc<FakeNode> {
    let text = format!(
        "[kfd]\n[[gpus]]\ngpu_id = 1\ngfx_target_version = 110000\ndrm_render_minor = 128\n[drm]\n{drm}\n{extra}"
    );
    Arc::new(FakeNode::from_toml(&text, "test").unwrap())
}

const READY: &str = "userq_ip_mask = 2\nuserq_compute_slots = 2\nuq_fw_areas = true";

fn open(n: &Arc<FakeNode>) -> UserqDevice {
    UserqDevice::open(n.clone(), "/dev/dri/renderD128").unwrap()
}

#[test]
fn the_smoke_test_passes_and_frees_everything() {
    let n = node(READY, "");
    let report = smoke(n.clone()).unwrap();
    assert!(report.iter().any(|l| l.starts_with("queue: id 1")), "{report:#?}");
    let write = report.iter().find(|l| l.starts_with("WRITE_DATA")).unwrap();
    assert!(write.contains("0x0 -> 0x5eed0fc0ffee000"), "{write}");
    assert!(write.contains("doorbell 6, read pointer 6 of 6 dwords"), "{write}");
    assert_eq!(n.user_queue_count(), 0);
    assert_eq!(n.gem_buffer_count(), 0, "every GEM buffer is closed");
}

#[test]
fn a_ring_of_256_bytes_wraps_and_applies_back_pressure() {
    let n = node(READY, "[emulator]\nretire_delay_ms = 1\n");
    let dev = open(&n);
    let fence = dev.alloc(4096, domain::GTT, Access::Shared).unwrap();
    let mut q = UserQueue::create(&dev, 256).unwrap();
    // 64 dwords of ring, 6 per packet: 40 packets go round the ring almost four times.
    for i in 1..=40u64 {
        let w = q.submit(&pm4::write_data_u64(fence.va, i), Duration::from_secs(5)).unwrap();
        assert_eq!(w, 6 * i);
        assert_eq!(q.doorbell_value(), w, "the doorbell carries the write pointer");
        assert!(w - q.read_pointer() <= 64, "never more than a ring's worth outstanding");
    }
    wait_value(fence.cpu, 40, Duration::from_secs(5)).unwrap();
    assert_eq!(q.read_pointer(), 240);
    q.free(&dev).unwrap();
    dev.free(fence);
    assert_eq!((n.user_queue_count(), n.gem_buffer_count()), (0, 0));
}

#[test]
fn a_queue_that_never_runs_is_a_timeout_error_not_a_hang() {
    let n = node(READY, "[emulator]\nnever_retire = true\n");
    let t = std::time::Instant::now();
    let err = smoke(n.clone()).unwrap_err();
    assert!(err.contains("never landed") && err.contains("read pointer 0, write pointer 6"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(10));
    assert_eq!((n.user_queue_count(), n.gem_buffer_count()), (0, 0), "freed after the failure too");
}

#[test]
fn a_full_ring_that_never_drains_is_refused_within_the_timeout() {
    let n = node(READY, "[emulator]\nnever_retire = true\n");
    let dev = open(&n);
    let mut q = UserQueue::create(&dev, 256).unwrap();
    for _ in 0..10 {
        q.submit(&pm4::write_data_u64(0x20_0000, 1), Duration::from_millis(50)).unwrap();
    }
    let err = q.submit(&pm4::write_data_u64(0x20_0000, 1), Duration::from_millis(100)).unwrap_err();
    assert!(err.contains("stayed full"), "{err}");
    q.free(&dev).unwrap();
}

#[test]
fn running_out_of_slots_says_so_and_leaks_nothing() {
    let n = node("userq_ip_mask = 2\nuserq_compute_slots = 1\nuq_fw_areas = true", "");
    let dev = open(&n);
    let first = UserQueue::create(&dev, 4096).unwrap();
    let buffers = n.gem_buffer_count();
    let err = UserQueue::create(&dev, 4096).map(|q| q.id).unwrap_err();
    assert!(err.contains("slot"), "{err}");
    assert_eq!(n.gem_buffer_count(), buffers, "the failed queue's buffers are freed");
    first.free(&dev).unwrap();
    assert_eq!(n.gem_buffer_count(), 0);
}

#[test]
fn a_write_to_an_unmapped_address_faults_the_queue_and_times_out() {
    let n = node(READY, "");
    let dev = open(&n);
    let fence = dev.alloc(4096, domain::GTT, Access::Shared).unwrap();
    let mut q = UserQueue::create(&dev, 4096).unwrap();
    q.submit(&pm4::write_data_u64(0x7000_0000_0000, 1), Duration::from_secs(1)).unwrap();
    q.submit(&pm4::write_data_u64(fence.va, 2), Duration::from_secs(1)).unwrap();
    let err = wait_value(fence.cpu, 2, Duration::from_millis(300)).unwrap_err();
    assert!(err.contains("never landed"), "{err}");
    assert_eq!(q.read_pointer(), 0, "a faulted queue consumes nothing more");
    let why = n.user_queue_fault(q.id).unwrap_or_default();
    assert!(why.contains("page fault") && why.contains("0x700000000000"), "{why:?}");
    q.free(&dev).unwrap();
    dev.free(fence);
}

#[test]
fn nodes_without_compute_user_queues_fail_with_the_fallback_reason() {
    for drm in [
        "userq_ip_mask = 2\nuserq_compute_slots = 0\nuq_fw_areas = true",
        &format!("info_errno = {}", libc::EOPNOTSUPP),
        &format!("info_errno = {}", libc::EINVAL),
    ] {
        let err = smoke(node(drm, "")).unwrap_err();
        assert!(err.starts_with(SLOTS_MISSING), "{drm}: {err}");
    }
}

#[test]
fn bad_ring_sizes_are_refused_before_any_allocation() {
    let n = node(READY, "");
    let dev = open(&n);
    for size in [0, 128, 1000] {
        let err = UserQueue::create(&dev, size).map(|q| q.id).unwrap_err();
        assert!(err.contains("power of two"), "{err}");
    }
    assert_eq!(n.gem_buffer_count(), 0);
}

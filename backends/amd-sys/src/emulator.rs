//! An emulated AQL packet processor: one thread per queue, woken by doorbell writes (it
//! watches the doorbell word), following the AQL rules the hardware follows: packets are
//! consumed in order; a packet whose header is still INVALID stalls the queue (the producer
//! writes the header last); a barrier-AND waits for its dependency signals to reach zero; a
//! kernel dispatch runs the host function registered for its kernel object; a completion
//! signal is decremented and, with a mailbox, the event id is written and the event raised;
//! consumed packets get an INVALID header and the read index advances.

use crate::aql::{self, packet_type};
use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, AtomicI64, AtomicU16, AtomicU64, Ordering::*},
        Arc, Condvar, Mutex,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

/// A host function standing in for a GPU kernel: (kernarg address, grid size x).
pub type HostKernel = Arc<dyn Fn(u64, u32) + Send + Sync>;

/// How the emulated device misbehaves, for fault tests.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultModes {
    /// Never consume any packet (the driver must time out, not hang).
    #[serde(default)]
    pub never_retire: bool,
    /// Delay before retiring each packet.
    #[serde(default)]
    pub retire_delay_ms: u64,
    /// Raise a memory fault instead of running the packet with this index.
    pub memory_fault_at_packet: Option<u64>,
}

/// Events raised by the device: id → (signalled, event type).
#[derive(Default)]
pub struct EventTable {
    /// id → (signalled, type).
    pub events: Mutex<HashMap<u32, (bool, u32)>>,
    /// Woken on every raise.
    pub raised: Condvar,
}

impl EventTable {
    /// Raises an event.
    pub fn raise(&self, id: u32) {
        let mut e = self.events.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ev) = e.get_mut(&id) {
            ev.0 = true;
        }
        self.raised.notify_all();
    }
    /// Raises every event of a type (memory faults, hardware exceptions).
    pub fn raise_type(&self, ty: u32) {
        let mut e = self.events.lock().unwrap_or_else(|e| e.into_inner());
        for ev in e.values_mut().filter(|ev| ev.1 == ty) {
            ev.0 = true;
        }
        self.raised.notify_all();
    }
}

/// What the packet processor needs to know about one queue.
pub struct QueueSpec {
    pub ring: usize,
    pub ring_bytes: usize,
    /// Address of the u64 read index (`read_dispatch_id`).
    pub read_ptr: usize,
    /// Address of the doorbell word.
    pub doorbell: usize,
}

/// A device thread that runs until its owner drops it: the stop flag is raised and the
/// thread joined, so nothing the thread touches is freed under it. Both emulated queue kinds
/// (AQL here, PM4 user queues in `userq_emulator`) run on one.
pub struct DeviceThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl DeviceThread {
    /// Spawns `body` with the stop flag it must poll.
    pub fn spawn(name: &str, body: impl FnOnce(Arc<AtomicBool>) + Send + 'static) -> DeviceThread {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(s))
            .expect("spawn an emulated device thread");
        DeviceThread { stop, thread: Some(thread) }
    }
}

impl Drop for DeviceThread {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A running packet processor.
pub struct Processor {
    _thread: DeviceThread,
    /// Packets retired.
    pub retired: Arc<AtomicU64>,
}

/// Memory fault event type (KFD_IOC_EVENT_MEMORY).
pub const EVENT_MEMORY: u32 = 8;

impl Processor {
    /// Starts the processor thread for a queue.
    pub fn start(
        q: QueueSpec,
        kernels: Arc<Mutex<HashMap<u64, HostKernel>>>,
        events: Arc<EventTable>,
        faults: FaultModes,
    ) -> Processor {
        let retired = Arc::new(AtomicU64::new(0));
        let r = retired.clone();
        let thread = DeviceThread::spawn("zinc-emulated-cp", move |s| run(q, kernels, events, faults, s, r));
        Processor { _thread: thread, retired }
    }
}

// SAFETY (whole module): the addresses come from the driver under test, which allocated them
// as host memory (the emulated device's GPU address equals the host address); the emulator
// only touches them while the queue exists, and the driver destroys the queue (stopping this
// thread) before freeing that memory.
unsafe fn u64_at(addr: usize) -> &'static AtomicU64 {
    &*(addr as *const AtomicU64)
}
unsafe fn i64_at(addr: usize) -> &'static AtomicI64 {
    &*(addr as *const AtomicI64)
}

fn run(
    q: QueueSpec,
    kernels: Arc<Mutex<HashMap<u64, HostKernel>>>,
    events: Arc<EventTable>,
    faults: FaultModes,
    stop: Arc<AtomicBool>,
    retired: Arc<AtomicU64>,
) {
    let slots = (q.ring_bytes / aql::PACKET_BYTES) as u64;
    let mut next: u64 = 0;
    let mut idle_since = Instant::now();
    let doorbell = unsafe { i64_at(q.doorbell) };
    while !stop.load(Acquire) {
        // The doorbell holds the index of the last packet written (-1 before any).
        let rung = doorbell.load(Acquire);
        if rung < next as i64 || faults.never_retire {
            let idle = idle_since.elapsed();
            std::thread::sleep(if idle < Duration::from_millis(2) {
                Duration::from_micros(20)
            } else {
                Duration::from_micros(200)
            });
            continue;
        }
        idle_since = Instant::now();
        let pkt = q.ring + ((next % slots) as usize) * aql::PACKET_BYTES;
        let header = unsafe { &*(pkt as *const AtomicU16) };
        let h = header.load(Acquire);
        if h & 0xff == packet_type::INVALID || h == 0 {
            // Header not written yet: the packet is not ready. Stall, as the hardware does.
            std::thread::sleep(Duration::from_micros(20));
            continue;
        }
        if faults.memory_fault_at_packet == Some(next) {
            events.raise_type(EVENT_MEMORY);
            // A faulted queue stops processing.
            while !stop.load(Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
            return;
        }
        if faults.retire_delay_ms > 0 {
            std::thread::sleep(Duration::from_millis(faults.retire_delay_ms));
        }
        let completion = match h & 0xff {
            packet_type::BARRIER_AND => {
                for i in 0..5 {
                    let dep = unsafe { u64_at(pkt + 8 + 8 * i) }.load(Acquire);
                    if dep != 0 {
                        while unsafe { i64_at(dep as usize + 8) }.load(Acquire) != 0 && !stop.load(Acquire) {
                            std::thread::sleep(Duration::from_micros(20));
                        }
                    }
                }
                unsafe { u64_at(pkt + 56) }.load(Acquire)
            }
            packet_type::KERNEL_DISPATCH => {
                let object = unsafe { u64_at(pkt + 32) }.load(Acquire);
                let kernarg = unsafe { u64_at(pkt + 40) }.load(Acquire);
                let grid = unsafe { &*((pkt + 12) as *const std::sync::atomic::AtomicU32) }.load(Acquire);
                let k = kernels.lock().unwrap_or_else(|e| e.into_inner()).get(&object).cloned();
                match k {
                    Some(f) => f(kernarg, grid),
                    None => {
                        // An unknown kernel object faults, as a bad code address would.
                        events.raise_type(EVENT_MEMORY);
                        return;
                    }
                }
                unsafe { u64_at(pkt + 56) }.load(Acquire)
            }
            _ => 0,
        };
        if completion != 0 {
            let sig = completion as usize;
            unsafe { i64_at(sig + 8) }.fetch_sub(1, AcqRel);
            let mailbox = unsafe { u64_at(sig + 16) }.load(Acquire);
            let event_id = unsafe { &*((sig + 24) as *const std::sync::atomic::AtomicU32) }.load(Acquire);
            if mailbox != 0 {
                unsafe { u64_at(mailbox as usize) }.store(event_id as u64, Release);
                events.raise(event_id);
            }
        }
        header.store(packet_type::INVALID, Release);
        next += 1;
        unsafe { u64_at(q.read_ptr) }.store(next, Release);
        retired.fetch_add(1, Release);
    }
}

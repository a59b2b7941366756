//! The KFD bring-up: device, memory with CPU address = GPU address, an AQL queue with its
//! doorbell, signals and events, submission, and retirement with a bounded poll followed by
//! a sleep in WAIT_EVENTS. Faults and timeouts are errors, never hangs. Everything goes
//! through [`Os`], so the same code runs against `/dev/kfd` and against the emulated node.

use crate::queue_sizes::QueueSizes;
use std::{
    sync::{
        atomic::{fence, AtomicI64, AtomicU16, AtomicU64, Ordering::*},
        Arc,
    },
    time::{Duration, Instant},
};
use zinc_amd_sys::{
    aql::{self, queue_offsets, AmdSignal, BarrierAndPacket, KernelDispatchPacket, SIGNAL_KIND_USER},
    ioctl::{alloc_flags, *},
    topology::{gpu_nodes, parse_properties, GpuNode, TOPOLOGY_NODES},
    Os,
};

/// A driver error with the step that failed.
pub type DriverResult<T> = Result<T, String>;

/// KFD event types.
pub const EVENT_SIGNAL: u32 = 0;
/// Hardware exception events.
pub const EVENT_HW_EXCEPTION: u32 = 3;
/// Memory fault events.
pub const EVENT_MEMORY: u32 = 8;

/// Host-visible, coherent, uncached GTT memory: what signals, rings and kernargs live in.
pub const HOST_VISIBLE: u32 =
    alloc_flags::GTT | alloc_flags::COHERENT | alloc_flags::UNCACHED | alloc_flags::WRITABLE | alloc_flags::EXECUTABLE;

/// An open KFD device.
pub struct KfdDevice {
    os: Arc<dyn Os>,
    kfd: i32,
    drm: i32,
    /// The GPU node in use.
    pub node: GpuNode,
    /// KFD interface version.
    pub version: (u32, u32),
    /// Buffer sizes CREATE_QUEUE checks (from topology, or computed as the kernel does).
    pub queue_sizes: QueueSizes,
}

/// Device memory mapped at the same address for CPU and GPU.
#[derive(Debug, Clone, Copy)]
pub struct Buffer {
    /// CPU address = GPU address.
    pub va: u64,
    /// Bytes.
    pub size: u64,
    handle: u64,
}

fn io(step: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{step}: {e}")
}

impl KfdDevice {
    /// Opens `/dev/kfd` and the first GPU node's render node, acquires the VM and enables
    /// the runtime.
    pub fn open(os: Arc<dyn Os>) -> DriverResult<KfdDevice> {
        let node =
            gpu_nodes(&*os).map_err(io("reading KFD topology"))?.into_iter().next().ok_or("KFD lists no GPU nodes")?;
        let props = os
            .read_to_string(&std::path::Path::new(TOPOLOGY_NODES).join(node.node.to_string()).join("properties"))
            .map(|t| parse_properties(&t))
            .unwrap_or_default();
        let queue_sizes = QueueSizes::from_properties(&props);
        let kfd = os.open_rw(std::path::Path::new("/dev/kfd")).map_err(io("opening /dev/kfd"))?;
        let mut v = KfdGetVersion::default();
        os.ioctl(kfd, KFD_IOC_GET_VERSION, as_bytes_mut(&mut v)).map_err(io("GET_VERSION"))?;
        let render = format!("/dev/dri/renderD{}", node.drm_render_minor);
        let drm = os.open_rw(std::path::Path::new(&render)).map_err(|e| format!("opening {render}: {e}"))?;
        let mut vm = KfdAcquireVm { drm_fd: drm as u32, gpu_id: node.gpu_id };
        os.ioctl(kfd, KFD_IOC_ACQUIRE_VM, as_bytes_mut(&mut vm)).map_err(io("ACQUIRE_VM"))?;
        if v.minor >= 14 {
            let mut re = KfdRuntimeEnable::default();
            os.ioctl(kfd, KFD_IOC_RUNTIME_ENABLE, as_bytes_mut(&mut re)).map_err(io("RUNTIME_ENABLE"))?;
        }
        Ok(KfdDevice { os, kfd, drm, node, version: (v.major, v.minor), queue_sizes })
    }

    /// The OS this device talks through.
    pub fn os(&self) -> &Arc<dyn Os> {
        &self.os
    }

    /// Allocates `size` bytes (rounded up to pages): reserve a VA range, allocate there, map
    /// the render node over it (CPU VA = GPU VA), map to the GPU and check it took.
    pub fn alloc(&self, size: u64, flags: u32) -> DriverResult<Buffer> {
        let size = size.div_ceil(4096) * 4096;
        let va = self
            .os
            .mmap(0, size as usize, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_NORESERVE, None, 0)
            .map_err(io("reserving VA"))?;
        let mut a =
            KfdAllocMemory { va_addr: va as u64, size, handle: 0, mmap_offset: 0, gpu_id: self.node.gpu_id, flags };
        if let Err(e) = self.os.ioctl(self.kfd, KFD_IOC_ALLOC_MEMORY_OF_GPU, as_bytes_mut(&mut a)) {
            let _ = self.os.munmap(va, size as usize);
            return Err(format!("ALLOC_MEMORY_OF_GPU of {size} bytes: {e}"));
        }
        let buf = Buffer { va: va as u64, size, handle: a.handle };
        let mapped = self.os.mmap(
            va,
            size as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            Some(self.drm),
            a.mmap_offset,
        );
        if let Err(e) = mapped {
            self.release(buf, false);
            return Err(format!("mapping device memory at {va:#x}: {e}"));
        }
        let (ok, n_success) = self.map_ioctl(KFD_IOC_MAP_MEMORY_TO_GPU, a.handle);
        if ok.is_err() || n_success != 1 {
            self.release(buf, false);
            return Err(format!(
                "MAP_MEMORY_TO_GPU: {}",
                ok.err().map_or_else(|| format!("{n_success} of 1 devices"), |e| e.to_string())
            ));
        }
        Ok(buf)
    }

    /// MAP_MEMORY_TO_GPU or UNMAP_MEMORY_FROM_GPU of one allocation on this node's GPU;
    /// returns the ioctl's result and how many devices it reached.
    fn map_ioctl(&self, request: u64, handle: u64) -> (std::io::Result<()>, u32) {
        let mut ids = [self.node.gpu_id];
        let mut m = KfdMapMemory { handle, device_ids_array_ptr: ids.as_mut_ptr() as u64, n_devices: 1, n_success: 0 };
        let r = self.os.ioctl(self.kfd, request, as_bytes_mut(&mut m));
        (r, m.n_success)
    }

    fn release(&self, b: Buffer, mapped_to_gpu: bool) {
        if mapped_to_gpu {
            let _ = self.map_ioctl(KFD_IOC_UNMAP_MEMORY_FROM_GPU, b.handle);
        }
        let _ = self.os.munmap(b.va as usize, b.size as usize);
        let mut f = KfdFreeMemory { handle: b.handle };
        let _ = self.os.ioctl(self.kfd, KFD_IOC_FREE_MEMORY_OF_GPU, as_bytes_mut(&mut f));
    }

    /// Frees a buffer: unmap from the GPU, unmap from the CPU, free.
    pub fn free(&self, b: Buffer) {
        self.release(b, true);
    }

    /// Creates an event; signal events get a mailbox slot in `page`.
    pub fn create_event(&self, ty: u32, page: Option<&Buffer>) -> DriverResult<(u32, u32)> {
        let mut e = KfdCreateEvent {
            event_page_offset: page.map_or(0, |p| p.handle),
            event_type: ty,
            auto_reset: 1,
            node_id: self.node.node,
            ..Default::default()
        };
        self.os.ioctl(self.kfd, KFD_IOC_CREATE_EVENT, as_bytes_mut(&mut e)).map_err(io("CREATE_EVENT"))?;
        Ok((e.event_id, e.event_slot_index))
    }

    /// Destroys an event.
    pub fn destroy_event(&self, id: u32) {
        let mut e = KfdEventId { event_id: id, pad: 0 };
        let _ = self.os.ioctl(self.kfd, KFD_IOC_DESTROY_EVENT, as_bytes_mut(&mut e));
    }

    /// Sleeps until one of `ids` fires or `timeout` passes; returns the ids that fired.
    pub fn wait_events(&self, ids: &[u32], timeout: Duration) -> DriverResult<Vec<u32>> {
        let mut data: Vec<KfdEventData> =
            ids.iter().map(|&id| KfdEventData { event_id: id, ..Default::default() }).collect();
        let mut w = KfdWaitEvents {
            events_ptr: data.as_mut_ptr() as u64,
            num_events: data.len() as u32,
            wait_for_all: 0,
            timeout: timeout.as_millis().min(u32::MAX as u128) as u32,
            wait_result: 0,
        };
        self.os.ioctl(self.kfd, KFD_IOC_WAIT_EVENTS, as_bytes_mut(&mut w)).map_err(io("WAIT_EVENTS"))?;
        match w.wait_result {
            0 => {
                Ok(data.iter().filter(|d| d.payload[0] != 0 || d.kfd_event_data_ext != 0).map(|d| d.event_id).collect())
            }
            1 => Ok(Vec::new()),
            r => Err(format!("WAIT_EVENTS failed (result {r})")),
        }
    }
}

impl Drop for KfdDevice {
    fn drop(&mut self) {
        self.os.close(self.drm);
        self.os.close(self.kfd);
    }
}

/// A completion signal in host-visible memory.
pub struct Signal {
    /// Address of the 64-byte `amd_signal_t`.
    pub addr: u64,
}

impl Signal {
    fn value_cell(&self) -> &AtomicI64 {
        // SAFETY: `addr` points at a live, 64-byte aligned amd_signal_t in mapped memory.
        unsafe { &*((self.addr + 8) as *const AtomicI64) }
    }
    /// Initialises the signal: user kind, `value`, optional event mailbox.
    pub fn init(&self, value: i64, mailbox: u64, event_id: u32) {
        // SAFETY: as above; no one else touches the signal before it is submitted.
        unsafe {
            let s = self.addr as *mut AmdSignal;
            (*s).kind = SIGNAL_KIND_USER;
            (*s).event_mailbox_ptr = mailbox;
            (*s).event_id = event_id;
        }
        self.value_cell().store(value, Release);
    }
    /// The current value.
    pub fn value(&self) -> i64 {
        self.value_cell().load(Acquire)
    }
}

/// An AQL queue owned by zinc.
pub struct AqlQueue {
    ring: Buffer,
    desc: Buffer,
    eop: Buffer,
    ctx: Buffer,
    /// KFD's queue id.
    pub id: u32,
    /// The doorbell offset KFD returned.
    pub doorbell_offset: u64,
    doorbell: u64,
    doorbell_map: (usize, usize),
    slots: u64,
    next: u64,
    /// The value last written to the doorbell (index of the last packet).
    pub last_doorbell: i64,
}

impl AqlQueue {
    /// Creates a queue of `slots` packets (a power of two).
    pub fn create(dev: &KfdDevice, slots: u64) -> DriverResult<AqlQueue> {
        if !slots.is_power_of_two() || slots < 2 {
            return Err(format!("queue size {slots} is not a power of two ≥ 2"));
        }
        let ring = dev.alloc(slots * aql::PACKET_BYTES as u64, HOST_VISIBLE)?;
        // SAFETY: freshly mapped ring; headers start INVALID so nothing runs by accident.
        for i in 0..slots {
            unsafe { *((ring.va + i * aql::PACKET_BYTES as u64) as *mut u16) = aql::packet_type::INVALID };
        }
        let desc = dev.alloc(4096, HOST_VISIBLE)?;
        let sizes = dev.queue_sizes;
        let eop = dev.alloc(sizes.eop, alloc_flags::VRAM | alloc_flags::WRITABLE)?;
        let ctx = dev.alloc(sizes.ctx_alloc.max(4096), alloc_flags::GTT | alloc_flags::WRITABLE)?;
        let mut q = KfdCreateQueue {
            ring_base_address: ring.va,
            write_pointer_address: desc.va + queue_offsets::WRITE_DISPATCH_ID as u64,
            read_pointer_address: desc.va + queue_offsets::READ_DISPATCH_ID as u64,
            ring_size: (slots * aql::PACKET_BYTES as u64) as u32,
            gpu_id: dev.node.gpu_id,
            queue_type: 2, // COMPUTE_AQL
            queue_percentage: 100,
            queue_priority: 7,
            eop_buffer_address: eop.va,
            eop_buffer_size: sizes.eop,
            ctx_save_restore_address: ctx.va,
            ctx_save_restore_size: sizes.cwsr as u32,
            ctl_stack_size: sizes.ctl_stack as u32,
            ..Default::default()
        };
        if let Err(e) = dev.os.ioctl(dev.kfd, KFD_IOC_CREATE_QUEUE, as_bytes_mut(&mut q)) {
            for b in [ring, desc, eop, ctx] {
                dev.free(b);
            }
            return Err(format!("CREATE_QUEUE: {e}"));
        }
        let base = q.doorbell_offset & !0x1fff;
        let map = dev.os.mmap(0, 0x2000, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, Some(dev.kfd), base);
        let map = match map {
            Ok(m) => m,
            Err(e) => {
                let mut d = KfdDestroyQueue { queue_id: q.queue_id, pad: 0 };
                let _ = dev.os.ioctl(dev.kfd, KFD_IOC_DESTROY_QUEUE, as_bytes_mut(&mut d));
                for b in [ring, desc, eop, ctx] {
                    dev.free(b);
                }
                return Err(format!("mapping the doorbell page: {e}"));
            }
        };
        Ok(AqlQueue {
            ring,
            desc,
            eop,
            ctx,
            id: q.queue_id,
            doorbell_offset: q.doorbell_offset,
            doorbell: map as u64 + (q.doorbell_offset - base),
            doorbell_map: (map, 0x2000),
            slots,
            next: 0,
            last_doorbell: -1,
        })
    }

    fn read_index(&self) -> u64 {
        // SAFETY: the descriptor page is mapped for the queue's lifetime.
        unsafe { &*((self.desc.va + queue_offsets::READ_DISPATCH_ID as u64) as *const AtomicU64) }.load(Acquire)
    }

    /// Writes one packet: the 62-byte body first, the 16-bit header last (release), so the
    /// packet processor never sees a half-written packet. Waits (bounded) while the ring is
    /// full. Returns the packet's index.
    pub fn write_packet(&mut self, bytes: &[u8; 64], timeout: Duration) -> DriverResult<u64> {
        self.write_packet_with(bytes, timeout, || {})
    }

    /// Like [`AqlQueue::write_packet`], running `before` once the slot is free and before the
    /// packet is written (to fill the packet's kernel arguments, which share its lifetime).
    pub fn write_packet_with(
        &mut self,
        bytes: &[u8; 64],
        timeout: Duration,
        before: impl FnOnce(),
    ) -> DriverResult<u64> {
        let start = Instant::now();
        while self.next - self.read_index() >= self.slots {
            if start.elapsed() > timeout {
                return Err(format!(
                    "queue {} stayed full for {timeout:?}: the device is not retiring packets",
                    self.id
                ));
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        before();
        let slot = self.ring.va + (self.next % self.slots) * aql::PACKET_BYTES as u64;
        // SAFETY: the slot is ours (the processor has consumed it: read index > next - slots).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes[2..].as_ptr(), (slot + 2) as *mut u8, 62);
            fence(Release);
            (*(slot as *const AtomicU16)).store(u16::from_le_bytes([bytes[0], bytes[1]]), Release);
        }
        let index = self.next;
        self.next += 1;
        // SAFETY: descriptor page mapped for the queue's lifetime.
        unsafe { &*((self.desc.va + queue_offsets::WRITE_DISPATCH_ID as u64) as *const AtomicU64) }
            .store(self.next, Release);
        Ok(index)
    }

    /// Rings the doorbell with the index of the last packet written.
    pub fn ring(&mut self) {
        fence(SeqCst);
        let v = self.next as i64 - 1;
        // SAFETY: the doorbell page is mapped for the queue's lifetime.
        unsafe { &*(self.doorbell as *const AtomicI64) }.store(v, Release);
        self.last_doorbell = v;
    }

    /// Destroys the queue and frees its memory, in order.
    pub fn destroy(self, dev: &KfdDevice) {
        let mut d = KfdDestroyQueue { queue_id: self.id, pad: 0 };
        let _ = dev.os.ioctl(dev.kfd, KFD_IOC_DESTROY_QUEUE, as_bytes_mut(&mut d));
        let _ = dev.os.munmap(self.doorbell_map.0, self.doorbell_map.1);
        for b in [self.ring, self.desc, self.eop, self.ctx] {
            dev.free(b);
        }
    }
}

/// A barrier-AND packet with no dependencies and a completion signal: the smallest packet
/// that retires without any kernel.
pub fn barrier_and(deps: [u64; 5], completion: u64) -> [u8; 64] {
    let p = BarrierAndPacket {
        header: aql::BARRIER_AND_HEADER,
        dep_signal: deps,
        completion_signal: completion,
        ..Default::default()
    };
    // SAFETY: a #[repr(C)] struct of integers, 64 bytes (checked at compile time).
    unsafe { std::mem::transmute(p) }
}

/// A one-dimensional kernel dispatch.
pub fn dispatch(kernel_object: u64, kernarg: u64, grid: u32, workgroup: u16, completion: u64) -> [u8; 64] {
    let p = KernelDispatchPacket {
        header: aql::DISPATCH_HEADER,
        setup: 1,
        workgroup_size_x: workgroup,
        workgroup_size_y: 1,
        workgroup_size_z: 1,
        grid_size_x: grid,
        grid_size_y: 1,
        grid_size_z: 1,
        kernel_object,
        kernarg_address: kernarg,
        completion_signal: completion,
        ..Default::default()
    };
    // SAFETY: as above.
    unsafe { std::mem::transmute(p) }
}

/// Waits until `sig` reaches `target`: spin for `spin`, then sleep in WAIT_EVENTS on the
/// signal's event and the fault events, up to `timeout` in all. A memory fault or hardware
/// exception is an error; so is the timeout.
pub fn wait_signal(
    dev: &KfdDevice,
    sig: &Signal,
    target: i64,
    signal_event: u32,
    fault_events: &[u32],
    spin: Duration,
    timeout: Duration,
) -> DriverResult<Duration> {
    let start = Instant::now();
    while start.elapsed() < spin {
        if sig.value() <= target {
            return Ok(start.elapsed());
        }
        std::hint::spin_loop();
    }
    let mut ids = vec![signal_event];
    ids.extend_from_slice(fault_events);
    loop {
        if sig.value() <= target {
            return Ok(start.elapsed());
        }
        let left = timeout
            .checked_sub(start.elapsed())
            .ok_or_else(|| format!("signal still {} after {timeout:?}: the packet never retired", sig.value()))?;
        let fired = dev.wait_events(&ids, left.min(Duration::from_millis(100)))?;
        if let Some(f) = fired.iter().find(|id| fault_events.contains(id)) {
            return Err(format!("the device reported a fault (event {f}) while waiting; signal is {}", sig.value()));
        }
    }
}

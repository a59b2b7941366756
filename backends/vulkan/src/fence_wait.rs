//! How the host waits for a step's fence.
//!
//! A blocking `vkWaitForFences` puts the thread to sleep until the driver wakes it, and on
//! the H200 that wake-up was a sizeable part of a decode token
//! (`docs/measurements/vulkan-h200-session15-2026-12-04/`). Polling the fence's status ends the
//! wait within microseconds of the signal, at the price of a busy core; so on GPUs the host
//! sleeps through half the time the same recorded step took last time and polls only the rest
//! (how much of it to sleep through changed nothing measurable there). On a software
//! device (lavapipe) the "GPU" is the host's own threads, and a polling thread would take a
//! core from them: there the wait blocks.

use ash::vk;
use std::time::{Duration, Instant};
use zinc_plugin_api::{DeviceKind, PluginError, PluginResult};

/// How `execute` waits for its step's fence, chosen at open (plugin option `fence_wait`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceWait {
    /// `vkWaitForFences` alone: the thread sleeps until the driver wakes it.
    Block,
    /// Sleep through half the step's expected time (all but its last [`POLL_MARGIN`] for long
    /// steps), then poll the fence's status.
    Poll,
}

/// The share of a step's expected time spent asleep before polling starts, in percent. Steps
/// of one shape vary by a few percent as their context grows, and a timed sleep may end late:
/// at 75 % the 30B-A3B decoded 2 % slower than polling throughout, at 50 % 1 %, dense and
/// SmolLM2 shapes level.
const SLEEP_PERCENT: u32 = 50;

/// Long steps (prompt chunks) sleep through all but this much of their expected time, so that
/// a 500 ms step does not poll for 250.
const POLL_MARGIN: Duration = Duration::from_millis(5);

/// How late past the expected time (as long again, at most this), or how long into a step
/// whose shape never ran, polling gives way to blocking: a late step — another process on
/// the GPU, a first run that compiles pipelines — is not worth a busy core.
const POLL_AT_MOST: Duration = Duration::from_millis(10);

impl FenceWait {
    /// The policy for a device of `kind`, or the one option `fence_wait` names.
    pub fn choose(kind: DeviceKind, option: Option<&str>) -> PluginResult<FenceWait> {
        match option {
            Some("poll") => Ok(FenceWait::Poll),
            Some("block") => Ok(FenceWait::Block),
            Some(v) => {
                Err(PluginError::invalid(format!("vulkan: option fence_wait = {v:?}; use \"poll\" or \"block\"")))
            }
            None if matches!(kind, DeviceKind::SoftwareGpu | DeviceKind::Cpu) => Ok(FenceWait::Block),
            None => Ok(FenceWait::Poll),
        }
    }

    /// Its entry among the opened device's features (`zinc bench --json` lists them).
    pub fn feature(self) -> String {
        match self {
            FenceWait::Block => "fence-wait=block".into(),
            FenceWait::Poll => format!("fence-wait=poll (asleep for {SLEEP_PERCENT}% of the step's last time)"),
        }
    }
}

/// One wait's schedule: sleep (woken early if the fence signals), then poll until `poll_until`
/// has passed since the submission, then block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// How long to sleep in `vkWaitForFences` first.
    pub sleep: Duration,
    /// Time since the submission after which polling gives way to blocking.
    pub poll_until: Duration,
}

/// The schedule for a step whose shape last took `expected` on the device (None: never ran).
pub fn schedule(expected: Option<Duration>) -> Schedule {
    match expected {
        None => Schedule { sleep: Duration::ZERO, poll_until: POLL_AT_MOST },
        Some(t) => Schedule {
            sleep: (t * SLEEP_PERCENT / 100).max(t.saturating_sub(POLL_MARGIN)),
            poll_until: t + t.min(POLL_AT_MOST),
        },
    }
}

/// What a wait needs from a fence: its status now, and a blocking wait of bounded length
/// (Vulkan's, or a test's stand-in).
pub trait Fence {
    /// Whether the fence has signalled.
    fn signalled(&mut self) -> Result<bool, vk::Result>;
    /// Sleeps until the fence signals (Ok) or `at_most` passes (`vk::Result::TIMEOUT`).
    fn block(&mut self, at_most: Duration) -> Result<(), vk::Result>;
}

/// A Vulkan fence of a device.
pub struct DeviceFence<'a> {
    /// The device the fence belongs to.
    pub device: &'a ash::Device,
    /// The fence, submitted with work.
    pub fence: vk::Fence,
}

impl Fence for DeviceFence<'_> {
    fn signalled(&mut self) -> Result<bool, vk::Result> {
        // SAFETY: the fence belongs to the device.
        unsafe { self.device.get_fence_status(self.fence) }
    }

    fn block(&mut self, at_most: Duration) -> Result<(), vk::Result> {
        // SAFETY: the fence belongs to the device.
        unsafe { self.device.wait_for_fences(&[self.fence], true, at_most.as_nanos() as u64) }
    }
}

/// Waits for `fence` by `policy` (it is not reset here); `vk::Result::TIMEOUT` once `timeout`
/// has passed without the signal.
pub fn wait(
    fence: &mut impl Fence,
    policy: FenceWait,
    expected: Option<Duration>,
    timeout: Duration,
) -> Result<(), vk::Result> {
    if policy == FenceWait::Block {
        return fence.block(timeout);
    }
    let started = Instant::now();
    let plan = schedule(expected);
    if !plan.sleep.is_zero() {
        match fence.block(plan.sleep.min(timeout)) {
            Err(vk::Result::TIMEOUT) => {}
            done => return done,
        }
    }
    while started.elapsed() < plan.poll_until.min(timeout) {
        if fence.signalled()? {
            return Ok(());
        }
        std::hint::spin_loop();
    }
    fence.block(timeout.saturating_sub(started.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn software_devices_block_and_gpus_poll_unless_the_option_says() {
        assert_eq!(FenceWait::choose(DeviceKind::SoftwareGpu, None).unwrap(), FenceWait::Block);
        assert_eq!(FenceWait::choose(DeviceKind::DiscreteGpu, None).unwrap(), FenceWait::Poll);
        assert_eq!(FenceWait::choose(DeviceKind::IntegratedGpu, None).unwrap(), FenceWait::Poll);
        assert_eq!(FenceWait::choose(DeviceKind::DiscreteGpu, Some("block")).unwrap(), FenceWait::Block);
        assert_eq!(FenceWait::choose(DeviceKind::SoftwareGpu, Some("poll")).unwrap(), FenceWait::Poll);
        let e = FenceWait::choose(DeviceKind::DiscreteGpu, Some("spin")).unwrap_err();
        assert!(e.message.contains("\"poll\" or \"block\""), "{}", e.message);
    }

    #[test]
    fn a_known_step_sleeps_through_half_its_time_or_all_but_a_margin_and_a_new_one_polls_a_bounded_while() {
        let ms = Duration::from_millis;
        assert_eq!(schedule(Some(ms(4))), Schedule { sleep: ms(2), poll_until: ms(8) });
        assert_eq!(schedule(Some(ms(400))), Schedule { sleep: ms(395), poll_until: ms(410) });
        assert_eq!(schedule(None), Schedule { sleep: Duration::ZERO, poll_until: POLL_AT_MOST });
    }

    /// A fence that signals `after` its creation; counts the calls a wait makes.
    struct Timed {
        made: Instant,
        after: Duration,
        polls: u32,
        blocks: Vec<Duration>,
    }

    impl Timed {
        fn new(after: Duration) -> Timed {
            Timed { made: Instant::now(), after, polls: 0, blocks: Vec::new() }
        }
        fn left(&self) -> Duration {
            self.after.saturating_sub(self.made.elapsed())
        }
    }

    impl Fence for Timed {
        fn signalled(&mut self) -> Result<bool, vk::Result> {
            self.polls += 1;
            Ok(self.left().is_zero())
        }
        fn block(&mut self, at_most: Duration) -> Result<(), vk::Result> {
            self.blocks.push(at_most);
            let left = self.left();
            std::thread::sleep(left.min(at_most));
            if left <= at_most {
                Ok(())
            } else {
                Err(vk::Result::TIMEOUT)
            }
        }
    }

    const LONG: Duration = Duration::from_secs(5);

    #[test]
    fn polling_returns_once_the_fence_signals_and_not_before() {
        let ms = Duration::from_millis;
        // Expected 20 ms, done after 18: asleep for 15 (all but 5 ms), then polling.
        let mut f = Timed::new(ms(18));
        wait(&mut f, FenceWait::Poll, Some(ms(20)), LONG).unwrap();
        let took = f.made.elapsed();
        // (Upper bounds here only catch a wait that never ends; the machine may be busy.)
        assert!(took >= ms(18) && took < ms(3000), "{took:?}");
        assert_eq!(f.blocks, vec![ms(15)], "one sleep");
        // Then polls (once, if a busy machine kept the thread asleep past the signal).
        assert!(f.polls >= 1, "then polls");
        // A step that signals during the sleep ends the wait without polling.
        let mut f = Timed::new(ms(4));
        wait(&mut f, FenceWait::Poll, Some(ms(20)), LONG).unwrap();
        assert_eq!(f.polls, 0);
    }

    #[test]
    fn a_late_step_stops_polling_and_blocks_and_a_hang_times_out() {
        let ms = Duration::from_millis;
        // Expected 4 ms but done after 40: polls until 8 ms, then one blocking wait for the rest.
        let mut f = Timed::new(ms(40));
        wait(&mut f, FenceWait::Poll, Some(ms(4)), LONG).unwrap();
        assert!(f.made.elapsed() >= ms(40));
        assert_eq!(f.blocks.len(), 2, "{:?}", f.blocks);
        assert!(f.blocks[1] > ms(4000), "{:?}", f.blocks);
        // Never signals within the timeout: TIMEOUT, after about the timeout.
        let mut f = Timed::new(LONG);
        assert_eq!(wait(&mut f, FenceWait::Poll, None, ms(30)), Err(vk::Result::TIMEOUT));
        let took = f.made.elapsed();
        assert!(took >= ms(30) && took < ms(3000), "{took:?}");
        // Block: one wait, no polls.
        let mut f = Timed::new(ms(3));
        wait(&mut f, FenceWait::Block, Some(ms(20)), LONG).unwrap();
        assert_eq!((f.polls, f.blocks.len()), (0, 1));
    }
}

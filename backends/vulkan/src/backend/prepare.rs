//! Step shapes readied before the first request.
//!
//! A step of a new shape may pick kernels that no earlier step used (another matrix kernel past
//! a row threshold, split attention for few rows deep in a context, the prompt tiles), and the
//! driver compiles a pipeline when it is first created, which stalls that step for up to
//! seconds (docs/measurements/batched-decode-2026-12-05/). A server's shapes drift
//! as streams join and leave, so that stall would fall on whichever requests first make a new
//! mix. [`VulkanBackend::prepare_shapes`] records, without submitting, every shape a step of up
//! to `max_rows` rows can have, which creates every pipeline those shapes use. The recordings
//! themselves are thrown away: recording takes microseconds, and a kept one would tie up a
//! command buffer for a shape that may never run.

use super::VulkanBackend;
use crate::record::{split_keys, Queries, StepShape, SPLIT_MIN_CONTEXT};
use zinc_plugin_api::{DeviceKind, PluginError, PluginResult};

/// Whether `prepare_steps` readies step shapes (plugin option `prepare_steps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrepareSteps {
    /// Every shape up to the engine's step size: the default on GPUs.
    AllShapes,
    /// None; kernels are compiled when a step first needs them. The default on software
    /// devices, where LLVM compiles each kernel in about a second and tests run few shapes.
    OnFirstUse,
}

impl PrepareSteps {
    /// The policy for a device of `kind`, or the one option `prepare_steps` names.
    pub fn choose(kind: DeviceKind, option: Option<&str>) -> PluginResult<PrepareSteps> {
        match option {
            Some("true") => Ok(PrepareSteps::AllShapes),
            Some("false") => Ok(PrepareSteps::OnFirstUse),
            Some(v) => Err(PluginError::invalid(format!("vulkan: option prepare_steps = {v:?}; use true or false"))),
            None if matches!(kind, DeviceKind::SoftwareGpu | DeviceKind::Cpu) => Ok(PrepareSteps::OnFirstUse),
            None => Ok(PrepareSteps::AllShapes),
        }
    }
}

/// Most rows prepared: beyond this, steps are prompt chunks whose few shapes compile on first use.
const MAX_PREPARED_ROWS: u32 = 1024;

/// Every shape a step of 1 to `max_rows` rows can have: decodes alone (each row its own
/// sequence), one sequence's prompt chunk with no logits, its last row's or all, and chunks
/// beside decodes or beside each other; each with split attention where the row count allows
/// it. The output product's kernel follows the number of logit rows, which the decode shapes
/// cover for every count.
pub fn shapes(max_rows: u32) -> Vec<StepShape> {
    // Rows summarised on the device (`LogitRows::LastTop`) add one kernel, the same for any
    // count: one decode shape with a summary creates its pipeline.
    let mut out = vec![StepShape {
        rows: 1,
        logit_rows: 1,
        top_rows: 1,
        split_keys: false,
        one_sequence: true,
        one_row_per_sequence: true,
    }];
    for rows in 1..=max_rows {
        for split in [false, true] {
            if split && !split_keys(rows, SPLIT_MIN_CONTEXT) {
                continue;
            }
            let shape = |logit_rows, one_sequence, one_row_per_sequence| StepShape {
                rows,
                logit_rows,
                top_rows: 0,
                split_keys: split,
                one_sequence,
                one_row_per_sequence,
            };
            out.push(shape(rows, rows == 1, true));
            // A chunk's logits: none (not its prompt's last), its last row's, or every row's
            // (prompt log-probabilities); beside others, any count in between.
            let mut logits = vec![0, 1, rows];
            logits.dedup();
            out.extend(logits.iter().map(|&l| shape(l, true, false)));
            if rows > 1 {
                let mut logits = vec![0, 1, rows - 1, rows];
                logits.dedup();
                out.extend(logits.into_iter().map(|l| shape(l, false, false)));
            }
        }
    }
    out
}

impl VulkanBackend {
    /// Records every shape of up to `max_rows` rows once (see the module's comment), after
    /// sizing the step buffers for them so that no later step reallocates them.
    pub(super) fn prepare_shapes(&mut self, max_rows: u32) -> PluginResult<()> {
        if self.prepare == PrepareSteps::OnFirstUse {
            return Ok(());
        }
        if self.model.is_none() || self.kv.is_none() {
            return Err(PluginError::invalid("prepare_steps before load_model and create_kv_pool"));
        }
        let max_rows = max_rows.clamp(1, MAX_PREPARED_ROWS);
        self.ensure_capacity(max_rows, 0)?;
        let cmd = self.ctx.command_buffer()?;
        let result = self.record_each(cmd, &shapes(max_rows));
        // SAFETY: recorded only, never submitted.
        unsafe { self.ctx.device.free_command_buffers(self.ctx.pool, &[cmd]) };
        result
    }

    fn record_each(&mut self, cmd: ash::vk::CommandBuffer, shapes: &[StepShape]) -> PluginResult<()> {
        for &shape in shapes {
            let none = Queries { timestamps: None, profile: None };
            self.record_shape(cmd, shape, none)
                .map_err(|e| PluginError::device(format!("vulkan: preparing {shape:?}: {}", e.message)))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::SPLIT_MAX_ROWS;

    #[test]
    fn every_row_count_and_kind_of_step_is_prepared() {
        let all = shapes(100);
        for rows in 1..=100 {
            let of = |f: &dyn Fn(&StepShape) -> bool| all.iter().any(|s| s.rows == rows && f(s));
            assert!(of(&|s| s.one_row_per_sequence && s.logit_rows == rows), "decode of {rows}");
            assert!(of(&|s| s.one_sequence && !s.one_row_per_sequence && s.logit_rows == 1), "chunk of {rows}");
            assert!(of(&|s| s.one_sequence && s.logit_rows == 0), "middle chunk of {rows}");
            assert_eq!(of(&|s| s.split_keys), rows <= SPLIT_MAX_ROWS, "split attention at {rows} rows");
        }
        assert!(all.iter().all(|s| s.logit_rows <= s.rows && s.rows <= 100));
        assert!(all.iter().any(|s| s.top_rows > 0), "no shape creates the summary kernel");
    }

    #[test]
    fn software_devices_compile_on_first_use_unless_told() {
        assert_eq!(PrepareSteps::choose(DeviceKind::DiscreteGpu, None).unwrap(), PrepareSteps::AllShapes);
        assert_eq!(PrepareSteps::choose(DeviceKind::SoftwareGpu, None).unwrap(), PrepareSteps::OnFirstUse);
        assert_eq!(PrepareSteps::choose(DeviceKind::SoftwareGpu, Some("true")).unwrap(), PrepareSteps::AllShapes);
        assert!(PrepareSteps::choose(DeviceKind::DiscreteGpu, Some("yes")).is_err());
    }
}

//! Epoch and PoC phase arithmetic of the simulated chain (`GET /v1/epochs/latest`).
//!
//! An epoch of `epoch_length` blocks starts at `poc_start_block_height` with the four PoC stages
//! (`PoCGenerate`, `PoCGenerateWindDown`, `PoCValidate`, `PoCValidateWindDown`), then `Inference`
//! until the next epoch's PoC. New validators are set when PoC validation ends. An optional
//! confirmation PoC runs inside the inference phase. Heights are pure functions of the clock.

use serde_json::{json, Value};

use super::config::EpochSchedule;

/// Phase strings of the public API.
pub const PHASE_POC_GENERATE: &str = "PoCGenerate";
pub const PHASE_POC_GENERATE_WIND_DOWN: &str = "PoCGenerateWindDown";
pub const PHASE_POC_VALIDATE: &str = "PoCValidate";
pub const PHASE_POC_VALIDATE_WIND_DOWN: &str = "PoCValidateWindDown";
pub const PHASE_INFERENCE: &str = "Inference";

/// The chain's view at one block height.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochView {
    pub block_height: u64,
    pub epoch_index: u64,
    pub poc_start: u64,
    pub phase: &'static str,
    /// Confirmation PoC phase (`CONFIRMATION_POC_…`) and trigger height, when an event exists.
    pub confirmation_poc: Option<(&'static str, u64)>,
}

impl EpochView {
    /// True during the four raw PoC stages.
    pub fn is_poc(&self) -> bool {
        self.phase != PHASE_INFERENCE
    }
}

/// Height of the first block of epoch 0 so that epoch indices and heights line up.
fn epoch_start(s: &EpochSchedule, index: u64) -> u64 {
    index.saturating_mul(s.epoch_length.max(1))
}

/// The block height `elapsed_ms` after the network started.
pub fn height_at(s: &EpochSchedule, elapsed_ms: u64) -> u64 {
    let offset = s.start_offset_blocks.unwrap_or_else(|| s.poc_blocks());
    epoch_start(s, s.first_epoch) + offset + elapsed_ms / s.block_time_ms.max(1)
}

/// The epoch and phase at `height`.
pub fn view_at(s: &EpochSchedule, height: u64) -> EpochView {
    let len = s.epoch_length.max(1);
    let epoch_index = height / len;
    let poc_start = epoch_start(s, epoch_index);
    let pos = height - poc_start;
    let gen_end = s.poc_generate_blocks;
    let gwd_end = gen_end + s.poc_generate_wind_down_blocks;
    let val_end = gwd_end + s.poc_validate_blocks;
    let vwd_end = val_end + s.poc_validate_wind_down_blocks;
    let phase = match pos {
        p if p < gen_end => PHASE_POC_GENERATE,
        p if p < gwd_end => PHASE_POC_GENERATE_WIND_DOWN,
        p if p < val_end => PHASE_POC_VALIDATE,
        p if p < vwd_end => PHASE_POC_VALIDATE_WIND_DOWN,
        _ => PHASE_INFERENCE,
    };
    let confirmation_poc = s.confirmation_poc.as_ref().and_then(|c| {
        let trigger = poc_start + c.trigger_offset_blocks;
        if height < trigger {
            return None;
        }
        let p = height - trigger;
        let grace_end = c.grace_blocks;
        let gen_end = grace_end + c.generation_blocks;
        let val_end = gen_end + c.validation_blocks;
        let phase = match p {
            p if p < grace_end => "CONFIRMATION_POC_GRACE_PERIOD",
            p if p < gen_end => "CONFIRMATION_POC_GENERATION",
            p if p < val_end => "CONFIRMATION_POC_VALIDATION",
            _ => "CONFIRMATION_POC_COMPLETED",
        };
        Some((phase, trigger))
    });
    EpochView {
        block_height: height,
        epoch_index,
        poc_start,
        phase,
        confirmation_poc,
    }
}

fn stages(s: &EpochSchedule, epoch_index: u64) -> Value {
    let start = epoch_start(s, epoch_index);
    let gwd = start + s.poc_generate_blocks;
    let val = gwd + s.poc_generate_wind_down_blocks;
    let vwd = val + s.poc_validate_blocks;
    let end = vwd + s.poc_validate_wind_down_blocks;
    json!({
        "epoch_index": epoch_index,
        "poc_start": start,
        "poc_generation_wind_down": gwd,
        "poc_validation_start": val,
        "poc_validation_wind_down": vwd,
        "poc_validation_end": end,
        "set_new_validators": end,
        "claim_money": end + 1,
        "next_poc_start": start + s.epoch_length.max(1),
    })
}

/// Body of `GET /v1/epochs/latest` (integers as JSON numbers).
pub fn latest_json(s: &EpochSchedule, v: &EpochView) -> Value {
    let cpoc = v.confirmation_poc.map(
        |(phase, trigger)| json!({"phase": phase, "trigger_height": trigger, "event_sequence": 0}),
    );
    let cpoc_active = matches!(
        v.confirmation_poc,
        Some((p, _)) if p != "CONFIRMATION_POC_COMPLETED"
    );
    json!({
        "block_height": v.block_height,
        "phase": v.phase,
        "latest_epoch": {"index": v.epoch_index, "poc_start_block_height": v.poc_start},
        "epoch_stages": stages(s, v.epoch_index),
        "next_epoch_stages": stages(s, v.epoch_index + 1),
        "epoch_params": {
            "epoch_length": s.epoch_length,
            "poc_stage_duration": s.poc_generate_blocks,
            "poc_validation_duration": s.poc_validate_blocks,
        },
        "is_confirmation_poc_active": cpoc_active,
        "active_confirmation_poc_event": cpoc,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::config::ConfirmationPocSchedule;

    #[test]
    fn starts_after_poc_and_walks_through_phases() {
        let s = EpochSchedule::default();
        let h0 = height_at(&s, 0);
        let v = view_at(&s, h0);
        assert_eq!((v.epoch_index, v.phase), (100, PHASE_INFERENCE));
        assert_eq!(v.poc_start, 60_000);
        // 530 blocks later the next epoch starts with PoC generation.
        let next = view_at(&s, height_at(&s, 530 * 6_000));
        assert_eq!((next.epoch_index, next.phase), (101, PHASE_POC_GENERATE));
        assert!(next.is_poc());
        assert_eq!(
            view_at(&s, next.poc_start + 42).phase,
            PHASE_POC_GENERATE_WIND_DOWN
        );
        assert_eq!(view_at(&s, next.poc_start + 50).phase, PHASE_POC_VALIDATE);
        assert_eq!(
            view_at(&s, next.poc_start + 67).phase,
            PHASE_POC_VALIDATE_WIND_DOWN
        );
        assert_eq!(view_at(&s, next.poc_start + 70).phase, PHASE_INFERENCE);
    }

    #[test]
    fn confirmation_poc_event() {
        let s = EpochSchedule {
            confirmation_poc: Some(ConfirmationPocSchedule {
                trigger_offset_blocks: 100,
                grace_blocks: 5,
                generation_blocks: 10,
                validation_blocks: 5,
            }),
            ..EpochSchedule::default()
        };
        assert_eq!(view_at(&s, 60_099).confirmation_poc, None);
        assert_eq!(
            view_at(&s, 60_107).confirmation_poc,
            Some(("CONFIRMATION_POC_GENERATION", 60_100))
        );
        let body = latest_json(&s, &view_at(&s, 60_101));
        assert_eq!(
            body["active_confirmation_poc_event"]["phase"],
            "CONFIRMATION_POC_GRACE_PERIOD"
        );
        assert_eq!(body["is_confirmation_poc_active"], true);
    }
}

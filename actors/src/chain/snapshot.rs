//! What the chain's public API says, parsed (docs/protocol.md §9.1–§9.2): `GET
//! /v1/epochs/latest`, `GET /v1/epochs/current/participants` and a miner's `GET /v1/versions`.
//! Integers may arrive as JSON numbers or strings; unknown fields are ignored.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// The raw epoch phase (`phase` of `epochs/latest`); serializes as the chain's string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EpochPhase {
    Inference,
    PoCGenerate,
    PoCGenerateWindDown,
    PoCValidate,
    PoCValidateWindDown,
    /// A phase string this gateway does not know (treated as not blocking).
    Other(String),
}

impl EpochPhase {
    pub fn parse(s: &str) -> EpochPhase {
        match s {
            "Inference" => EpochPhase::Inference,
            "PoCGenerate" => EpochPhase::PoCGenerate,
            "PoCGenerateWindDown" => EpochPhase::PoCGenerateWindDown,
            "PoCValidate" => EpochPhase::PoCValidate,
            "PoCValidateWindDown" => EpochPhase::PoCValidateWindDown,
            other => EpochPhase::Other(other.to_owned()),
        }
    }

    /// One of the four raw PoC stages.
    pub fn is_poc(&self) -> bool {
        matches!(
            self,
            EpochPhase::PoCGenerate
                | EpochPhase::PoCGenerateWindDown
                | EpochPhase::PoCValidate
                | EpochPhase::PoCValidateWindDown
        )
    }

    pub fn as_str(&self) -> &str {
        match self {
            EpochPhase::Inference => "Inference",
            EpochPhase::PoCGenerate => "PoCGenerate",
            EpochPhase::PoCGenerateWindDown => "PoCGenerateWindDown",
            EpochPhase::PoCValidate => "PoCValidate",
            EpochPhase::PoCValidateWindDown => "PoCValidateWindDown",
            EpochPhase::Other(s) => s,
        }
    }
}

impl Serialize for EpochPhase {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Phase of the active confirmation-PoC event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CpocPhase {
    Inactive,
    GracePeriod,
    Generation,
    Validation,
    Completed,
}

impl CpocPhase {
    /// `CONFIRMATION_POC_…` string or the enum's integer 0–4.
    pub fn parse(v: &Value) -> Option<CpocPhase> {
        let s = match v {
            Value::Number(n) => return n.as_u64().and_then(CpocPhase::from_index),
            Value::String(s) => s.as_str(),
            _ => return None,
        };
        if let Ok(i) = s.parse::<u64>() {
            return CpocPhase::from_index(i);
        }
        match s.trim_start_matches("CONFIRMATION_POC_") {
            "INACTIVE" => Some(CpocPhase::Inactive),
            "GRACE_PERIOD" => Some(CpocPhase::GracePeriod),
            "GENERATION" => Some(CpocPhase::Generation),
            "VALIDATION" => Some(CpocPhase::Validation),
            "COMPLETED" => Some(CpocPhase::Completed),
            _ => None,
        }
    }

    fn from_index(i: u64) -> Option<CpocPhase> {
        [
            CpocPhase::Inactive,
            CpocPhase::GracePeriod,
            CpocPhase::Generation,
            CpocPhase::Validation,
            CpocPhase::Completed,
        ]
        .get(usize::try_from(i).ok()?)
        .copied()
    }

    /// Grace period, generation or validation.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            CpocPhase::GracePeriod | CpocPhase::Generation | CpocPhase::Validation
        )
    }
}

/// What the phase means for routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseKind {
    Inference,
    #[serde(rename = "poc")]
    PoC,
    #[serde(rename = "confirmation_poc")]
    ConfirmationPoC,
}

/// Stage heights of one epoch (`epoch_stages`, `next_epoch_stages`); absent fields are `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EpochStages {
    pub poc_start: Option<u64>,
    pub poc_validation_end: Option<u64>,
    pub set_new_validators: Option<u64>,
    pub next_poc_start: Option<u64>,
}

/// Parsed `GET /v1/epochs/latest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EpochInfo {
    pub block_height: u64,
    pub phase: EpochPhase,
    pub epoch_index: u64,
    pub poc_start_block_height: u64,
    pub stages: EpochStages,
    pub next_stages: EpochStages,
    /// `active_confirmation_poc_event` (phase, trigger height), when present.
    pub confirmation_poc: Option<(CpocPhase, u64)>,
}

impl EpochInfo {
    pub fn phase_kind(&self) -> PhaseKind {
        if self.phase.is_poc() {
            PhaseKind::PoC
        } else if self
            .confirmation_poc
            .is_some_and(|(phase, _)| phase.is_active())
        {
            PhaseKind::ConfirmationPoC
        } else {
            PhaseKind::Inference
        }
    }

    /// PoC validation or confirmation-PoC validation (when versions re-admit capable nodes).
    pub fn is_validation(&self) -> bool {
        matches!(
            self.phase,
            EpochPhase::PoCValidate | EpochPhase::PoCValidateWindDown
        ) || (!self.phase.is_poc()
            && self
                .confirmation_poc
                .is_some_and(|(p, _)| p == CpocPhase::Validation))
    }

    /// First height after the raw PoC stages of the current epoch, when the chain says.
    pub fn poc_end_height(&self) -> Option<u64> {
        self.stages
            .poc_validation_end
            .or(self.stages.set_new_validators)
    }
}

/// One ML node of a participant for one model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeInfo {
    pub node_id: String,
    pub poc_weight: u64,
    /// `timeslot_allocation[1]`: the node keeps serving inference during PoC.
    pub preserved: bool,
}

/// A participant's nodes for one model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelNodes {
    pub model: String,
    pub nodes: Vec<NodeInfo>,
}

/// One active participant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParticipantInfo {
    /// `index`: the participant's bech32 address.
    pub address: String,
    pub inference_url: String,
    pub weight: u64,
    pub models: Vec<ModelNodes>,
}

impl ParticipantInfo {
    /// Nodes serving `model`.
    pub fn nodes_for<'a>(&'a self, model: &'a str) -> impl Iterator<Item = &'a NodeInfo> + 'a {
        self.models
            .iter()
            .filter(move |m| m.model == model)
            .flat_map(|m| m.nodes.iter())
    }
}

/// A number or a numeric string.
fn uint(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn stages(v: &Value) -> EpochStages {
    EpochStages {
        poc_start: uint(&v["poc_start"]),
        poc_validation_end: uint(&v["poc_validation_end"]),
        set_new_validators: uint(&v["set_new_validators"]),
        next_poc_start: uint(&v["next_poc_start"]),
    }
}

/// Parses `GET /v1/epochs/latest`.
pub fn parse_epoch(body: &[u8]) -> Result<EpochInfo, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("epochs/latest: {e}"))?;
    let block_height = uint(&v["block_height"]).ok_or("epochs/latest: block_height missing")?;
    let phase = v["phase"]
        .as_str()
        .map(EpochPhase::parse)
        .ok_or("epochs/latest: phase missing")?;
    let cpoc = &v["active_confirmation_poc_event"];
    let confirmation_poc =
        CpocPhase::parse(&cpoc["phase"]).map(|p| (p, uint(&cpoc["trigger_height"]).unwrap_or(0)));
    Ok(EpochInfo {
        block_height,
        phase,
        epoch_index: uint(&v["latest_epoch"]["index"]).unwrap_or(0),
        poc_start_block_height: uint(&v["latest_epoch"]["poc_start_block_height"]).unwrap_or(0),
        stages: stages(&v["epoch_stages"]),
        next_stages: stages(&v["next_epoch_stages"]),
        confirmation_poc,
    })
}

/// Parses `GET /v1/epochs/current/participants` (participants without an address are dropped).
pub fn parse_participants(body: &[u8]) -> Result<BTreeMap<String, ParticipantInfo>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("participants: {e}"))?;
    let list = v["active_participants"]["participants"]
        .as_array()
        .ok_or("participants: active_participants.participants missing")?;
    let mut out = BTreeMap::new();
    for p in list {
        let address = p["index"].as_str().unwrap_or_default().trim().to_owned();
        if address.is_empty() {
            continue;
        }
        let groups = p["ml_nodes"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        let models = p["models"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
            .iter()
            .enumerate()
            .map(|(i, m)| ModelNodes {
                model: m.as_str().unwrap_or_default().to_owned(),
                nodes: groups
                    .get(i)
                    .and_then(|g| g["ml_nodes"].as_array())
                    .map(Vec::as_slice)
                    .unwrap_or(&[])
                    .iter()
                    .map(|n| NodeInfo {
                        node_id: n["node_id"].as_str().unwrap_or_default().to_owned(),
                        poc_weight: uint(&n["poc_weight"]).unwrap_or(0),
                        preserved: n["timeslot_allocation"][1].as_bool().unwrap_or(false),
                    })
                    .collect(),
            })
            .collect();
        let info = ParticipantInfo {
            address: address.clone(),
            inference_url: p["inference_url"].as_str().unwrap_or_default().to_owned(),
            weight: uint(&p["weight"]).unwrap_or(0),
            models,
        };
        out.insert(address, info);
    }
    Ok(out)
}

/// Parses a miner's `GET /v1/versions` into node id → `poc_validation_inference`.
pub fn parse_versions(body: &[u8]) -> Result<BTreeMap<String, bool>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("versions: {e}"))?;
    let nodes = v["mlnodes"].as_array().ok_or("versions: mlnodes missing")?;
    Ok(nodes
        .iter()
        .filter_map(|n| {
            let id = n["node_id"].as_str()?;
            Some((
                id.to_owned(),
                n["poc_validation_inference"].as_bool().unwrap_or(false),
            ))
        })
        .collect())
}

//! A live record's committed bytes, encoded when they are hashed or sealed instead of kept beside
//! the record (issue 16: the kept copy was ≈ 190 B of every live record, held by the escrow and
//! by the cost ledger's replica). [`encode_entry`] writes exactly `proto(InferenceRecordProto)`
//! as prost encodes [`InferenceRecord::to_proto`] (fields in tag order, proto3 defaults
//! omitted, `validated_by` always 16 bytes), without building the proto: no allocation beyond
//! the caller's reused buffer. The tests below hold it to the prost encoding.

use prost::encoding::{
    encode_key, encode_varint, encoded_len_varint, int64, uint32, uint64, WireType,
};
use sha2::{Digest, Sha256};

use super::{InferenceRecord, ENTRY_KEY};

/// Appends `proto(InferenceRecordProto)` of `r` to `buf`.
pub(super) fn encode_entry(r: &InferenceRecord, buf: &mut Vec<u8>) {
    let u64_field = |tag: u32, v: u64, buf: &mut Vec<u8>| {
        if v != 0 {
            uint64::encode(tag, &v, buf);
        }
    };
    let u32_field = |tag: u32, v: u32, buf: &mut Vec<u8>| {
        if v != 0 {
            uint32::encode(tag, &v, buf);
        }
    };
    let i64_field = |tag: u32, v: i64, buf: &mut Vec<u8>| {
        if v != 0 {
            int64::encode(tag, &v, buf);
        }
    };
    let bytes_field = |tag: u32, v: &[u8], buf: &mut Vec<u8>| {
        if !v.is_empty() {
            encode_key(tag, WireType::LengthDelimited, buf);
            encode_varint(v.len() as u64, buf);
            buf.extend_from_slice(v);
        }
    };
    u64_field(1, r.inference_id, buf);
    u32_field(2, r.status.as_u32(), buf);
    u32_field(3, r.executor_slot, buf);
    bytes_field(4, r.model.as_bytes(), buf);
    bytes_field(5, &r.prompt_hash, buf);
    bytes_field(6, &r.response_hash, buf);
    u64_field(7, r.input_length, buf);
    u64_field(8, r.max_tokens, buf);
    u64_field(9, r.input_tokens, buf);
    u64_field(10, r.output_tokens, buf);
    u64_field(11, r.reserved_cost, buf);
    u64_field(12, r.actual_cost, buf);
    i64_field(13, r.started_at, buf);
    i64_field(14, r.confirmed_at, buf);
    u32_field(15, r.votes_valid, buf);
    u32_field(16, r.votes_invalid, buf);
    bytes_field(17, &r.validated_by.to_le_bytes(), buf);
}

/// Feeds `0x0a ‖ varint(len) ‖ proto(record)` (the record's part of the live hash) to `h`;
/// `scratch` is reused between records.
pub(super) fn hash_framed(r: &InferenceRecord, h: &mut Sha256, scratch: &mut Vec<u8>) {
    scratch.clear();
    encode_entry(r, scratch);
    let len = scratch.len() as u64;
    let mut head = [0u8; 11];
    head[0] = ENTRY_KEY;
    let mut varint: &mut [u8] = &mut head[1..];
    encode_varint(len, &mut varint);
    h.update(&head[..1 + encoded_len_varint(len)]);
    h.update(scratch.as_slice());
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::protocol::state::record::InferenceStatus;

    fn record(seed: u64) -> InferenceRecord {
        // Every field takes zero (omitted), small, large and negative values across seeds.
        let pick = |k: u64| match (seed / k) % 4 {
            0 => 0,
            1 => seed % 300,
            2 => u64::MAX - seed,
            _ => 1 << (seed % 63),
        };
        let statuses = [
            InferenceStatus::Pending,
            InferenceStatus::Started,
            InferenceStatus::Finished,
            InferenceStatus::Challenged,
            InferenceStatus::Validated,
            InferenceStatus::Invalidated,
            InferenceStatus::TimedOut,
        ];
        InferenceRecord {
            inference_id: pick(1),
            status: statuses[(seed % 7) as usize],
            executor_slot: pick(2) as u32,
            model: ["", "m", "Qwen/Qwen2.5-7B-Instruct"][(seed % 3) as usize].into(),
            prompt_hash: vec![seed as u8; [0, 32, 200][(seed % 3) as usize]].into(),
            response_hash: vec![7; [0, 32][(seed / 3 % 2) as usize]].into(),
            input_length: pick(3),
            max_tokens: pick(5),
            input_tokens: pick(7),
            output_tokens: pick(11),
            reserved_cost: pick(13),
            actual_cost: pick(17),
            started_at: pick(19) as i64,
            confirmed_at: -(pick(23) as i64),
            votes_valid: pick(29) as u32,
            votes_invalid: pick(31) as u32,
            validated_by: u128::from(pick(37)) << (seed % 64),
        }
    }

    #[test]
    fn the_encoding_is_prosts_byte_for_byte() {
        let mut buf = Vec::new();
        for seed in 0..5_000 {
            let r = record(seed);
            buf.clear();
            encode_entry(&r, &mut buf);
            assert_eq!(buf, r.to_proto().encode_to_vec(), "seed {seed}: {r:?}");
            assert_eq!(buf, r.entry_bytes(), "seed {seed}");
        }
    }

    #[test]
    fn the_framed_hash_is_the_hash_of_the_field_1_framing() {
        let mut scratch = vec![1, 2, 3];
        for seed in [0, 1, 2, 77, 4_999] {
            let r = record(seed);
            let body = r.entry_bytes();
            let mut framed = vec![ENTRY_KEY];
            encode_varint(body.len() as u64, &mut framed);
            framed.extend_from_slice(&body);
            let mut h = Sha256::new();
            hash_framed(&r, &mut h, &mut scratch);
            assert_eq!(h.finalize(), Sha256::digest(&framed), "seed {seed}");
        }
    }
}

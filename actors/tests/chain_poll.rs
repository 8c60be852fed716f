//! The pure parts of chain polling: settings (env, serde, validation against the budget), parsing
//! of the public API's answers, and phase gating (`admission`) over hand-built views. The actor
//! itself is tested against the simulator and a scripted API in the root crate
//! (`tests/chain_poll.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod settings {
    use devshard_actors::chain::settings::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("20s"), Ok(20_000));
        assert_eq!(parse_duration_ms(" 1m30s "), Ok(90_000));
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("1.5h"), Ok(5_400_000));
        assert_eq!(parse_duration_ms("0"), Ok(0));
        assert!(parse_duration_ms("20")
            .unwrap_err()
            .contains("missing unit"));
        assert!(parse_duration_ms("20x")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_duration_ms("s").is_err());
        assert!(parse_duration_ms("").is_err());
    }

    #[test]
    fn defaults_fit_the_budget() {
        let s = ChainPollSettings::default();
        assert_eq!(s.validate(), Ok(()));
        // 60/18 + 60/54 + 60/270
        assert!((s.public_api_demand_per_minute() - 4.667).abs() < 0.01);
        assert_eq!(s.phase_stale_after_ms(), 100_000);
    }

    #[test]
    fn env_overrides_and_rejections() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let s = ChainPollSettings::from_env(env(&[
            (ENV_CHAIN_PHASE_POLL_INTERVAL, "30s"),
            (ENV_PARTICIPANTS_POLL_INTERVAL, "2m"),
            (ENV_VERSIONS_POLL_INTERVAL, "10m"),
            (ENV_POC_REQUEST_MODE, "Relaxed"),
        ]))
        .unwrap();
        assert_eq!(s.chain_phase_poll_interval_ms, 30_000);
        assert_eq!(s.participants_poll_interval_ms, 120_000);
        assert_eq!(s.versions_poll_interval_ms, 600_000);
        assert_eq!(s.poc_request_mode, PocMode::Relaxed);
        // The reference gateway's 5 s needs 24+/min: rejected, and the message says why.
        let err = ChainPollSettings::from_env(env(&[
            (ENV_CHAIN_PHASE_POLL_INTERVAL, "5s"),
            (ENV_PARTICIPANTS_POLL_INTERVAL, "5s"),
        ]))
        .unwrap_err();
        assert!(
            err.0.contains("public_api_requests_per_minute is 6"),
            "{err}"
        );
        assert!(err.0.contains("13.33/min"), "{err}");
        let err = ChainPollSettings::from_env(env(&[(ENV_VERSIONS_POLL_INTERVAL, "5")]));
        assert!(err.unwrap_err().0.starts_with(ENV_VERSIONS_POLL_INTERVAL));
        let err = ChainPollSettings::from_env(env(&[(ENV_POC_REQUEST_MODE, "on")]));
        assert!(err.is_err());
        // A higher budget admits faster polling.
        let s = ChainPollSettings::from_env(env(&[
            (ENV_CHAIN_PHASE_POLL_INTERVAL, "10s"),
            (ENV_PUBLIC_API_REQUESTS_PER_MINUTE, "9"),
        ]))
        .unwrap();
        assert_eq!(s.public_api_requests_per_minute, 9);
    }

    #[test]
    fn serde_defaults_and_unknown_fields() {
        let s: ChainPollSettings =
            serde_json::from_str(r#"{"chain_phase_poll_interval_ms": 25000}"#).unwrap();
        assert_eq!(s.chain_phase_poll_interval_ms, 25_000);
        assert_eq!(s.participants_poll_interval_ms, 60_000);
        let err = serde_json::from_str::<ChainPollSettings>(r#"{"phase_interval": 1}"#);
        assert!(err.is_err());
        let s: ChainPollSettings =
            serde_json::from_str(r#"{"poc_request_mode": "relaxed"}"#).unwrap();
        assert_eq!(s.poc_request_mode, PocMode::Relaxed);
    }
}

mod snapshot {
    use devshard_actors::chain::snapshot::*;

    #[test]
    fn epoch_with_strings_and_cpoc_int() {
        let body = br#"{"block_height":"1234","phase":"PoCValidate",
            "latest_epoch":{"index":"7","poc_start_block_height":1200},
            "epoch_stages":{"poc_validation_end":"1270","set_new_validators":1270},
            "active_confirmation_poc_event":{"phase":2,"trigger_height":"1100"}}"#;
        let e = parse_epoch(body).unwrap();
        assert_eq!((e.block_height, e.epoch_index), (1234, 7));
        assert_eq!(e.phase_kind(), PhaseKind::PoC);
        assert!(e.is_validation());
        assert_eq!(e.poc_end_height(), Some(1270));
        assert_eq!(e.confirmation_poc, Some((CpocPhase::Generation, 1100)));
        let body = br#"{"block_height":5,"phase":"Inference","active_confirmation_poc_event":
            {"phase":"CONFIRMATION_POC_GRACE_PERIOD","trigger_height":4}}"#;
        let e = parse_epoch(body).unwrap();
        assert_eq!(e.phase_kind(), PhaseKind::ConfirmationPoC);
        let body =
            br#"{"block_height":5,"phase":"Inference","active_confirmation_poc_event":null}"#;
        assert_eq!(
            parse_epoch(body).unwrap().phase_kind(),
            PhaseKind::Inference
        );
        assert!(parse_epoch(br#"{"phase":"Inference"}"#).is_err());
        assert!(parse_epoch(b"<html>").is_err());
    }

    #[test]
    fn participants_and_versions() {
        let body = br#"{"active_participants":{"participants":[
            {"index":"gonka1a","inference_url":"http://a:8000","weight":"10","models":["m1","m2"],
             "ml_nodes":[{"ml_nodes":[{"node_id":"n1","timeslot_allocation":[true,true],"poc_weight":5}]},
                         {"ml_nodes":[{"node_id":"n2","timeslot_allocation":[true,false],"poc_weight":"6"}]}]},
            {"index":"","inference_url":"http://x"}]}}"#;
        let p = parse_participants(body).unwrap();
        assert_eq!(p.len(), 1);
        let a = &p["gonka1a"];
        assert_eq!(a.weight, 10);
        assert!(a.nodes_for("m1").all(|n| n.preserved));
        assert_eq!(
            a.nodes_for("m2")
                .next()
                .map(|n| (n.preserved, n.poc_weight)),
            Some((false, 6))
        );
        let v =
            parse_versions(br#"{"mlnodes":[{"node_id":"n1","poc_validation_inference":true}]}"#)
                .unwrap();
        assert_eq!(v.get("n1"), Some(&true));
        assert!(parse_versions(b"{}").is_err());
    }
}

#[path = "chain_poll/admission.rs"]
mod admission;

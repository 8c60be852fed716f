//! The live page's series: after some load, `GET /v1/debug/series` has points with the request
//! rate, TTFB, participants by state and the escrow's nonce and balance.

use std::time::{Duration, Instant};

use crate::live::{self, admin_get, chat};

#[actix_rt::test]
async fn load_shows_up_in_the_series() {
    let l = live::start("series", 3, &[], |_| {}).await;
    let url = l.url().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let point = loop {
        for i in 0..5 {
            let body = format!(r#"{{"messages":[{{"role":"user","content":"s{i}"}}]}}"#);
            assert_eq!(chat(&url, &body).await.0, 200);
        }
        let (status, s) = admin_get(&url, "/v1/debug/series").await;
        assert_eq!(status, 200);
        assert_eq!(s["capacity"], 450);
        let busy = s["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["requests_per_s"].as_f64() > Some(0.0) && p["ttfb_p50_ms"].is_i64())
            .cloned();
        if let Some(p) = busy {
            break p;
        }
        assert!(Instant::now() < deadline, "no busy point: {s}");
        // The sampler ticks every 2 s of wall time: wait for its next point (bounded).
        actix_rt::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        point["ttfb_p99_ms"].as_i64() >= point["ttfb_p50_ms"].as_i64(),
        "{point}"
    );
    assert_eq!(point["participants"]["healthy"], 3, "{point}");
    let e = &point["escrows"]["42"];
    assert!(
        e["nonce"].as_u64() > Some(0) && e["balance"].as_u64() > Some(0),
        "{point}"
    );
    assert!(e["nonces_left"].as_u64() > Some(0));
    assert_eq!(point["sheds"], 0);
    assert!(point["errors"].is_object() && point["hedges"].is_u64());
    let (status, _) = live::admin_get(&url, "/v1/debug/series").await;
    assert_eq!(status, 200);
    let resp = live::client(1)
        .get(format!("{url}/v1/debug/series"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401, "admin only");
    l.stop().await;
}

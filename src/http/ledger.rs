//! The cost ledger over HTTP (`crate::state::ledger`):
//!
//! - `GET /v1/requests/{request_id}` — with the admin key, or with the API key that made the
//!   request: the in-memory record (while it is in the table) and its `ledger` row (request +
//!   attempts with their costs once settled; `null` until the request ended). A request of
//!   another key is 404, as an unknown one.
//! - `GET /v1/admin/ledger?since=…&until=…&format=jsonl|csv` (admin) — streams every request
//!   that ended in `[since, until)` (unix ms; defaults: everything), oldest first, read in pages
//!   of [`PAGE`] rows: `jsonl` = one request row per line with its attempts; `csv` = one line
//!   per request with a header, the attempts' nonces and costs as `nonce:cost` joined by `;`.

use std::convert::Infallible;

use actix_web::{http::header, web, HttpRequest, HttpResponse};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{bearer, error::ApiError, key_matches};
use crate::{
    state::{ledger::key_id, AppState},
    store::ledger::RequestRow,
};

/// Rows read per page of an export.
pub const PAGE: usize = 500;

/// Who asks.
enum Asker {
    Admin,
    /// The id of the API key presented.
    Key(String),
}

fn asker(req: &HttpRequest, state: &AppState) -> Result<Asker, ApiError> {
    let token = bearer(req).ok_or(ApiError::Unauthorized(
        "Send the admin key or the API key that made the request.",
    ))?;
    if let Some(admin) = &state.auth.admin {
        if key_matches(token, [admin.expose()]) {
            return Ok(Asker::Admin);
        }
    }
    state
        .auth
        .api_keys
        .iter()
        .find(|k| key_matches(token, [k.expose()]))
        .map(|k| Asker::Key(key_id(k)))
        .ok_or(ApiError::Unauthorized("Invalid API key."))
}

async fn ledger_row(state: &AppState, id: &str) -> Result<Option<RequestRow>, ApiError> {
    let Some(ledger) = state.ledger.clone() else {
        return Ok(None);
    };
    let id = id.to_string();
    actix_web::rt::task::spawn_blocking(move || ledger.store().get(&id))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(|e| ApiError::Internal(format!("reading the ledger: {e}")))
}

/// `GET /v1/requests/{request_id}` (see the module docs).
pub async fn get_request(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let asker = asker(&req, &state)?;
    let id = path.into_inner();
    let memory = state.accounting.get(&id);
    let row = ledger_row(&state, &id).await?;
    let not_found = || ApiError::NotFound(format!("request {id} is not known"));
    if let Asker::Key(key) = &asker {
        let owner = match (&row, &memory) {
            (Some(r), _) => Some(r.api_key_id.clone()),
            (None, Some(m)) => state.ledger.as_ref().map(|l| l.caller_id(&m.caller)),
            (None, None) => None,
        };
        if owner.as_deref() != Some(key.as_str()) {
            return Err(not_found());
        }
    }
    let mut v = match &memory {
        Some(r) => {
            let stored = r.stored.as_ref().map(|s| s.bytes.len());
            let mut v = serde_json::to_value(r).map_err(|e| ApiError::Internal(e.to_string()))?;
            if let Some(o) = v.as_object_mut() {
                o.insert("stored_bytes".into(), json!(stored));
            }
            v
        }
        None if row.is_some() => json!({"request_id": id}),
        None => return Err(not_found()),
    };
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "ledger".into(),
            serde_json::to_value(&row).unwrap_or(Value::Null),
        );
    }
    Ok(HttpResponse::Ok().json(v))
}

/// Query of the export.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub format: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Jsonl,
    Csv,
}

const CSV_HEADER: &str = "request_id,started_ms,ended_ms,model,escrow_id,api_key_id,stream,outcome,status,winner_nonce,input_tokens,output_tokens,reserved_cost,actual_cost,total_cost,settled_ms,attempts\n";

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

fn csv_line(r: &RequestRow) -> String {
    let attempts: Vec<String> = r
        .attempts
        .iter()
        .map(|a| format!("{}:{}", a.nonce, opt(a.cost)))
        .collect();
    let fields = [
        csv_field(&r.request_id),
        r.started_ms.to_string(),
        r.ended_ms.to_string(),
        csv_field(&r.model),
        csv_field(&r.escrow_id),
        csv_field(&r.api_key_id),
        r.stream.to_string(),
        csv_field(&r.outcome),
        r.status.to_string(),
        opt(r.winner_nonce),
        opt(r.input_tokens),
        opt(r.output_tokens),
        opt(r.reserved_cost),
        opt(r.actual_cost),
        opt(r.total_cost),
        opt(r.settled_ms),
        attempts.join(";"),
    ];
    let mut line = fields.join(",");
    line.push('\n');
    line
}

fn encode(rows: &[RequestRow], format: Format) -> Bytes {
    let mut out = String::new();
    for r in rows {
        match format {
            Format::Csv => out.push_str(&csv_line(r)),
            Format::Jsonl => {
                out.push_str(&serde_json::to_string(r).unwrap_or_default());
                out.push('\n');
            }
        }
    }
    Bytes::from(out)
}

struct Cursor {
    state: web::Data<AppState>,
    since: i64,
    until: i64,
    after: Option<(i64, String)>,
    format: Format,
    header: bool,
    done: bool,
}

async fn next_page(mut c: Cursor) -> Option<(Result<Bytes, Infallible>, Cursor)> {
    if c.header {
        c.header = false;
        return Some((Ok(Bytes::from_static(CSV_HEADER.as_bytes())), c));
    }
    if c.done {
        return None;
    }
    let ledger = c.state.ledger.clone()?;
    let (since, until, after) = (c.since, c.until, c.after.clone());
    let page =
        actix_web::rt::task::spawn_blocking(move || ledger.store().page(since, until, after, PAGE))
            .await
            .ok()?
            .ok()?;
    c.done = page.len() < PAGE;
    c.after = Some(page.last().map(|r| (r.ended_ms, r.request_id.clone()))?);
    let bytes = encode(&page, c.format);
    Some((Ok(bytes), c))
}

/// `GET /v1/admin/ledger` (see the module docs).
pub async fn export(
    query: web::Query<ExportQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let format = match query.format.as_deref().unwrap_or("jsonl") {
        "jsonl" => Format::Jsonl,
        "csv" => Format::Csv,
        other => {
            return Err(ApiError::invalid(
                "format",
                "invalid_value",
                format!("format {other:?} is not one of jsonl, csv"),
            ))
        }
    };
    if state.ledger.is_none() {
        return Err(ApiError::NotFound("the cost ledger is not open".into()));
    }
    let content_type = match format {
        Format::Jsonl => "application/x-ndjson",
        Format::Csv => "text/csv; charset=utf-8",
    };
    let cursor = Cursor {
        state,
        since: query.since.unwrap_or(i64::MIN),
        until: query.until.unwrap_or(i64::MAX),
        after: None,
        format,
        header: format == Format::Csv,
        done: false,
    };
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, content_type))
        .streaming(futures::stream::unfold(cursor, next_page)))
}

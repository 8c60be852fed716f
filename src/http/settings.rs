//! `GET /v1/admin/settings` and `PUT /v1/admin/settings` (admin): the runtime settings.
//!
//! - `GET` → `{"health": HealthSettings, "chain_poll": ChainPollSettings,
//!   "rotation": RotationSettings}` (what is in force).
//! - `rotation` (`crate::rotation::settings`) is merged like the others, validated (every
//!   `rotation.models[i].field` named), stored as `settings`/`rotation` (it wins over the file
//!   at the next start) and applied at once (the rotation actor checks immediately).
//! - `PUT` with a partial object, e.g. `{"health": {"hedge_budget": 0.1}}`: each section present
//!   is merged field by field into the settings in force (`null` resets a field: `health` to its
//!   default, `chain_poll` to the file/environment value, dropping the persisted change), then
//!   deserialized (unknown sections
//!   or fields, and values of the wrong type, are 400 naming them), validated (400 listing every
//!   `{field, message}`; `param` is the first field), persisted and applied live: `health` through
//!   the directory (`SetHealthSettings`: stored as `settings`/`health`, pushed to every escrow and
//!   participant), `chain_poll` to the poller (`ApplyPollSettings`; the fields sent are stored as
//!   `settings`/`chain_poll` and win over the file at the next start). A `chain_poll` field set by
//!   an environment variable cannot be changed here (400 naming the variable): the environment
//!   always wins. Answers 200 with the full new settings. Updates are serialized.

use crate::replicas::events::EventKind;
use actix_web::{http::StatusCode, web, HttpRequest, HttpResponse};
use devshard_actors::{
    chain::{ApplyPollSettings, ChainPollSettings},
    directory::{GetHealthSettings, SetHealthSettings},
    policy::settings::HealthSettings,
    store::ns,
};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::{json, Map, Value};
use slog::info;

use super::{admin::ADMIN_BODY_LIMIT, error::ApiError, read_body};
use crate::{
    rotation::settings::RotationSettings,
    state::{polling::CHAIN_POLL_KEY, AppState, ACTOR_TIMEOUT},
};

const HEALTH: &str = "health";
const CHAIN_POLL: &str = "chain_poll";
const ROTATION: &str = "rotation";

/// One rejected setting (`field` is `section.name`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

fn field_error(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}

/// 400 in the OpenAI shape, every error in `message` and in `errors`.
fn rejection(code: &str, errors: &[FieldError]) -> HttpResponse {
    let list: Vec<String> = errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.message))
        .collect();
    HttpResponse::build(StatusCode::BAD_REQUEST).json(json!({"error": {
        "message": format!("invalid settings: {}", list.join("; ")),
        "type": "invalid_request_error",
        "param": errors.first().map(|e| e.field.clone()),
        "code": code,
        "errors": errors,
    }}))
}

fn full(
    health: &HealthSettings,
    chain_poll: &ChainPollSettings,
    rotation: &RotationSettings,
) -> HttpResponse {
    HttpResponse::Ok().json(json!({"health": health, "chain_poll": chain_poll,
        "rotation": rotation}))
}

/// `GET /v1/admin/settings`.
pub async fn get_settings(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let health = state
        .directory
        .send(GetHealthSettings)
        .timeout(ACTOR_TIMEOUT)
        .await?;
    Ok(full(
        &health,
        &state.polling.settings(),
        &state.rotation.settings(),
    ))
}

/// `current` with the fields of `patch` (`null` = the field's value in `reset`), each checked
/// alone first: a field that is unknown or of the wrong type is named in `errors` and left out,
/// so that the rest can still be validated and every problem reported at once.
pub fn merge<T: Serialize + DeserializeOwned>(
    section: &str,
    current: &T,
    reset: &T,
    patch: &Map<String, Value>,
    errors: &mut Vec<FieldError>,
) -> Option<T> {
    let (Ok(Value::Object(base)), Ok(Value::Object(reset))) =
        (serde_json::to_value(current), serde_json::to_value(reset))
    else {
        errors.push(field_error(
            section,
            "the settings in force do not serialize",
        ));
        return None;
    };
    let mut merged = base.clone();
    for (k, v) in patch {
        let field = format!("{section}.{k}");
        let (Some(_), Some(reset)) = (base.get(k), reset.get(k)) else {
            errors.push(field_error(
                field,
                format!("unknown setting `{k}` in `{section}`"),
            ));
            continue;
        };
        let v = if v.is_null() { reset } else { v };
        let mut one = base.clone();
        one.insert(k.clone(), v.clone());
        if let Err(e) = serde_json::from_value::<T>(Value::Object(one)) {
            errors.push(field_error(field, format!("{e} (got {v})")));
            continue;
        }
        merged.insert(k.clone(), v.clone());
    }
    serde_json::from_value(Value::Object(merged))
        .map_err(|e| errors.push(field_error(section, e.to_string())))
        .ok()
}

/// The `chain_poll` field a validation message is about (the first one it names).
fn chain_field(message: &str) -> String {
    let names = serde_json::to_value(ChainPollSettings::default())
        .ok()
        .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()))
        .unwrap_or_default();
    names
        .into_iter()
        .filter_map(|n| message.find(&n).map(|at| (at, n)))
        .min()
        .map_or_else(
            || CHAIN_POLL.to_string(),
            |(_, n)| format!("{CHAIN_POLL}.{n}"),
        )
}

/// Errors of a `chain_poll` merge that failed validation (which reports one problem at a time):
/// each patched field is validated alone on the settings in force and named when it fails (an
/// interval that alone breaks the request budget is named, not the budget); when only their
/// combination fails, that one error is reported under the field its message names first.
fn chain_errors(
    current: &ChainPollSettings,
    reset: &ChainPollSettings,
    patch: &Map<String, Value>,
    combined: String,
    errors: &mut Vec<FieldError>,
) {
    let before = errors.len();
    for (k, v) in patch {
        let mut one = Map::new();
        one.insert(k.clone(), v.clone());
        let mut alone = Vec::new();
        let Some(single) = merge(CHAIN_POLL, current, reset, &one, &mut alone) else {
            continue;
        };
        if let Err(e) = single.validate() {
            if !errors[before..].iter().any(|x| x.message == e.0) {
                errors.push(field_error(format!("{CHAIN_POLL}.{k}"), e.0));
            }
        }
    }
    if errors.len() == before {
        errors.push(field_error(chain_field(&combined), combined));
    }
}

/// The section `name` of the body as an object (absent: `None`).
fn section<'a>(
    body: &'a Map<String, Value>,
    name: &str,
    errors: &mut Vec<FieldError>,
) -> Option<&'a Map<String, Value>> {
    match body.get(name)? {
        Value::Object(o) => Some(o),
        other => {
            errors.push(field_error(name, format!("must be an object, not {other}")));
            None
        }
    }
}

/// `PUT /v1/admin/settings` (see the module docs).
pub async fn put_settings(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let raw = read_body(&req, payload, ADMIN_BODY_LIMIT).await?;
    let body = match serde_json::from_slice::<Value>(&raw) {
        Ok(Value::Object(o)) => o,
        Ok(_) | Err(_) => {
            return Err(ApiError::BadRequest {
                message: "expected a JSON object such as {\"health\": {\"hedge_budget\": 0.1}} \
                          or {\"chain_poll\": {\"chain_phase_poll_interval_ms\": 30000}}"
                    .into(),
                param: None,
                code: "invalid_json",
            })
        }
    };
    let unknown: Vec<FieldError> = body
        .keys()
        .filter(|k| *k != HEALTH && *k != CHAIN_POLL && *k != ROTATION)
        .map(|k| {
            field_error(
                k,
                format!(
                    "unknown settings section `{k}` (expected `{HEALTH}`, `{CHAIN_POLL}` or \
                     `{ROTATION}`)"
                ),
            )
        })
        .collect();
    if !unknown.is_empty() {
        return Ok(rejection("unknown_setting", &unknown));
    }
    let polling = &state.polling;
    let _serialized = polling.lock_updates().await;
    let health_now = state
        .directory
        .send(GetHealthSettings)
        .timeout(ACTOR_TIMEOUT)
        .await?;
    let chain_now = polling.settings();
    let mut errors = Vec::new();
    let health_patch = section(&body, HEALTH, &mut errors);
    let chain_patch = section(&body, CHAIN_POLL, &mut errors);
    let health_reset = HealthSettings::default();
    let health =
        health_patch.and_then(|p| merge(HEALTH, &*health_now, &health_reset, p, &mut errors));
    let chain_reset = polling.configured();
    let chain =
        chain_patch.and_then(|p| merge(CHAIN_POLL, &chain_now, chain_reset, p, &mut errors));
    let rotation_now = state.rotation.settings();
    let rotation = section(&body, ROTATION, &mut errors).and_then(|p| {
        merge(
            ROTATION,
            &rotation_now,
            &RotationSettings::default(),
            p,
            &mut errors,
        )
    });
    if let Some(Err(list)) = rotation.as_ref().map(RotationSettings::validate) {
        errors.extend(
            list.into_iter()
                .map(|e| field_error(format!("{ROTATION}.{}", e.field), e.message)),
        );
    }
    if let Some(Err(list)) = health.as_ref().map(HealthSettings::validate) {
        errors.extend(
            list.into_iter()
                .map(|e| field_error(format!("{HEALTH}.{}", e.field), e.message)),
        );
    }
    if let (Some(c), Some(patch)) = (&chain, chain_patch) {
        if let Err(e) = c.validate() {
            chain_errors(&chain_now, chain_reset, patch, e.0, &mut errors);
        }
        let now = serde_json::to_value(&chain_now).unwrap_or(Value::Null);
        for (k, v) in patch {
            let field = format!("{CHAIN_POLL}.{k}");
            if errors.iter().any(|e| e.field == field) {
                continue;
            }
            match polling.pinned().get(k) {
                Some(var) if !v.is_null() && now.get(k) != Some(v) => errors.push(field_error(
                    field,
                    format!(
                        "set by the environment variable {var}, which always wins; unset it \
                         and restart to manage `{k}` here"
                    ),
                )),
                _ => {}
            }
        }
    }
    if !errors.is_empty() {
        let unknown = errors
            .iter()
            .any(|e| e.message.starts_with("unknown setting"));
        let code = if unknown {
            "unknown_setting"
        } else {
            "invalid_value"
        };
        return Ok(rejection(code, &errors));
    }

    if let Some(h) = health.filter(|h| *h != *health_now) {
        state
            .directory
            .send(SetHealthSettings(h))
            .timeout(ACTOR_TIMEOUT)
            .await??;
    }
    if let (Some(c), Some(patch)) = (chain, chain_patch) {
        let mut overrides = polling.overrides();
        for (k, v) in patch {
            if v.is_null() {
                overrides.remove(k);
            } else if !polling.pinned().contains_key(k) {
                overrides.insert(k.clone(), v.clone());
            }
        }
        state
            .store
            .put(
                ns::SETTINGS,
                CHAIN_POLL_KEY,
                Value::Object(overrides.clone()),
            )
            .await
            .map_err(|e| ApiError::Internal(format!("persisting chain poll settings: {e}")))?;
        if let Some(p) = polling.poller() {
            p.send(ApplyPollSettings(c.clone()))
                .timeout(ACTOR_TIMEOUT)
                .await?
                .map_err(|e| ApiError::invalid(CHAIN_POLL, "invalid_value", e.0))?;
        }
        polling.set(c, overrides);
    }
    if let Some(r) = rotation.filter(|r| *r != rotation_now) {
        state.rotation.apply(r).await?;
    }
    if let Some(replicas) = &state.replicas {
        replicas.publish(EventKind::Settings, None).await;
    }
    let sections: Vec<&str> = body.keys().map(String::as_str).collect();
    info!(state.log, "settings changed by an admin"; "stage" => "settings_updated",
        "sections" => sections.join(","), "body" => %Value::Object(body.clone()));
    let health = state
        .directory
        .send(GetHealthSettings)
        .timeout(ACTOR_TIMEOUT)
        .await?;
    Ok(full(
        &health,
        &polling.settings(),
        &state.rotation.settings(),
    ))
}

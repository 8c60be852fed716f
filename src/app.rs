//! Process wiring: [`build_app`] (the actix-web `App`, shared by the binary and the tests),
//! [`start`] (open the store, start the directory, register the configured escrows, bind) and
//! [`run`] (start, then wait for SIGTERM/SIGINT and shut down gracefully: stop accepting, let
//! running requests and streams finish within `shutdown_grace`, flush the store). [`serve`] is
//! the whole process for `main`. What every handler gets ([`AppState`]) is in [`crate::state`],
//! which imports nothing from here or from `http`.

mod error;
mod lifecycle;
mod listener;

use actix_web::{
    body::MessageBody,
    dev::{ServiceFactory, ServiceRequest, ServiceResponse},
    middleware::from_fn,
    web, App,
};

pub use self::lifecycle::{
    run, serve, start, start_with, AppError, RunningGateway, StartOptions, SERVER_KEEP_ALIVE,
    STORE_FILE,
};
use crate::{
    http,
    metrics::{self},
    state::AppState,
};

/// The actix-web application: metrics middleware around every route of [`http::configure`],
/// and an OpenAI-shaped 404 for unknown routes.
pub fn build_app(
    state: AppState,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let metrics = web::Data::new(state.metrics.clone());
    App::new()
        .app_data(web::Data::new(state))
        .app_data(metrics)
        .wrap(from_fn(metrics::track))
        .configure(http::configure)
        .default_service(web::to(http::not_found))
}

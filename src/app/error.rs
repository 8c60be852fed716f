//! Why the process could not start or stop cleanly ([`AppError`]), and the sysexits code each
//! cause exits with.

use std::{net::SocketAddr, path::PathBuf};

use crate::{config::ConfigError, state::polling::PollerError};

/// `EX_UNAVAILABLE`: the listener could not be bound.
const EXIT_UNAVAILABLE: u8 = 69;
/// `EX_SOFTWARE`: anything else.
pub(super) const EXIT_SOFTWARE: u8 = 70;
/// `EX_IOERR`: the data directory or the store could not be opened.
const EXIT_IOERR: u8 = 74;

/// Why the process could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot open the store {path}: {reason}")]
    Store { path: PathBuf, reason: String },
    #[error("cannot set up metrics: {0}")]
    Metrics(String),
    #[error("cannot listen on {addr}: {reason}")]
    Bind { addr: SocketAddr, reason: String },
    #[error("the HTTP server failed: {0}")]
    Server(String),
    #[error("flushing the store at shutdown failed: {0}")]
    Flush(String),
}

impl From<PollerError> for AppError {
    fn from(e: PollerError) -> Self {
        match e {
            PollerError::Metrics(m) => AppError::Metrics(m),
            PollerError::Config(c) => AppError::Config(c),
        }
    }
}

impl AppError {
    /// The process exit code (sysexits).
    pub fn exit_code(&self) -> u8 {
        match self {
            AppError::Config(_) => ConfigError::EXIT_CODE,
            AppError::Bind { .. } => EXIT_UNAVAILABLE,
            AppError::Store { .. } | AppError::Flush(_) => EXIT_IOERR,
            AppError::Metrics(_) | AppError::Server(_) => EXIT_SOFTWARE,
        }
    }
}

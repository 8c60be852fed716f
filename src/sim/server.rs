//! hyper 1 server plumbing shared by the chain API and the hosts.
//!
//! Every task is spawned with `tokio::spawn` on the *current* runtime, so a test that pauses
//! tokio's clock also pauses the simulator. A [`Listener`] can be switched off and on: off closes
//! the listening socket (clients get "connection refused") and drops every open connection of
//! the current incarnation (in-flight streams are cut); on rebinds the same port.

use std::{
    convert::Infallible,
    future::Future,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard},
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use devshard_actors::protocol::auth::HEADER_ERROR;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, Limited, StreamBody};
use hyper::{body::Frame, body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::{
    net::{TcpListener, TcpSocket, TcpStream},
    sync::{mpsc, watch},
};

/// Largest request body a simulated server reads (as the reference gateway's limit).
pub(crate) const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;
/// Capacity of the channel between a stream producer and its response body.
pub(crate) const STREAM_CHANNEL_CAPACITY: usize = 16;
/// Listen backlog.
const BACKLOG: u32 = 1024;
/// Pause between rebind attempts when the port is briefly unavailable.
const REBIND_RETRY: Duration = Duration::from_millis(50);

/// Response body: complete or streamed; an `Err` frame aborts the connection mid-body.
pub(crate) type Body = BoxBody<Bytes, io::Error>;
pub(crate) type Resp = Response<Body>;
/// A boxed handler future.
pub(crate) type HandlerFuture = Pin<Box<dyn Future<Output = Resp> + Send>>;
/// A request handler: request and peer address in, response out.
pub(crate) type Handler = Arc<dyn Fn(Request<Incoming>, SocketAddr) -> HandlerFuture + Send + Sync>;
/// Sending side of a streamed body.
pub(crate) type BodySender = mpsc::Sender<Result<Frame<Bytes>, io::Error>>;

/// A complete body.
pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

/// A streamed body and the sender that feeds it.
pub(crate) fn channel_body() -> (BodySender, Body) {
    let (tx, rx) = mpsc::channel(STREAM_CHANNEL_CAPACITY);
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|f| (f, rx)) });
    (tx, BodyExt::boxed(StreamBody::new(stream)))
}

/// A response with a body and content type.
pub(crate) fn response(status: StatusCode, content_type: &'static str, body: Body) -> Resp {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// A JSON response.
pub(crate) fn json<T: Serialize + ?Sized>(status: StatusCode, value: &T) -> Resp {
    match serde_json::to_vec(value) {
        Ok(bytes) => response(status, "application/json", full(bytes)),
        Err(e) => message(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("encode response: {e}"),
        ),
    }
}

/// An Echo-style error body `{"message": text}`.
pub(crate) fn message(status: StatusCode, text: &str) -> Resp {
    json(status, &serde_json::json!({ "message": text }))
}

/// An error answer on its way to becoming a response (`{"message": …}` plus headers).
#[derive(Debug)]
pub(crate) struct Reject {
    pub status: StatusCode,
    pub message: String,
    /// `Retry-After` seconds.
    pub retry_after_s: Option<u64>,
    /// `X-Devshard-Error` value.
    pub devshard_error: Option<&'static str>,
}

impl Reject {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Reject {
        Reject {
            status,
            message: message.into(),
            retry_after_s: None,
            devshard_error: None,
        }
    }

    pub(crate) fn into_response(self) -> Resp {
        let mut resp = message(self.status, &self.message);
        let headers = resp.headers_mut();
        if let Some(v) = self.devshard_error {
            headers.insert(HEADER_ERROR, HeaderValue::from_static(v));
        }
        if let Some(s) = self.retry_after_s {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                headers.insert(header::RETRY_AFTER, v);
            }
        }
        resp
    }
}

/// Reads the whole request body (at most [`MAX_BODY_BYTES`]).
pub(crate) async fn read_body(req: Request<Incoming>) -> Result<Bytes, Reject> {
    match Limited::new(req.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => Err(Reject::new(
            StatusCode::BAD_REQUEST,
            format!("read request body: {e}"),
        )),
    }
}

/// The raw value of query parameter `name` (no percent-decoding; values here are numbers).
pub(crate) fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then_some(v)
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ListenState {
    up: bool,
    /// Bumped whenever the listener goes down; connections of older incarnations are dropped.
    incarnation: u64,
    shutdown: bool,
}

/// The listening socket, shared with the accept task so that switching it off closes the port
/// at once (synchronously), not when the task next runs.
type SharedSocket = Arc<Mutex<Option<TcpListener>>>;

fn lock(socket: &SharedSocket) -> MutexGuard<'_, Option<TcpListener>> {
    socket.lock().unwrap_or_else(|p| p.into_inner())
}

/// One listening socket whose availability can be switched at runtime.
#[derive(Debug)]
pub(crate) struct Listener {
    addr: SocketAddr,
    socket: SharedSocket,
    ctl: watch::Sender<ListenState>,
    /// Runtime of the accept task (rebinding registers the socket with its reactor).
    rt: tokio::runtime::Handle,
}

impl Listener {
    /// Starts accepting on a socket from [`bind_reuse`] (on the current runtime).
    pub(crate) fn start(tcp: TcpListener, handler: Handler) -> io::Result<Listener> {
        let addr = tcp.local_addr()?;
        let rt = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
        let socket = Arc::new(Mutex::new(Some(tcp)));
        let initial = ListenState {
            up: true,
            incarnation: 0,
            shutdown: false,
        };
        let (ctl, rx) = watch::channel(initial);
        rt.spawn(accept_loop(Arc::clone(&socket), addr, handler, rx));
        Ok(Listener {
            addr,
            socket,
            ctl,
            rt,
        })
    }

    /// Opens (rebinds the same port) or closes the socket; closing also drops every open
    /// connection. Takes effect before it returns.
    pub(crate) fn set_up(&self, up: bool) {
        {
            let mut socket = lock(&self.socket);
            if !up {
                *socket = None;
            } else if socket.is_none() {
                let _enter = self.rt.enter();
                // On failure the accept task retries.
                *socket = bind_reuse(self.addr).ok();
            }
        }
        self.ctl.send_if_modified(|s| {
            if s.up == up {
                return false;
            }
            s.up = up;
            if !up {
                s.incarnation += 1;
            }
            true
        });
    }

    pub(crate) fn is_up(&self) -> bool {
        let s = *self.ctl.borrow();
        s.up && !s.shutdown
    }

    /// Stops accepting for good and drops every connection.
    pub(crate) fn shutdown(&self) {
        *lock(&self.socket) = None;
        self.ctl.send_modify(|s| s.shutdown = true);
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Binds `addr` (port 0 = ephemeral) with `SO_REUSEADDR`, so the port can be rebound after a
/// simulated outage.
pub(crate) fn bind_reuse(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

fn poll_accept(
    socket: &SharedSocket,
    cx: &mut Context<'_>,
) -> Poll<io::Result<(TcpStream, SocketAddr)>> {
    match lock(socket).as_ref() {
        Some(l) => l.poll_accept(cx),
        // Closed: the state change that closed it wakes the loop.
        None => Poll::Pending,
    }
}

async fn accept_loop(
    socket: SharedSocket,
    addr: SocketAddr,
    handler: Handler,
    mut rx: watch::Receiver<ListenState>,
) {
    loop {
        let state = *rx.borrow_and_update();
        if state.shutdown {
            return;
        }
        if state.up && lock(&socket).is_none() {
            match bind_reuse(addr) {
                Ok(l) => *lock(&socket) = Some(l),
                Err(_) => {
                    tokio::time::sleep(REBIND_RETRY).await;
                    continue;
                }
            }
        }
        tokio::select! {
            biased;
            changed = rx.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            accepted = std::future::poll_fn(|cx| poll_accept(&socket, cx)) => {
                if let Ok((stream, peer)) = accepted {
                    let incarnation = rx.borrow().incarnation;
                    spawn_connection(stream, peer, handler.clone(), rx.clone(), incarnation);
                }
            }
        }
    }
}

fn spawn_connection(
    stream: TcpStream,
    peer: SocketAddr,
    handler: Handler,
    mut rx: watch::Receiver<ListenState>,
    incarnation: u64,
) {
    // Small SSE events must leave at once, as they do from a real host.
    let _ = stream.set_nodelay(true);
    tokio::spawn(async move {
        let service = service_fn(move |req| {
            let fut = handler(req, peer);
            async move { Ok::<_, Infallible>(fut.await) }
        });
        let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
        // The watch guard `wait_for` returns must be gone before `conn` is dropped: dropping the
        // connection can drop the last reference to the network, whose listeners' `shutdown`
        // takes this watch's write lock (a self-deadlock that stalled the actor property tests
        // when a second simulator started in the same runtime).
        let closed = async move {
            let _ = rx
                .wait_for(|s| s.shutdown || s.incarnation != incarnation)
                .await
                .map(|_| ());
        };
        tokio::select! {
            biased;
            () = closed => {}
            _ = conn => {}
        }
    });
}

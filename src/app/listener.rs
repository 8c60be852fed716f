//! The gateway's listening socket.
//!
//! - **Backlog [`LISTEN_BACKLOG`].** `std::net::TcpListener::bind` listens with a backlog of
//!   128. Under a burst of thousands of new connections (issue 16: 4 096 streams), the kernel's
//!   accept queue overflowed: 3 406 `ListenOverflows` in one run. Each dropped SYN came back a
//!   second later (TCP's retransmission), so those clients waited a second or more before the
//!   gateway could shed or serve them, and a few timed out. The kernel caps the backlog at
//!   `net.core.somaxconn` (4 096 by default since Linux 5.4).
//! - **A request head may take [`REQUEST_HEAD_TIMEOUT`]** (actix-web's `client_request_timeout`,
//!   5 s by default) from the accept until it is read. Under 4 096 back-to-back streams on 2
//!   cores, heads waited longer than 5 s to be read and actix answered them 408 itself, outside
//!   the gateway's overload control (238–802 of 30 000 requests in a run). With 30 s each of them
//!   is read and then served or shed with 503 + `Retry-After` (0 408s in the same run). nginx's
//!   `client_header_timeout` is 60 s.
//! - **`TCP_NODELAY`.** Accepted sockets inherit it from the listener (Linux). Without it, a
//!   streamed answer's first chunk waits for the client's delayed ACK of the response head
//!   (~40 ms).

use std::{
    net::{SocketAddr, TcpListener},
    time::Duration,
};

use socket2::{Domain, Protocol, SockRef, Socket, Type};

/// How long a request head may take to arrive and be read after the accept.
pub const REQUEST_HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections the kernel queues before the gateway accepts them.
pub const LISTEN_BACKLOG: i32 = 4_096;

/// A listener on `addr` with [`LISTEN_BACKLOG`] and `SO_REUSEADDR` (as `std` sets it).
/// `TCP_NODELAY` is set too, or the returned warning says why not.
pub fn listen(addr: SocketAddr) -> std::io::Result<(TcpListener, Option<std::io::Error>)> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    let listener: TcpListener = socket.into();
    let nodelay = SockRef::from(&listener).set_tcp_nodelay(true).err();
    Ok((listener, nodelay))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The accept queue holds far more than std's 128 connections nobody has accepted yet.
    #[test]
    fn the_accept_queue_holds_a_burst_of_connections() {
        let (listener, nodelay) = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        assert!(nodelay.is_none());
        assert!(SockRef::from(&listener).tcp_nodelay().unwrap());
        let addr = listener.local_addr().unwrap();
        let burst = 600;
        let clients: Vec<std::net::TcpStream> = (0..burst)
            .map(|i| {
                std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(5))
                    .unwrap_or_else(|e| panic!("connection {i} of {burst}: {e}"))
            })
            .collect();
        listener.set_nonblocking(true).unwrap();
        let accepted = std::iter::from_fn(|| listener.accept().ok()).count();
        assert_eq!((clients.len(), accepted), (burst, burst));
    }
}

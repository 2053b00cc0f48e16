//! Admitting connections: a cap on how many are open, and no free ride for
//! connections that never speak.
//!
//! hyper times a request head only once it knows the protocol. While the
//! automatic HTTP/1-or-2 detection waits for a connection's first bytes
//! there is no timer at all, so a client that connects and sends nothing
//! would hold a file descriptor forever. Here such a connection is closed
//! after the header timeout ([`Ticket::first_byte`], [`ClientIo`]), and when
//! the cap is reached the oldest connection that has not sent a byte makes
//! room for the new one: a flood of idle connections cannot lock out the
//! clients that talk.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

use super::bare_errors;

/// File descriptors kept back from the connection cap, for the store,
/// outbound webhook and model requests, plugins and logs.
pub const FD_HEADROOM: usize = 256;

/// The cap when none was worked out at start (tests that serve directly).
pub const FALLBACK_CAP: usize = 768;

/// The open connections, and which of them have not spoken yet.
pub struct Admission {
    max: usize,
    open: AtomicUsize,
    /// Connection number → its eviction signal, oldest first.
    silent: Mutex<BTreeMap<u64, Arc<Notify>>>,
    next: AtomicU64,
}

/// One admitted connection; dropping it frees its place.
pub struct Ticket {
    admission: Arc<Admission>,
    id: u64,
    evicted: Arc<Notify>,
}

impl Admission {
    /// Admits at most `max` connections at once.
    pub fn new(max: usize) -> Arc<Admission> {
        Arc::new(Admission {
            max: max.max(1),
            open: AtomicUsize::new(0),
            silent: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
        })
    }

    /// Admits a new connection. At the cap, the oldest connection that has
    /// sent nothing yet is closed to make room; `None` when every open
    /// connection has spoken.
    pub fn admit(self: &Arc<Self>) -> Option<Ticket> {
        if self.open.load(Ordering::SeqCst) >= self.max && !self.evict_oldest_silent() {
            return None;
        }
        self.open.fetch_add(1, Ordering::SeqCst);
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let evicted = Arc::new(Notify::new());
        self.silent().insert(id, evicted.clone());
        Some(Ticket {
            admission: self.clone(),
            id,
            evicted,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    fn silent(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Notify>>> {
        self.silent.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn evict_oldest_silent(&self) -> bool {
        match self.silent().pop_first() {
            Some((_, evicted)) => {
                // A stored permit: the connection sees it even if it is not
                // waiting yet.
                evicted.notify_one();
                true
            }
            None => false,
        }
    }
}

impl Ticket {
    /// Waits for the connection's first byte, at most `limit`. `false` when
    /// it sent nothing in time, or was evicted to make room.
    pub async fn first_byte(&self, stream: &TcpStream, limit: Duration) -> bool {
        let mut byte = [0u8; 1];
        let spoke = tokio::select! {
            // `readable()` can wake spuriously; `peek` waits for a real byte
            // (or end of stream, which is nothing to serve).
            peeked = stream.peek(&mut byte) => matches!(peeked, Ok(n) if n > 0),
            () = tokio::time::sleep(limit) => false,
            () = self.evicted.notified() => false,
        };
        self.admission.silent().remove(&self.id);
        spoke
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admission.silent().remove(&self.id);
        self.admission.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The connection cap: `configured`, or what the open-file limit allows
/// less [`FD_HEADROOM`]. A configured cap above that is an error that says
/// what to change.
pub fn cap(configured: Option<usize>, fd_limit: usize) -> Result<usize, String> {
    let room = fd_limit.saturating_sub(FD_HEADROOM).max(16);
    match configured {
        None => Ok(room.min(65_536)),
        Some(n) if n <= room => Ok(n.max(1)),
        Some(n) => Err(format!(
            "limits.max_connections is {n}, but the open-file limit ({fd_limit}) leaves room for {room} \
             ({FD_HEADROOM} are kept for the store and outbound requests); raise `ulimit -n` or lower max_connections"
        )),
    }
}

/// Raises the soft open-file limit to the hard one and returns it.
pub fn raise_fd_limit() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
}

/// Bytes of the HTTP/2 preface, which protocol detection may wait for.
const DETECTION_BYTES: usize = 24;

/// A client connection as hyper sees it. Its first [`DETECTION_BYTES`] must
/// arrive before a deadline, since protocol detection has no timer of its
/// own (after that, hyper's header timeout takes over); and the bare error
/// responses hyper writes by itself for requests it cannot parse get the
/// API's JSON error body on the way out (see [`bare_errors`]).
pub struct ClientIo {
    stream: TcpStream,
    read: usize,
    deadline: Option<Pin<Box<Sleep>>>,
    /// A reshaped response being written, how much of it is out, and how
    /// many bytes of hyper's own it stands for.
    reshaped: Option<(Vec<u8>, usize, usize)>,
}

impl ClientIo {
    /// `stream`, whose first bytes must arrive by `deadline`.
    pub fn new(stream: TcpStream, deadline: Instant) -> ClientIo {
        ClientIo {
            stream,
            read: 0,
            deadline: Some(Box::pin(tokio::time::sleep_until(deadline))),
            reshaped: None,
        }
    }
}

impl AsyncRead for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.read += buf.filled().len() - before;
                if this.read >= DETECTION_BYTES {
                    this.deadline = None;
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                let expired = this
                    .deadline
                    .as_mut()
                    .is_some_and(|d| d.as_mut().poll(cx).is_ready());
                if expired {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no request within the header timeout",
                    )));
                }
                Poll::Pending
            }
        }
    }
}

impl ClientIo {
    /// Writes the reshaped response under way, if any; then it counts as the
    /// `stands_for` bytes hyper asked to write.
    fn poll_reshaped(&mut self, cx: &mut Context<'_>) -> Option<Poll<io::Result<usize>>> {
        let (bytes, written, stands_for) = self.reshaped.as_mut()?;
        while *written < bytes.len() {
            match Pin::new(&mut self.stream).poll_write(cx, &bytes[*written..]) {
                Poll::Ready(Ok(n)) => *written += n,
                other => return Some(other),
            }
        }
        let n = *stands_for;
        self.reshaped = None;
        Some(Poll::Ready(Ok(n)))
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.reshaped.is_none()
            && let Some(reshaped) = bare_errors::reshape(buf)
        {
            this.reshaped = Some((reshaped, 0, buf.len()));
        }
        match this.poll_reshaped(cx) {
            Some(poll) => poll,
            None => Pin::new(&mut this.stream).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // hyper's bare errors are a head alone, in one slice.
        if this.reshaped.is_none()
            && let Some(head) = bufs.first()
            && bufs[1..].iter().all(|b| b.is_empty())
            && let Some(reshaped) = bare_errors::reshape(head)
        {
            this.reshaped = Some((reshaped, 0, head.len()));
        }
        match this.poll_reshaped(cx) {
            Some(poll) => poll,
            None => Pin::new(&mut this.stream).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_stays_below_the_file_limit() {
        assert_eq!(cap(None, 1024), Ok(768));
        assert_eq!(cap(None, 10_000_000), Ok(65_536));
        assert_eq!(cap(Some(100), 1024), Ok(100));
        assert!(cap(Some(1000), 1024).unwrap_err().contains("ulimit -n"));
    }

    #[test]
    fn at_the_cap_the_oldest_silent_connection_makes_room() {
        let admission = Admission::new(2);
        let first = admission.admit().unwrap();
        let second = admission.admit().unwrap();
        let third = admission.admit().expect("room made by evicting the first");
        assert_eq!(admission.silent().len(), 2);
        assert!(!admission.silent().contains_key(&first.id));
        drop((first, second, third));
        assert_eq!(admission.open(), 0);
    }

    #[test]
    fn when_every_connection_has_spoken_none_is_evicted() {
        let admission = Admission::new(1);
        let ticket = admission.admit().unwrap();
        admission.silent().remove(&ticket.id);
        assert!(admission.admit().is_none());
    }
}

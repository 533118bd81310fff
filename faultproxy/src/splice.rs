//! Zero-copy forwarding for fault-free links (Linux `splice(2)` through a
//! pipe). Copying through a user-space buffer costs two extra memory copies
//! per byte, which on a 2-core box roughly halves loopback throughput.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

use tokio::io::Interest;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// Requested pipe capacity; Linux lets unprivileged processes go up to
/// /proc/sys/fs/pipe-max-size (1 MiB by default).
const PIPE_SIZE: usize = 1 << 20;

/// splice(2) refused these fds (old kernel, odd fd type): copy instead.
pub(crate) fn unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS))
}

pub(crate) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

fn cvt(r: libc::ssize_t) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

impl Pipe {
    /// None when the platform cannot splice; callers fall back to copying.
    pub(crate) fn new() -> Option<Pipe> {
        // Escape hatch (and A/B switch for the benchmark): copy everything.
        static DISABLED: OnceLock<bool> = OnceLock::new();
        if *DISABLED.get_or_init(|| std::env::var_os("FAULTPROXY_NO_SPLICE").is_some()) {
            return None;
        }
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: fds is a valid array of two ints for pipe2 to fill.
        let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if r != 0 {
            return None;
        }
        // SAFETY: pipe2 succeeded, so both fds are open and owned by nobody
        // else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: plain fcntl on an fd we own; failure leaves the default
        // (64 KiB) capacity, which still works, only slower.
        let got = unsafe {
            libc::fcntl(
                write.as_raw_fd(),
                libc::F_SETPIPE_SZ,
                PIPE_SIZE as libc::c_int,
            )
        };
        let capacity = if got > 0 { got as usize } else { 64 * 1024 };
        Some(Pipe {
            read,
            write,
            capacity,
        })
    }

    /// Moves up to one pipe-full from `src` into the (empty) pipe. Ok(0) is
    /// EOF on `src`.
    pub(crate) async fn fill(&self, src: &OwnedReadHalf) -> io::Result<usize> {
        let sock = src.as_ref();
        loop {
            sock.readable().await?;
            let res = sock.try_io(Interest::READABLE, || {
                // SAFETY: both fds are open for the duration of the call; null
                // offsets are required for sockets and pipes.
                cvt(unsafe {
                    libc::splice(
                        sock.as_raw_fd(),
                        std::ptr::null_mut(),
                        self.write.as_raw_fd(),
                        std::ptr::null_mut(),
                        self.capacity,
                        libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
                    )
                })
            });
            // The pipe is always empty here, so EAGAIN can only mean the
            // socket had nothing after all; try_io has cleared its readiness.
            match res {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return other,
            }
        }
    }

    /// Moves exactly `n` bytes (all of the pipe) into `dst`.
    ///
    /// splice(2) has no MSG_NOSIGNAL: writing to a socket whose peer is gone
    /// raises SIGPIPE. Rust binaries ignore SIGPIPE by default, so that shows
    /// up here as an EPIPE error like it does for send().
    pub(crate) async fn drain_to(&self, dst: &OwnedWriteHalf, mut n: usize) -> io::Result<()> {
        let sock = dst.as_ref();
        while n > 0 {
            sock.writable().await?;
            let res = sock.try_io(Interest::WRITABLE, || {
                // SAFETY: as in fill.
                cvt(unsafe {
                    libc::splice(
                        self.read.as_raw_fd(),
                        std::ptr::null_mut(),
                        sock.as_raw_fd(),
                        std::ptr::null_mut(),
                        n,
                        libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
                    )
                })
            });
            match res {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => n -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Copies up to `buf.len()` bytes out of the pipe, for when a fault was
    /// switched on after bytes were spliced in and they need the slow path.
    pub(crate) fn read_into(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: buf is valid for writes of buf.len() bytes.
        cvt(unsafe { libc::read(self.read.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
    }
}

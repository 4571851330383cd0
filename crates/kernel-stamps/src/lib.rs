//! Kernel receive times on TCP sockets (Linux `SO_TIMESTAMPNS`): with it on, every `recvmsg`
//! hands back, beside the bytes, when the machine's network stack received the read's last
//! packet — on CLOCK_REALTIME, whatever the reading thread was doing meanwhile. Bakeoff's
//! stamped client times tokens with it; the mock stamps each request's receipt with it, so the
//! ground truth calibration compares against starts when the request reached the machine, not
//! when the mock's busy thread got round to reading it. Elsewhere reads carry no stamp.
use std::io;
use std::mem::MaybeUninit;

/// Asks the kernel to stamp every packet `socket` receives (connections a listener accepts
/// inherit it). A failure only costs the stamps.
pub fn enable(socket: &impl std::os::fd::AsRawFd) {
    #[cfg(target_os = "linux")]
    {
        let on: libc::c_int = 1;
        // SAFETY: a valid socket, an option of the size the kernel expects, no pointer kept.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&raw const on).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = socket;
}

/// One non-blocking read into `buf` (which it initialises up to the count returned) and the
/// kernel's receive time of its last packet, in nanoseconds since the Unix epoch.
#[cfg(target_os = "linux")]
pub fn recv(socket: &impl std::os::fd::AsRawFd, buf: &mut [MaybeUninit<u8>]) -> io::Result<(usize, Option<i64>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for one timespec control message, aligned as a cmsghdr must be.
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: iov and control point into live buffers of the lengths given.
    let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &raw mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut stamp = None;
    // SAFETY: the CMSG_* walk stays within msg_controllen as the kernel filled it in.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                #[allow(clippy::useless_conversion)] // time_t and c_long are i32 on 32-bit targets
                let ns = i64::from(ts.tv_sec) * 1_000_000_000 + i64::from(ts.tv_nsec);
                stamp = Some(ns);
            }
            cmsg = libc::CMSG_NXTHDR(&raw const msg, cmsg);
        }
    }
    Ok((n as usize, stamp))
}

#[cfg(not(target_os = "linux"))]
pub fn recv(socket: &impl std::os::fd::AsRawFd, buf: &mut [MaybeUninit<u8>]) -> io::Result<(usize, Option<i64>)> {
    // SAFETY: recv writes at most buf.len() bytes into it and initialises what it returns.
    let n = unsafe {
        libc::recv(
            socket.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((n as usize, None))
}

/// Nanoseconds since the Unix epoch on CLOCK_REALTIME, the clock the stamps are on.
pub fn wall_clock_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

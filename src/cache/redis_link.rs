//! One connection to Redis whose every reply is bounded in bytes and in time: the transport
//! under [`RedisCacheStore`](super::RedisCacheStore).
//!
//! The `redis` crate encodes the commands and parses the replies (its [`redis::Parser`]); this
//! module owns the socket and reads it through [`Bounded`], which fails a reply that grows past
//! the byte limit or is still arriving at the deadline. `redis::Connection` bounds only each
//! read (its socket timeout): a server that keeps sending, however slowly, is never cut off,
//! and a reply is buffered whole however large it claims to be.

use std::io::{self, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, ProtocolVersion, RedisResult, Value};

/// A connection to one Redis server: RESP2, authenticated and on its database when
/// [`Connection::connect`] returns.
pub(crate) struct Connection {
    reader: BufReader<Socket>,
    writer: Socket,
    parser: redis::Parser,
    db: i64,
    timeout: Duration,
    max_reply: u64,
    open: bool,
}

impl Connection {
    /// Connects to `info`'s server within `timeout`, sends `AUTH` and `SELECT` as `info`
    /// says, and checks that it answers `PING`. Every later reply must arrive whole within `timeout` of its command being sent,
    /// and be at most `max_reply` bytes on the wire.
    pub fn connect(
        info: &ConnectionInfo,
        timeout: Duration,
        max_reply: u64,
    ) -> RedisResult<Connection> {
        let settings = info.redis_settings();
        if settings.protocol() != ProtocolVersion::RESP2 {
            return Err(unsupported(
                "only RESP2 is spoken (drop `protocol=` from the URL)",
            ));
        }
        let socket = Socket::connect(info.addr(), timeout)?;
        let writer = socket.try_clone()?;
        let mut link = Connection {
            reader: BufReader::with_capacity(64 * 1024, socket),
            writer,
            parser: redis::Parser::new(),
            db: settings.db(),
            timeout,
            max_reply,
            open: true,
        };
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password).query::<()>(&mut link)?;
        }
        if settings.db() != 0 {
            redis::cmd("SELECT")
                .arg(settings.db())
                .query::<()>(&mut link)?;
        }
        // Whatever listens must speak Redis before it is trusted with a command.
        let pong: String = redis::cmd("PING").query(&mut link)?;
        if pong != "PONG" {
            return Err(redis::RedisError::from(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the server answered PING with {pong:?}"),
            )));
        }
        Ok(link)
    }

    /// Sends `bytes` (commands already encoded), then reads `count` replies, each bounded.
    fn exchange(&mut self, bytes: &[u8], count: usize) -> RedisResult<Vec<Value>> {
        let result = self.exchange_unchecked(bytes, count);
        if result.is_err() {
            // Mid-reply, the stream cannot be resynchronized: the connection is done.
            self.open = false;
        }
        result
    }

    fn exchange_unchecked(&mut self, bytes: &[u8], count: usize) -> RedisResult<Vec<Value>> {
        let deadline = Instant::now() + self.timeout;
        self.writer.set_write_timeout(Some(self.timeout))?;
        self.writer.write_all(bytes)?;
        let mut values = Vec::with_capacity(count.min(1024));
        while values.len() < count {
            let reply = Bounded {
                inner: &mut self.reader,
                left: self.max_reply,
                limit: self.max_reply,
                deadline,
            };
            match self.parser.parse_value(reply)? {
                // Out-of-band data (RESP3 only; never sent on RESP2) is not a reply.
                Value::Push { .. } => continue,
                value => values.push(value),
            }
        }
        Ok(values)
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        let mut values = self.exchange(cmd, 1)?;
        Ok(values.pop().unwrap_or(Value::Nil))
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let mut values = self.exchange(cmd, offset + count)?;
        Ok(values.split_off(offset))
    }

    fn get_db(&self) -> i64 {
        self.db
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<String>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        self.open
    }
}

/// A reader over the socket's buffer that gives out at most `left` more bytes and fails once
/// `deadline` has passed; each socket read waits at most until the deadline. Past it, one last
/// read takes what the socket already holds: a reply that arrived in time still counts when
/// the calling thread itself was descheduled past the deadline (a loaded machine).
struct Bounded<'a> {
    inner: &'a mut BufReader<Socket>,
    left: u64,
    limit: u64,
    deadline: Instant,
}

impl Read for Bounded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("reply longer than {} bytes", self.limit),
            ));
        }
        let mut late = false;
        if self.inner.buffer().is_empty() {
            let wait = self.deadline.saturating_duration_since(Instant::now());
            late = wait.is_zero();
            // Past the deadline, the shortest wait the socket takes: what already arrived.
            let wait = wait.max(Duration::from_millis(1));
            self.inner.get_ref().set_read_timeout(Some(wait))?;
        }
        let most = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = match self.inner.read(&mut buf[..most]) {
            Err(e)
                if late
                    && matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
            {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "reply not complete within the timeout",
                ))
            }
            r => r?,
        };
        self.left -= n as u64;
        Ok(n)
    }
}

/// A TCP or Unix socket.
enum Socket {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Socket {
    fn connect(addr: &ConnectionAddr, timeout: Duration) -> RedisResult<Socket> {
        match addr {
            ConnectionAddr::Tcp(host, port) => {
                let mut last = None;
                for a in (host.as_str(), *port).to_socket_addrs()? {
                    match TcpStream::connect_timeout(&a, timeout) {
                        Ok(s) => {
                            s.set_nodelay(true)?;
                            return Ok(Socket::Tcp(s));
                        }
                        Err(e) => last = Some(e),
                    }
                }
                Err(last
                    .unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))
                    .into())
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => Ok(Socket::Unix(UnixStream::connect(path)?)),
            _ => Err(unsupported(
                "only redis:// and redis+unix:// URLs are supported",
            )),
        }
    }

    fn try_clone(&self) -> io::Result<Socket> {
        Ok(match self {
            Socket::Tcp(s) => Socket::Tcp(s.try_clone()?),
            #[cfg(unix)]
            Socket::Unix(s) => Socket::Unix(s.try_clone()?),
        })
    }

    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_read_timeout(t),
            #[cfg(unix)]
            Socket::Unix(s) => s.set_read_timeout(t),
        }
    }

    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_write_timeout(t),
            #[cfg(unix)]
            Socket::Unix(s) => s.set_write_timeout(t),
        }
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.read(buf),
            #[cfg(unix)]
            Socket::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write(buf),
            #[cfg(unix)]
            Socket::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.flush(),
            #[cfg(unix)]
            Socket::Unix(s) => s.flush(),
        }
    }
}

fn unsupported(what: &'static str) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, what))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A server on loopback that answers the first command (the `PING` of
    /// [`Connection::connect`]) with `PONG`, the second with `head` and then `rest`, again and again every `pause` when `endless`; returns the
    /// URL.
    fn server(head: &'static [u8], rest: &'static [u8], endless: bool, pause: Duration) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"+PONG\r\n");
            let _ = s.read(&mut buf);
            let _ = s.write_all(head);
            loop {
                if s.write_all(rest).is_err() || !endless {
                    break;
                }
                std::thread::sleep(pause);
            }
            std::thread::sleep(Duration::from_millis(200));
        });
        format!("redis://{addr}")
    }

    fn link(url: &str, timeout: Duration, max_reply: u64) -> Connection {
        let info = redis::Client::open(url)
            .unwrap()
            .get_connection_info()
            .clone();
        Connection::connect(&info, timeout, max_reply).unwrap()
    }

    fn smembers(link: &mut Connection) -> RedisResult<Vec<String>> {
        redis::cmd("SMEMBERS").arg("k").query(link)
    }

    #[test]
    fn an_endless_array_is_cut_at_the_byte_limit() {
        let rest = b"$1\r\nx\r\n$1\r\nx\r\n$1\r\nx\r\n$1\r\nx\r\n";
        let url = server(b"*1000000000\r\n", rest, true, Duration::ZERO);
        let mut link = link(&url, Duration::from_secs(10), 1 << 20);
        let t = Instant::now();
        let err = smembers(&mut link).unwrap_err();
        assert!(
            err.to_string().contains("reply longer than 1048576 bytes"),
            "{err}"
        );
        assert!(err.is_io_error(), "the link counts as failed");
        assert!(!link.is_open());
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_reply_still_arriving_at_the_deadline_times_out() {
        // An element every 20 ms: every read gets data, the reply would take 20 s.
        let url = server(
            b"*1000\r\n",
            b"$1\r\nx\r\n",
            true,
            Duration::from_millis(20),
        );
        // Two seconds: the connection's PING, answered by a thread of this process, is in
        // time on a loaded machine too; the trickle would take ten times that.
        let mut link = link(&url, Duration::from_secs(2), 1 << 20);
        let t = Instant::now();
        let err = smembers(&mut link).unwrap_err();
        assert!(err.is_timeout(), "{err}");
        assert!(!link.is_open());
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }

    #[test]
    fn replies_within_the_bounds_pass() {
        let url = server(b"*2\r\n$1\r\na\r\n$2\r\nbc\r\n", b"", false, Duration::ZERO);
        let mut link = link(&url, Duration::from_secs(2), 1 << 20);
        assert_eq!(smembers(&mut link).unwrap(), ["a", "bc"]);
        assert!(link.is_open());
    }

    #[test]
    fn a_server_that_does_not_answer_ping_as_redis_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b":42\r\n");
            std::thread::sleep(Duration::from_millis(200));
        });
        let info = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection_info()
            .clone();
        assert!(Connection::connect(&info, Duration::from_secs(2), 1 << 20).is_err());
    }
}

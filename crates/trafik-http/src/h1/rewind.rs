//! The stream hyper gets when the own engine hands a connection over: the bytes already read
//! (a request head the fast path did not take, and whatever followed it) come first, then the
//! socket, so hyper sees the connection exactly as if it had read it from the start.

use tokio::io::ReadBuf;

use crate::observed::{Observed, Observer};

/// A stream whose first bytes are [`Replay`]ed.
pub type Rewind<S> = Observed<S, Replay>;

/// The bytes read already, handed out again before the stream's.
pub struct Replay {
    read: Vec<u8>,
    at: usize,
}

/// `stream` with `read` before it.
pub fn rewind<S>(read: Vec<u8>, stream: S) -> Rewind<S> {
    Observed::with(stream, Replay { read, at: 0 })
}

impl Observer for Replay {
    fn read_ahead(&mut self, buf: &mut ReadBuf<'_>) -> bool {
        if self.at == self.read.len() {
            return false;
        }
        let take = buf.remaining().min(self.read.len() - self.at);
        buf.put_slice(&self.read[self.at..self.at + take]);
        self.at += take;
        if self.at == self.read.len() {
            self.read = Vec::new();
            self.at = 0;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn the_bytes_read_come_before_the_stream() {
        let (mut near, far) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut near, b" world")
            .await
            .unwrap();
        drop(near);
        let mut rewound = rewind(b"hello".to_vec(), far);
        let mut all = String::new();
        rewound.read_to_string(&mut all).await.unwrap();
        assert_eq!(all, "hello world");
    }
}

//! A worker's spare connection buffers: a connection that ends gives its buffers back for the
//! next one to take, so a client that opens a connection per request costs no allocation of
//! them (nearly 50 KiB a connection, which the allocator handles slowly).

use std::cell::RefCell;

/// Buffer sizes of one connection, kept for its life.
const CLIENT_BUFFER: usize = 32 * 1024;
const RELAY_BUFFER: usize = 16 * 1024;
const HEAD_BUFFER: usize = 2 * 1024;

/// Spare sets kept per worker: as many as connections that closed together, up to this.
const SPARE: usize = 64;

/// The buffers of one client connection.
pub struct Buffers {
    /// Bytes from the client not yet consumed.
    pub input: Vec<u8>,
    /// A head rewritten for the next hop.
    pub head: Vec<u8>,
    /// Bytes from the upstream, or request body bytes on their way to it.
    pub relay: Vec<u8>,
}

thread_local! {
    /// Each worker is one thread with its own runtime: this is the worker's.
    static SPARES: RefCell<Vec<Buffers>> = const { RefCell::new(Vec::new()) };
}

impl Buffers {
    /// A spare set, or a new one.
    pub fn take() -> Buffers {
        SPARES.with_borrow_mut(Vec::pop).unwrap_or_else(|| Buffers {
            input: Vec::with_capacity(CLIENT_BUFFER),
            head: Vec::with_capacity(HEAD_BUFFER),
            relay: Vec::with_capacity(RELAY_BUFFER),
        })
    }

    /// Keeps the set for the next connection, unless enough are kept or one of them grew.
    pub fn give_back(mut self) {
        let usual = self.input.capacity() == CLIENT_BUFFER
            && self.head.capacity() <= 4 * HEAD_BUFFER
            && self.relay.capacity() == RELAY_BUFFER;
        if !usual {
            return;
        }
        self.input.clear();
        self.head.clear();
        self.relay.clear();
        SPARES.with_borrow_mut(|spares| {
            if spares.len() < SPARE {
                spares.push(self);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_given_back_is_taken_again_empty_and_a_grown_one_is_not() {
        let mut first = Buffers::take();
        first.input.extend_from_slice(b"GET / HTTP/1.1\r\n");
        let address = first.input.as_ptr();
        first.give_back();
        let again = Buffers::take();
        assert_eq!(again.input.as_ptr(), address);
        assert!(again.input.is_empty());

        let mut grown = again;
        grown.input.resize(CLIENT_BUFFER + 1, b'x');
        let address = grown.input.as_ptr();
        grown.give_back();
        assert_ne!(Buffers::take().input.as_ptr(), address);
    }
}

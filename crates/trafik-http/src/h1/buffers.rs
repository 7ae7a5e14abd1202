//! A worker's spare connection buffers: a connection that ends gives its buffers back for the
//! next one to take, so a client that opens a connection per request costs no allocation of
//! them (nearly 50 KiB a connection, which the allocator handles slowly).
//!
//! A connection takes its input buffer when accepted and the buffers of an exchange only once
//! its first bytes arrive, and gives those back when it goes to hyper: thousands of idle
//! connections, or of slowloris or HTTP/2 ones that hyper serves, hold no exchange buffers.

use crate::spares::{self, Spares};

/// Buffer sizes of one connection, kept for its life.
const CLIENT_BUFFER: usize = 32 * 1024;
const RELAY_BUFFER: usize = 16 * 1024;
const HEAD_BUFFER: usize = 2 * 1024;

/// Spares of each kind kept per worker: as many as connections that closed together, up to
/// this (about 3 MiB a worker in all).
const SPARE: usize = 64;

/// The buffers of one exchange on a connection.
pub struct Exchange {
    /// A head rewritten for the next hop.
    pub head: Vec<u8>,
    /// Bytes from the upstream, or request body bytes on their way to it.
    pub relay: Vec<u8>,
}

thread_local! {
    static SPARE_INPUTS: Spares<Vec<u8>> = const { Spares::new(SPARE) };
    static SPARE_EXCHANGES: Spares<Exchange> = const { Spares::new(SPARE) };
}

/// A spare input buffer (bytes from the client not yet consumed), or a new one.
pub fn take_input() -> Vec<u8> {
    SPARE_INPUTS
        .with(Spares::take)
        .unwrap_or_else(|| Vec::with_capacity(CLIENT_BUFFER))
}

/// Keeps an input buffer for the next connection, unless enough are kept or it grew.
pub fn give_back_input(mut input: Vec<u8>) {
    if input.capacity() != CLIENT_BUFFER {
        return;
    }
    input.clear();
    spares::keep(&SPARE_INPUTS, input);
}

impl Exchange {
    /// A spare set, or a new one.
    pub fn take() -> Exchange {
        SPARE_EXCHANGES
            .with(Spares::take)
            .unwrap_or_else(|| Exchange {
                head: Vec::with_capacity(HEAD_BUFFER),
                relay: Vec::with_capacity(RELAY_BUFFER),
            })
    }

    /// Keeps the set for the next connection, unless enough are kept or one of them grew.
    pub fn give_back(mut self) {
        let usual =
            self.head.capacity() <= 4 * HEAD_BUFFER && self.relay.capacity() == RELAY_BUFFER;
        if !usual {
            return;
        }
        self.head.clear();
        self.relay.clear();
        spares::keep(&SPARE_EXCHANGES, self);
    }
}

/// The spares kept on this thread now: inputs and exchange sets.
#[cfg(test)]
pub fn spares() -> (usize, usize) {
    (
        SPARE_INPUTS.with(Spares::len),
        SPARE_EXCHANGES.with(Spares::len),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_given_back_are_taken_again_empty_and_grown_ones_are_not() {
        let mut first = take_input();
        first.extend_from_slice(b"GET / HTTP/1.1\r\n");
        let address = first.as_ptr();
        give_back_input(first);
        let again = take_input();
        assert_eq!(again.as_ptr(), address);
        assert!(again.is_empty());

        // Grown buffers are freed, not kept (an address check could see the memory reused).
        let mut grown = again;
        grown.resize(CLIENT_BUFFER + 1, b'x');
        give_back_input(grown);
        let mut exchange = Exchange::take();
        exchange.relay.resize(RELAY_BUFFER + 1, b'x');
        exchange.give_back();
        assert_eq!(spares(), (0, 0));
    }

    #[test]
    fn a_worker_keeps_at_most_its_spares_after_a_flood_closes() {
        let inputs: Vec<_> = (0..3 * SPARE).map(|_| take_input()).collect();
        let exchanges: Vec<_> = (0..3 * SPARE).map(|_| Exchange::take()).collect();
        inputs.into_iter().for_each(give_back_input);
        exchanges.into_iter().for_each(Exchange::give_back);
        assert_eq!(spares(), (SPARE, SPARE));
    }
}
